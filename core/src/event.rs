//! The event schema: every lifecycle fact the runtime records, the stream it
//! belongs to, and the envelope it is stored in.
//!
//! This module is the one place each event type is defined. Tests, the
//! runtime and the replay tools all build events through these variants.
//! Payload field names are camelCase on the wire and never change meaning;
//! a change of shape bumps [`CURRENT_SCHEMA_VERSION`] and adds an upcaster in
//! [`crate::upcast`].
//!
//! Over 500 lines because it is a table: one documented variant per event
//! type (29 of them) with every payload field, plus the envelope. Splitting
//! it would scatter the one schema over several files.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::content::ContentBlock;
use crate::contracts::{
    AgentRoute, Delivery, InterruptAuthority, MessageDelivery, MessageSource, SessionMode,
    SubagentCapabilities, ToolCallRef,
};
use crate::error::SubagentError;
use crate::ids::{EventId, HostId, MessageId, SessionId, SubagentRunId};
use crate::result::{Diagnostic, SubagentResult, SubagentStopReason};
use crate::telemetry::TraceContext;

/// The schema version this build writes. Older versions decode through
/// upcasters; newer ones are refused rather than misread.
///
/// - 1: the first release.
/// - 2: adds `AgentReported` (an agent's session, plan and context use).
///   Version 1 events are version 2 events unchanged; a build that reads
///   only version 1 refuses a version 2 record rather than misread it.
/// - 3: adds `TreeAcquired` (a host of a shared log took a tree) and the
///   `host-<uuid>` streams. Version 2 events are version 3 events
///   unchanged.
pub const CURRENT_SCHEMA_VERSION: u32 = 4;

/// A stream of the log: `runtime` for host-level facts of a single-writer
/// log, `host-<uuid>` for those of one host of a shared log,
/// `session-<uuid>` for everything about one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StreamId {
    /// Provider registrations, admission control, recovery markers.
    Runtime,
    /// The same facts of one host incarnation on a shared log.
    Host(HostId),
    /// One session's creation, transcript, inbox, activations and catalog.
    Session(SessionId),
}

impl StreamId {
    const SESSION_PREFIX: &'static str = "session-";
    const HOST_PREFIX: &'static str = "host-";

    /// The session this stream belongs to, if any.
    #[must_use]
    pub fn session(&self) -> Option<SessionId> {
        match self {
            StreamId::Runtime | StreamId::Host(_) => None,
            StreamId::Session(id) => Some(*id),
        }
    }
}

/// The longest stream name: `session-` and a hyphenated uuid.
pub const STREAM_NAME_MAX: usize = StreamId::SESSION_PREFIX.len() + uuid::fmt::Hyphenated::LENGTH;

/// A stream's name built on the stack: what its `Display` writes, without
/// the formatter or an allocation. Every record's envelope and every key
/// of a stream's index name their stream, so this is on the append path.
#[derive(Clone, Copy)]
pub struct StreamName {
    bytes: [u8; STREAM_NAME_MAX],
    len: u8,
}

impl StreamName {
    /// The name, ASCII by construction.
    #[must_use]
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    /// The name's bytes, without the UTF-8 check `as_str` makes: what a
    /// writer of bytes wants.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for StreamName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl StreamId {
    /// The stream's name, built on the stack.
    #[must_use]
    pub fn name(&self) -> StreamName {
        let mut bytes = [0u8; STREAM_NAME_MAX];
        let (prefix, id) = match self {
            StreamId::Runtime => {
                let text = b"runtime";
                bytes[..text.len()].copy_from_slice(text);
                return StreamName {
                    bytes,
                    len: text.len() as u8,
                };
            }
            StreamId::Host(id) => (Self::HOST_PREFIX, id.as_uuid()),
            StreamId::Session(id) => (Self::SESSION_PREFIX, id.as_uuid()),
        };
        bytes[..prefix.len()].copy_from_slice(prefix.as_bytes());
        let end = prefix.len() + uuid::fmt::Hyphenated::LENGTH;
        id.hyphenated().encode_lower(&mut bytes[prefix.len()..end]);
        StreamName {
            bytes,
            // At most `STREAM_NAME_MAX`, 44.
            len: end as u8,
        }
    }

