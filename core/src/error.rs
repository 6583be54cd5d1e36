//! The runtime's one error vocabulary: [`SubagentError`] and its stable
//! [`ErrorCode`]s.
//!
//! A code is a published contract: hosts branch on it, so a code's string never
//! changes once released. Every rejection the runtime returns is one of these
//! variants; a rejection never appends to the log.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A stable, machine-readable error code (`area/kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The caller's authority does not own the target, or its handle is stale.
    #[serde(rename = "subagent/unauthorized")]
    Unauthorized,
    /// The target exists but cannot be resumed (external, unknown mode, ...).
    #[serde(rename = "subagent/not-resumable")]
    NotResumable,
    /// The message could not be delivered now (for example at capacity).
    #[serde(rename = "subagent/delivery-unavailable")]
    DeliveryUnavailable,
    /// The addressed parent is not live or not known.
    #[serde(rename = "subagent/parent-unavailable")]
    ParentUnavailable,
    /// An attachment failed validation.
    #[serde(rename = "subagent/attachment-invalid")]
    AttachmentInvalid,
    /// A browser zone is not a valid IANA time zone.
    #[serde(rename = "subagent/invalid-time-zone")]
    InvalidTimeZone,
    /// A requested start option is not supported by the chosen provider.
    #[serde(rename = "subagent/capability-unsupported")]
    CapabilityUnsupported,
    /// No provider is registered under the requested name.
    #[serde(rename = "subagent/unknown-provider")]
    UnknownProvider,
    /// A provider with that name is already registered.
    #[serde(rename = "subagent/duplicate-provider")]
    DuplicateProvider,
    /// The output schema is outside the enforced subset.
    #[serde(rename = "subagent/invalid-output-schema")]
    InvalidOutputSchema,
    /// `max_depth` is negative, fractional or above 2^53 - 1.
    #[serde(rename = "subagent/invalid-depth")]
    InvalidDepth,
    /// The child's computed depth would exceed the accepted `max_depth`.
    #[serde(rename = "subagent/depth-exceeded")]
    DepthExceeded,
    /// A tool filter names a tool that does not exist.
    #[serde(rename = "subagent/unknown-tool")]
    UnknownTool,
    /// A persona template is malformed or names an unknown variable.
    #[serde(rename = "subagent/invalid-persona")]
    InvalidPersona,
    /// A provider/model route outside the allowed model selection.
    #[serde(rename = "subagent/route-not-allowed")]
    RouteNotAllowed,
    /// Admission below the parent is closed by a drain.
    #[serde(rename = "subagent/admission-closed")]
    AdmissionClosed,
    /// Several branches of one operation failed; see the aggregated errors.
    #[serde(rename = "subagent/aggregate")]
    Aggregate,
    /// The runtime was closed: it accepts no further calls.
    #[serde(rename = "subagent/closed")]
    Closed,
    /// The root session is already held open by this runtime.
    #[serde(rename = "subagent/root-held")]
    RootHeld,
    /// A request would record an event larger than
    /// [`crate::MAX_EVENT_BYTES`] (a message, result or seed too large).
    #[serde(rename = "subagent/event-too-large")]
    EventTooLarge,
    /// The request is malformed.
    #[serde(rename = "gateway/bad-request")]
    BadRequest,
    /// The caller cancelled before the operation was accepted.
    #[serde(rename = "gateway/cancelled")]
    Cancelled,
    /// An infrastructure fault (storage, a crashed driver, ...).
    #[serde(rename = "gateway/internal")]
    Internal,
}

impl ErrorCode {
    /// Every code, for exhaustive tests and documentation.
    pub const ALL: [ErrorCode; 23] = [
        ErrorCode::Unauthorized,
        ErrorCode::NotResumable,
        ErrorCode::DeliveryUnavailable,
        ErrorCode::ParentUnavailable,
        ErrorCode::AttachmentInvalid,
        ErrorCode::InvalidTimeZone,
        ErrorCode::CapabilityUnsupported,
        ErrorCode::UnknownProvider,
        ErrorCode::DuplicateProvider,
        ErrorCode::InvalidOutputSchema,
        ErrorCode::InvalidDepth,
        ErrorCode::DepthExceeded,
        ErrorCode::UnknownTool,
        ErrorCode::InvalidPersona,
        ErrorCode::RouteNotAllowed,
        ErrorCode::AdmissionClosed,
        ErrorCode::Aggregate,
        ErrorCode::Closed,
        ErrorCode::RootHeld,
        ErrorCode::EventTooLarge,
        ErrorCode::BadRequest,
        ErrorCode::Cancelled,
        ErrorCode::Internal,
    ];

