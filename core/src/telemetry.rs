//! Telemetry vocabulary: the one place span names, span attribute names and
//! metric names are defined, and [`TraceContext`], the W3C trace context an
//! event keeps so a replay can rebuild the tree of spans.
//!
//! Names follow the OpenTelemetry GenAI semantic conventions where one
//! exists (`invoke_agent`, `execute_tool`, `gen_ai.*`, `error.type`); the
//! runtime's own concepts are under `subagents.*`. Metric names follow the
//! Prometheus conventions (`_total` counters, `_seconds` durations).
//!
//! Which span an event names ([`NamedSpan`], [`Event::named_span`]: what a
//! replay rebuilds the tree of spans from):
//! - a root's `SessionCreated`: the root's `create_agent` span, which
//!   starts the tree's one trace;
//! - `ActivationRequested` and `RunRequested`: the new activation's (or
//!   run's) own span, whose parent is `Projections::span_parent` at that
//!   point of the log: the parent session's turn in progress, else its
//!   live activation, else the root;
//! - `TurnStarted`: the `invoke_agent` span, a child of the activation's;
//! - `ToolCalled`: the `execute_tool` span, a child of the turn's.
//!
//! Which events keep a trace context ([`kept_trace`]): an event that names
//! a span keeps it, and so does an event recorded in a span outside its
//! tree's trace (a host's request, say). Every other event was recorded in
//! a span of its tree's trace and keeps none: a span's identity is written
//! once, by the event that begins it, not on every event recorded in it.
//! Only spans a naming event begins are rebuilt from the log; which span
//! of its tree's trace any other event was recorded in (a turn, a tool
//! call, a message delivery, a host's span inside the trace) is not
//! written down.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Event;

/// Span names. A span's OpenTelemetry name adds the agent's or tool's name
/// where the GenAI conventions say so (`invoke_agent {gen_ai.agent.name}`).
pub mod span {
    /// A host root is recorded (GenAI `create_agent`).
    pub const CREATE_AGENT: &str = "create_agent";
    /// One activation of a child: from its reservation to its release.
    pub const ACTIVATION: &str = "subagents.activation";
    /// One external run: from its request to its settlement.
    pub const RUN: &str = "subagents.run";
    /// One turn of an agent (GenAI `invoke_agent`).
    pub const INVOKE_AGENT: &str = "invoke_agent";
    /// One tool call (GenAI `execute_tool`).
    pub const EXECUTE_TOOL: &str = "execute_tool";
    /// One message delivered to a session's inbox.
    pub const DELIVER_MESSAGE: &str = "subagents.message";
    /// One engine command: decide, append, fold (debug level).
    pub const COMMAND: &str = "subagents.command";
    /// One command's append, from enqueue to durable (debug level).
    pub const APPEND: &str = "subagents.append";
    /// One group commit of the log's writer (debug level).
    pub const GROUP_COMMIT: &str = "subagents.group_commit";
}

/// Span attribute names.
pub mod attr {
    /// GenAI: the operation (`create_agent`, `invoke_agent`, `execute_tool`).
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    /// GenAI: the agent's human-readable name: the session's label.
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    /// GenAI: the agent's id: the session id.
    pub const AGENT_ID: &str = "gen_ai.agent.id";
    /// GenAI: the conversation: the root session of the tree.
    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    /// GenAI: input tokens of a turn, where the agent reported usage.
    pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    /// GenAI: output tokens of a turn, where the agent reported usage.
    pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    /// GenAI: the tool's name.
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    /// GenAI: the agent's id for the tool call.
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    /// OpenTelemetry: why it failed: a stop reason other than `completed`,
    /// or an error code (`subagent/unknown-provider`, ...).
    pub const ERROR_TYPE: &str = "error.type";
    /// The session's parent session.
    pub const PARENT_ID: &str = "subagents.parent.id";
    /// The provider that started the child.
    pub const PROVIDER: &str = "subagents.provider";
    /// The activation's epoch.
    pub const EPOCH: &str = "subagents.activation.epoch";
    /// The turn's number within its session.
    pub const TURN: &str = "subagents.turn";
    /// The engine command (`start`, `begin_turn`, ...).
    pub const COMMAND: &str = "subagents.command";
    /// How many events a command recorded.
    pub const EVENTS: &str = "subagents.events";
    /// How many appends one group commit made durable together.
    pub const GROUP_SIZE: &str = "subagents.append.group_size";
    /// How a message was delivered (`steer`, `queue`, `wake`, ...).
    pub const DELIVERY: &str = "subagents.message.delivery";
    /// The message's target session.
    pub const TARGET: &str = "subagents.message.target";
}

