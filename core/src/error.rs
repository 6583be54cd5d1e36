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
    pub const ALL: [ErrorCode; 20] = [
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
    /// See [`ErrorCode::Aggregate`].
    #[error("{} branches failed", .0.len())]
    Aggregate(Vec<SubagentError>),
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

impl SubagentError {
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
            unchanged @ (SubagentError::DepthExceeded { .. } | SubagentError::Cancelled) => {
                unchanged
            }
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
}
