//! The runtime's spans: how each one is opened and parented, and the trace
//! context the engine keeps on the events it records.
//!
//! Spans are `tracing` spans; a host that installs `tracing-opentelemetry`
//! exports them, and without it they cost a disabled-span check. Names and
//! attributes are [`subagent_core::telemetry`]'s constants.
//!
//! The shape of a trace, one per root: `create_agent` (the root) →
//! `subagents.activation` of each child → `invoke_agent` (each turn) →
//! `execute_tool` (each call). A grandchild's activation is a child of its
//! parent's turn in progress when it starts, else of its parent's
//! activation. Activations run in tasks of their own, so their parent is
//! set explicitly, by the log's rule
//! ([`Projections::span_parent`](subagent_projections::Projections::span_parent)),
//! which a replay applies again to rebuild the tree; the caller's span (a
//! tool call, a host request) is kept as a link.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use subagent_core::telemetry::{attr, span};
use subagent_core::{kept_trace, Event, NewEvent, SessionId, StreamId, TraceContext};
use subagent_projections::Projections;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The trace of one session's tree, read once from the projections when
/// a span was opened for that session: what [`recorded_events`] would
/// otherwise look up for every command on the session's stream, a walk of
/// its lineage through maps too large to stay in cache, under the
/// engine's lock. A tree's trace never changes (it is what its root's
/// `SessionCreated` kept), so reading it once is reading it every time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KnownTree {
    /// The session the span was opened for.
    pub(crate) session: SessionId,
    /// Its tree's trace id; `None` when the root kept none.
    pub(crate) trace: Option<[u8; 16]>,
}

/// The span a command's events are recorded in: its trace context, and,
/// when it is a driver's span, the tree it was opened in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecordedIn {
    /// The span's trace context; `None` when it is not exported.
    pub(crate) trace: Option<TraceContext>,
    /// The tree of the session the span was opened for, when known.
    pub(crate) tree: Option<KnownTree>,
}

impl RecordedIn {
    /// The span whose trace context is `trace`, in no known tree.
    #[must_use]
    pub(crate) fn span(trace: Option<TraceContext>) -> RecordedIn {
        RecordedIn { trace, tree: None }
    }
}

/// `events`, decided for `stream`, as the engine appends them, each keeping
/// the trace context [`subagent_core::kept_trace`] gives it when it is
/// recorded in the span `within`: the span, when the event names one or
/// the span is outside the event's tree's trace; none otherwise. The tree
/// is the stream's session's: `within`'s known tree when the stream is
/// that session's, else read from `state`, the projections the decision
/// was made on. A session the decision creates is not in them yet: a
/// child's tree is its parent's, and a root's is the trace of the span,
/// which its `SessionCreated` keeps.
pub(crate) fn recorded_events(
    state: &Projections,
    stream: StreamId,
    events: Vec<Event>,
    within: RecordedIn,
) -> Vec<NewEvent> {
    let Some(span) = within.trace else {
        return events.into_iter().map(NewEvent::new).collect();
    };
    let created_below = events.iter().find_map(|event| match event {
        Event::SessionCreated { parent, .. } => Some(*parent),
        _ => None,
    });
    let tree_of = |session: Option<SessionId>| match (session, within.tree) {
        (Some(session), Some(known)) if known.session == session => known.trace,
        _ => session
            .and_then(|session| state.tree_trace(session))
            .map(|root| root.trace_id),
    };
    let tree = match created_below {
        // A root created here: its `SessionCreated` keeps `span`, which
        // is then its tree's trace.
        Some(None) => Some(span.trace_id),
        Some(parent) => tree_of(parent),
        None => tree_of(stream.session()),
    };
    events
        .into_iter()
        .map(|event| NewEvent {
            trace: kept_trace(&event, Some(span), tree),
            ..NewEvent::new(event)
        })
        .collect()
}

