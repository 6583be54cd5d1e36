//! The delegation state machine: [`decide`] turns a [`Command`] into the
//! events that record it, or a typed rejection, by reading the current
//! [`Projections`]. Pure: no IO, no clock, no randomness (ids come in the
//! command). The runtime appends the events atomically and folds them back
//! with [`Projections::apply`], and drivers report outcomes as new commands.
//!
//! `decide` reads the same fold the queries read, so there is one state, and
//! the property tests of that fold cover the state decisions are made on.

use serde_json::{json, Value};
use subagent_core::{
    effective_agent_options, AbandonReason, AgentOptions, ContentBlock, Delivery, Diagnostic,
    Event, MessageDelivery, MessageId, MessageSource, SessionId, SessionMode, StartOptions,
    StartSettings, StreamId, SubagentDescriptor, SubagentError, SubagentResult, SubagentRunId,
    SubagentStopReason, MAX_SAFE_INTEGER,
};

use crate::activation::{ActivationPhase, LiveActivation, RunPhase, RunState};
use crate::sessions::SessionRecord;
use crate::state::{Projections, ProviderRecord};

/// Everything a caller or a driver can ask of the state machine.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Record the host's own root session.
    OpenRoot {
        /// Its id.
        session: SessionId,
        /// Its label.
        label: String,
        /// The root agent's options, which its local children inherit.
        agent_options: Option<AgentOptions>,
    },
    /// Register a provider.
    RegisterProvider {
        /// The registration, as the runtime stream records it.
        registration: Event,
    },
    /// Remove a provider.
    RemoveProvider {
        /// Its name.
        name: String,
    },
    /// Start a child below `parent` (validated against the provider first).
    StartChild(StartChild),
    /// The provider contributed the activation's creation inputs; the
    /// delegated prompt (first activation only) is accepted into the inbox
    /// with them, which ends the caller's cancellation window.
    Prepared {
        /// The child.
        child: SessionId,
        /// Its epoch.
        epoch: u64,
        /// The initial prompt and its message id.
        prompt: Option<(MessageId, Vec<ContentBlock>)>,
        /// Parent history to seed with (fork), as lossless JSON.
        seed: Option<Vec<Value>>,
        /// Whose history the seed copies, and the version it ends at.
        seed_source: Option<(SessionId, u64)>,
    },
    /// The child agent of an activation is live.
    Published {
        /// The child.
        child: SessionId,
        /// Its epoch.
        epoch: u64,
        /// The run id pairing `subagent/start` and `subagent/end`.
        run_id: SubagentRunId,
    },
    /// A turn begins and claims every pending message, in FIFO order.
    BeginTurn {
        /// The session.
        session: SessionId,
    },
    /// A transcript entry of the running turn (`AssistantMessage`,
    /// `ToolCalled` or `ToolReturned`).
    Transcript {
        /// The session.
        session: SessionId,
        /// The entry.
        entry: Event,
    },
    /// Steering: the running turn claims every pending message at its next
    /// step boundary. A no-op when nothing is pending.
    Steer {
        /// The session.
        session: SessionId,
    },
    /// The running turn ended.
    EndTurn {
        /// The session.
        session: SessionId,
        /// Why.
        stop_reason: SubagentStopReason,
    },
    /// An activation produced its result.
    Settle {
        /// The child.
        child: SessionId,
        /// Its epoch.
        epoch: u64,
        /// The result.
        result: SubagentResult,
    },
    /// An activation's resources were released (settling it as `aborted`
    /// first when it had no result yet).
    Release {
        /// The child.
        child: SessionId,
        /// Its epoch.
        epoch: u64,
        /// A cleanup failure, recorded beside the result.
        cleanup_error: Option<Diagnostic>,
    },
    /// The activation's agent or driver failed: the agent could not be
    /// built (a model endpoint down, a persona that no longer renders) or a
    /// turn could not go on. A model or transport failure is a result with
    /// stop reason `error` (the spec's `SubagentResult`), so an unsettled
    /// epoch settles `error` with `diagnostic` (and its parent is notified
    /// as for any settlement); a settled result is kept and the diagnostic
    /// is recorded beside it. A running turn ends `error`, and the activation
    /// is released: nothing is left live to swallow messages, pending ones
    /// stay pending, and the next send cold-resumes the child.
    Fail {
        /// The child.
        child: SessionId,
        /// Its epoch.
        epoch: u64,
        /// Safe failure detail (already redacted).
        diagnostic: Diagnostic,
    },
    /// An activation ended before publication.
    Abandon {
        /// The child.
        child: SessionId,
        /// Its epoch.
        epoch: u64,
        /// Why.
        reason: AbandonReason,
    },
    /// An external run was published by its provider.
    RunStarted {
        /// The external child.
        child: SessionId,
    },
    /// An external run settled.
    RunSettled {
        /// The external child.
        child: SessionId,
        /// The result.
        result: SubagentResult,
    },
    /// An external run's handle was disposed.
    RunDisposed {
        /// The external child.
        child: SessionId,
        /// A cleanup failure, recorded beside the result.
        cleanup_error: Option<Diagnostic>,
    },
    /// The provider refused to start the run.
    RunStartFailed {
        /// The external child.
        child: SessionId,
        /// Safe detail.
        diagnostic: Diagnostic,
    },
    /// A model-authored message between adjacent agents (a direct parent and
    /// its direct child). An idle target takes it in its next turn; an absent
    /// continuable child is cold-resumed (a new activation epoch).
    SendMessage {
        /// The exact live sender.
        sender: SessionId,
        /// The direct parent or direct child addressed.
        target: SessionId,
        /// The inbox id to record.
        message_id: MessageId,
        /// The content.
        content: Vec<ContentBlock>,
        /// Queue or steer.
        delivery: MessageDelivery,
    },
    /// Interrupt a child's live execution under a human parent address or a
    /// live ancestor. An absent or idle target is an accepted no-op.
    Interrupt {
        /// The child.
        target: SessionId,
        /// The authority.
        authority: subagent_core::InterruptAuthority,
    },
    /// A drain closes admission below `parent`.
    CloseAdmission {
        /// The parent entering teardown.
        parent: SessionId,
    },
    /// The parent left the registry; its cutoff ends.
    ReopenAdmission {
        /// The parent.
        parent: SessionId,
    },
    /// Settle explicitly everything that was live when the host stopped, end
    /// the registrations of the previous host's providers, and end every
    /// drain's admission cutoff (no parent of the previous host is in the
    /// registry any more).
    Recover,
    /// A host takes an existing root session back (after a restart). Records
    /// nothing: holding a root is a fact of one live runtime, not of the log.
    /// The log only has to show that `session` is a root.
    ReopenRoot {
        /// The root session.
        session: SessionId,
    },
}

