//! The runtime's one error vocabulary: [`SubagentError`] and its stable
//! [`ErrorCode`]s.
//!
//! Layout: this file is the table (`declare_errors!`) and the error's
//! constructors; `out_of_order.rs` holds [`OutOfOrder`], `fault.rs`
//! [`Fault`] (an internal fault's text and cause), `causes.rs` [`Causes`]
//! (an aggregate's bounded text).
//!
//! A code is a published contract: hosts branch on it, so a code's string never
//! changes once released. Every rejection the runtime returns is one of these
//! variants; a rejection never appends to the log.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

mod causes;
mod fault;
mod out_of_order;

pub use causes::{Causes, AGGREGATE_CAUSES_SHOWN};
pub use fault::Fault;
pub use out_of_order::OutOfOrder;

use crate::SessionId;
use thiserror::Error;

/// Declares every error once: each entry's doc, stable code, message and
/// payload generate both the [`ErrorCode`] variant (with
/// [`ErrorCode::ALL`], [`ErrorCode::as_str`] and [`ErrorCode::parse`]) and
/// the [`SubagentError`] variant with its [`SubagentError::code`]. The list
/// after `codes of other errors` declares the codes of the store's and the
/// replay tools' own error types, which return them from their `code()`:
/// one enum holds every code a caller can see.
macro_rules! declare_errors {
    ($(
        $(#[doc = $doc:literal])*
        #[code = $code:literal]
        #[error($($display:tt)*)]
        $variant:ident
            $(( $($(#[$tattr:meta])* $tuple:ty),* $(,)? ))?
            $({ $( $(#[doc = $fdoc:literal])* $field:ident : $fty:ty ),* $(,)? })?,
    )*
    codes of other errors:
    $(
        $(#[doc = $odoc:literal])*
        $other:ident = $ocode:literal,
    )*) => {
        /// A stable, machine-readable error code (`area/kind`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $( $(#[doc = $doc])* $variant, )*
            $( $(#[doc = $odoc])* $other, )*
        }

        impl ErrorCode {
            /// Every code, for exhaustive tests and documentation.
            pub const ALL: &'static [ErrorCode] =
                &[$(ErrorCode::$variant,)* $(ErrorCode::$other,)*];

            /// The wire form of the code.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)*
                    $(ErrorCode::$other => $ocode,)*
                }
            }

            /// The code whose wire form is `text`.
            #[must_use]
            pub fn parse(text: &str) -> Option<ErrorCode> {
                match text {
                    $($code => Some(ErrorCode::$variant),)*
                    $($ocode => Some(ErrorCode::$other),)*
                    _ => None,
                }
            }
        }

        /// Every rejection and failure the runtime reports to a caller.
        ///
        /// Messages never carry tool inputs, file contents, environment values or
        /// credentials; they name ids, providers and option names only.
        #[derive(Clone, Debug, PartialEq, Error)]
        pub enum SubagentError {
            $(
                $(#[doc = $doc])*
                #[error($($display)*)]
                $variant $(( $($(#[$tattr])* $tuple),* ))? $({ $( $(#[doc = $fdoc])* $field: $fty ),* })?,
            )*
        }

        impl SubagentError {
            /// The stable code of this error.
            #[must_use]
            pub fn code(&self) -> ErrorCode {
                match self {
                    $(SubagentError::$variant { .. } => ErrorCode::$variant,)*
                }
            }
        }
    };
}

declare_errors! {
    /// The caller's authority does not own the target, or its handle is stale.
    #[code = "subagent/unauthorized"]
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The target exists but cannot be resumed (external, unknown mode, ...).
    #[code = "subagent/not-resumable"]
    #[error("not resumable: {0}")]
    NotResumable(String),
    /// The message could not be delivered now (for example at capacity).
    #[code = "subagent/delivery-unavailable"]
    #[error("delivery unavailable: {0}")]
    DeliveryUnavailable(String),
    /// The addressed parent is not live or not known.
    #[code = "subagent/parent-unavailable"]
    #[error("parent unavailable: {0}")]
    ParentUnavailable(String),
    /// An attachment failed validation.
    #[code = "subagent/attachment-invalid"]
    #[error("attachment invalid: {0}")]
    AttachmentInvalid(String),
    /// A browser zone is not a valid IANA time zone.
    #[code = "subagent/invalid-time-zone"]
    #[error("invalid time zone: {0:?}")]
    InvalidTimeZone(String),
    /// A requested start option is not supported by the chosen provider.
    #[code = "subagent/capability-unsupported"]
    #[error("provider {provider:?} does not support the {capability} start option")]
    CapabilityUnsupported {
        /// The chosen provider.
        provider: String,
        /// The capability flag the request needs (`outputSchema`, `depthLimit`, ...).
        capability: &'static str,
    },
    /// No provider is registered under the requested name.
    #[code = "subagent/unknown-provider"]
    #[error("no provider is registered as {0:?}")]
    UnknownProvider(String),
    /// A provider with that name is already registered.
    #[code = "subagent/duplicate-provider"]
    #[error("a provider is already registered as {0:?}")]
    DuplicateProvider(String),
    /// The output schema is outside the enforced subset.
    #[code = "subagent/invalid-output-schema"]
    #[error("output schema rejected: {0}")]
    InvalidOutputSchema(String),
    /// `max_depth` is negative, fractional or above 2^53 - 1.
    #[code = "subagent/invalid-depth"]
    #[error("max depth must be a non-negative safe integer, got {0}")]
    InvalidDepth(serde_json::Value),
    /// The child's computed depth would exceed the accepted `max_depth`.
    #[code = "subagent/depth-exceeded"]
    #[error("child depth {depth} exceeds max depth {max_depth}")]
    DepthExceeded {
        /// The computed depth of the child.
        depth: u64,
        /// The accepted cap.
        max_depth: u64,
    },
    /// A tool filter names a tool that does not exist.
    #[code = "subagent/unknown-tool"]
    #[error("tool filter names unknown tool {0:?}")]
    UnknownTool(String),
    /// A persona template is malformed or names an unknown variable.
    #[code = "subagent/invalid-persona"]
    #[error("persona rejected: {0}")]
    InvalidPersona(String),
    /// A provider/model route outside the allowed model selection.
    #[code = "subagent/route-not-allowed"]
    #[error("model route rejected: {0}")]
    RouteNotAllowed(String),
    /// Admission below the parent is closed by a drain.
    #[code = "subagent/admission-closed"]
    #[error("admission below {below} is closed")]
    AdmissionClosed {
        /// The session whose drain closed admission (the parent or an
        /// ancestor of the refused start).
        below: SessionId,
    },
    /// Several branches of one operation failed; see the aggregated errors.
    ///
    /// The text names the first
    /// [`AGGREGATE_CAUSES_SHOWN`] causes with their codes, then how many more.
    #[code = "subagent/aggregate"]
    #[error("{0}")]
    Aggregate(Causes),
    /// The runtime was closed: it accepts no further calls.
    #[code = "subagent/closed"]
    #[error("the runtime is closed")]
    Closed,
    /// The root session is already held open by this runtime.
    #[code = "subagent/root-held"]
    #[error("root {0} is already held open by this runtime")]
    RootHeld(SessionId),
    /// The command is for a tree this runtime does not hold: on a shared
    /// log, another host holds it (`holder`), or no host took it yet
    /// (`None`; taking the root back takes it); a single-writer runtime
    /// refuses a tree a host of a shared log holds. Nothing was recorded.
    #[code = "subagent/tree-elsewhere"]
    #[error("the tree of root {root} is {}", holder_text(holder.as_deref()))]
    TreeElsewhere {
        /// The root of the tree addressed.
        root: SessionId,
        /// The lease holder of the host that holds it, if any.
        holder: Option<String>,
    },
    /// A request would record an event larger than
    /// [`crate::MAX_EVENT_BYTES`] (a message, result or seed too large).
    ///
    /// Nothing was recorded.
    #[code = "subagent/event-too-large"]
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
    /// A command came out of order for its session: the state machine's
    /// precondition for it does not hold (a driver or host bug, or a race
    /// the caller lost). Nothing was recorded.
    #[code = "subagent/out-of-order"]
    #[error("{session}: {reason}")]
    OutOfOrder {
        /// The session the command addressed.
        session: SessionId,
        /// Which precondition failed.
        reason: OutOfOrder,
    },
    /// The request is malformed.
    #[code = "gateway/bad-request"]
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The caller cancelled before the operation was accepted.
    #[code = "gateway/cancelled"]
    #[error("cancelled before acceptance")]
    Cancelled,
    /// An infrastructure fault (storage, a crashed driver, ...).
    #[code = "gateway/internal"]
    #[error("internal error: {0}")]
    Internal(#[source] Fault),
    /// The log cannot take writes now: its database server cannot be
    /// reached, its disk is full, or its writer stopped after such a
    /// failure. Nothing was recorded by this call. The failure is
    /// transient: a host that supervises its runtime reopens it once the
    /// store answers again, and a retry then works.
    #[code = "store/unavailable"]
    #[error("the store is unavailable: {0}")]
    StoreUnavailable(#[source] Fault),

    codes of other errors:

    /// `StoreError::Conflict`: the stream's version is not the expected one.
    StoreConflict = "store/conflict",
    /// `StoreError::Corrupt`: a record failed its checksum or did not decode.
    StoreCorrupt = "store/corrupt",
    /// `StoreError::UnsupportedSchema`: a record of a newer schema.
    StoreUnsupportedSchema = "store/unsupported-schema",
    /// `StoreError::Locked`: another process holds the log directory.
    StoreLocked = "store/locked",
    /// `StoreError::UnsupportedFormat`: an unknown on-disk format.
    StoreUnsupportedFormat = "store/unsupported-format",
    /// `StoreError::EmptyAppend`: an append carried no events.
    StoreEmptyAppend = "store/empty-append",
    /// `StoreError::RepeatedStream`: an atomic append names a stream twice.
    StoreRepeatedStream = "store/repeated-stream",
    /// `StoreError::MisplacedEvent`: an event in a stream of the wrong kind.
    StoreMisplacedEvent = "store/misplaced-event",
    /// `StoreError::DuplicateEventId`: an event id reused, not as a retry.
    StoreDuplicateEventId = "store/duplicate-event-id",
    /// `StoreError::Damaged`: the log's files are damaged beyond one record.
    StoreDamaged = "store/damaged",
    /// `StoreError::NotALog`: the path holds no log.
    StoreNotALog = "store/not-a-log",
    /// `StoreError::ReadOnly`: a write through a read-only handle.
    StoreReadOnly = "store/read-only",
    /// `StoreError::EventTooLarge`: an encoded record over the event limit.
    StoreEventTooLarge = "store/event-too-large",
    /// `StoreError::NumberingExhausted`: a position or version would overflow.
    StoreNumberingExhausted = "store/numbering-exhausted",
    /// `StoreError::CorruptIndex`: an index entry does not decode.
    StoreCorruptIndex = "store/corrupt-index",
    /// `StoreError::Io`: a storage IO failure.
    StoreIo = "store/io",
    /// `StoreError::Closed`: the log's writer has stopped.
    StoreClosed = "store/closed",
    /// `StoreError::Fenced`: an append presented a stale lease's fencing
    /// token; its writer lost the tree.
    StoreFenced = "store/fenced",
    /// `StoreError::LeaseHeld`: another holder's lease on the tree has not
    /// lapsed.
    StoreLeaseHeld = "store/lease-held",
    /// `StoreError::InvalidLease`: a lease request with a bad holder or term.
    StoreInvalidLease = "store/invalid-lease",
    /// `ReplayError::PositionPastHead`: a position beyond the log's head.
    ReplayPositionPastHead = "replay/position-past-head",
    /// `ReplayError::UnknownSession`: a session the log does not know.
    ReplayUnknownSession = "replay/unknown-session",
    /// `ReplayError::NotEmpty`: import needs an empty log.
    ReplayNotEmpty = "replay/not-empty",
    /// `ReplayError::DirectoryNotEmpty`: import needs a new or empty directory.
    ReplayDirectoryNotEmpty = "replay/directory-not-empty",
    /// `ReplayError::BadImport`: an import line is not a record in order.
    ReplayBadImport = "replay/bad-import",
    /// `ReplayError::LineTooLong`: an import line over the event limit.
    ReplayLineTooLong = "replay/line-too-long",
    /// `HistoryViolation`: a record the state machine could not have produced.
    ReplayImpossibleHistory = "replay/impossible-history",
    /// `ReplayError::Io`: reading an import or writing an export failed.
    ReplayIo = "replay/io",
    /// `GatewayError::Unauthenticated`: no bearer token, or a wrong one.
    GatewayUnauthenticated = "gateway/unauthenticated",
    /// `GatewayError::ForbiddenOrigin`: a browser origin off the allow-list.
    GatewayForbiddenOrigin = "gateway/forbidden-origin",
    /// `GatewayError::NotFound`: no such route or resource.
    GatewayNotFound = "gateway/not-found",
    /// `GatewayError::MethodNotAllowed`: the route exists, the method not.
    GatewayMethodNotAllowed = "gateway/method-not-allowed",
    /// `GatewayError::PayloadTooLarge`: a body over the gateway's limit.
    GatewayPayloadTooLarge = "gateway/payload-too-large",
    /// `GatewayError::Timeout`: the request ran past the gateway's limit.
    GatewayTimeout = "gateway/timeout",
    /// `GatewayError::UriTooLong`: a request URI over the HTTP server's
    /// limit, refused before the request is routed.
    GatewayUriTooLong = "gateway/uri-too-long",
    /// `GatewayError::HeadersTooLarge`: too many request headers, or a
    /// request head over the HTTP server's limit, refused before the
    /// request is routed.
    GatewayHeadersTooLarge = "gateway/headers-too-large",
    /// `AcpError::Spawn`: the agent's program could not be started.
    AcpSpawn = "acp/spawn",
    /// `AcpError::InitializeTimeout`: the agent never answered `initialize`.
    AcpInitializeTimeout = "acp/initialize-timeout",
    /// `AcpError::SessionTimeout`: the agent never answered `session/new`
    /// or `session/load`.
    AcpSessionTimeout = "acp/session-timeout",
    /// `AcpError::Protocol`: the agent answered a request with an error.
    AcpProtocol = "acp/protocol",
    /// `AcpError::Exited`: the agent's process exited or closed its stdout.
    AcpExited = "acp/exited",
    /// `AcpError::CancelUnanswered`: a cancelled turn was not answered in time.
    AcpCancelUnanswered = "acp/cancel-unanswered",
    /// `AcpError::OutputTooLarge`: a turn's assistant message grew past the
    /// content limit.
    AcpOutputTooLarge = "acp/output-too-large",
    /// `AcpError::IdleTimeout`: the agent sent nothing for the idle limit
    /// during a turn.
    AcpIdleTimeout = "acp/idle-timeout",
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        ErrorCode::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code {text:?}")))
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SubagentError {
    /// An infrastructure fault (`gateway/internal`) described by `text`
    /// alone (no underlying error).
    #[must_use]
    pub fn internal(text: impl Into<String>) -> SubagentError {
        SubagentError::Internal(Fault {
            text: text.into(),
            cause: None,
        })
    }

    /// An infrastructure fault (`gateway/internal`) caused by `source`,
    /// which it keeps ([`Fault::cause`]; `std::error::Error::source` of the
    /// fault). The message is `source`'s text followed by each of its own
    /// sources (`a: b: c`), so the root cause is never dropped from the
    /// text either; a source whose text its parent already includes is not
    /// repeated.
    #[must_use]
    pub fn internal_from(source: impl std::error::Error + Send + Sync + 'static) -> SubagentError {
        SubagentError::Internal(Fault::from_error(source))
    }

    /// The store unavailable (`store/unavailable`) because of `source`,
    /// which it keeps, its text built as [`internal_from`](Self::internal_from)'s.
    #[must_use]
    pub fn unavailable_from(
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> SubagentError {
        SubagentError::StoreUnavailable(Fault::from_error(source))
    }
}

impl Fault {
    /// A fault caused by `source`: its text is `source`'s followed by each
    /// of its own sources (`a: b: c`), a source whose text its parent
    /// already includes not repeated.
    fn from_error(source: impl std::error::Error + Send + Sync + 'static) -> Fault {
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
        Fault {
            text,
            cause: Some(Arc::new(source)),
        }
    }
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
            SubagentError::UnknownTool(m) => SubagentError::UnknownTool(clean(&m)),
            SubagentError::InvalidPersona(m) => SubagentError::InvalidPersona(clean(&m)),
            SubagentError::RouteNotAllowed(m) => SubagentError::RouteNotAllowed(clean(&m)),
            SubagentError::BadRequest(m) => SubagentError::BadRequest(clean(&m)),
            // The cause is dropped: its own text was not cleaned.
            SubagentError::Internal(fault) => SubagentError::internal(clean(&fault.text)),
            SubagentError::StoreUnavailable(fault) => SubagentError::StoreUnavailable(Fault {
                text: clean(&fault.text),
                cause: None,
            }),
            SubagentError::Aggregate(Causes(errors)) => SubagentError::Aggregate(Causes(
                errors
                    .into_iter()
                    .map(|error| error.map_messages(clean))
                    .collect(),
            )),
            SubagentError::CapabilityUnsupported {
                provider,
                capability,
            } => SubagentError::CapabilityUnsupported {
                provider: clean(&provider),
                capability,
            },
            unchanged @ (SubagentError::DepthExceeded { .. }
            | SubagentError::InvalidDepth(_)
            | SubagentError::AdmissionClosed { .. }
            | SubagentError::RootHeld(_)
            | SubagentError::TreeElsewhere { .. }
            | SubagentError::OutOfOrder { .. }
            | SubagentError::EventTooLarge { .. }
            | SubagentError::Cancelled
            | SubagentError::Closed) => unchanged,
        }
    }
}

/// How [`SubagentError::TreeElsewhere`] names who holds the tree.
fn holder_text(holder: Option<&str>) -> String {
    match holder {
        Some(holder) => format!("held by host {holder:?}; this runtime may not act on it"),
        None => "held by no host of this shared log; take the root back first".to_owned(),
    }
}

#[cfg(test)]
mod tests;