/// A span and its trace context, read once when it was opened: what a
/// driver issues its commands in. The engine records the events in
/// `recorded_in` and parents the command's own span on `span`, without
/// asking the subscriber for the current span and its context on every
/// command, and without the driver entering the span around its own steps
/// (which a subscriber pays on every poll). `recorded_in.trace` is `None`
/// when the span is not exported.
#[derive(Clone, Debug)]
pub(crate) struct TracedSpan {
    /// The span.
    pub(crate) span: Span,
    /// Its trace context (when an OpenTelemetry layer exports it) and the
    /// tree of the session it was opened for.
    pub(crate) recorded_in: RecordedIn,
}

impl TracedSpan {
    /// `span`, opened in `tree` (when the projections knew it), with its
    /// trace context, read now.
    #[must_use]
    pub(crate) fn new(span: Span, tree: Option<KnownTree>) -> TracedSpan {
        let trace = trace_of(&span);
        TracedSpan {
            span,
            recorded_in: RecordedIn { trace, tree },
        }
    }

    /// No span: commands issued in it are recorded in no trace.
    #[must_use]
    pub(crate) fn none() -> TracedSpan {
        TracedSpan {
            span: Span::none(),
            recorded_in: RecordedIn::default(),
        }
    }
}

/// A provider's step, `future`, run inside `span`: entered on each poll,
/// as [`tracing::Instrument`] does, but dropped outside it (`Instrument`
/// enters the span once more to drop the future, which doubles what a
/// step that finishes on its first poll costs a subscriber). A step's own
/// spans and events are in `span`; only what its destructor emits is not.
pub(crate) fn in_span<F: Future + Unpin>(span: &Span, future: F) -> InSpan<'_, F> {
    InSpan { span, future }
}

/// The future [`in_span`] returns.
pub(crate) struct InSpan<'a, F> {
    span: &'a Span,
    future: F,
}

impl<F: Future + Unpin> Future for InSpan<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let _entered = this.span.enter();
        Pin::new(&mut this.future).poll(cx)
    }
}

/// The trace context of the span the caller is in, when it is exported.
#[must_use]
pub(crate) fn current_trace() -> Option<TraceContext> {
    trace_of(&Span::current())
}

/// The trace context of `span`, when an OpenTelemetry layer exports it.
#[must_use]
pub(crate) fn trace_of(span: &Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let otel = context.span();
    let span_context = otel.span_context();
    if !span_context.is_valid() {
        return None;
    }
    TraceContext::new(
        span_context.trace_id().to_bytes(),
        span_context.span_id().to_bytes(),
        span_context.is_sampled(),
    )
}

fn remote(parent: TraceContext) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.span_id),
        if parent.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        },
        true,
        TraceState::default(),
    )
}

/// Makes `parent` the parent of `span`, which must not have been entered
/// or asked for its context yet; a caller's span outside the tree is kept
/// as a link.
fn parent_on(span: &Span, parent: Option<TraceContext>, caller: Option<TraceContext>) {
    if let Some(parent) = parent {
        let context = opentelemetry::Context::new().with_remote_span_context(remote(parent));
        // Fails only for a disabled span or one without the layer: nothing to parent.
        let _ = span.set_parent(context);
    }
    if let Some(caller) = caller.filter(|caller| Some(*caller) != parent) {
        span.add_link(remote(caller));
    }
}

/// The root of `session`'s tree.
fn root_of(state: &Projections, session: SessionId) -> SessionId {
    state
        .lineage(session)
        .last()
        .map_or(session, |root| root.id)
}

/// The span of a root's creation (GenAI `create_agent`): the parent of
/// every activation in its tree that no in-tree span started. It starts a
/// trace of its own, one per root; the caller's span is kept as a link.
pub(crate) fn create_agent_span(session: SessionId, label: &str) -> Span {
    let caller = current_trace();
    let span = tracing::info_span!(
        parent: None,
        span::CREATE_AGENT,
        "otel.name" = otel_name(span::CREATE_AGENT, label),
        { attr::OPERATION_NAME } = span::CREATE_AGENT,
        { attr::AGENT_NAME } = label,
        { attr::AGENT_ID } = session.text().as_str(),
        { attr::CONVERSATION_ID } = session.text().as_str(),
    );
    parent_on(&span, None, caller);
    span
}