    /// The length of the name of a session's stream.
    pub(crate) const SESSION_NAME_LEN: usize =
        Self::SESSION_PREFIX.len() + uuid::fmt::Hyphenated::LENGTH;

    /// The session stream `name` names, read from its bytes as
    /// [`from_str`](StreamId::from_str) reads it, or `None` for any other
    /// name. Only a UUID's characters are accepted after the prefix, so
    /// what this reads is also the text of the JSON string that holds it.
    pub(crate) fn session_from_ascii(name: &[u8]) -> Option<StreamId> {
        let id = name.strip_prefix(Self::SESSION_PREFIX.as_bytes())?;
        let id = uuid::Uuid::try_parse_ascii(id).ok()?;
        Some(StreamId::Session(SessionId::from_uuid(id)))
    }

    /// The length of the stream's name, which is ASCII: what its JSON
    /// string holds between the quotes.
    #[must_use]
    pub fn name_len(&self) -> usize {
        match self {
            StreamId::Runtime => "runtime".len(),
            StreamId::Host(_) => Self::HOST_PREFIX.len() + uuid::fmt::Hyphenated::LENGTH,
            StreamId::Session(_) => Self::SESSION_PREFIX.len() + uuid::fmt::Hyphenated::LENGTH,
        }
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name().as_str())
    }
}

impl FromStr for StreamId {
    type Err = SubagentError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "runtime" {
            return Ok(StreamId::Runtime);
        }
        if let Some(id) = text.strip_prefix(Self::SESSION_PREFIX) {
            return SessionId::parse(id).map(StreamId::Session);
        }
        match text.strip_prefix(Self::HOST_PREFIX) {
            Some(id) => HostId::parse(id).map(StreamId::Host),
            None => Err(SubagentError::BadRequest(format!(
                "unknown stream {text:?}"
            ))),
        }
    }
}

impl Serialize for StreamId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name().as_str())
    }
}

impl<'de> Deserialize<'de> for StreamId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Token accounting of one assistant message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// What an agent reports of itself outside its messages, as agents over
/// the Agent Client Protocol do: the session it runs the child in, its
/// plan, or how much of its context window it has used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum AgentReport {
    /// The agent's own id of the session it runs this child in (an ACP
    /// session id), so that a later activation can load it again.
    #[serde(rename_all = "camelCase")]
    AgentSession {
        /// The agent's session id.
        session_id: String,
    },
    /// The agent's current plan, replacing any earlier one.
    Plan {
        /// Its entries, in the agent's order.
        entries: Vec<PlanEntry>,
    },
    /// Tokens of the context window in use, of its size, and the session's
    /// cost so far when the agent knows it.
    ContextUsage {
        /// Tokens in use.
        used: u64,
        /// The window's size in tokens.
        size: u64,
        /// The cumulative cost.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<Cost>,
    },
}

/// One entry of an agent's plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanEntry {
    /// What the step is.
    pub content: String,
    /// `high`, `medium` or `low`, as the agent said.
    pub priority: String,
    /// `pending`, `in_progress` or `completed`, as the agent said.
    pub status: String,
}

/// A cost an agent reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// The amount.
    pub amount: f64,
    /// Its currency, e.g. `USD`.
    pub currency: String,
}

/// Why an activation ended without settling through its agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum AbandonReason {
    /// The caller's signal fired before publication.
    Cancelled,
    /// The provider failed to prepare the child.
    PreparationFailed {
        /// Safe failure detail.
        diagnostic: Diagnostic,
    },
    /// The host died while the activation was live; recorded on reopen.
    HostRestart,
    /// A drain closed admission before the activation was published.
    Drained,
}