/// A request to start a child.
#[derive(Clone, Debug, PartialEq)]
pub struct StartChild {
    /// The delegating parent.
    pub parent: SessionId,
    /// The child's reserved id.
    pub child: SessionId,
    /// The provider.
    pub provider: String,
    /// The catalog label.
    pub label: String,
    /// Capability-gated options.
    pub options: StartOptions,
    /// Who receives the result.
    pub delivery: Delivery,
    /// The run id (external children).
    pub run_id: SubagentRunId,
    /// The deployment settings the start is checked against: persona
    /// variables, the host's tool names and model selection.
    pub settings: std::sync::Arc<StartSettings>,
}

/// The events of one decision, grouped by stream, to be appended atomically.
pub type Decision = Vec<(StreamId, Vec<Event>)>;

fn single(stream: StreamId, events: Vec<Event>) -> Decision {
    vec![(stream, events)]
}

/// Decides what `command` records, given `state`.
///
/// # Errors
/// A typed [`SubagentError`] with its stable code; a rejected command records
/// nothing.
pub fn decide(state: &Projections, command: Command) -> Result<Decision, SubagentError> {
    match command {
        Command::OpenRoot {
            session,
            label,
            agent_options,
        } => {
            new_session(state, session)?;
            if let Some(options) = &agent_options {
                options.validate()?;
            }
            Ok(single(
                StreamId::Session(session),
                vec![Event::root_created_with(
                    session,
                    label,
                    agent_options.as_ref(),
                )],
            ))
        }
        Command::RegisterProvider { registration } => {
            check_registration(state, &registration)?;
            Ok(single(StreamId::Runtime, vec![registration]))
        }
        Command::RemoveProvider { name } => {
            registered(state, &name)?;
            Ok(single(
                StreamId::Runtime,
                vec![Event::ProviderRemoved { name }],
            ))
        }
        Command::StartChild(start) => start_child(state, start),
        Command::Prepared {
            child,
            epoch,
            prompt,
            seed,
            seed_source,
        } => {
            requested_live(state, child, epoch)?;
            let mut events = Vec::new();
            let seeded_events = seed.as_ref().map_or(0, |events| events.len() as u64);
            if let (Some(events_to_seed), Some((source, through_version))) = (seed, seed_source) {
                events.push(Event::HistorySeeded {
                    source,
                    through_version,
                    events: events_to_seed,
                });
            }
            events.push(Event::ActivationPrepared {
                epoch,
                seeded_events,
            });
            if let Some((message_id, content)) = prompt {
                let parent = state
                    .sessions
                    .get(&child)
                    .and_then(|record| record.parent)
                    .unwrap_or(child);
                events.push(Event::MessageAccepted {
                    message_id,
                    source: MessageSource::Delegation {
                        parent_session_id: parent,
                    },
                    delivery: MessageDelivery::Queue,
                    content,
                });
            }
            Ok(single(StreamId::Session(child), events))
        }
        Command::Published {
            child,
            epoch,
            run_id,
        } => {
            unpublished_live(state, child, epoch)?;
            Ok(single(
                StreamId::Session(child),
                vec![Event::ActivationPublished { epoch, run_id }],
            ))
        }
        Command::BeginTurn { session } => {
            let (turn, activation) = next_turn(state, session)?;
            Ok(single(
                StreamId::Session(session),
                vec![
                    Event::MessagesClaimed {
                        ids: state.pending_messages(session),
                        turn,
                    },
                    Event::TurnStarted {
                        turn,
                        epoch: activation.epoch,
                    },
                ],
            ))
        }
        Command::Transcript { session, entry } => {
            transcript_turn(state, session, &entry)?;
            Ok(single(StreamId::Session(session), vec![entry]))
        }
        Command::EndTurn {
            session,
            stop_reason,
        } => {
            let turn = running_turn(state, session)?;
            Ok(single(
                StreamId::Session(session),
                vec![Event::TurnEnded { turn, stop_reason }],
            ))
        }
        Command::Settle {
            child,
            epoch,
            result,
        } => {
            let live = unsettled_live(state, child, epoch)?;
            Ok(settle(state, child, live, result))
        }
        Command::Release {
            child,
            epoch,
            cleanup_error,
        } => {
            let live = live(state, child, epoch)?;
            let mut decision = Vec::new();
            if let Some(turn) = state.activations.get(&child).and_then(|a| a.running_turn) {
                push_to(
                    &mut decision,
                    StreamId::Session(child),
                    vec![Event::TurnEnded {
                        turn,
                        stop_reason: SubagentStopReason::Aborted,
                    }],
                );
            }
            if !live.settled {
                let aborted = SubagentResult::failed(
                    SubagentStopReason::Aborted,
                    Vec::new(),
                    "disposed before it settled",
                );
                for (stream, events) in settle(state, child, live, aborted) {
                    push_to(&mut decision, stream, events);
                }
            }
            push_to(
                &mut decision,
                StreamId::Session(child),
                vec![Event::ActivationReleased {
                    epoch,
                    cleanup_error,
                }],
            );
            Ok(decision)
        }
        Command::Fail {
            child,
            epoch,
            diagnostic,
        } => {
            let live = live(state, child, epoch)?;
            let mut decision = Vec::new();
            if let Some(turn) = state.activations.get(&child).and_then(|a| a.running_turn) {
                push_to(
                    &mut decision,
                    StreamId::Session(child),
                    vec![Event::TurnEnded {
                        turn,
                        stop_reason: SubagentStopReason::Error,
                    }],
                );
            }
            let cleanup_error = if live.settled {
                Some(diagnostic)
            } else {
                let failed = SubagentResult {
                    output: Vec::new(),
                    structured: None,
                    diagnostic: Some(diagnostic),
                    stop_reason: SubagentStopReason::Error,
                };
                for (stream, events) in settle(state, child, live, failed) {
                    push_to(&mut decision, stream, events);
                }
                None
            };
            push_to(
                &mut decision,
                StreamId::Session(child),
                vec![Event::ActivationReleased {
                    epoch,
                    cleanup_error,
                }],
            );
            Ok(decision)
        }
        Command::ReopenRoot { session } => {
            let record = state.sessions.get(&session).ok_or_else(|| {
                SubagentError::ParentUnavailable(format!("unknown root session {session}"))
            })?;
            if record.parent.is_some() {
                return Err(SubagentError::Unauthorized(format!(
                    "{session} is a child session; only a root is held by the host"
                )));
            }
            Ok(Vec::new())
        }
        Command::Abandon {
            child,
            epoch,
            reason,
        } => {
            abandonable_live(state, child, epoch)?;
            Ok(single(
                StreamId::Session(child),
                vec![Event::ActivationAbandoned { epoch, reason }],
            ))
        }
        Command::RunStarted { child } => {
            let run = run_in(state, child, &[RunPhase::Requested], "run started twice")?;
            Ok(single(
                StreamId::Session(child),
                vec![Event::RunStarted { run_id: run.run_id }],
            ))
        }
        Command::RunSettled { child, result } => {
            let run = run_in(
                state,
                child,
                &[RunPhase::Started],
                "only a started, unsettled run settles",
            )?;
            Ok(settle_run(state, child, run.run_id, run.delivery, result))
        }
        Command::RunDisposed {
            child,
            cleanup_error,
        } => {
            let run = run_in(
                state,
                child,
                &[RunPhase::Requested, RunPhase::Started, RunPhase::Settled],
                "run already disposed",
            )?;
            let mut decision = if run.phase == RunPhase::Settled {
                Vec::new()
            } else {
                let aborted = SubagentResult::failed(
                    SubagentStopReason::Aborted,
                    Vec::new(),
                    "disposed before it settled",
                );
                settle_run(state, child, run.run_id, run.delivery, aborted)
            };
            push_to(
                &mut decision,
                StreamId::Session(child),
                vec![Event::RunDisposed {
                    run_id: run.run_id,
                    cleanup_error,
                }],
            );
            Ok(decision)
        }
        Command::RunStartFailed { child, diagnostic } => {
            let run = run_in(
                state,
                child,
                &[RunPhase::Requested],
                "only a requested run fails to start",
            )?;
            Ok(single(
                StreamId::Session(child),
                vec![Event::RunStartFailed {
                    run_id: run.run_id,
                    diagnostic,
                }],
            ))
        }
        Command::Recover => Ok(recover(state)),
        Command::Steer { session } => {
            let turn = running_turn(state, session)?;
            let ids = state.pending_messages(session);
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            Ok(single(
                StreamId::Session(session),
                vec![Event::MessagesClaimed { ids, turn }],
            ))
        }
        Command::SendMessage {
            sender,
            target,
            message_id,
            content,
            delivery,
        } => send_message(state, sender, target, message_id, content, delivery),
        Command::Interrupt { target, authority } => interrupt(state, target, &authority),
        Command::CloseAdmission { parent } => {
            if state.admission_closed.contains(&parent) {
                return Ok(Vec::new());
            }
            Ok(single(
                StreamId::Runtime,
                vec![Event::AdmissionClosed { parent }],
            ))
        }
        Command::ReopenAdmission { parent } => {
            if !state.admission_closed.contains(&parent) {
                return Ok(Vec::new());
            }
            Ok(single(
                StreamId::Runtime,
                vec![Event::AdmissionReopened { parent }],
            ))
        }
    }
}

