//! [`Causes`]: the causes of a [`SubagentError::Aggregate`], and its
//! bounded text.

use super::SubagentError;

/// The causes of a [`SubagentError::Aggregate`], in the order they
/// happened. Its text is bounded: the count, the first
/// [`AGGREGATE_CAUSES_SHOWN`] causes with their codes, then how many more.
#[derive(Clone, Debug, PartialEq)]
pub struct Causes(pub Vec<SubagentError>);

impl std::ops::Deref for Causes {
    type Target = [SubagentError];
    fn deref(&self) -> &[SubagentError] {
        &self.0
    }
}

impl std::fmt::Display for Causes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&aggregate_text(&self.0))
    }
}

/// How many causes an aggregate's text names before "and N more".
pub const AGGREGATE_CAUSES_SHOWN: usize = 3;

/// The text of an aggregate: the count, then each of the first
/// [`AGGREGATE_CAUSES_SHOWN`] causes as `code: message`, then how many more.
/// A nested aggregate is bounded the same way, so the text stays bounded.
fn aggregate_text(causes: &[SubagentError]) -> String {
    use std::fmt::Write as _;
    let noun = if causes.len() == 1 {
        "branch"
    } else {
        "branches"
    };
    let mut text = format!("{} {noun} failed", causes.len());
    for (index, cause) in causes.iter().take(AGGREGATE_CAUSES_SHOWN).enumerate() {
        let separator = if index == 0 { ": " } else { "; " };
        let _ = write!(text, "{separator}[{}] {cause}", cause.code());
    }
    if causes.len() > AGGREGATE_CAUSES_SHOWN {
        let _ = write!(text, "; and {} more", causes.len() - AGGREGATE_CAUSES_SHOWN);
    }
    text
}
