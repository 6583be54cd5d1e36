//! Results: [`SubagentResult`], its [`SubagentStopReason`], the bounded
//! [`Diagnostic`], and the output-selection rule ([`select_output`]).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::content::{ContentBlock, TextBlock};

/// Why a run ended. The five known reasons mirror the harness turn-end
/// vocabulary; any other string a backend adds is kept as [`Other`](Self::Other)
/// so consumers can fall through a default branch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SubagentStopReason {
    /// The child finished its turn normally.
    Completed,
    /// Cancelled through the request signal or disposal.
    Aborted,
    /// Model or transport failure.
    Error,
    /// The child hit its token ceiling before finishing.
    MaxTokens,
    /// The child declined the task.
    Refusal,
    /// A backend-specific reason, forward compatible.
    Other(String),
}

impl SubagentStopReason {
    /// The wire string (`completed`, `max-tokens`, ...).
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            SubagentStopReason::Completed => "completed",
            SubagentStopReason::Aborted => "aborted",
            SubagentStopReason::Error => "error",
            SubagentStopReason::MaxTokens => "max-tokens",
            SubagentStopReason::Refusal => "refusal",
            SubagentStopReason::Other(other) => other,
        }
    }

    /// Parses a wire string; unknown strings become [`Other`](Self::Other).
    #[must_use]
    pub fn from_wire(text: &str) -> Self {
        match text {
            "completed" => SubagentStopReason::Completed,
            "aborted" => SubagentStopReason::Aborted,
            "error" => SubagentStopReason::Error,
            "max-tokens" => SubagentStopReason::MaxTokens,
            "refusal" => SubagentStopReason::Refusal,
            other => SubagentStopReason::Other(other.to_owned()),
        }
    }

    /// Whether a tool layer should present the result as an error.
    #[must_use]
    pub fn is_error(&self) -> bool {
        !matches!(self, SubagentStopReason::Completed)
    }
}

impl fmt::Display for SubagentStopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SubagentStopReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SubagentStopReason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(SubagentStopReason::from_wire(&text))
    }
}

/// The byte cap on a diagnostic.
pub const MAX_DIAGNOSTIC_BYTES: usize = 4096;

/// Provider-authored failure detail, at most [`MAX_DIAGNOSTIC_BYTES`] UTF-8
/// bytes. Construction truncates on a char boundary; decoding does too, so no
/// path can hold a longer one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Diagnostic(String);

impl Diagnostic {
    /// Builds a diagnostic: shaped credentials are removed
    /// ([`scrub_credentials`](crate::redact::scrub_credentials)), then at most
    /// the first 4096 bytes are kept without splitting a character.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        let mut text = crate::redact::scrub_credentials(&text.into());
        if text.len() > MAX_DIAGNOSTIC_BYTES {
            let mut cut = MAX_DIAGNOSTIC_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        Diagnostic(text)
    }

    /// The text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Diagnostic {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Diagnostic::new)
    }
}

/// The terminal outcome of a subagent run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentResult {
    /// The final assistant output, chosen by [`select_output`].
    pub output: Vec<ContentBlock>,
    /// The structured capture, present only when an output schema was satisfied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Failure detail for a non-`completed` result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<Diagnostic>,
    /// Why the run ended.
    pub stop_reason: SubagentStopReason,
}

impl SubagentResult {
    /// A completed result with the given output.
    #[must_use]
    pub fn completed(output: Vec<ContentBlock>) -> Self {
        SubagentResult {
            output,
            structured: None,
            diagnostic: None,
            stop_reason: SubagentStopReason::Completed,
        }
    }

    /// A non-completed result with a diagnostic and possibly partial output.
    #[must_use]
    pub fn failed(
        stop_reason: SubagentStopReason,
        output: Vec<ContentBlock>,
        diagnostic: impl Into<String>,
    ) -> Self {
        SubagentResult {
            output,
            structured: None,
            diagnostic: Some(Diagnostic::new(diagnostic)),
            stop_reason,
        }
    }
}