fn push_to(decision: &mut Decision, stream: StreamId, events: Vec<Event>) {
    match decision
        .iter_mut()
        .find(|(existing, _)| *existing == stream)
    {
        Some((_, existing)) => existing.extend(events),
        None => decision.push((stream, events)),
    }
}

// ---- preconditions ----------------------------------------------------------
//
// One function per rule, shared by `decide` and by `admissible::admit`, which
// checks a recorded history against the same rules.

fn out_of_order(session: SessionId, what: &str) -> SubagentError {
    SubagentError::BadRequest(format!("{session}: {what}"))
}

/// `session` is not in use yet (a root's creation).
pub(crate) fn new_session(state: &Projections, session: SessionId) -> Result<(), SubagentError> {
    if state.sessions.contains_key(&session) {
        return Err(SubagentError::BadRequest(format!(
            "session {session} already exists"
        )));
    }
    Ok(())
}

/// A provider registration is well-formed and its name is free.
pub(crate) fn check_registration(
    state: &Projections,
    registration: &Event,
) -> Result<(), SubagentError> {
    let Event::ProviderRegistered {
        name,
        capabilities,
        route_defaults,
        ..
    } = registration
    else {
        return Err(SubagentError::BadRequest(
            "not a provider registration".into(),
        ));
    };
    if name.is_empty() {
        return Err(SubagentError::BadRequest("provider name is empty".into()));
    }
    if let Some(route) = route_defaults {
        if !capabilities.agent_options {
            return Err(SubagentError::BadRequest(format!(
                "provider {name} has agentRouteDefaults but no agentOptions capability"
            )));
        }
        AgentOptions {
            provider: Some(route.provider.clone()),
            model: Some(route.model.clone()),
            ..AgentOptions::default()
        }
        .validate()?;
    }
    if state
        .providers
        .iter()
        .any(|provider| provider.name == *name)
    {
        return Err(SubagentError::DuplicateProvider(name.clone()));
    }
    Ok(())
}