/// The span of the activation or run `decision` requests, with its trace
/// context, if it requests one: opened while the engine decides it,
/// parented by the log's rule
/// ([`Projections::span_parent`]) on `state`, the projections the decision
/// is made on, so a replay, which applies the rule on the state just
/// before the request, finds the same parent. (The two states differ only
/// by the decision's earlier events, which never touch the parent's
/// activation or the root: a start catalogs the child on the parent's
/// stream, a resume accepts a message on the child's.) `caller`, the span
/// the command was issued in, is kept as a link.
pub(crate) fn requested_activation_span(
    state: &Projections,
    decision: &[(StreamId, Vec<Event>)],
    caller: Option<TraceContext>,
) -> Option<TracedSpan> {
    for (stream, events) in decision {
        let Some(child) = stream.session() else {
            continue;
        };
        // A start creates the child in the same decision; a resume finds
        // it in the projections.
        let mut created = None;
        for event in events {
            let (epoch, external) = match event {
                Event::SessionCreated {
                    parent,
                    label,
                    provider,
                    ..
                } => {
                    created = Some((*parent, label.as_str(), provider.as_deref()));
                    continue;
                }
                Event::ActivationRequested { epoch, .. } => (*epoch, false),
                Event::RunRequested { .. } => (1, true),
                _ => continue,
            };
            let (parent, label, provider) = created.or_else(|| {
                state.sessions.get(&child).map(|record| {
                    (
                        record.parent,
                        record.label.as_str(),
                        record.provider.as_deref(),
                    )
                })
            })?;
            // Without a subscriber building spans, skip the tree walks
            // below: this runs under the engine's lock on every start.
            if !tracing::enabled!(tracing::Level::INFO) {
                return None;
            }
            let parent = parent.unwrap_or(child);
            let root = state.lineage(parent).last();
            let span = ActivationSpan {
                child,
                parent,
                label,
                provider: provider.unwrap_or_default(),
                epoch,
                external,
            }
            .create(root.map_or(parent, |root| root.id));
            parent_on(&span, state.span_parent(parent), caller);
            // Known only when the root is in the projections already: a
            // root created by this very decision has its tree's trace on
            // its `SessionCreated`, which later commands look up.
            let tree = root.map(|root| KnownTree {
                session: child,
                trace: root.trace.map(|trace| trace.trace_id),
            });
            return Some(TracedSpan::new(span, tree));
        }
    }
    None
}

/// What an activation or run span is opened with.
struct ActivationSpan<'a> {
    /// The child.
    child: SessionId,
    /// Its parent session.
    parent: SessionId,
    /// Its label.
    label: &'a str,
    /// The provider that started it.
    provider: &'a str,
    /// The epoch (1 for a run).
    epoch: u64,
    /// Whether it is an external run rather than a continuable activation.
    external: bool,
}

impl ActivationSpan<'_> {
    /// The span, not yet parented, in `root`'s conversation.
    fn create(self, root: SessionId) -> Span {
        let (child, parent, root) = (self.child.text(), self.parent.text(), root.text());
        if self.external {
            tracing::info_span!(
                parent: None,
                span::RUN,
                "otel.name" = otel_name(span::RUN, self.label),
                { attr::AGENT_NAME } = self.label,
                { attr::AGENT_ID } = child.as_str(),
                { attr::CONVERSATION_ID } = root.as_str(),
                { attr::PARENT_ID } = parent.as_str(),
                { attr::PROVIDER } = self.provider,
                { attr::ERROR_TYPE } = tracing::field::Empty,
            )
        } else {
            tracing::info_span!(
                parent: None,
                span::ACTIVATION,
                "otel.name" = otel_name(span::ACTIVATION, self.label),
                { attr::AGENT_NAME } = self.label,
                { attr::AGENT_ID } = child.as_str(),
                { attr::CONVERSATION_ID } = root.as_str(),
                { attr::PARENT_ID } = parent.as_str(),
                { attr::PROVIDER } = self.provider,
                { attr::EPOCH } = self.epoch,
                { attr::ERROR_TYPE } = tracing::field::Empty,
            )
        }
    }
}