/// Every fact the runtime records. Serialized adjacently tagged:
/// `{"type": "SessionCreated", "data": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum Event {
    // ---- runtime stream -------------------------------------------------
    /// A provider became resolvable.
    #[serde(rename_all = "camelCase")]
    ProviderRegistered {
        /// Unique registry name.
        name: String,
        /// Supported start options.
        capabilities: SubagentCapabilities,
        /// Whether children see the parent's completed-turn prefix.
        inherits_parent_context: bool,
        /// Static provider/model route, when the provider has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        route_defaults: Option<AgentRoute>,
        /// Whether the provider prepares continuable children.
        continuable: bool,
        /// Whether the provider starts external one-shot runs.
        one_shot: bool,
    },
    /// A provider left the registry; accepted runs stay holder-owned.
    ProviderRemoved {
        /// The name that no longer resolves.
        name: String,
    },
    /// A drain closed child admission below `parent`.
    AdmissionClosed {
        /// The parent entering teardown.
        parent: SessionId,
    },
    /// The parent left the registry; the cutoff is lifted.
    AdmissionReopened {
        /// The parent.
        parent: SessionId,
    },
    /// Recovery marker: the log was reopened after the host stopped with live
    /// work, which the listed events settled explicitly.
    #[serde(rename_all = "camelCase")]
    HostRecovered {
        /// The log head found on reopen.
        previous_head: u64,
        /// Continuable activations marked abandoned.
        abandoned_activations: u64,
        /// External runs settled as `error`.
        failed_runs: u64,
    },

    // ---- session lifecycle ------------------------------------------------
    /// A host of a shared log took a root's tree: from here on only `host`
    /// decides for the tree, with the provider registry of its
    /// `host-<uuid>` stream, and every append for the tree presents
    /// `fence`. In the root's stream, first beside its `SessionCreated`,
    /// then at every takeover (the taker's recovery of the tree follows in
    /// the same append).
    #[serde(rename_all = "camelCase")]
    TreeAcquired {
        /// The host incarnation that holds the tree.
        host: HostId,
        /// The name its lease is held under.
        holder: String,
        /// The lease's fencing token: greater than every earlier holder's.
        fence: u64,
    },
    /// A session exists. First event of every session stream.
    #[serde(rename_all = "camelCase")]
    SessionCreated {
        /// This session.
        session: SessionId,
        /// The delegating parent; `None` for a host root.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<SessionId>,
        /// Edges from the host root (a root is 0).
        depth: u64,
        /// Creation label.
        label: String,
        /// The creating provider; `None` for a root.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        /// Execution mode.
        mode: SessionMode,
        /// Whether this is an external one-shot execution.
        external: bool,
        /// The detached descriptor (see `SubagentDescriptor`), kept raw so that
        /// a descriptor this version cannot read still replays.
        descriptor: Value,
    },
    /// Catalog membership, recorded in the parent's stream. Never status.
    #[serde(rename_all = "camelCase")]
    ChildCataloged {
        /// The child.
        child: SessionId,
        /// Creation label.
        label: String,
        /// Creating provider.
        provider: String,
        /// Execution mode.
        mode: SessionMode,
        /// External one-shot execution.
        external: bool,
    },
    /// A fork child's copy of the parent's completed-turn prefix.
    #[serde(rename_all = "camelCase")]
    HistorySeeded {
        /// Whose history was copied.
        source: SessionId,
        /// The source stream version the prefix ends at.
        through_version: u64,
        /// The copied events, lossless JSON, contiguous from the start.
        events: Vec<Value>,
    },

    // ---- continuable activations ------------------------------------------
    /// A new activation epoch was reserved.
    #[serde(rename_all = "camelCase")]
    ActivationRequested {
        /// Epoch number, 1 for the first activation.
        epoch: u64,
        /// Who receives the result.
        delivery: Delivery,
        /// Output schema for this activation only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_schema: Option<Value>,
        /// The parent's delegation tool call that requested it, when an
        /// agent started the child (a program's start names none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_by: Option<ToolCallRef>,
    },
    /// The provider contributed the creation inputs.
    #[serde(rename_all = "camelCase")]
    ActivationPrepared {
        /// Epoch.
        epoch: u64,
        /// How many parent events seeded the child.
        seeded_events: u64,
    },
    /// The child agent is live; its run id pairs `subagent/start` and `end`.
    #[serde(rename_all = "camelCase")]
    ActivationPublished {
        /// Epoch.
        epoch: u64,
        /// Identity of this published run.
        run_id: SubagentRunId,
    },
    /// The activation's result. Never overwritten.
    ActivationSettled {
        /// Epoch.
        epoch: u64,
        /// The result.
        result: SubagentResult,
    },
    /// The activation's resources were released.
    #[serde(rename_all = "camelCase")]
    ActivationReleased {
        /// Epoch.
        epoch: u64,
        /// A cleanup failure, recorded beside the settled result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cleanup_error: Option<Diagnostic>,
    },
    /// The activation ended without a result of its own.
    ActivationAbandoned {
        /// Epoch.
        epoch: u64,
        /// Why.
        reason: AbandonReason,
    },

    // ---- external one-shot runs --------------------------------------------
    /// An external run was requested.
    #[serde(rename_all = "camelCase")]
    RunRequested {
        /// The run.
        run_id: SubagentRunId,
        /// The provider asked to start it.
        provider: String,
        /// Who receives the result.
        delivery: Delivery,
        /// The parent's delegation tool call that requested it, when an
        /// agent started the run (a program's start names none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_by: Option<ToolCallRef>,
    },
    /// The provider published the run.
    #[serde(rename_all = "camelCase")]
    RunStarted {
        /// The run.
        run_id: SubagentRunId,
    },
    /// The run's result. Never overwritten.
    #[serde(rename_all = "camelCase")]
    RunSettled {
        /// The run.
        run_id: SubagentRunId,
        /// The result.
        result: SubagentResult,
    },
    /// The backend handle was disposed.
    #[serde(rename_all = "camelCase")]
    RunDisposed {
        /// The run.
        run_id: SubagentRunId,
        /// A cleanup failure, recorded beside the settled result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cleanup_error: Option<Diagnostic>,
    },
    /// The provider rejected the start after cleaning partial resources.
    #[serde(rename_all = "camelCase")]
    RunStartFailed {
        /// The run.
        run_id: SubagentRunId,
        /// Safe failure detail.
        diagnostic: Diagnostic,
    },

    // ---- inbox and turns ------------------------------------------------------
    /// A message is durable in this session's inbox.
    #[serde(rename_all = "camelCase")]
    MessageAccepted {
        /// Inbox identity returned to the sender.
        message_id: MessageId,
        /// Durable attribution.
        source: MessageSource,
        /// Queue or steer.
        delivery: MessageDelivery,
        /// The content.
        content: Vec<ContentBlock>,
    },
    /// A turn took these pending messages, in FIFO order.
    MessagesClaimed {
        /// The claimed messages.
        ids: Vec<MessageId>,
        /// The claiming turn.
        turn: u64,
    },
    /// Pending messages dropped with their activation's disposal.
    MessagesDropped {
        /// The dropped messages.
        ids: Vec<MessageId>,
        /// The activation being disposed.
        epoch: u64,
    },
    /// A turn began.
    TurnStarted {
        /// Turn number in this session, from 1.
        turn: u64,
        /// The activation running it.
        epoch: u64,
    },
    /// An assistant message of the transcript.
    AssistantMessage {
        /// The turn.
        turn: u64,
        /// Content, possibly empty (usage-only).
        content: Vec<ContentBlock>,
        /// Token accounting.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// The agent called a tool.
    #[serde(rename_all = "camelCase")]
    ToolCalled {
        /// The turn.
        turn: u64,
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Arbitrary JSON input.
        input: Value,
    },
    /// A tool call returned (or was refused).
    #[serde(rename_all = "camelCase")]
    ToolReturned {
        /// The turn.
        turn: u64,
        /// Call id.
        call_id: String,
        /// The result content.
        output: Vec<ContentBlock>,
        /// Whether it failed.
        is_error: bool,
        /// Whether the runtime refused to execute it: the tool is
        /// restricted for this session (the call never reached the tool).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        refused: bool,
    },
    /// The agent reported its progress (a plan, its context use).
    AgentReported {
        /// The turn.
        turn: u64,
        /// What it reported.
        report: AgentReport,
    },
    /// A turn ended.
    #[serde(rename_all = "camelCase")]
    TurnEnded {
        /// The turn.
        turn: u64,
        /// Why it ended.
        stop_reason: SubagentStopReason,
    },

    // ---- control --------------------------------------------------------------
    /// An interrupt was admitted against this session's live work.
    InterruptRequested {
        /// The interrupted session.
        target: SessionId,
        /// Under whose authority.
        authority: InterruptAuthority,
    },
}

