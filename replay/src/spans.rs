//! [`spans`]: the tree of spans a run exported, rebuilt from the trace
//! contexts its events keep, without the exporter and without running an
//! agent.
//!
//! The rule is the runtime's own: [`subagent_core::Event::named_span`]
//! says which events name a span (a root's `SessionCreated`, an
//! `ActivationRequested` or `RunRequested`, a `TurnStarted`, a
//! `ToolCalled`), and only those need to keep a trace context for this
//! (`subagent_core::kept_trace`). An activation's or run's parent is
//! [`Projections::span_parent`] just before its request; a turn's is the
//! live activation's span; a tool call's is the turn's.

use subagent_core::{NamedSpan, RecordedEvent, SessionId, TraceContext};
use subagent_projections::Projections;

/// What a rebuilt span stands for: the span its event names.
pub type SpanKind = NamedSpan;

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

/// The spans `records` name, in log order, each with its parent. A record
/// that names a span but keeps no trace context (recorded while spans were
/// not exported) names none; a span whose parent was not recorded has
/// `parent_span_id: None`.
pub fn spans<'a>(records: impl IntoIterator<Item = &'a RecordedEvent>) -> Vec<RebuiltSpan> {
    let mut state = Projections::new();
    let mut rebuilt: Vec<RebuiltSpan> = Vec::new();
    for record in records {
        if let (Some(context), Some(session)) = (record.trace, record.stream.session()) {
            let named = record.event.named_span().map(|kind| {
                let parent = match kind {
                    NamedSpan::Root => None,
                    NamedSpan::Activation { .. } | NamedSpan::Run => state
                        .sessions
                        .get(&session)
                        .and_then(|s| s.parent)
                        .and_then(|parent| state.span_parent(parent)),
                    NamedSpan::Turn { .. } => live(&state, session).and_then(|live| live.trace),
                    NamedSpan::Tool => live(&state, session).and_then(|live| live.turn_trace),
                };
                (kind, parent)
            });
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