/// The span of one turn (GenAI `invoke_agent`), a child of the current
/// (activation) span.
pub(crate) fn invoke_agent_span(state: &Projections, session: SessionId, label: &str) -> Span {
    let root = root_of(state, session);
    tracing::info_span!(
        span::INVOKE_AGENT,
        "otel.name" = otel_name(span::INVOKE_AGENT, label),
        { attr::OPERATION_NAME } = span::INVOKE_AGENT,
        { attr::AGENT_NAME } = label,
        { attr::AGENT_ID } = session.text().as_str(),
        { attr::CONVERSATION_ID } = root.text().as_str(),
        { attr::TURN } = tracing::field::Empty,
        { attr::USAGE_INPUT_TOKENS } = tracing::field::Empty,
        { attr::USAGE_OUTPUT_TOKENS } = tracing::field::Empty,
        { attr::ERROR_TYPE } = tracing::field::Empty,
    )
}

/// The span of one tool call (GenAI `execute_tool`), a child of the
/// current (turn) span.
pub(crate) fn execute_tool_span(name: &str, call_id: &str) -> Span {
    tracing::info_span!(
        span::EXECUTE_TOOL,
        "otel.name" = otel_name(span::EXECUTE_TOOL, name),
        { attr::OPERATION_NAME } = span::EXECUTE_TOOL,
        { attr::TOOL_NAME } = name,
        { attr::TOOL_CALL_ID } = call_id,
        { attr::ERROR_TYPE } = tracing::field::Empty,
    )
}

/// What a delivery's span is parented and named by, read from the
/// projections in the same hold of the engine's lock as the rest of the
/// delivery's reads ([`DeliveryParents::of`]), so the span itself is built
/// after the lock is released.
pub(crate) struct DeliveryParents {
    /// The tree's trace ([`Projections::tree_trace`]).
    tree: Option<TraceContext>,
    /// The log's rule on the sender ([`Projections::span_parent`]).
    parent: Option<TraceContext>,
    /// The sender's root, the conversation.
    root: SessionId,
}

impl DeliveryParents {
    /// Read for a delivery from `sender`, or `None` when no subscriber
    /// takes `info` spans (then nothing is read).
    pub(crate) fn of(state: &Projections, sender: SessionId) -> Option<DeliveryParents> {
        if !tracing::enabled!(tracing::Level::INFO) {
            return None;
        }
        // One walk to the root gives both the tree's trace and the root.
        let root = state.lineage(sender).last();
        Some(DeliveryParents {
            tree: root.and_then(|root| root.trace),
            parent: state.span_parent(sender),
            root: root.map_or(sender, |root| root.id),
        })
    }
}

/// The span of one message delivery to `target`, in its tree's one trace:
/// a child of the caller's span when that span is in the tree's trace (a
/// tool call that sends it); otherwise parented by the log's rule on the
/// sender ([`Projections::span_parent`]: its turn in progress, else its
/// live activation, else its root's `create_agent`), with the caller's
/// span, if any, as a link. So a host that sends from a request of its
/// own, or from no span at all, adds a delivery to the tree's trace, not a
/// trace of its own. No span (`Span::none`) without `parents`, which
/// [`DeliveryParents::of`] reads only when a subscriber takes `info` spans.
pub(crate) fn deliver_message_span(parents: Option<DeliveryParents>, target: SessionId) -> Span {
    let Some(DeliveryParents { tree, parent, root }) = parents else {
        return Span::none();
    };
    let caller = current_trace();
    let by_rule = parented_by_rule(tree, parent, caller);
    let span = tracing::info_span!(
        parent: if by_rule { None } else { Span::current().id() },
        span::DELIVER_MESSAGE,
        { attr::CONVERSATION_ID } = root.text().as_str(),
        { attr::TARGET } = target.text().as_str(),
        { attr::DELIVERY } = tracing::field::Empty,
        { attr::ERROR_TYPE } = tracing::field::Empty,
    );
    if by_rule {
        parent_on(&span, parent, caller);
    }
    span
}