/// Which kind of stream an event type lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// The `runtime` stream, or a `host-<uuid>` stream.
    Runtime,
    /// A `session-<uuid>` stream.
    Session,
}

/// Generates [`EventKind`] and [`Event::kind`] from one list of the
/// event types, so a new event cannot have a data variant but no kind.
macro_rules! event_kinds {
    ($($variant:ident),* $(,)?) => {
        /// The type of an event without its data: what tests, filters and
        /// reports compare instead of type-name strings. Its [`Self::as_str`]
        /// is the wire `type` tag.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum EventKind {
            $(
                #[doc = concat!("[`Event::", stringify!($variant), "`].")]
                $variant,
            )*
        }

        impl EventKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [EventKind] = &[$(EventKind::$variant),*];

            /// The wire type name, e.g. `SessionCreated`.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(EventKind::$variant => stringify!($variant),)*
                }
            }
        }

        impl Event {
            /// This event's kind.
            #[must_use]
            pub fn kind(&self) -> EventKind {
                match self {
                    $(Event::$variant { .. } => EventKind::$variant,)*
                }
            }
        }
    };
}

event_kinds! {
    ProviderRegistered,
    ProviderRemoved,
    AdmissionClosed,
    AdmissionReopened,
    HostRecovered,
    TreeAcquired,
    SessionCreated,
    ChildCataloged,
    HistorySeeded,
    ActivationRequested,
    ActivationPrepared,
    ActivationPublished,
    ActivationSettled,
    ActivationReleased,
    ActivationAbandoned,
    RunRequested,
    RunStarted,
    RunSettled,
    RunDisposed,
    RunStartFailed,
    MessageAccepted,
    MessagesClaimed,
    MessagesDropped,
    TurnStarted,
    AssistantMessage,
    ToolCalled,
    ToolReturned,
    AgentReported,
    TurnEnded,
    InterruptRequested,
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Event {
    /// The wire type name, e.g. `SessionCreated` ([`EventKind::as_str`]).
    #[must_use]
    pub fn type_name(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The kind of stream this event belongs in.
    #[must_use]
    pub fn stream_kind(&self) -> StreamKind {
        match self {
            Event::ProviderRegistered { .. }
            | Event::ProviderRemoved { .. }
            | Event::AdmissionClosed { .. }
            | Event::AdmissionReopened { .. }
            | Event::HostRecovered { .. } => StreamKind::Runtime,
            _ => StreamKind::Session,
        }
    }

    /// The creation of a host root session: no parent, depth 0, no provider,
    /// continuable (a root has an inbox), no descriptor.
    #[must_use]
    pub fn root_created(session: SessionId, label: impl Into<String>) -> Event {
        Event::root_created_with(session, label, None)
    }

    /// A host root's `SessionCreated` carrying the root agent's options,
    /// which local children inherit. Its descriptor is `{"agentOptions": …}`,
    /// or `null` without options.
    #[must_use]
    pub fn root_created_with(
        session: SessionId,
        label: impl Into<String>,
        agent_options: Option<&crate::contracts::AgentOptions>,
    ) -> Event {
        Event::SessionCreated {
            session,
            parent: None,
            depth: 0,
            label: label.into(),
            provider: None,
            mode: SessionMode::Continuable,
            external: false,
            descriptor: agent_options.map_or(
                Value::Null,
                |options| serde_json::json!({ "agentOptions": options }),
            ),
        }
    }

    /// Whether this event may be appended to `stream`. A `SessionCreated`
    /// must also name the stream's own session.
    #[must_use]
    pub fn belongs_in(&self, stream: &StreamId) -> bool {
        match (self.stream_kind(), stream) {
            (StreamKind::Runtime, StreamId::Runtime | StreamId::Host(_)) => true,
            (StreamKind::Session, StreamId::Session(id)) => match self {
                Event::SessionCreated { session, .. } => session == id,
                _ => true,
            },
            _ => false,
        }
    }
}

/// An event as handed to `EventLog::append`, before it has a position.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    /// Idempotency key: re-appending the same id returns the original position.
    pub event_id: EventId,
    /// Groups the events of one host request.
    pub correlation_id: Option<Uuid>,
    /// The event that caused this one.
    pub causation_id: Option<EventId>,
    /// The span the event was recorded in, when spans were exported and
    /// the event keeps it ([`kept_trace`](crate::telemetry::kept_trace)).
    pub trace: Option<TraceContext>,
    /// The payload.
    pub event: Event,
    /// Import only: keep this original timestamp instead of the writer's clock.
    pub recorded_at: Option<u64>,
}

impl NewEvent {
    /// A new event with a fresh id and no correlation.
    #[must_use]
    pub fn new(event: Event) -> Self {
        NewEvent {
            event_id: EventId::new(),
            correlation_id: None,
            causation_id: None,
            trace: None,
            event,
            recorded_at: None,
        }
    }

    /// The durable record of this event at `position`, version `version` of
    /// `stream`, stamped `now` unless an import carried the original time.
    /// The one place an appended event becomes a record, for every backend.
    #[must_use]
    pub fn into_record(
        self,
        position: u64,
        stream: StreamId,
        version: u64,
        now: u64,
    ) -> RecordedEvent {
        RecordedEvent {
            position,
            stream,
            version,
            event_id: self.event_id,
            recorded_at: self.recorded_at.unwrap_or(now),
            schema_version: CURRENT_SCHEMA_VERSION,
            correlation_id: self.correlation_id,
            causation_id: self.causation_id,
            trace: self.trace,
            event: self.event,
        }
    }

    /// Sets the correlation id.
    #[must_use]
    pub fn correlated(mut self, correlation_id: Uuid) -> Self {
        self.correlation_id = Some(correlation_id);
        self
    }

    /// Sets the causation id.
    #[must_use]
    pub fn caused_by(mut self, causation_id: EventId) -> Self {
        self.causation_id = Some(causation_id);
        self
    }
}

/// A durable event with its envelope.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedEvent {
    /// Global position, from 1, gap-free.
    pub position: u64,
    /// The stream.
    pub stream: StreamId,
    /// Version within the stream, from 1, gap-free.
    pub version: u64,
    /// Idempotency key.
    pub event_id: EventId,
    /// Unix milliseconds at which the writer recorded it.
    pub recorded_at: u64,
    /// The schema version the event was written with.
    pub schema_version: u32,
    /// Request correlation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<Uuid>,
    /// Causing event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<EventId>,
    /// The span the event was recorded in (a W3C `traceparent`), when
    /// spans were exported and the event keeps it
    /// ([`kept_trace`](crate::telemetry::kept_trace)): what lets a replay
    /// rebuild the tree of spans.
    #[serde(
        default,
        rename = "traceparent",
        skip_serializing_if = "Option::is_none"
    )]
    pub trace: Option<TraceContext>,
    /// The payload, upcast to the current schema.
    pub event: Event,
}

#[cfg(test)]
#[path = "event_tests.rs"]
mod tests;
