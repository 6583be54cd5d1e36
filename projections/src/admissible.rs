//! Admissibility: whether a recorded history is one the state machine could
//! have produced. [`admit`] states, per event type, the precondition
//! [`decide`](crate::decide) guarantees before it records that event,
//! through the same precondition functions `decide` calls (one place per
//! rule, in `machine/guards.rs`); [`HistoryCheck`] folds a history through it.
//! `import` refuses, and `verify` reports, the first record that fails, as a
//! [`HistoryViolation`] (`replay/impossible-history`).
//!
//! Some decisions record several events that always appear together and in
//! order (a start records the catalog entry, the creation and the first
//! request; a turn records its claim and its start; a cold resume records the
//! message and the new epoch; a fork records its seed and the preparation).
//! [`Expectation`] carries what the previous record obliges the next one to
//! be, so a history cannot hold half a decision.
//!
//! What is not checked: rules that depend on deployment settings or command
//! inputs the log does not hold (persona variables, tool names, model
//! selection, capabilities of the requested options), and ids the runtime
//! generates fresh (message and run ids).
//!
//! Over 500 lines because [`admit`] is a table: one arm per event type, each
//! naming the rules it shares with `decide`.

use std::fmt;

use subagent_core::{
    AbandonReason, Delivery, ErrorCode, Event, MessageSource, RecordedEvent, SessionId,
    SessionMode, StreamId, SubagentDescriptor, SubagentError,
};
use thiserror::Error;

use crate::activation::RunPhase;
use crate::machine::{
    abandonable_live, check_registration, child_depth, child_mode, interrupt_authorized, live,
    new_session, next_turn, registered, requested_live, requesting_turn, route_message,
    route_prompt, run_in, running_turn, runs_live_work, settlement_notice_id, settlement_summary,
    start_parent, transcript_turn, unpublished_live, unsettled_live, unused_child_id, valid_label,
};
use crate::sessions::SessionRecord;
use crate::state::Projections;

/// A record the state machine could not have produced at its place in the
/// history.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("impossible history at position {position} ({event_type} in {stream}): {reason}")]
pub struct HistoryViolation {
    /// The record's position.
    pub position: u64,
    /// Its stream.
    pub stream: StreamId,
    /// Its event type.
    pub event_type: &'static str,
    /// Which rule it breaks.
    pub reason: String,
}

impl HistoryViolation {
    /// The stable code of every violation
    /// ([`ErrorCode::ReplayImpossibleHistory`]).
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        ErrorCode::ReplayImpossibleHistory
    }
}

/// What the previous record obliges the next one to be: the rest of the
/// decision it began. Every variant but `None` and `Prompt` is mandatory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expectation {
    /// Anything admissible.
    #[default]
    None,
    /// After a `ChildCataloged`: the child's `SessionCreated`.
    Creation {
        /// The parent whose catalog names the child.
        parent: SessionId,
        /// The child.
        child: SessionId,
    },
    /// After a child's `SessionCreated`: its first `ActivationRequested`
    /// (epoch 1) or its `RunRequested`.
    FirstActivation {
        /// The child.
        child: SessionId,
    },
    /// After a message that cold-resumes a child: its `ActivationRequested`.
    Resume {
        /// The child.
        child: SessionId,
        /// The epoch it must request.
        epoch: u64,
    },
    /// After a turn's `MessagesClaimed`: its `TurnStarted`.
    TurnStart {
        /// The session.
        session: SessionId,
        /// The turn.
        turn: u64,
        /// The live epoch.
        epoch: u64,
    },
    /// After `HistorySeeded`: the `ActivationPrepared` it belongs to.
    Preparation {
        /// The session.
        session: SessionId,
    },
    /// After `ActivationPrepared`: optionally, the delegated prompt.
    Prompt {
        /// The session.
        session: SessionId,
    },
}

impl Expectation {
    fn is_mandatory(self) -> bool {
        !matches!(self, Expectation::None | Expectation::Prompt { .. })
    }