/// Metric names (Prometheus).
pub mod metric {
    /// Gauge: live activations, by `mode` (`continuable`, `external`).
    pub const LIVE_ACTIVATIONS: &str = "subagents_live_activations";
    /// Counter: activations and runs started, by `mode`.
    pub const STARTS: &str = "subagents_starts_total";
    /// Counter: activations and runs settled, by `stop_reason`.
    pub const SETTLES: &str = "subagents_settles_total";
    /// Counter: commands refused, by error `code`.
    pub const REFUSALS: &str = "subagents_refusals_total";
    /// Histogram: seconds from a command's append to its durability.
    pub const APPEND_SECONDS: &str = "subagents_append_duration_seconds";
    /// Histogram: appends per group commit.
    pub const GROUP_SIZE: &str = "subagents_append_group_size";
    /// Gauge: the log's head position.
    pub const LOG_HEAD: &str = "subagents_log_head";
    /// Gauge: events since the newest projections checkpoint.
    pub const CHECKPOINT_AGE_EVENTS: &str = "subagents_checkpoint_age_events";
    /// Gauge: open SSE event subscriptions of the gateway.
    pub const SSE_SUBSCRIBERS: &str = "subagents_sse_subscribers";
    /// Gauge: 1 while the runtime serves, 0 while it is being reopened
    /// after its log failed (or could not be).
    pub const STORE_AVAILABLE: &str = "subagents_store_available";
    /// Label: a session's mode.
    pub const LABEL_MODE: &str = "mode";
    /// Label: a settlement's stop reason.
    pub const LABEL_STOP_REASON: &str = "stop_reason";
    /// Label: an error code.
    pub const LABEL_CODE: &str = "code";
}

/// A span an event names: the one it begins, which a replay rebuilds from
/// the trace context the event keeps (`subagent_replay::spans`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NamedSpan {
    /// A root's creation (`create_agent`), named by its `SessionCreated`.
    Root,
    /// An activation of a continuable child (`subagents.activation`),
    /// named by its `ActivationRequested`.
    Activation {
        /// The epoch.
        epoch: u64,
    },
    /// An external run (`subagents.run`), named by its `RunRequested`.
    Run,
    /// A turn (`invoke_agent`), named by its `TurnStarted`.
    Turn {
        /// The turn number.
        turn: u64,
    },
    /// A tool call (`execute_tool`), named by its `ToolCalled`.
    Tool,
}

impl Event {
    /// The span this event names, if it begins one: the one rule of which
    /// events do.
    #[must_use]
    pub fn named_span(&self) -> Option<NamedSpan> {
        match self {
            Event::SessionCreated { parent: None, .. } => Some(NamedSpan::Root),
            Event::ActivationRequested { epoch, .. } => {
                Some(NamedSpan::Activation { epoch: *epoch })
            }
            Event::RunRequested { .. } => Some(NamedSpan::Run),
            Event::TurnStarted { turn, .. } => Some(NamedSpan::Turn { turn: *turn }),
            Event::ToolCalled { .. } => Some(NamedSpan::Tool),
            _ => None,
        }
    }
}

/// The trace context `event` keeps when it is recorded in the span `span`,
/// in a tree whose trace is `tree` (its root's, `None` when the root kept
/// none): `span` when the event names a span, or when `span` is outside
/// the tree's trace; otherwise none (the module's doc says what that
/// leaves unwritten).
#[must_use]
pub fn kept_trace(
    event: &Event,
    span: Option<TraceContext>,
    tree: Option<[u8; 16]>,
) -> Option<TraceContext> {
    let span = span?;
    (event.named_span().is_some() || tree != Some(span.trace_id)).then_some(span)
}

/// A W3C trace context: the span an event was recorded in. Stored on the
/// event's envelope as a `traceparent` string
/// (`00-{trace-id}-{span-id}-{flags}`), absent when no span was being
/// exported or the event does not keep it ([`kept_trace`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// The trace: 16 bytes, never all zero.
    pub trace_id: [u8; 16],
    /// The span within it: 8 bytes, never all zero.
    pub span_id: [u8; 8],
    /// Whether the span was sampled (the W3C `sampled` flag).
    pub sampled: bool,
}