/// The registered provider called `name`.
pub(crate) fn registered<'a>(
    state: &'a Projections,
    name: &str,
) -> Result<&'a ProviderRecord, SubagentError> {
    state
        .providers
        .iter()
        .find(|provider| provider.name == name)
        .ok_or_else(|| SubagentError::UnknownProvider(name.to_owned()))
}

/// The parent of a start: known, with admission open at it and every
/// ancestor.
pub(crate) fn start_parent(
    state: &Projections,
    parent: SessionId,
) -> Result<&SessionRecord, SubagentError> {
    let record = state
        .sessions
        .get(&parent)
        .ok_or_else(|| SubagentError::ParentUnavailable(format!("unknown parent {parent}")))?;
    if let Some(closed) = admission_closed_above(state, parent) {
        return Err(SubagentError::AdmissionClosed(closed.to_string()));
    }
    Ok(record)
}

/// The mode and externality of a child of `provider`.
pub(crate) fn child_mode(provider: &ProviderRecord) -> (SessionMode, bool) {
    if provider.continuable {
        (SessionMode::Continuable, false)
    } else {
        (SessionMode::OneShot, true)
    }
}

/// The depth of a child of `parent`, within `max_depth`.
pub(crate) fn child_depth(
    parent: &SessionRecord,
    max_depth: Option<u64>,
) -> Result<u64, SubagentError> {
    let depth = parent.depth.checked_add(1).ok_or_else(|| {
        SubagentError::BadRequest(format!("parent {} is at the deepest depth", parent.id))
    })?;
    if let Some(max_depth) = max_depth {
        if max_depth > MAX_SAFE_INTEGER {
            return Err(SubagentError::InvalidDepth(max_depth.to_string()));
        }
        if depth > max_depth {
            return Err(SubagentError::DepthExceeded { depth, max_depth });
        }
    }
    Ok(depth)
}

