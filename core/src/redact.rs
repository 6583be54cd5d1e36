//! What a diagnostic must never carry: credentials, environment values, tool
//! inputs and file contents.
//!
//! Two layers. [`scrub_credentials`] recognises credentials by their shape
//! (`password=…`, `Authorization: Bearer …`, `sk-…` keys, PEM private keys)
//! and runs inside every [`Diagnostic`] construction, so no
//! path can skip it. A [`Redactor`] additionally removes strings known to be
//! sensitive in one context: the process environment's values and a child's
//! recorded tool inputs and outputs (which is where file contents arrive).

use serde_json::Value;

use crate::result::Diagnostic;

/// What replaces a removed span.
pub const REDACTED: &str = "[redacted]";

/// Known-sensitive strings shorter than this are left alone: short values
/// (`1`, `true`, `/tmp`) would shred a diagnostic without protecting anything.
pub const MIN_SECRET_LEN: usize = 6;

/// Key names whose value is a credential, matched case-insensitively as a
/// substring of the key (`DB_PASSWORD`, `x-api-key`, `client_secret`).
const SECRET_KEYS: [&str; 11] = [
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "api-key",
    "authorization",
    "credential",
    "private_key",
    "access_key",
];

/// Prefixes of well-known API key formats.
const KEY_PREFIXES: [&str; 10] = [
    "sk-",
    "sk_live_",
    "rk_live_",
    "ghp_",
    "gho_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "glpat-",
    "AKIA",
];

/// Authorization schemes whose following word is a credential.
const AUTH_SCHEMES: [&str; 2] = ["bearer ", "basic "];

/// Removes credentials recognisable by their shape from `text`.
#[must_use]
pub fn scrub_credentials(text: &str) -> String {
    let text = scrub_pem_blocks(text);
    let lower = text.to_ascii_lowercase();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for key in SECRET_KEYS {
        for (at, _) in lower.match_indices(key) {
            if let Some(span) = assigned_value(&text, at + key.len()) {
                spans.push(span);
            }
        }
    }
    for scheme in AUTH_SCHEMES {
        for (at, _) in lower.match_indices(scheme) {
            let start = at + scheme.len();
            let end = token_end(&text, start);
            if end > start {
                spans.push((start, end));
            }
        }
    }
    for prefix in KEY_PREFIXES {
        for (at, _) in text.match_indices(prefix) {
            let starts_word = text[..at]
                .chars()
                .next_back()
                .is_none_or(|before| !is_token_char(before));
            let end = token_end(&text, at);
            if starts_word && end - at >= prefix.len() + 8 {
                spans.push((at, end));
            }
        }
    }
    replace_spans(&text, spans)
}

/// A secret value assigned right after a key that ends at `after_key`:
/// the rest of the key name, an optional closing quote, `=` or `:`, optional
/// spaces and an opening quote, then the value up to a delimiter.
fn assigned_value(text: &str, after_key: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut at = after_key;
    while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || b"_-".contains(&bytes[at])) {
        at += 1;
    }
    if at < bytes.len() && b"\"'".contains(&bytes[at]) {
        at += 1;
    }
    while at < bytes.len() && bytes[at] == b' ' {
        at += 1;
    }
    if at >= bytes.len() || !b"=:".contains(&bytes[at]) {
        return None;
    }
    at += 1;
    while at < bytes.len() && b" \"'".contains(&bytes[at]) {
        at += 1;
    }
    let end = value_end(text, at);
    // A bare number (`max_tokens: 512`) is a setting, not a credential.
    let numeric = text[at..end].bytes().all(|byte| byte.is_ascii_digit());
    (end > at && !numeric).then_some((at, end))
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./+=".contains(c)
}

fn token_end(text: &str, start: usize) -> usize {
    text[start..]
        .char_indices()
        .find(|(_, c)| !is_token_char(*c))
        .map_or(text.len(), |(offset, _)| start + offset)
}

fn value_end(text: &str, start: usize) -> usize {
    text[start..]
        .char_indices()
        .find(|(_, c)| c.is_whitespace() || "\"',;&}".contains(*c))
        .map_or(text.len(), |(offset, _)| start + offset)
}