    /// The stream the expected record belongs in.
    fn stream(self) -> StreamId {
        match self {
            Expectation::None => StreamId::Runtime,
            Expectation::Creation { child, .. }
            | Expectation::FirstActivation { child }
            | Expectation::Resume { child, .. } => StreamId::Session(child),
            Expectation::TurnStart { session, .. }
            | Expectation::Preparation { session }
            | Expectation::Prompt { session } => StreamId::Session(session),
        }
    }
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expectation::None => f.write_str("nothing in particular"),
            Expectation::Creation { child, .. } => write!(f, "the SessionCreated of {child}"),
            Expectation::FirstActivation { child } => {
                write!(
                    f,
                    "the first ActivationRequested or RunRequested of {child}"
                )
            }
            Expectation::Resume { child, epoch } => {
                write!(f, "ActivationRequested {epoch} of {child}")
            }
            Expectation::TurnStart { session, turn, .. } => {
                write!(f, "TurnStarted {turn} of {session}")
            }
            Expectation::Preparation { session } => {
                write!(f, "the ActivationPrepared of {session}")
            }
            Expectation::Prompt { session } => write!(f, "the delegated prompt of {session}"),
        }
    }
}

/// Checks that `record` could follow the history folded into `state`, whose
/// last record left `expected`. Returns what `record` obliges the next one
/// to be. Pure: `state` is not changed (apply the record afterwards).
///
/// # Errors
/// The broken rule, as a [`HistoryViolation`] at `record`'s position.
pub fn admit(
    state: &Projections,
    expected: Expectation,
    record: &RecordedEvent,
) -> Result<Expectation, HistoryViolation> {
    let violation = |reason: String| HistoryViolation {
        position: record.position,
        stream: record.stream,
        event_type: record.event.type_name(),
        reason,
    };
    rule(state, expected, record).map_err(|broken| violation(broken.0))
}

/// A broken rule, before it is placed at a record.
struct Broken(String);

impl From<SubagentError> for Broken {
    fn from(refusal: SubagentError) -> Self {
        Broken(format!("the state machine refuses it ({refusal})"))
    }
}

fn broken<T>(reason: impl Into<String>) -> Result<T, Broken> {
    Err(Broken(reason.into()))
}

/// A child's first request naming `call`: a call of its parent's running
/// turn, as `decide` checks it (a root's child names none).
fn requested_by_call(
    state: &Projections,
    created: &SessionRecord,
    call: Option<&subagent_core::ToolCallRef>,
) -> Result<(), Broken> {
    let (Some(call), Some(parent)) = (call, created.parent) else {
        return match call {
            Some(_) => broken("a root's child names no requesting call"),
            None => Ok(()),
        };
    };
    requesting_turn(state, parent, call)?;
    Ok(())
}

