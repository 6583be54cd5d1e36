//! The spec's two remote methods' requests and receipts, `prompt` and
//! `interruptByParent`, in their wire form (camelCase JSON), and the
//! validation both the runtime and the gateway apply to them before anything
//! is looked up: ids, the address's mode, the request id, the content and
//! the browser's time zone.
//!
//! Authorisation, liveness and delivery are not checked here: they depend on
//! the runtime's state (the runtime and `decide` check them).

use serde::{Deserialize, Serialize};

use crate::{content::ContentBlock, MessageDelivery, MessageId, SessionId, SubagentError};

/// The longest caller-minted request id, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 256;

/// The longest IANA time zone name accepted, in bytes (the longest in the
/// database is 32).
pub const MAX_TIME_ZONE_BYTES: usize = 64;

/// The continuable mode of a durable address: the only mode the remote
/// methods accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AddressMode {
    /// `"continuable"`.
    Continuable,
}

/// A durable address of a continuable child under its direct parent
/// (`{childSessionId, parentSessionId, mode: "continuable"}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContinuableAddress {
    /// The child addressed.
    pub child_session_id: SessionId,
    /// Its direct parent, whose authority the caller claims.
    pub parent_session_id: SessionId,
    /// Always `continuable`.
    pub mode: AddressMode,
}

/// `prompt`'s request: one browser-authored message to a continuable child
/// through its exact live direct parent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptRequest {
    /// Where the message goes, and under whose authority.
    pub address: ContinuableAddress,
    /// `queue` (a later turn) or `steer` (the nearest step).
    pub delivery: MessageDelivery,
    /// The caller-minted identity: a retry with the same id and body returns
    /// the first receipt; the same id with another body is refused.
    pub request_id: String,
    /// The message: text and image blocks.
    pub content: Vec<ContentBlock>,
    /// The browser's IANA time zone, kept on the accepted message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// `prompt`'s answer: the accepted message's inbox identity. Later
/// execution is independent of the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptReceipt {
    /// The id the child's inbox accepted the message under.
    pub message_id: MessageId,
}

/// `interruptByParent`'s request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterruptRequest {
    /// The child whose live execution to stop.
    pub child_session_id: SessionId,
    /// Its direct parent, whose authority the caller claims.
    pub parent_session_id: SessionId,
    /// Always `continuable`.
    pub mode: AddressMode,
}

/// `interruptByParent`'s answer: the cancel signal was admitted (or there
/// was nothing to stop), not that the target is quiescent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptReceipt {
    /// Whether an interrupt was recorded: false for an absent, idle or
    /// finished target (an accepted no-op).
    pub interrupted: bool,
}

impl PromptRequest {
    /// Checks what needs no state: a request id of 1 to
    /// [`MAX_REQUEST_ID_BYTES`] bytes without control characters, content
    /// of text and image blocks only and not empty, and a time zone that
    /// `is_time_zone` knows (`subagent/invalid-time-zone` otherwise).
    ///
    /// # Errors
    /// `gateway/bad-request` or `subagent/invalid-time-zone`.
    pub fn validate(&self, is_time_zone: impl Fn(&str) -> bool) -> Result<(), SubagentError> {
        check_request_id(&self.request_id)?;
        crate::content::require_content(&self.content, "a prompt")?;
        if let Some(other) = self
            .content
            .iter()
            .find(|block| !matches!(block, ContentBlock::Text(_) | ContentBlock::Image(_)))
        {
            return Err(SubagentError::BadRequest(format!(
                "a prompt carries text and image blocks only, not {} blocks",
                other.type_name().unwrap_or("unknown")
            )));
        }
        if let Some(zone) = &self.time_zone {
            if zone.is_empty() || zone.len() > MAX_TIME_ZONE_BYTES || !is_time_zone(zone) {
                return Err(SubagentError::InvalidTimeZone(
                    zone.chars().take(MAX_TIME_ZONE_BYTES).collect(),
                ));
            }
        }
        Ok(())
    }
}

fn check_request_id(id: &str) -> Result<(), SubagentError> {
    if id.is_empty() {
        return Err(SubagentError::BadRequest("requestId is empty".into()));
    }
    if id.len() > MAX_REQUEST_ID_BYTES {
        return Err(SubagentError::BadRequest(format!(
            "requestId is longer than {MAX_REQUEST_ID_BYTES} bytes"
        )));
    }
    if id.chars().any(char::is_control) {
        return Err(SubagentError::BadRequest(
            "requestId holds a control character".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;