/// The output-selection rule of `SubagentResult.output`:
///
/// 1. the content of the last assistant message that has at least one
///    non-empty block (empty and usage-only messages are skipped);
/// 2. otherwise the accumulated streamed assistant text, as one text block;
/// 3. otherwise `[]`.
///
/// `assistant_messages` are in transcript order.
#[must_use]
pub fn select_output<'a, I>(assistant_messages: I, streamed_text: &str) -> Vec<ContentBlock>
where
    I: IntoIterator<Item = &'a [ContentBlock]>,
    I::IntoIter: DoubleEndedIterator,
{
    let last_non_empty = assistant_messages
        .into_iter()
        .rev()
        .find(|content| content.iter().any(|block| !block.is_empty()));
    match last_non_empty {
        Some(content) => content.to_vec(),
        None if !streamed_text.is_empty() => vec![ContentBlock::Text(TextBlock {
            text: streamed_text.to_owned(),
            extra: serde_json::Map::new(),
        })],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_round_trip_including_unknown_ones() {
        for wire in [
            "completed",
            "aborted",
            "error",
            "max-tokens",
            "refusal",
            "timeout",
        ] {
            let reason: SubagentStopReason =
                serde_json::from_value(Value::String(wire.into())).unwrap();
            assert_eq!(reason.as_str(), wire);
            assert_eq!(
                serde_json::to_value(&reason).unwrap(),
                Value::String(wire.into())
            );
        }
        assert_eq!(
            SubagentStopReason::from_wire("timeout"),
            SubagentStopReason::Other("timeout".into())
        );
        assert!(!SubagentStopReason::Completed.is_error());
        assert!(SubagentStopReason::MaxTokens.is_error());
    }

    #[test]
    fn output_is_the_last_non_empty_assistant_message() {
        let first = vec![ContentBlock::text("draft")];
        let second = vec![ContentBlock::text("final")];
        let usage_only: Vec<ContentBlock> = vec![];
        let blank = vec![ContentBlock::text("")];
        let messages: Vec<&[ContentBlock]> = vec![&first, &second, &usage_only, &blank];
        assert_eq!(select_output(messages, "streamed"), second);
    }

    #[test]
    fn output_falls_back_to_streamed_text_then_to_nothing() {
        let blank = vec![ContentBlock::text("")];
        let messages: Vec<&[ContentBlock]> = vec![&blank];
        assert_eq!(
            select_output(messages.clone(), "partial stream"),
            vec![ContentBlock::text("partial stream")]
        );
        assert_eq!(select_output(messages, ""), Vec::<ContentBlock>::new());
        assert_eq!(
            select_output(Vec::<&[ContentBlock]>::new(), ""),
            Vec::<ContentBlock>::new()
        );
    }

    #[test]
    fn a_tool_use_only_message_counts_as_non_empty() {
        let tool_call: Vec<ContentBlock> = serde_json::from_value(serde_json::json!([
            {"type": "tool_use", "id": "c", "name": "ls", "input": {}}
        ]))
        .unwrap();
        let messages: Vec<&[ContentBlock]> = vec![&tool_call];
        assert_eq!(select_output(messages, "x"), tool_call);
    }

    #[test]
    fn diagnostic_is_cut_to_4096_bytes_on_a_char_boundary() {
        // 'é' is 2 bytes and '😀' 4: 4095 ASCII bytes then a 4-byte char must cut before it.
        let text = format!("{}😀tail", "a".repeat(4095));
        let diagnostic = Diagnostic::new(text);
        assert_eq!(diagnostic.as_str().len(), 4095);
        assert!(diagnostic.as_str().chars().all(|c| c == 'a'));

        let multibyte = "é".repeat(3000); // 6000 bytes
        let diagnostic = Diagnostic::new(multibyte);
        assert_eq!(diagnostic.as_str().len(), 4096);
        assert_eq!(diagnostic.as_str().chars().count(), 2048);

        let short = Diagnostic::new("fine");
        assert_eq!(short.as_str(), "fine");
    }

    #[test]
    fn decoding_an_oversized_diagnostic_truncates_it() {
        let long = Value::String("x".repeat(10_000));
        let diagnostic: Diagnostic = serde_json::from_value(long).unwrap();
        assert_eq!(diagnostic.as_str().len(), MAX_DIAGNOSTIC_BYTES);
    }
}
