//! [`spans`]: the tree of spans a run exported, rebuilt from the trace
//! contexts its events keep, without the exporter and without running an
//! agent.
//!
//! The rule is the runtime's own (`subagent_core::telemetry` states which
//! span each event names): a root's `SessionCreated` names its
//! `create_agent` span; an `ActivationRequested` or `RunRequested` names
//! the new activation's span, whose parent is
//! [`Projections::span_parent`] just before it; a `TurnStarted` names the
//! turn's span, a child of the live activation's; a `ToolCalled` names the
//! call's span, a child of the turn's.

use subagent_core::{Event, RecordedEvent, SessionId, TraceContext};
use subagent_projections::Projections;

/// What a rebuilt span stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpanKind {
    /// A root's creation (`create_agent`).
    Root,
    /// An activation of a continuable child (`subagents.activation`).
    Activation {
        /// The epoch.
        epoch: u64,
    },
    /// An external run (`subagents.run`).
    Run,
    /// A turn (`invoke_agent`).
    Turn {
        /// The turn number.
        turn: u64,
    },
    /// A tool call (`execute_tool`).
    Tool,
}

/// One span, as the log recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RebuiltSpan {
    /// Its trace context (trace and span id).
    pub context: TraceContext,
    /// Its parent span's id; `None` for a root's span.
    pub parent_span_id: Option<[u8; 8]>,
    /// What it stands for.
    pub kind: SpanKind,
    /// The session it belongs to.
    pub session: SessionId,
    /// The position of the event that named it.
    pub position: u64,
}

/// The spans `records` name, in log order, each with its parent. Records
/// without a trace context (recorded while spans were not exported) name
/// none; a span whose parent was not recorded has `parent_span_id: None`.
pub fn spans<'a>(records: impl IntoIterator<Item = &'a RecordedEvent>) -> Vec<RebuiltSpan> {
    let mut state = Projections::new();
    let mut rebuilt: Vec<RebuiltSpan> = Vec::new();
    for record in records {
        if let (Some(context), Some(session)) = (record.trace, record.stream.session()) {
            let named = match &record.event {
                Event::SessionCreated { parent: None, .. } => Some((SpanKind::Root, None)),
                Event::ActivationRequested { epoch, .. } => {
                    let parent = state.sessions.get(&session).and_then(|s| s.parent);
                    Some((
                        SpanKind::Activation { epoch: *epoch },
                        parent.and_then(|parent| state.span_parent(parent)),
                    ))
                }
                Event::RunRequested { .. } => {
                    let parent = state.sessions.get(&session).and_then(|s| s.parent);
                    Some((
                        SpanKind::Run,
                        parent.and_then(|parent| state.span_parent(parent)),
                    ))
                }
                Event::TurnStarted { turn, .. } => Some((
                    SpanKind::Turn { turn: *turn },
                    live(&state, session).and_then(|live| live.trace),
                )),
                Event::ToolCalled { .. } => Some((
                    SpanKind::Tool,
                    live(&state, session).and_then(|live| live.turn_trace),
                )),
                _ => None,
            };
            if let Some((kind, parent)) = named {
                rebuilt.push(RebuiltSpan {
                    context,
                    parent_span_id: parent.map(|parent| parent.span_id),
                    kind,
                    session,
                    position: record.position,
                });
            }
        }
        state.apply(record);
    }
    rebuilt
}

fn live(state: &Projections, session: SessionId) -> Option<&subagent_projections::LiveActivation> {
    state
        .activations
        .get(&session)
        .and_then(|activation| activation.live.as_ref())
}