/// Whether a delivery sent from the span `caller` is parented by the rule
/// on `parent` rather than on `caller`: when the rule names a parent and
/// `caller` is not in the tree's trace, which is the root's (`tree`), or
/// `parent`'s when the root kept none (a root opened before spans were
/// exported).
fn parented_by_rule(
    tree: Option<TraceContext>,
    parent: Option<TraceContext>,
    caller: Option<TraceContext>,
) -> bool {
    let Some(parent) = parent else {
        return false;
    };
    let trace = tree.unwrap_or(parent).trace_id;
    caller.is_none_or(|caller| caller.trace_id != trace)
}

/// A span's display name as the GenAI conventions form it: the operation,
/// a space, then what it acts on (`invoke_agent researcher`). Joined
/// without the formatter: this runs on every activation.
fn otel_name(operation: &str, subject: &str) -> String {
    [operation, " ", subject].concat()
}

/// Records why `span` failed.
pub(crate) fn record_error(span: &Span, error_type: &str) {
    span.record(attr::ERROR_TYPE, error_type);
}

#[cfg(test)]
mod tests {
    use super::*;
    use subagent_core::Delivery;

    fn context(trace: u8, span: u8) -> TraceContext {
        TraceContext::new([trace; 16], [span; 8], true).unwrap()
    }

    /// Any event that names no span: the rule does not look at which.
    fn unnamed() -> Event {
        Event::ActivationPrepared {
            epoch: 1,
            seeded_events: 0,
        }
    }

    fn child_of(parent: SessionId, child: SessionId) -> Event {
        Event::SessionCreated {
            session: child,
            parent: Some(parent),
            depth: 1,
            label: "child".into(),
            provider: Some("spawn".into()),
            mode: subagent_core::SessionMode::Continuable,
            external: false,
            descriptor: serde_json::Value::Null,
        }
    }

    fn kept(events: &[NewEvent]) -> Vec<Option<TraceContext>> {
        events.iter().map(|event| event.trace).collect()
    }

    /// A state with one root whose `SessionCreated` kept `trace`.
    fn traced_root(trace: Option<TraceContext>) -> (Projections, SessionId) {
        let root = SessionId::new();
        let mut state = Projections::new();
        let created = NewEvent {
            trace,
            ..NewEvent::new(Event::root_created(root, "root"))
        };
        state.apply(&created.into_record(1, StreamId::Session(root), 1, 0));
        (state, root)
    }

    #[test]
    fn a_decision_in_its_trees_span_keeps_it_only_on_the_naming_event() {
        let tree = context(1, 1);
        let (state, root) = traced_root(Some(tree));
        let activation = context(1, 2);
        // A start: the child, created by this decision, is in its parent's
        // tree; so is the parent's own stream.
        let child = SessionId::new();
        let events = recorded_events(
            &state,
            StreamId::Session(child),
            vec![
                child_of(root, child),
                unnamed(),
                Event::ActivationRequested {
                    epoch: 1,
                    delivery: Delivery::Caller,
                    output_schema: None,
                    requested_by: None,
                },
            ],
            RecordedIn::span(Some(activation)),
        );
        assert_eq!(kept(&events), [None, None, Some(activation)]);
        let events = recorded_events(
            &state,
            StreamId::Session(root),
            vec![unnamed()],
            RecordedIn::span(Some(activation)),
        );
        assert_eq!(kept(&events), [None]);
    }

    #[test]
    fn a_root_created_by_the_decision_is_its_own_trees_start() {
        let (state, _) = traced_root(None);
        let create_agent = context(7, 7);
        let root = SessionId::new();
        let events = recorded_events(
            &state,
            StreamId::Session(root),
            vec![Event::root_created(root, "new"), unnamed()],
            RecordedIn::span(Some(create_agent)),
        );
        assert_eq!(kept(&events), [Some(create_agent), None]);
    }