    /// The stable string form, e.g. `subagent/unauthorized`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "subagent/unauthorized",
            ErrorCode::NotResumable => "subagent/not-resumable",
            ErrorCode::DeliveryUnavailable => "subagent/delivery-unavailable",
            ErrorCode::ParentUnavailable => "subagent/parent-unavailable",
            ErrorCode::AttachmentInvalid => "subagent/attachment-invalid",
            ErrorCode::InvalidTimeZone => "subagent/invalid-time-zone",
            ErrorCode::CapabilityUnsupported => "subagent/capability-unsupported",
            ErrorCode::UnknownProvider => "subagent/unknown-provider",
            ErrorCode::DuplicateProvider => "subagent/duplicate-provider",
            ErrorCode::InvalidOutputSchema => "subagent/invalid-output-schema",
            ErrorCode::InvalidDepth => "subagent/invalid-depth",
            ErrorCode::DepthExceeded => "subagent/depth-exceeded",
            ErrorCode::UnknownTool => "subagent/unknown-tool",
            ErrorCode::InvalidPersona => "subagent/invalid-persona",
            ErrorCode::RouteNotAllowed => "subagent/route-not-allowed",
            ErrorCode::AdmissionClosed => "subagent/admission-closed",
            ErrorCode::Aggregate => "subagent/aggregate",
            ErrorCode::Closed => "subagent/closed",
            ErrorCode::RootHeld => "subagent/root-held",
            ErrorCode::EventTooLarge => "subagent/event-too-large",
            ErrorCode::BadRequest => "gateway/bad-request",
            ErrorCode::Cancelled => "gateway/cancelled",
            ErrorCode::Internal => "gateway/internal",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every rejection and failure the runtime reports to a caller.
///
/// Messages never carry tool inputs, file contents, environment values or
/// credentials; they name ids, providers and option names only.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SubagentError {
    /// See [`ErrorCode::Unauthorized`].
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// See [`ErrorCode::NotResumable`].
    #[error("not resumable: {0}")]
    NotResumable(String),
    /// See [`ErrorCode::DeliveryUnavailable`].
    #[error("delivery unavailable: {0}")]
    DeliveryUnavailable(String),
    /// See [`ErrorCode::ParentUnavailable`].
    #[error("parent unavailable: {0}")]
    ParentUnavailable(String),
    /// See [`ErrorCode::AttachmentInvalid`].
    #[error("attachment invalid: {0}")]
    AttachmentInvalid(String),
    /// See [`ErrorCode::InvalidTimeZone`].
    #[error("invalid time zone: {0:?}")]
    InvalidTimeZone(String),
    /// See [`ErrorCode::CapabilityUnsupported`].
    #[error("provider {provider:?} does not support the {capability} start option")]
    CapabilityUnsupported {
        /// The chosen provider.
        provider: String,
        /// The capability flag the request needs (`outputSchema`, `depthLimit`, ...).
        capability: &'static str,
    },
    /// See [`ErrorCode::UnknownProvider`].
    #[error("no provider is registered as {0:?}")]
    UnknownProvider(String),
    /// See [`ErrorCode::DuplicateProvider`].
    #[error("a provider is already registered as {0:?}")]
    DuplicateProvider(String),
    /// See [`ErrorCode::InvalidOutputSchema`].
    #[error("output schema rejected: {0}")]
    InvalidOutputSchema(String),
    /// See [`ErrorCode::InvalidDepth`].
    #[error("max depth must be a non-negative safe integer, got {0}")]
    InvalidDepth(String),
    /// See [`ErrorCode::DepthExceeded`].
    #[error("child depth {depth} exceeds max depth {max_depth}")]
    DepthExceeded {
        /// The computed depth of the child.
        depth: u64,
        /// The accepted cap.
        max_depth: u64,
    },
    /// See [`ErrorCode::UnknownTool`].
    #[error("tool filter names unknown tool {0:?}")]
    UnknownTool(String),
    /// See [`ErrorCode::InvalidPersona`].
    #[error("persona rejected: {0}")]
    InvalidPersona(String),
    /// See [`ErrorCode::RouteNotAllowed`].
    #[error("model route rejected: {0}")]
    RouteNotAllowed(String),
    /// See [`ErrorCode::AdmissionClosed`].
    #[error("admission below {0} is closed")]
    AdmissionClosed(String),
    /// See [`ErrorCode::Aggregate`]. The text names the first
    /// [`AGGREGATE_CAUSES_SHOWN`] causes with their codes, then how many more.
    #[error("{}", aggregate_text(.0))]
    Aggregate(Vec<SubagentError>),
    /// See [`ErrorCode::Closed`].
    #[error("the runtime is closed")]
    Closed,
    /// See [`ErrorCode::RootHeld`].
    #[error("root {0} is already held open by this runtime")]
    RootHeld(String),
    /// See [`ErrorCode::EventTooLarge`]. Nothing was recorded.
    #[error("a {event_type} event of {bytes} bytes is larger than the {limit}-byte limit")]
    EventTooLarge {
        /// The event's type name (`MessageAccepted`, `AssistantMessage`, ...).
        event_type: &'static str,
        /// The size counted against `limit`: the record's body, or for a
        /// start's prompt its content.
        bytes: usize,
        /// [`crate::MAX_EVENT_BYTES`], or for a prompt
        /// [`crate::MAX_CONTENT_BYTES`].
        limit: usize,
    },
    /// See [`ErrorCode::BadRequest`].
    #[error("bad request: {0}")]
    BadRequest(String),
    /// See [`ErrorCode::Cancelled`].
    #[error("cancelled before acceptance")]
    Cancelled,
    /// See [`ErrorCode::Internal`].
    #[error("internal error: {0}")]
    Internal(String),
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

impl SubagentError {
    /// An infrastructure fault (`gateway/internal`) caused by `source`. The
    /// message is `source`'s text followed by each of its own sources
    /// (`a: b: c`), so the root cause is never dropped; a source whose text
    /// its parent already includes is not repeated.
    #[must_use]
    pub fn internal_from(source: &(dyn std::error::Error + 'static)) -> SubagentError {
        let mut text = source.to_string();
        let mut next = source.source();
        while let Some(cause) = next {
            let cause_text = cause.to_string();
            if !cause_text.is_empty() && !text.contains(&cause_text) {
                text.push_str(": ");
                text.push_str(&cause_text);
            }
            next = cause.source();
        }
        SubagentError::Internal(text)
    }

    /// The same error with every free-text message passed through `clean`
    /// (codes, ids and numbers kept): how a provider's error is made safe
    /// before it reaches a caller or the log.
    #[must_use]
    pub fn map_messages(self, clean: &impl Fn(&str) -> String) -> SubagentError {
        match self {
            SubagentError::Unauthorized(m) => SubagentError::Unauthorized(clean(&m)),
            SubagentError::NotResumable(m) => SubagentError::NotResumable(clean(&m)),
            SubagentError::DeliveryUnavailable(m) => SubagentError::DeliveryUnavailable(clean(&m)),
            SubagentError::ParentUnavailable(m) => SubagentError::ParentUnavailable(clean(&m)),
            SubagentError::AttachmentInvalid(m) => SubagentError::AttachmentInvalid(clean(&m)),
            SubagentError::InvalidTimeZone(m) => SubagentError::InvalidTimeZone(clean(&m)),
            SubagentError::UnknownProvider(m) => SubagentError::UnknownProvider(clean(&m)),
            SubagentError::DuplicateProvider(m) => SubagentError::DuplicateProvider(clean(&m)),
            SubagentError::InvalidOutputSchema(m) => SubagentError::InvalidOutputSchema(clean(&m)),
            SubagentError::InvalidDepth(m) => SubagentError::InvalidDepth(clean(&m)),
            SubagentError::UnknownTool(m) => SubagentError::UnknownTool(clean(&m)),
            SubagentError::InvalidPersona(m) => SubagentError::InvalidPersona(clean(&m)),
            SubagentError::RouteNotAllowed(m) => SubagentError::RouteNotAllowed(clean(&m)),
            SubagentError::AdmissionClosed(m) => SubagentError::AdmissionClosed(clean(&m)),
            SubagentError::RootHeld(m) => SubagentError::RootHeld(clean(&m)),
            SubagentError::BadRequest(m) => SubagentError::BadRequest(clean(&m)),
            SubagentError::Internal(m) => SubagentError::Internal(clean(&m)),
            SubagentError::Aggregate(errors) => SubagentError::Aggregate(
                errors
                    .into_iter()
                    .map(|error| error.map_messages(clean))
                    .collect(),
            ),
            SubagentError::CapabilityUnsupported {
                provider,
                capability,
            } => SubagentError::CapabilityUnsupported {
                provider: clean(&provider),
                capability,
            },
            unchanged @ (SubagentError::DepthExceeded { .. }
            | SubagentError::EventTooLarge { .. }
            | SubagentError::Cancelled
            | SubagentError::Closed) => unchanged,
        }
    }

    /// The stable code of this error.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            SubagentError::Unauthorized(_) => ErrorCode::Unauthorized,
            SubagentError::NotResumable(_) => ErrorCode::NotResumable,
            SubagentError::DeliveryUnavailable(_) => ErrorCode::DeliveryUnavailable,
            SubagentError::ParentUnavailable(_) => ErrorCode::ParentUnavailable,
            SubagentError::AttachmentInvalid(_) => ErrorCode::AttachmentInvalid,
            SubagentError::InvalidTimeZone(_) => ErrorCode::InvalidTimeZone,
            SubagentError::CapabilityUnsupported { .. } => ErrorCode::CapabilityUnsupported,
            SubagentError::UnknownProvider(_) => ErrorCode::UnknownProvider,
            SubagentError::DuplicateProvider(_) => ErrorCode::DuplicateProvider,
            SubagentError::InvalidOutputSchema(_) => ErrorCode::InvalidOutputSchema,
            SubagentError::InvalidDepth(_) => ErrorCode::InvalidDepth,
            SubagentError::DepthExceeded { .. } => ErrorCode::DepthExceeded,
            SubagentError::UnknownTool(_) => ErrorCode::UnknownTool,
            SubagentError::InvalidPersona(_) => ErrorCode::InvalidPersona,
            SubagentError::RouteNotAllowed(_) => ErrorCode::RouteNotAllowed,
            SubagentError::AdmissionClosed(_) => ErrorCode::AdmissionClosed,
            SubagentError::Aggregate(_) => ErrorCode::Aggregate,
            SubagentError::Closed => ErrorCode::Closed,
            SubagentError::RootHeld(_) => ErrorCode::RootHeld,
            SubagentError::EventTooLarge { .. } => ErrorCode::EventTooLarge,
            SubagentError::BadRequest(_) => ErrorCode::BadRequest,
            SubagentError::Cancelled => ErrorCode::Cancelled,
            SubagentError::Internal(_) => ErrorCode::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_code_is_unique_and_matches_its_serde_name() {
        let mut seen = HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "duplicate code {code}");
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, serde_json::Value::String(code.as_str().to_owned()));
        }
    }

    #[test]
    fn errors_map_to_their_codes() {
        assert_eq!(
            SubagentError::Unauthorized("stale".into()).code().as_str(),
            "subagent/unauthorized"
        );
        assert_eq!(
            SubagentError::Cancelled.code().as_str(),
            "gateway/cancelled"
        );
        let unsupported = SubagentError::CapabilityUnsupported {
            provider: "acp".into(),
            capability: "outputSchema",
        };
        assert_eq!(unsupported.code(), ErrorCode::CapabilityUnsupported);
        assert!(unsupported.to_string().contains("outputSchema"));
    }

    #[test]
    fn an_aggregate_names_its_first_causes_with_their_codes_then_counts_the_rest() {
        let disk_full =
            || SubagentError::Internal("storage failure: No space left on device".into());
        let one = SubagentError::Aggregate(vec![disk_full()]);
        assert_eq!(
            one.to_string(),
            "1 branch failed: [gateway/internal] internal error: storage failure: \
             No space left on device"
        );
        let three = SubagentError::Aggregate(vec![
            disk_full(),
            SubagentError::Unauthorized("no live agent x".into()),
            SubagentError::Closed,
        ]);
        assert_eq!(
            three.to_string(),
            "3 branches failed: [gateway/internal] internal error: storage failure: \
             No space left on device; [subagent/unauthorized] unauthorized: no live agent x; \
             [subagent/closed] the runtime is closed"
        );
        let many = SubagentError::Aggregate((0..7).map(|_| disk_full()).collect());
        let text = many.to_string();
        assert!(
            text.starts_with("7 branches failed: [gateway/internal]"),
            "{text}"
        );
        assert_eq!(text.matches("No space left on device").count(), 3, "{text}");
        assert!(text.ends_with("; and 4 more"), "{text}");
    }

    #[test]
    fn a_nested_aggregate_stays_bounded() {
        let leaf = || SubagentError::Internal("x".repeat(100));
        let inner = || SubagentError::Aggregate((0..50).map(|_| leaf()).collect());
        let outer = SubagentError::Aggregate((0..50).map(|_| inner()).collect());
        let text = outer.to_string();
        // 3 inner aggregates of 3 leaves each, never 2,500.
        assert_eq!(text.matches(&"x".repeat(100)).count(), 9);
        assert!(text.len() < 2_000, "{} bytes", text.len());
        assert!(text.contains("and 47 more"));
    }

    #[test]
    fn an_internal_error_keeps_its_source_chain() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("writing the batch")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let error =
            SubagentError::internal_from(&Outer(std::io::Error::other("No space left on device")));
        assert_eq!(error.code(), ErrorCode::Internal);
        assert_eq!(
            error.to_string(),
            "internal error: writing the batch: No space left on device"
        );
        // A source its parent already prints is not repeated.
        let io = std::io::Error::other("disk full");
        assert_eq!(
            SubagentError::internal_from(&io).to_string(),
            "internal error: disk full"
        );
    }
}