/// Why a `traceparent` did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed traceparent {0:?}")]
pub struct MalformedTraceparent(pub String);

impl TraceContext {
    /// The context, unless either id is all zero (W3C: invalid).
    #[must_use]
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], sampled: bool) -> Option<Self> {
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(TraceContext {
            trace_id,
            span_id,
            sampled,
        })
    }

    /// The trace id as 32 lower-case hex digits.
    #[must_use]
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }

    /// The span id as 16 lower-case hex digits.
    #[must_use]
    pub fn span_id_hex(&self) -> String {
        hex::encode(self.span_id)
    }

    /// The `traceparent` text (`00-{trace-id}-{span-id}-{flags}`), written
    /// into a fixed buffer: on the append path of every event that keeps
    /// one.
    pub(crate) fn traceparent(&self) -> [u8; TRACEPARENT_LEN] {
        let mut out = *b"00-00000000000000000000000000000000-0000000000000000-00";
        // The lengths are fixed: both encodes fill slices of exactly twice
        // their input's length.
        let _ = hex::encode_to_slice(self.trace_id, &mut out[3..35]);
        let _ = hex::encode_to_slice(self.span_id, &mut out[36..52]);
        if self.sampled {
            out[54] = b'1';
        }
        out
    }

    /// Parses a version-00 `traceparent` from its bytes, as
    /// [`from_str`](TraceContext::from_str) does: only lower-case hex digits
    /// and hyphens are ever accepted, so what this reads is also the text
    /// of the JSON string that holds it.
    pub(crate) fn parse_ascii(bytes: &[u8]) -> Option<TraceContext> {
        if bytes.len() != TRACEPARENT_LEN
            || !bytes.starts_with(b"00-")
            || bytes[35] != b'-'
            || bytes[52] != b'-'
        {
            return None;
        }
        let trace_id = crate::lower_hex::decode::<16>(&bytes[3..35])?;
        let span_id = crate::lower_hex::decode::<8>(&bytes[36..52])?;
        let [flags] = crate::lower_hex::decode::<1>(&bytes[53..])?;
        TraceContext::new(trace_id, span_id, flags & 1 == 1)
    }
}

/// The length of a version-00 `traceparent`.
pub(crate) const TRACEPARENT_LEN: usize = 55;

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.traceparent();
        // All ASCII, by construction.
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl FromStr for TraceContext {
    type Err = MalformedTraceparent;

    /// Parses a version-00 `traceparent`: lower-case hex, non-zero ids.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        TraceContext::parse_ascii(text.as_bytes())
            .ok_or_else(|| MalformedTraceparent(text.chars().take(80).collect()))
    }
}

impl Serialize for TraceContext {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = self.traceparent();
        serializer.serialize_str(std::str::from_utf8(&text).map_err(serde::ser::Error::custom)?)
    }
}

impl<'de> Deserialize<'de> for TraceContext {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SessionId;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_round_trips() {
        let context: TraceContext = SAMPLE.parse().unwrap();
        assert_eq!(context.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.span_id_hex(), "00f067aa0ba902b7");
        assert!(context.sampled);
        assert_eq!(context.to_string(), SAMPLE);
        let json = serde_json::to_string(&context).unwrap();
        assert_eq!(json, format!("\"{SAMPLE}\""));
        assert_eq!(
            serde_json::from_str::<TraceContext>(&json).unwrap(),
            context
        );
    }

    #[test]
    fn the_sampled_flag_is_bit_zero_and_is_written_back_as_00_or_01() {
        let unsampled = TraceContext::new([0xab; 16], [0x01; 8], false).unwrap();
        let text = unsampled.to_string();
        assert_eq!(
            text,
            "00-abababababababababababababababab-0101010101010101-00"
        );
        assert_eq!(text.parse::<TraceContext>().unwrap(), unsampled);
        // Other flag bits are kept by no one; only `sampled` is read.
        let other_bits: TraceContext = "00-abababababababababababababababab-0101010101010101-03"
            .parse()
            .unwrap();
        assert!(other_bits.sampled);
        assert!(other_bits.to_string().ends_with("-01"));
    }

