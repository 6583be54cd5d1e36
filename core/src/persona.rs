//! Persona templates: strict `{{name}}` interpolation against registered
//! variables.
//!
//! A template is literal text with placeholders `{{name}}`, where `name` is
//! `[A-Za-z_][A-Za-z0-9_.-]*` with optional spaces inside the braces. Strict
//! means: an unknown variable, an empty or malformed name, a `{{` without its
//! `}}`, or a stray `}}` is an error at start time, never text passed through.
//! Single braces are ordinary text; literal double braces have no escape,
//! which keeps the grammar unambiguous.

use std::collections::BTreeMap;

use crate::error::SubagentError;

/// One piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Literal text.
    Text(&'a str),
    /// A `{{name}}` placeholder.
    Variable(&'a str),
}

fn invalid(reason: String) -> SubagentError {
    SubagentError::InvalidPersona(reason)
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Splits a template into text and placeholders.
///
/// # Errors
/// `subagent/invalid-persona` naming the byte offset of an unclosed `{{`, a
/// stray `}}`, or a malformed name.
pub fn parse(template: &str) -> Result<Vec<Piece<'_>>, SubagentError> {
    let mut pieces = Vec::new();
    let mut rest = template;
    let mut offset = 0;
    while !rest.is_empty() {
        let close = rest.find("}}");
        let Some(open) = rest
            .find("{{")
            .filter(|open| close.is_none_or(|close| *open < close))
        else {
            if let Some(close) = close {
                return Err(invalid(format!("stray `}}}}` at byte {}", offset + close)));
            }
            pieces.push(Piece::Text(rest));
            break;
        };
        if open > 0 {
            pieces.push(Piece::Text(&rest[..open]));
        }
        let after = &rest[open + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| invalid(format!("`{{{{` at byte {} is never closed", offset + open)))?;
        let name = after[..end].trim();
        if !valid_name(name) {
            return Err(invalid(format!(
                "malformed placeholder at byte {}",
                offset + open
            )));
        }
        pieces.push(Piece::Variable(name));
        let consumed = open + 2 + end + 2;
        rest = &rest[consumed..];
        offset += consumed;
    }
    Ok(pieces)
}

/// Checks that `template` parses and names only registered variables.
///
/// # Errors
/// As [`parse`], and `subagent/invalid-persona` for an unknown variable.
pub fn validate(template: &str, variables: &BTreeMap<String, String>) -> Result<(), SubagentError> {
    for piece in parse(template)? {
        if let Piece::Variable(name) = piece {
            if !variables.contains_key(name) {
                return Err(invalid(format!("unknown variable {name:?}")));
            }
        }
    }
    Ok(())
}

/// Renders `template` with `variables`.
///
/// # Errors
/// As [`validate`].
pub fn render(
    template: &str,
    variables: &BTreeMap<String, String>,
) -> Result<String, SubagentError> {
    let mut out = String::with_capacity(template.len());
    for piece in parse(template)? {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Variable(name) => out.push_str(
                variables
                    .get(name)
                    .ok_or_else(|| invalid(format!("unknown variable {name:?}")))?,
            ),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vars() -> BTreeMap<String, String> {
        [("user", "Ada"), ("project.name", "subagents")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn placeholders_are_interpolated_strictly() {
        assert_eq!(
            render(
                "You help {{ user }} on {{project.name}}. {braces} stay.",
                &vars()
            )
            .unwrap(),
            "You help Ada on subagents. {braces} stay."
        );
        assert_eq!(render("", &vars()).unwrap(), "");
    }

    #[test]
    fn every_malformed_template_is_an_invalid_persona() {
        for (template, why) in [
            ("Hi {{user", "never closed"),
            ("Hi user}}", "stray"),
            ("Hi {{}}", "malformed"),
            ("Hi {{ 9lives }}", "malformed"),
            ("Hi {{a {{b}} }}", "malformed"),
            ("Hi {{stranger}}", "unknown variable"),
        ] {
            let err = render(template, &vars()).unwrap_err();
            assert_eq!(
                err.code().as_str(),
                "subagent/invalid-persona",
                "{template}"
            );
            assert!(err.to_string().contains(why), "{template}: {err}");
            assert!(validate(template, &vars()).is_err());
        }
    }

    proptest! {
        #[test]
        fn parsing_never_panics(template in "\\\\PC{0,40}") {
            let _ = parse(&template);
        }

        #[test]
        fn text_without_double_braces_renders_unchanged(text in "[^{}]{0,40}") {
            prop_assert_eq!(render(&text, &vars()).unwrap(), text);
        }
    }
}