    #[test]
    fn a_span_outside_the_trees_trace_is_kept_on_every_event() {
        let (state, root) = traced_root(Some(context(1, 1)));
        let host = context(9, 9);
        let events = recorded_events(
            &state,
            StreamId::Session(root),
            vec![unnamed(), unnamed()],
            RecordedIn::span(Some(host)),
        );
        assert_eq!(kept(&events), [Some(host), Some(host)]);
        // The `runtime` stream is in no tree.
        let events = recorded_events(
            &state,
            StreamId::Runtime,
            vec![unnamed()],
            RecordedIn::span(Some(context(1, 3))),
        );
        assert_eq!(kept(&events), [Some(context(1, 3))]);
        // A root that kept no trace has no tree's trace to name its spans.
        let (untraced, untraced_root) = traced_root(None);
        let events = recorded_events(
            &untraced,
            StreamId::Session(untraced_root),
            vec![unnamed()],
            RecordedIn::span(Some(context(1, 3))),
        );
        assert_eq!(kept(&events), [Some(context(1, 3))]);
    }

    #[test]
    fn a_delivery_is_parented_by_the_rule_unless_its_caller_is_in_the_trees_trace() {
        let (root, turn) = (context(1, 1), context(1, 2));
        let (tool, host) = (context(1, 3), context(9, 9));
        // From a host's span, or from none: by the rule.
        assert!(parented_by_rule(Some(root), Some(turn), Some(host)));
        assert!(parented_by_rule(Some(root), Some(turn), None));
        // From a span of the tree's trace (a tool call): the caller's child.
        assert!(!parented_by_rule(Some(root), Some(turn), Some(tool)));
        // A root that kept no trace: the parent's trace is the tree's.
        assert!(!parented_by_rule(None, Some(turn), Some(tool)));
        assert!(parented_by_rule(None, Some(turn), Some(host)));
        // No parent to name: the caller's, whatever it is.
        assert!(!parented_by_rule(Some(root), None, Some(host)));
        assert!(!parented_by_rule(None, None, None));
    }

    #[test]
    fn a_known_tree_stands_for_its_own_sessions_stream_only() {
        let tree = context(1, 1);
        let (mut state, root) = traced_root(Some(tree));
        let child = SessionId::new();
        state.apply(&NewEvent::new(child_of(root, child)).into_record(
            2,
            StreamId::Session(child),
            1,
            0,
        ));
        let run = context(1, 2);
        // What the lookup gives: the run's span is in the tree's trace.
        let looked_up = kept(&recorded_events(
            &state,
            StreamId::Session(child),
            vec![unnamed()],
            RecordedIn::span(Some(run)),
        ));
        assert_eq!(looked_up, [None]);
        // A known tree for the stream's session is taken as it is: one
        // that disagrees with the projections shows it was not looked up.
        let known = |session, trace: u8| RecordedIn {
            trace: Some(run),
            tree: Some(KnownTree {
                session,
                trace: Some([trace; 16]),
            }),
        };
        let on_child = |within| {
            kept(&recorded_events(
                &state,
                StreamId::Session(child),
                vec![unnamed()],
                within,
            ))
        };
        assert_eq!(on_child(known(child, 1)), looked_up);
        assert_eq!(on_child(known(child, 5)), [Some(run)]);
        // Another session's known tree is not the stream's: looked up.
        assert_eq!(on_child(known(root, 5)), looked_up);
        let on_root = kept(&recorded_events(
            &state,
            StreamId::Session(root),
            vec![unnamed()],
            known(child, 5),
        ));
        assert_eq!(on_root, [None]);
    }

    #[test]
    fn nothing_is_kept_without_a_span() {
        let (state, root) = traced_root(Some(context(1, 1)));
        let events = recorded_events(
            &state,
            StreamId::Session(root),
            vec![Event::TurnStarted { turn: 1, epoch: 1 }, unnamed()],
            RecordedIn::span(None),
        );
        assert_eq!(kept(&events), [None, None]);
    }
}