fn rule(
    state: &Projections,
    expected: Expectation,
    record: &RecordedEvent,
) -> Result<Expectation, Broken> {
    let event = &record.event;
    if !event.belongs_in(&record.stream) {
        return broken(format!("it does not belong in {}", record.stream));
    }
    if state.position.checked_add(1) != Some(record.position) {
        return broken(format!("it does not follow position {}", state.position));
    }
    if expected.is_mandatory() && !fulfils(expected, record) {
        return broken(format!(
            "the decision recorded at position {} must continue with {expected}",
            state.position
        ));
    }
    let Some(session) = record.stream.session() else {
        return runtime_rule(state, record);
    };
    let known = state.sessions.get(&session);
    let created = || known.ok_or_else(|| Broken(format!("session {session} was never created")));
    if !matches!(event, Event::SessionCreated { .. }) {
        created()?;
    }
    match event {
        Event::SessionCreated {
            parent: None,
            depth,
            label,
            provider,
            mode,
            external,
            ..
        } => {
            new_session(state, session)?;
            valid_label(label)?;
            if *depth != 0 || provider.is_some() || *mode != SessionMode::Continuable || *external {
                return broken("a root is continuable, at depth 0, with no provider");
            }
            Ok(Expectation::None)
        }
        Event::SessionCreated {
            parent: Some(parent),
            ..
        } => created_child(state, expected, session, *parent, event),
        Event::ChildCataloged {
            child,
            label,
            provider,
            mode,
            external,
        } => {
            start_parent(state, session)?;
            let provider = registered(state.registry_for(session), provider)?;
            if child_mode(provider) != (*mode, *external) {
                return broken(format!(
                    "provider {} starts {:?} children",
                    provider.name,
                    child_mode(provider)
                ));
            }
            unused_child_id(state, *child)?;
            valid_label(label)?;
            Ok(Expectation::Creation {
                parent: session,
                child: *child,
            })
        }
        Event::ActivationRequested {
            epoch,
            delivery,
            output_schema,
            requested_by,
        } => match expected {
            Expectation::FirstActivation { .. } => {
                let created = created()?;
                if *epoch != 1 || created.mode != SessionMode::Continuable || created.external {
                    return broken("a continuable child's first activation is epoch 1");
                }
                if let Some(schema) = output_schema {
                    subagent_core::schema::assert_object_json_schema(schema)?;
                }
                requested_by_call(state, created, requested_by.as_ref())?;
                Ok(Expectation::None)
            }
            Expectation::Resume { epoch: resumed, .. }
                if *epoch == resumed
                    && *delivery == Delivery::Parent
                    && output_schema.is_none()
                    && requested_by.is_none() =>
            {
                Ok(Expectation::None)
            }
            _ => broken("only a start or a message to an absent child requests an activation"),
        },
        Event::RunRequested {
            provider,
            requested_by,
            ..
        } => {
            let created = created()?;
            if !matches!(expected, Expectation::FirstActivation { .. })
                || !created.external
                || created.provider.as_deref() != Some(provider.as_str())
            {
                return broken("only the start of an external child requests its run");
            }
            requested_by_call(state, created, requested_by.as_ref())?;
            Ok(Expectation::None)
        }
        Event::HistorySeeded { .. } => {
            let epoch = live_epoch(state, session)?;
            requested_live(state, session, epoch)?;
            Ok(Expectation::Preparation { session })
        }
        Event::ActivationPrepared { epoch, .. } => {
            requested_live(state, session, *epoch)?;
            Ok(Expectation::Prompt { session })
        }
        Event::ActivationPublished { epoch, .. } => {
            unpublished_live(state, session, *epoch)?;
            Ok(Expectation::None)
        }
        Event::ActivationSettled { epoch, .. } => {
            unsettled_live(state, session, *epoch)?;
            Ok(Expectation::None)
        }
        Event::ActivationReleased { epoch, .. } => {
            let live = live(state, session, *epoch)?;
            if !live.settled || running(state, session) {
                return broken("a release first settles the activation and ends its turn");
            }
            Ok(Expectation::None)
        }
        Event::ActivationAbandoned { epoch, reason } => {
            if *reason == AbandonReason::HostRestart {
                // Recovery abandons every live activation, published or not,
                // after ending its turn.
                live(state, session, *epoch)?;
                if running(state, session) {
                    return broken("recovery ends the running turn before abandoning");
                }
            } else {
                abandonable_live(state, session, *epoch)?;
            }
            Ok(Expectation::None)
        }
        Event::RunStarted { run_id } => run_phase(
            state,
            session,
            *run_id,
            &[RunPhase::Requested],
            "only a requested run starts",
        ),
        Event::RunSettled { run_id, .. } => run_phase(
            state,
            session,
            *run_id,
            &[RunPhase::Requested, RunPhase::Started],
            "only a started run settles",
        ),
        Event::RunDisposed { run_id, .. } => run_phase(
            state,
            session,
            *run_id,
            &[RunPhase::Settled],
            "only a settled run is disposed",
        ),
        Event::RunStartFailed { run_id, .. } => run_phase(
            state,
            session,
            *run_id,
            &[RunPhase::Requested],
            "only a requested run fails to start",
        ),
        Event::MessageAccepted { .. } => accepted_message(state, expected, created()?, record),
        Event::MessagesClaimed { ids, turn } => {
            if *ids != state.pending_messages(session) {
                return broken("a claim takes every pending message, oldest first");
            }
            if !ids.is_empty() && running_turn(state, session).ok() == Some(*turn) {
                return Ok(Expectation::None); // steering
            }
            let (next, live) = next_turn(state, session)?;
            if next != *turn {
                return broken(format!("the next turn is {next}, not {turn}"));
            }
            Ok(Expectation::TurnStart {
                session,
                turn: next,
                epoch: live.epoch,
            })
        }
        Event::MessagesDropped { .. } => broken("the state machine never drops messages"),
        Event::TurnStarted { .. } => {
            // `fulfils` matched it against the claim before it.
            if !matches!(expected, Expectation::TurnStart { .. }) {
                return broken("a turn starts only right after its claim");
            }
            Ok(Expectation::None)
        }
        Event::AssistantMessage { .. }
        | Event::ToolCalled { .. }
        | Event::ToolReturned { .. }
        | Event::AgentReported { .. } => {
            transcript_turn(state, session, event)?;
            Ok(Expectation::None)
        }
        Event::TurnEnded { turn, .. } => {
            if running_turn(state, session)? != *turn {
                return broken(format!("turn {turn} is not running"));
            }
            Ok(Expectation::None)
        }
        Event::InterruptRequested { target, authority } => {
            if *target != session
                || !interrupt_authorized(state, created()?, authority)
                || !runs_live_work(state, session)
            {
                return broken("only an owner interrupts a target's running work");
            }
            Ok(Expectation::None)
        }
        Event::TreeAcquired { holder, fence, .. } => {
            if created()?.parent.is_some() {
                return broken("only a root's tree is acquired");
            }
            if holder.is_empty() {
                return broken("a tree is acquired under a holder's name");
            }
            let previous = state.owners.get(&session).map_or(0, |owner| owner.fence);
            if *fence <= previous {
                return broken(format!(
                    "a take's fence ({fence}) must exceed the previous holder's ({previous})"
                ));
            }
            Ok(Expectation::None)
        }
        Event::ProviderRegistered { .. }
        | Event::ProviderRemoved { .. }
        | Event::AdmissionClosed { .. }
        | Event::AdmissionReopened { .. }
        | Event::HostRecovered { .. } => broken("a runtime event in a session stream"),
    }
}