/// `child` names no session and no catalog.
pub(crate) fn unused_child_id(state: &Projections, child: SessionId) -> Result<(), SubagentError> {
    if state.sessions.contains_key(&child) || state.catalogs.contains_key(&child) {
        return Err(SubagentError::BadRequest(format!(
            "child id {child} is already in use"
        )));
    }
    Ok(())
}

/// A catalog label is not empty.
pub(crate) fn nonempty_label(label: &str) -> Result<(), SubagentError> {
    if label.is_empty() {
        return Err(SubagentError::BadRequest("label is empty".into()));
    }
    Ok(())
}

/// The live activation of `child` at `epoch`.
pub(crate) fn live(
    state: &Projections,
    child: SessionId,
    epoch: u64,
) -> Result<&LiveActivation, SubagentError> {
    state
        .activations
        .get(&child)
        .and_then(|activation| activation.live.as_ref())
        .filter(|live| live.epoch == epoch)
        .ok_or_else(|| out_of_order(child, &format!("activation {epoch} is not live")))
}

fn live_where<'a>(
    state: &'a Projections,
    child: SessionId,
    epoch: u64,
    admits: impl Fn(&LiveActivation) -> bool,
    refusal: &str,
) -> Result<&'a LiveActivation, SubagentError> {
    let live = live(state, child, epoch)?;
    if admits(live) {
        Ok(live)
    } else {
        Err(out_of_order(child, refusal))
    }
}

/// The live activation at `epoch`, not yet prepared.
pub(crate) fn requested_live(
    state: &Projections,
    child: SessionId,
    epoch: u64,
) -> Result<&LiveActivation, SubagentError> {
    live_where(
        state,
        child,
        epoch,
        |live| live.phase == ActivationPhase::Requested,
        "prepared twice",
    )
}

/// The live activation at `epoch`, not yet published.
pub(crate) fn unpublished_live(
    state: &Projections,
    child: SessionId,
    epoch: u64,
) -> Result<&LiveActivation, SubagentError> {
    live_where(
        state,
        child,
        epoch,
        |live| live.phase != ActivationPhase::Published,
        "published twice",
    )
}

/// The live activation at `epoch`, which may still be abandoned: a
/// published one is released instead.
pub(crate) fn abandonable_live(
    state: &Projections,
    child: SessionId,
    epoch: u64,
) -> Result<&LiveActivation, SubagentError> {
    live_where(
        state,
        child,
        epoch,
        |live| live.phase != ActivationPhase::Published,
        "a published activation is released, not abandoned",
    )
}

/// The live activation at `epoch`, with no result yet.
pub(crate) fn unsettled_live(
    state: &Projections,
    child: SessionId,
    epoch: u64,
) -> Result<&LiveActivation, SubagentError> {
    live_where(
        state,
        child,
        epoch,
        |live| !live.settled,
        "a settled result is never overwritten",
    )
}

/// The session's published live activation.
pub(crate) fn published(
    state: &Projections,
    session: SessionId,
) -> Result<&LiveActivation, SubagentError> {
    state
        .activations
        .get(&session)
        .and_then(|activation| activation.live.as_ref())
        .filter(|live| live.phase == ActivationPhase::Published)
        .ok_or_else(|| out_of_order(session, "no published activation"))
}

/// The turn a published, idle activation starts next, and the activation.
pub(crate) fn next_turn(
    state: &Projections,
    session: SessionId,
) -> Result<(u64, &LiveActivation), SubagentError> {
    let activation = published(state, session)?;
    let turns = state.activations.get(&session);
    if turns.and_then(|a| a.running_turn).is_some() {
        return Err(out_of_order(session, "a turn is already running"));
    }
    let turn = turns
        .map_or(0, |a| a.turns)
        .checked_add(1)
        .ok_or_else(|| out_of_order(session, "turn numbers are exhausted"))?;
    Ok((turn, activation))
}

/// The session's running turn.
pub(crate) fn running_turn(state: &Projections, session: SessionId) -> Result<u64, SubagentError> {
    published(state, session)?;
    state
        .activations
        .get(&session)
        .and_then(|activation| activation.running_turn)
        .ok_or_else(|| out_of_order(session, "no turn is running"))
}