    proptest::proptest! {
        /// Every valid context round-trips through its text and its JSON;
        /// any text that parses is written back the same, but for flag
        /// bits other than `sampled`.
        #[test]
        fn traceparents_round_trip(
            trace_id in proptest::array::uniform16(proptest::num::u8::ANY),
            span_id in proptest::array::uniform8(proptest::num::u8::ANY),
            sampled in proptest::bool::ANY,
            noise in "[0-9a-fA-F-]{0,60}",
        ) {
            if let Some(context) = TraceContext::new(trace_id, span_id, sampled) {
                let text = context.to_string();
                proptest::prop_assert_eq!(text.parse::<TraceContext>(), Ok(context));
                let json = serde_json::to_string(&context).unwrap();
                proptest::prop_assert_eq!(json.clone(), format!("\"{text}\""));
                proptest::prop_assert_eq!(serde_json::from_str::<TraceContext>(&json).unwrap(), context);
            }
            if let Ok(parsed) = noise.parse::<TraceContext>() {
                proptest::prop_assert_eq!(&parsed.to_string()[..53], &noise[..53]);
            }
        }
    }

    #[test]
    fn only_the_event_that_begins_a_span_names_it() {
        let root = SessionId::new();
        let child = Event::SessionCreated {
            session: SessionId::new(),
            parent: Some(root),
            depth: 1,
            label: "child".into(),
            provider: Some("local".into()),
            mode: crate::SessionMode::Continuable,
            external: false,
            descriptor: serde_json::Value::Null,
        };
        assert_eq!(
            Event::root_created(root, "root").named_span(),
            Some(NamedSpan::Root)
        );
        assert_eq!(
            child.named_span(),
            None,
            "a child's creation is its parent's"
        );
        assert_eq!(
            Event::ActivationRequested {
                epoch: 2,
                delivery: crate::Delivery::Caller,
                output_schema: None,
                requested_by: None,
            }
            .named_span(),
            Some(NamedSpan::Activation { epoch: 2 })
        );
        assert_eq!(
            Event::RunRequested {
                run_id: crate::SubagentRunId::new(),
                provider: "process".into(),
                delivery: crate::Delivery::Caller,
                requested_by: None,
            }
            .named_span(),
            Some(NamedSpan::Run)
        );
        assert_eq!(
            Event::TurnStarted { turn: 3, epoch: 1 }.named_span(),
            Some(NamedSpan::Turn { turn: 3 })
        );
        assert_eq!(
            Event::ToolCalled {
                turn: 3,
                call_id: "c".into(),
                name: "t".into(),
                input: serde_json::Value::Null,
            }
            .named_span(),
            Some(NamedSpan::Tool)
        );
        let returned = Event::ToolReturned {
            turn: 3,
            call_id: "c".into(),
            output: Vec::new(),
            is_error: false,
            refused: false,
        };
        assert_eq!(returned.named_span(), None);
        assert_eq!(
            Event::TurnEnded {
                turn: 3,
                stop_reason: crate::SubagentStopReason::Completed
            }
            .named_span(),
            None
        );
    }

    #[test]
    fn an_event_keeps_its_span_when_it_names_it_or_the_span_is_outside_its_tree() {
        let tree = [0x11; 16];
        let in_tree = TraceContext::new(tree, [0x22; 8], true).unwrap();
        let elsewhere = TraceContext::new([0x33; 16], [0x44; 8], true).unwrap();
        let names = Event::TurnStarted { turn: 1, epoch: 1 };
        let inside = Event::TurnEnded {
            turn: 1,
            stop_reason: crate::SubagentStopReason::Completed,
        };
        // Names a span: kept, wherever it was recorded.
        assert_eq!(kept_trace(&names, Some(in_tree), Some(tree)), Some(in_tree));
        assert_eq!(
            kept_trace(&names, Some(elsewhere), Some(tree)),
            Some(elsewhere)
        );
        // In one of its tree's spans: the log names that span already.
        assert_eq!(kept_trace(&inside, Some(in_tree), Some(tree)), None);
        // In a span of another trace (a host's), or in a tree whose root
        // kept no trace: kept.
        assert_eq!(
            kept_trace(&inside, Some(elsewhere), Some(tree)),
            Some(elsewhere)
        );
        assert_eq!(kept_trace(&inside, Some(in_tree), None), Some(in_tree));
        // No span: nothing to keep.
        assert_eq!(kept_trace(&names, None, Some(tree)), None);
        assert_eq!(kept_trace(&inside, None, None), None);
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in [
            "",
            "00",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736+00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7+01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-001",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-é",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-001",
        ] {
            assert!(bad.parse::<TraceContext>().is_err(), "{bad:?} parsed");
            assert!(serde_json::from_str::<TraceContext>(&format!("{bad:?}")).is_err());
        }
    }
}