/// Whether `record` is what `expected` demands.
fn fulfils(expected: Expectation, record: &RecordedEvent) -> bool {
    let in_stream = |session: SessionId| record.stream == StreamId::Session(session);
    match (expected, &record.event) {
        (
            Expectation::Creation { parent, child },
            Event::SessionCreated {
                session,
                parent: Some(created_parent),
                ..
            },
        ) => in_stream(child) && *session == child && *created_parent == parent,
        (
            Expectation::FirstActivation { child },
            Event::ActivationRequested { .. } | Event::RunRequested { .. },
        ) => in_stream(child),
        (Expectation::Resume { child, .. }, Event::ActivationRequested { .. }) => in_stream(child),
        (
            Expectation::TurnStart {
                session,
                turn,
                epoch,
            },
            Event::TurnStarted {
                turn: started,
                epoch: started_epoch,
            },
        ) => in_stream(session) && *started == turn && *started_epoch == epoch,
        (Expectation::Preparation { session }, Event::ActivationPrepared { .. }) => {
            in_stream(session)
        }
        (expected, _) => !expected.is_mandatory(),
    }
}

fn runtime_rule(state: &Projections, record: &RecordedEvent) -> Result<Expectation, Broken> {
    match &record.event {
        registration @ Event::ProviderRegistered { .. } => {
            check_registration(state.registry_of_stream(record.stream), registration)?;
        }
        Event::ProviderRemoved { name } => {
            registered(state.registry_of_stream(record.stream), name)?;
        }
        Event::AdmissionClosed { parent } => {
            if state.admission_closed.contains(parent) {
                return broken(format!("admission below {parent} is already closed"));
            }
        }
        Event::AdmissionReopened { parent } => {
            if !state.admission_closed.contains(parent) {
                return broken(format!("admission below {parent} is not closed"));
            }
        }
        Event::HostRecovered {
            previous_head,
            abandoned_activations,
            failed_runs,
        } => {
            if *previous_head >= record.position
                || (*abandoned_activations == 0 && *failed_runs == 0)
            {
                return broken("recovery is marked only after settling live work found on reopen");
            }
        }
        other => return broken(format!("{} belongs in a session stream", other.type_name())),
    }
    Ok(Expectation::None)
}