/// A transcript entry of the session's running turn; returns the turn.
pub(crate) fn transcript_turn(
    state: &Projections,
    session: SessionId,
    entry: &Event,
) -> Result<u64, SubagentError> {
    let turn = running_turn(state, session)?;
    let entry_turn = match entry {
        Event::AssistantMessage { turn, .. }
        | Event::ToolCalled { turn, .. }
        | Event::ToolReturned { turn, .. } => *turn,
        other => {
            return Err(SubagentError::BadRequest(format!(
                "{} is not a transcript entry",
                other.type_name()
            )))
        }
    };
    if entry_turn != turn {
        return Err(out_of_order(session, "transcript entry names another turn"));
    }
    Ok(turn)
}

/// The external run of `child`, in one of `phases`.
pub(crate) fn run_in<'a>(
    state: &'a Projections,
    child: SessionId,
    phases: &[RunPhase],
    refusal: &str,
) -> Result<&'a RunState, SubagentError> {
    let run = state
        .runs
        .get(&child)
        .ok_or_else(|| out_of_order(child, "no external run"))?;
    if phases.contains(&run.phase) {
        Ok(run)
    } else {
        Err(out_of_order(child, refusal))
    }
}

/// The one-line, status-only account of how a child ended. Never the child's
/// words: a settlement notice is the runtime speaking.
#[must_use]
pub fn settlement_summary(label: &str, result: &SubagentResult) -> String {
    format!("subagent {label:?} finished: {}", result.stop_reason)
}

fn settle(
    state: &Projections,
    child: SessionId,
    live: &LiveActivation,
    result: SubagentResult,
) -> Decision {
    let mut decision = Vec::new();
    let notice = (live.delivery == Delivery::Parent)
        .then(|| state.sessions.get(&child))
        .flatten()
        .and_then(|record| record.parent.map(|parent| (parent, record.label.clone())));
    let summary = notice
        .as_ref()
        .map(|(_, label)| settlement_summary(label, &result));
    decision.push((
        StreamId::Session(child),
        vec![Event::ActivationSettled {
            epoch: live.epoch,
            result,
        }],
    ));
    if let (Some((parent, _)), Some(summary)) = (notice, summary) {
        decision.push((
            StreamId::Session(parent),
            vec![Event::MessageAccepted {
                message_id: settlement_notice_id(child, live.epoch),
                source: MessageSource::SubagentSettled {
                    summary: summary.clone(),
                    sender_session_id: child,
                },
                delivery: MessageDelivery::Queue,
                content: vec![ContentBlock::text(summary)],
            }],
        ));
    }
    decision
}

/// The external report's content: final text, structured result, diagnostic
/// and status.
fn report_content(result: &SubagentResult) -> Vec<ContentBlock> {
    let mut content = result.output.clone();
    if let Some(structured) = &result.structured {
        content.push(ContentBlock::text(format!(
            "structured result: {structured}"
        )));
    }
    if let Some(diagnostic) = &result.diagnostic {
        content.push(ContentBlock::text(format!("diagnostic: {diagnostic}")));
    }
    content.push(ContentBlock::text(format!(
        "status: {}",
        result.stop_reason
    )));
    content
}

fn settle_run(
    state: &Projections,
    child: SessionId,
    run_id: SubagentRunId,
    delivery: Delivery,
    result: SubagentResult,
) -> Decision {
    let report = (delivery == Delivery::Parent)
        .then(|| state.sessions.get(&child).and_then(|record| record.parent))
        .flatten()
        .map(|parent| (parent, report_content(&result)));
    let mut decision = vec![(
        StreamId::Session(child),
        vec![Event::RunSettled { run_id, result }],
    )];
    if let Some((parent, content)) = report {
        decision.push((
            StreamId::Session(parent),
            vec![Event::MessageAccepted {
                message_id: MessageId::from_uuid(*run_id.as_uuid()),
                source: MessageSource::SubagentReport {
                    sender_session_id: child,
                },
                delivery: MessageDelivery::Queue,
                content,
            }],
        ));
    }
    decision
}

/// The deterministic id of the settlement notice of `child`'s `epoch`, so a
/// retried decision dedupes instead of notifying twice.
#[must_use]
pub fn settlement_notice_id(child: SessionId, epoch: u64) -> MessageId {
    MessageId::from_uuid(uuid::Uuid::from_u128(
        child.as_uuid().as_u128() ^ u128::from(epoch).rotate_left(64) ^ 0x5e77_1ed0,
    ))
}

