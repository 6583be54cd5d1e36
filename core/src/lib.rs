//! # subagent-core
//!
//! The pure domain of the subagents runtime: identities, content, the
//! published contracts of `types.ts`, results, errors, and the event schema
//! every lifecycle transition is recorded in. Nothing here does IO, spawns a
//! task or knows RocksDB exists; the store and runtime crates do.

pub mod attachment;
pub mod content;
pub mod contracts;
pub mod error;
pub mod event;
pub mod ids;
mod json_writer;
mod lower_hex;
pub mod persona;
pub mod record;
pub mod redact;
pub mod remote;
pub mod result;
pub mod schema;
pub mod settings;
pub mod telemetry;
pub mod upcast;

#[cfg(any(test, feature = "arbitrary"))]
pub mod arbitrary;

pub use attachment::{Attachment, AttachmentId, AttachmentLimits, ImageKind, MAX_ATTACHMENT_BYTES};
pub use content::ContentBlock;
pub use contracts::*;
pub use error::{Causes, ErrorCode, Fault, OutOfOrder, SubagentError};
pub use event::{
    AbandonReason, AgentReport, Cost, Event, EventKind, NewEvent, PlanEntry, RecordedEvent,
    StreamId, StreamKind, StreamName, Usage, CURRENT_SCHEMA_VERSION, STREAM_NAME_MAX,
};
pub use ids::{EventId, HostId, IdText, MessageId, SessionId, SubagentRunId};
pub use record::{MAX_CONTENT_BYTES, MAX_EVENT_BYTES};
pub use remote::{
    AddressMode, ContinuableAddress, InterruptReceipt, InterruptRequest, PromptReceipt,
    PromptRequest,
};
pub use result::{select_output, Diagnostic, SubagentResult, SubagentStopReason};
pub use settings::{
    effective_agent_options, resolve_max_depth, DepthPolicy, ModelSelectionSettings, StartSettings,
};
pub use telemetry::{kept_trace, NamedSpan, TraceContext};