fn created_child(
    state: &Projections,
    expected: Expectation,
    session: SessionId,
    parent: SessionId,
    created: &Event,
) -> Result<Expectation, Broken> {
    let Event::SessionCreated {
        depth,
        label,
        provider,
        mode,
        external,
        descriptor,
        ..
    } = created
    else {
        return broken("not a creation");
    };
    if !matches!(expected, Expectation::Creation { .. }) {
        return broken("a child is created only by its start, right after its catalog entry");
    }
    let parent_record = state
        .sessions
        .get(&parent)
        .ok_or_else(|| Broken(format!("parent {parent} does not exist")))?;
    let cataloged = state
        .catalogs
        .get(&parent)
        .and_then(|facts| facts.last())
        .filter(|fact| fact.child == session);
    let matches_catalog = cataloged.is_some_and(|fact| {
        fact.label == *label
            && Some(&fact.provider) == provider.as_ref()
            && fact.mode == *mode
            && fact.external == *external
    });
    if !matches_catalog {
        return broken("the creation disagrees with the parent's catalog entry");
    }
    let max_depth = SubagentDescriptor::interpret(descriptor).and_then(|d| d.max_depth);
    let computed = child_depth(parent_record, max_depth)?;
    if computed != *depth {
        return broken(format!("a child of {parent} is at depth {computed}"));
    }
    Ok(Expectation::FirstActivation { child: session })
}

fn accepted_message(
    state: &Projections,
    expected: Expectation,
    target_record: &SessionRecord,
    record: &RecordedEvent,
) -> Result<Expectation, Broken> {
    let target = target_record.id;
    let Event::MessageAccepted {
        message_id, source, ..
    } = &record.event
    else {
        return broken("not a message");
    };
    let child_of_target = |sender: &SessionId| {
        state
            .sessions
            .get(sender)
            .is_some_and(|record| record.parent == Some(target))
    };
    match source {
        MessageSource::Delegation { parent_session_id } => {
            if expected != (Expectation::Prompt { session: target })
                || *parent_session_id != target_record.parent.unwrap_or(target)
            {
                return broken("a delegated prompt comes with its child's preparation");
            }
            Ok(Expectation::None)
        }
        MessageSource::AgentMessage { sender_session_id } => {
            let route = route_message(state, *sender_session_id, target)?;
            Ok(match route.resume_epoch {
                Some(epoch) if route.to_child => Expectation::Resume {
                    child: target,
                    epoch,
                },
                _ => Expectation::None,
            })
        }
        MessageSource::SubagentSettled {
            summary,
            sender_session_id: child,
        } => {
            let settled = state
                .activations
                .get(child)
                .and_then(|activation| activation.last_result.as_ref());
            let label = state
                .sessions
                .get(child)
                .map(|record| record.label.as_str());
            let genuine = child_of_target(child)
                && settled.zip(label).is_some_and(|((epoch, result), label)| {
                    *message_id == settlement_notice_id(*child, *epoch)
                        && *summary == settlement_summary(label, result)
                });
            if !genuine {
                return broken("a settlement notice follows its child's settlement");
            }
            Ok(Expectation::None)
        }
        MessageSource::SubagentReport {
            sender_session_id: child,
        } => {
            // Recovery may place the report before its run's settlement in
            // one decision, so only the run's identity is checked.
            let genuine = child_of_target(child)
                && state
                    .runs
                    .get(child)
                    .is_some_and(|run| message_id.as_uuid() == run.run_id.as_uuid());
            if !genuine {
                return broken("an external report comes from the target's own run");
            }
            Ok(Expectation::None)
        }
        MessageSource::Browser { request_id, .. } => {
            let parent = target_record
                .parent
                .ok_or_else(|| Broken("a prompt goes to a child, not a root".into()))?;
            let route = route_prompt(state, parent, target, request_id)?;
            Ok(match route.resume_epoch {
                Some(epoch) => Expectation::Resume {
                    child: target,
                    epoch,
                },
                None => Expectation::None,
            })
        }
        MessageSource::User => broken("the state machine records no user messages"),
    }
}