fn start_child(state: &Projections, start: StartChild) -> Result<Decision, SubagentError> {
    let parent = start_parent(state, start.parent)?;
    let provider = registered(state, &start.provider)?;
    provider
        .capabilities
        .check(&provider.name, &start.options)?;
    if let Some(schema) = &start.options.output_schema {
        subagent_core::schema::assert_object_json_schema(schema)?;
    }
    if let Some(persona) = &start.options.persona {
        subagent_core::persona::validate(persona, &start.settings.persona_variables)?;
    }
    if let Some(filter) = &start.options.tool_filter {
        filter.check_names(&start.settings.tools)?;
    }
    if let Some(requested) = &start.options.agent_options {
        requested.validate()?;
    }
    // Local children inherit the parent's options; an external provider
    // owns its runtime defaults. Route defaults sit between.
    let agent_options = effective_agent_options(
        start.options.agent_options.as_ref(),
        provider.route_defaults.as_ref(),
        provider
            .continuable
            .then_some(parent.agent_options.as_ref())
            .flatten(),
    );
    if let Some(requested) = &start.options.agent_options {
        start
            .settings
            .model_selection
            .check(requested, &agent_options)?;
    }
    let depth = child_depth(parent, start.options.max_depth)?;
    unused_child_id(state, start.child)?;
    nonempty_label(&start.label)?;
    let (mode, external) = child_mode(provider);
    let descriptor = SubagentDescriptor {
        version: subagent_core::DESCRIPTOR_VERSION,
        provider: provider.name.clone(),
        mode,
        inherits_parent_context: provider.inherits_parent_context,
        agent_options: (agent_options != AgentOptions::default()).then_some(agent_options),
        tool_filter: start.options.tool_filter.clone(),
        persona: start.options.persona.clone(),
        max_depth: start.options.max_depth,
    };
    let created = Event::SessionCreated {
        session: start.child,
        parent: Some(start.parent),
        depth,
        label: start.label.clone(),
        provider: Some(provider.name.clone()),
        mode,
        external,
        descriptor: serde_json::to_value(&descriptor).unwrap_or_else(|_| json!(null)),
    };
    let mut child_events = vec![created];
    if external {
        child_events.push(Event::RunRequested {
            run_id: start.run_id,
            provider: provider.name.clone(),
            delivery: start.delivery,
        });
    } else {
        child_events.push(Event::ActivationRequested {
            epoch: 1,
            delivery: start.delivery,
            output_schema: start.options.output_schema.clone(),
        });
    }
    Ok(vec![
        (
            StreamId::Session(start.parent),
            vec![Event::ChildCataloged {
                child: start.child,
                label: start.label,
                provider: provider.name.clone(),
                mode,
                external,
            }],
        ),
        (StreamId::Session(start.child), child_events),
    ])
}

/// Whether admission is closed below `session` or any of its ancestors.
pub(crate) fn admission_closed_above(state: &Projections, session: SessionId) -> Option<SessionId> {
    let mut current = state.sessions.get(&session);
    while let Some(record) = current {
        if state.admission_closed.contains(&record.id) {
            return Some(record.id);
        }
        current = record.parent.and_then(|parent| state.sessions.get(&parent));
    }
    None
}

/// How an accepted agent message travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Route {
    /// The target is the sender's direct child (else its direct parent).
    pub(crate) to_child: bool,
    /// The epoch a cold resume of the target requests, when it has no live
    /// activation.
    pub(crate) resume_epoch: Option<u64>,
}

/// Whether `sender` may message `target` now, and how the message travels.
pub(crate) fn route_message(
    state: &Projections,
    sender: SessionId,
    target: SessionId,
) -> Result<Route, SubagentError> {
    let sender_record = state
        .sessions
        .get(&sender)
        .ok_or_else(|| SubagentError::Unauthorized(format!("unknown sender {sender}")))?;
    let target_record = state
        .sessions
        .get(&target)
        .ok_or_else(|| SubagentError::Unauthorized(format!("unknown target {target}")))?;
    let to_child = target_record.parent == Some(sender);
    let to_parent = sender_record.parent == Some(target);
    if !to_child && !to_parent {
        return Err(SubagentError::Unauthorized(format!(
            "{sender} and {target} are not adjacent"
        )));
    }
    if target_record.external {
        return Err(SubagentError::NotResumable(format!(
            "{target} is an external execution and accepts no follow-ups"
        )));
    }
    if !target_record.is_resumable() {
        return Err(SubagentError::NotResumable(format!(
            "{target} cannot be interpreted by this version"
        )));
    }
    let activation = state.activations.get(&target);
    let live = activation.and_then(|a| a.live.as_ref());
    if live.is_some_and(LiveActivation::captures_structured_output) {
        return Err(SubagentError::DeliveryUnavailable(format!(
            "{target} is capturing structured output; its input is closed"
        )));
    }
    // A child with no live activation is cold-resumed; a root's inbox is read
    // by its host.
    let resume_epoch = if to_child && live.is_none() {
        if let Some(closed) = admission_closed_above(state, sender) {
            return Err(SubagentError::AdmissionClosed(closed.to_string()));
        }
        let epoch = activation
            .map_or(0, |a| a.epoch)
            .checked_add(1)
            .ok_or_else(|| out_of_order(target, "activation epochs are exhausted"))?;
        Some(epoch)
    } else {
        None
    };
    Ok(Route {
        to_child,
        resume_epoch,
    })
}