fn scrub_pem_blocks(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(begin) = rest.find("-----BEGIN ") {
        let header_end = rest[begin..].find("PRIVATE KEY-----");
        let Some(header_end) = header_end.map(|offset| begin + offset) else {
            break;
        };
        out.push_str(&rest[..begin]);
        out.push_str(REDACTED);
        rest = match rest[header_end..].find("-----END ") {
            Some(end) => {
                let after_end = header_end + end + "-----END ".len();
                match rest[after_end..].find("-----") {
                    Some(close) => &rest[after_end + close + 5..],
                    None => "",
                }
            }
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// Replaces the (possibly overlapping) byte spans of `text` with [`REDACTED`].
fn replace_spans(text: &str, mut spans: Vec<(usize, usize)>) -> String {
    if spans.is_empty() {
        return text.to_owned();
    }
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut cursor = 0;
    for (start, end) in spans {
        if end <= cursor {
            continue;
        }
        let start = start.max(cursor);
        out.push_str(&text[cursor..start]);
        out.push_str(REDACTED);
        cursor = end;
    }
    out.push_str(&text[cursor..]);
    out
}

/// Strings known to be sensitive in one context, removed from any text
/// before it becomes a diagnostic.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor that removes only shaped credentials.
    #[must_use]
    pub fn new() -> Self {
        Redactor::default()
    }

    /// Adds one sensitive string (ignored when shorter than
    /// [`MIN_SECRET_LEN`] bytes).
    pub fn add(&mut self, secret: &str) {
        if secret.len() >= MIN_SECRET_LEN && !self.secrets.iter().any(|known| known == secret) {
            self.secrets.push(secret.to_owned());
        }
    }

    /// Adds every string leaf of a JSON value (a tool's input), and each
    /// line of a multi-line leaf, since an error may quote one line.
    pub fn add_json(&mut self, value: &Value) {
        match value {
            Value::String(text) => self.add_text(text),
            Value::Array(items) => items.iter().for_each(|item| self.add_json(item)),
            Value::Object(fields) => fields.values().for_each(|field| self.add_json(field)),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Adds a text and each of its non-blank lines (file contents).
    pub fn add_text(&mut self, text: &str) {
        self.add(text);
        for line in text.lines() {
            self.add(line.trim());
        }
    }

    /// Adds the value of every environment variable in `vars`.
    pub fn add_environment(&mut self, vars: impl IntoIterator<Item = (String, String)>) {
        for (_, value) in vars {
            self.add(&value);
        }
    }

    /// Removes every known secret, then shaped credentials, then bounds the
    /// result to a diagnostic's size.
    #[must_use]
    pub fn clean(&self, text: &str) -> Diagnostic {
        let mut secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        // Longest first, so a secret containing another is removed whole.
        secrets.sort_unstable_by_key(|secret| std::cmp::Reverse(secret.len()));
        let mut spans = Vec::new();
        for secret in secrets {
            spans.extend(
                text.match_indices(secret)
                    .map(|(at, _)| (at, at + secret.len())),
            );
        }
        Diagnostic::new(replace_spans(text, spans))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shaped_credentials_are_removed() {
        let cases = [
            ("login failed: password=hunter2 for bob", "hunter2"),
            ("DB_PASSWORD: 's3cr3t!' rejected", "s3cr3t!"),
            (r#"{"api_key": "abc123xyz"}"#, "abc123xyz"),
            (
                "header Authorization: Bearer eyJhbGciOi.payload.sig",
                "eyJhbGciOi",
            ),
            ("using key sk-proj-ABCDEFGHIJKLMNOP now", "ABCDEFGHIJKLMNOP"),
            ("aws AKIAIOSFODNN7EXAMPLE denied", "IOSFODNN7EXAMPLE"),
            ("client_secret=zzz&grant=1", "zzz"),
            (
                "gh ghp_0123456789abcdefghij rate limited",
                "0123456789abcdef",
            ),
        ];
        for (text, secret) in cases {
            let cleaned = scrub_credentials(text);
            assert!(!cleaned.contains(secret), "{text} -> {cleaned}");
            assert!(cleaned.contains(REDACTED), "{text} -> {cleaned}");
        }
    }

    #[test]
    fn pem_private_keys_are_removed_whole() {
        let text = "bad key -----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAKCAQ\n-----END RSA PRIVATE KEY----- end";
        let cleaned = scrub_credentials(text);
        assert_eq!(cleaned, format!("bad key {REDACTED} end"));
        let unterminated = scrub_credentials("x -----BEGIN PRIVATE KEY-----\nMIIE");
        assert_eq!(unterminated, format!("x {REDACTED}"));
    }

    #[test]
    fn ordinary_text_is_kept() {
        for text in [
            "connection refused",
            "the token budget ran out",
            "tokens: 512",
            "task-list is empty",
            "skipped 3 files",
        ] {
            assert_eq!(scrub_credentials(text), text);
        }
    }

    #[test]
    fn known_secrets_are_removed_and_the_result_is_bounded() {
        let mut redactor = Redactor::new();
        redactor.add_environment([("HOME_TOKEN".to_owned(), "q9-w8-e7-r6".to_owned())]);
        redactor.add_json(&json!({"path": "/etc/shadow", "flags": ["--force-all"], "n": 3}));
        redactor.add_text("fn main() {\n    launch_missiles();\n}\n");
        redactor.add("ab"); // too short to matter
        let text = "tool read /etc/shadow with --force-all: launch_missiles(); env q9-w8-e7-r6; ab";
        let cleaned = redactor.clean(text);
        for secret in [
            "/etc/shadow",
            "--force-all",
            "launch_missiles();",
            "q9-w8-e7-r6",
        ] {
            assert!(!cleaned.as_str().contains(secret), "{cleaned}");
        }
        assert!(cleaned.as_str().ends_with("; ab"), "{cleaned}");
        let long = "x".repeat(10_000);
        assert!(redactor.clean(&long).as_str().len() <= crate::result::MAX_DIAGNOSTIC_BYTES);
    }

    #[test]
    fn multibyte_text_survives_redaction() {
        let text = "ошибка: password=пароль123 — 再试";
        let cleaned = scrub_credentials(text);
        assert!(!cleaned.contains("пароль123"));
        assert!(cleaned.ends_with("— 再试"));
    }
}