fn live_epoch(state: &Projections, session: SessionId) -> Result<u64, Broken> {
    state
        .activations
        .get(&session)
        .and_then(|activation| activation.live.as_ref())
        .map(|live| live.epoch)
        .ok_or_else(|| Broken(format!("{session} has no live activation")))
}

fn running(state: &Projections, session: SessionId) -> bool {
    state
        .activations
        .get(&session)
        .is_some_and(|activation| activation.running_turn.is_some())
}

fn run_phase(
    state: &Projections,
    session: SessionId,
    run_id: subagent_core::SubagentRunId,
    phases: &[RunPhase],
    accepted: &'static str,
) -> Result<Expectation, Broken> {
    let run = run_in(state, session, phases, accepted)?;
    if run.run_id != run_id {
        return broken(format!("the run of {session} is {}", run.run_id));
    }
    Ok(Expectation::None)
}

/// Checks that a history whose projections are `state` and whose last record
/// left `expected` may end there: not inside a decision (a start without its
/// creation, a claim without its turn, ...), since every decision is appended
/// atomically.
///
/// # Errors
/// A violation at the last position, naming what is missing.
pub fn admit_end(state: &Projections, expected: Expectation) -> Result<(), HistoryViolation> {
    if expected.is_mandatory() {
        return Err(HistoryViolation {
            position: state.position,
            stream: expected.stream(),
            event_type: "(end of log)",
            reason: format!("the log ends inside a decision, which must continue with {expected}"),
        });
    }
    Ok(())
}

/// A history folded through [`admit`]: the projections so far and what the
/// last record obliges the next one to be.
#[derive(Clone, Debug, Default)]
pub struct HistoryCheck {
    state: Projections,
    expected: Expectation,
}

impl HistoryCheck {
    /// The check of an empty history.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Admits `record` (the next in position order) and folds it in.
    ///
    /// # Errors
    /// The broken rule; `record` is then not folded in, and the check should
    /// not go on (the history is already impossible).
    pub fn check(&mut self, record: &RecordedEvent) -> Result<(), HistoryViolation> {
        self.expected = admit(&self.state, self.expected, record)?;
        self.state.apply(record);
        Ok(())
    }

    /// Checks that the history may end here ([`admit_end`]).
    ///
    /// # Errors
    /// A violation at the last position when a decision is incomplete.
    pub fn finish(&self) -> Result<(), HistoryViolation> {
        admit_end(&self.state, self.expected)
    }

    /// The projections of the history checked so far.
    #[must_use]
    pub fn state(&self) -> &Projections {
        &self.state
    }

    /// Checks a whole history, start to end.
    ///
    /// # Errors
    /// The first broken rule.
    pub fn history<'a>(
        records: impl IntoIterator<Item = &'a RecordedEvent>,
    ) -> Result<Projections, HistoryViolation> {
        let mut check = Self::new();
        for record in records {
            check.check(record)?;
        }
        check.finish()?;
        Ok(check.state)
    }
}