fn send_message(
    state: &Projections,
    sender: SessionId,
    target: SessionId,
    message_id: MessageId,
    content: Vec<ContentBlock>,
    delivery: MessageDelivery,
) -> Result<Decision, SubagentError> {
    let route = route_message(state, sender, target)?;
    let mut events = vec![Event::MessageAccepted {
        message_id,
        source: MessageSource::AgentMessage {
            sender_session_id: sender,
        },
        delivery,
        content,
    }];
    if let Some(epoch) = route.resume_epoch {
        events.push(Event::ActivationRequested {
            epoch,
            delivery: Delivery::Parent,
            output_schema: None,
        });
    }
    Ok(single(StreamId::Session(target), events))
}

/// Whether `authority` may interrupt `target`: its direct parent as a
/// user, or a live ancestor.
pub(crate) fn interrupt_authorized(
    state: &Projections,
    target: &SessionRecord,
    authority: &subagent_core::InterruptAuthority,
) -> bool {
    match authority {
        subagent_core::InterruptAuthority::User { parent_session_id } => {
            target.parent == Some(*parent_session_id)
        }
        subagent_core::InterruptAuthority::Ancestor { agent_session_id } => {
            let mut ancestor = target.parent;
            while let Some(id) = ancestor {
                if id == *agent_session_id {
                    return true;
                }
                ancestor = state.sessions.get(&id).and_then(|parent| parent.parent);
            }
            false
        }
    }
}

/// Whether `target` has work an interrupt stops: a running turn of a live
/// activation, or a started external run.
pub(crate) fn runs_live_work(state: &Projections, target: SessionId) -> bool {
    state
        .activations
        .get(&target)
        .is_some_and(|a| a.live.is_some() && a.running_turn.is_some())
        || state
            .runs
            .get(&target)
            .is_some_and(|run| run.phase == RunPhase::Started)
}

fn interrupt(
    state: &Projections,
    target: SessionId,
    authority: &subagent_core::InterruptAuthority,
) -> Result<Decision, SubagentError> {
    let Some(record) = state.sessions.get(&target) else {
        return Ok(Vec::new());
    };
    if !interrupt_authorized(state, record, authority) {
        return Err(SubagentError::Unauthorized(format!(
            "the authority does not own {target}"
        )));
    }
    if !runs_live_work(state, target) {
        return Ok(Vec::new());
    }
    Ok(single(
        StreamId::Session(target),
        vec![Event::InterruptRequested {
            target,
            authority: authority.clone(),
        }],
    ))
}

fn recover(state: &Projections) -> Decision {
    let mut decision = Vec::new();
    let mut abandoned = 0;
    let mut failed = 0;
    for (child, activation) in state.live_activations() {
        abandoned += 1;
        let mut events = Vec::new();
        if let Some(turn) = state.activations.get(&child).and_then(|a| a.running_turn) {
            events.push(Event::TurnEnded {
                turn,
                stop_reason: SubagentStopReason::Aborted,
            });
        }
        events.push(Event::ActivationAbandoned {
            epoch: activation.epoch,
            reason: AbandonReason::HostRestart,
        });
        push_to(&mut decision, StreamId::Session(child), events);
    }
    let mut runs: Vec<_> = state
        .runs
        .iter()
        .filter(|(_, run)| run.is_live())
        .map(|(id, run)| (*id, run))
        .collect();
    runs.sort_by_key(|(id, _)| *id);
    for (child, run) in runs {
        failed += 1;
        if run.phase != RunPhase::Settled {
            let result = SubagentResult::failed(
                SubagentStopReason::Error,
                Vec::new(),
                "the host restarted while the run was live",
            );
            for (stream, events) in settle_run(state, child, run.run_id, run.delivery, result) {
                push_to(&mut decision, stream, events);
            }
        }
        push_to(
            &mut decision,
            StreamId::Session(child),
            vec![Event::RunDisposed {
                run_id: run.run_id,
                cleanup_error: Some(Diagnostic::new("backend handle lost in a host restart")),
            }],
        );
    }
    // Provider objects do not survive the host: their registrations end with
    // it, and the host registers them again.
    let removed: Vec<Event> = state
        .providers
        .iter()
        .map(|provider| Event::ProviderRemoved {
            name: provider.name.clone(),
        })
        .collect();
    if !removed.is_empty() {
        push_to(&mut decision, StreamId::Runtime, removed);
    }
    // A cutoff lasts until its parent leaves the registry; the previous
    // host's registry is gone, so every cutoff ends (a reopened root would
    // otherwise stay closed for good).
    let reopened: Vec<Event> = state
        .admission_closed
        .iter()
        .map(|parent| Event::AdmissionReopened { parent: *parent })
        .collect();
    if !reopened.is_empty() {
        push_to(&mut decision, StreamId::Runtime, reopened);
    }
    if abandoned + failed > 0 {
        push_to(
            &mut decision,
            StreamId::Runtime,
            vec![Event::HostRecovered {
                previous_head: state.position,
                abandoned_activations: abandoned,
                failed_runs: failed,
            }],
        );
    }
    decision
}
