//! The preconditions of the state machine: one function per rule, each
//! returning the typed rejection when it does not hold. `decide` and
//! [`crate::admissible::admit`] (which checks a recorded history against
//! the same rules) share them, so a rule is written once.

use subagent_core::{
    AgentOptions, Event, OutOfOrder, SessionId, SessionMode, SubagentError, ToolCallRef,
    MAX_SAFE_INTEGER,
};

use crate::activation::{ActivationPhase, LiveActivation, RunPhase, RunState};
use crate::sessions::SessionRecord;
use crate::state::{Projections, ProviderRecord};

use super::messaging::admission_closed_above;

/// A command that comes out of order for `session`, for `reason`.
pub(crate) fn out_of_order(session: SessionId, reason: OutOfOrder) -> SubagentError {
    SubagentError::OutOfOrder { session, reason }
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

/// A provider registration is well-formed and its name is free in
/// `registry` (the registering host's).
pub(crate) fn check_registration(
    registry: &[ProviderRecord],
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
    if registry.iter().any(|provider| provider.name == *name) {
        return Err(SubagentError::DuplicateProvider(name.clone()));
    }
    Ok(())
}

/// The provider called `name` in `registry` (a host's, see
/// [`Projections::registry`]).
pub(crate) fn registered<'a>(
    registry: &'a [ProviderRecord],
    name: &str,
) -> Result<&'a ProviderRecord, SubagentError> {
    registry
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
        return Err(SubagentError::AdmissionClosed { below: closed });
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
    let depth = parent
        .depth
        .checked_add(1)
        .ok_or_else(|| out_of_order(parent.id, OutOfOrder::Exhausted("depth")))?;
    if let Some(max_depth) = max_depth {
        if max_depth > MAX_SAFE_INTEGER {
            return Err(SubagentError::InvalidDepth(max_depth.into()));
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

/// A session's label (a root's or a child's catalog label) is not empty and
/// holds no control character: it is shown on terminals and in the console,
/// where a newline or an escape sequence would forge or restyle what an
/// operator reads.
pub(crate) fn valid_label(label: &str) -> Result<(), SubagentError> {
    if label.is_empty() {
        return Err(SubagentError::BadRequest("label is empty".into()));
    }
    if let Some(control) = label.chars().find(|c| c.is_control()) {
        return Err(SubagentError::BadRequest(format!(
            "label holds the control character {}",
            control.escape_unicode()
        )));
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
        .ok_or_else(|| out_of_order(child, OutOfOrder::NotLive { epoch }))
}

/// The live activation at `epoch`, if `admits` it; else `refusal`.
fn live_where(
    state: &Projections,
    child: SessionId,
    epoch: u64,
    admits: impl Fn(&LiveActivation) -> bool,
    refusal: OutOfOrder,
) -> Result<&LiveActivation, SubagentError> {
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
        OutOfOrder::PreparedTwice,
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
        OutOfOrder::PublishedTwice,
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
        OutOfOrder::AbandonPublished,
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
        OutOfOrder::AlreadySettled,
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
        .ok_or_else(|| out_of_order(session, OutOfOrder::NotPublished))
}

/// The turn a published, idle activation starts next, and the activation.
pub(crate) fn next_turn(
    state: &Projections,
    session: SessionId,
) -> Result<(u64, &LiveActivation), SubagentError> {
    let activation = published(state, session)?;
    let turns = state.activations.get(&session);
    if turns.and_then(|a| a.running_turn).is_some() {
        return Err(out_of_order(session, OutOfOrder::TurnRunning));
    }
    let turn = turns
        .map_or(0, |a| a.turns)
        .checked_add(1)
        .ok_or_else(|| out_of_order(session, OutOfOrder::Exhausted("turn")))?;
    Ok((turn, activation))
}

/// The session's running turn.
pub(crate) fn running_turn(state: &Projections, session: SessionId) -> Result<u64, SubagentError> {
    published(state, session)?;
    state
        .activations
        .get(&session)
        .and_then(|activation| activation.running_turn)
        .ok_or_else(|| out_of_order(session, OutOfOrder::NoTurnRunning))
}

/// A start asked for by `call`, a delegation tool call of `parent`'s: the
/// call is an open call of the turn `parent` is running (its `ToolCalled`
/// is recorded before the tool runs, its `ToolReturned` after the start).
/// A root, which runs no turns, asks for none.
pub(crate) fn requesting_turn(
    state: &Projections,
    parent: SessionId,
    call: &ToolCallRef,
) -> Result<(), SubagentError> {
    let running = running_turn(state, parent)?;
    if call.turn != running {
        return Err(out_of_order(
            parent,
            OutOfOrder::OtherTurn {
                entry: call.turn,
                running,
            },
        ));
    }
    if call.call_id.is_empty() {
        return Err(SubagentError::BadRequest(
            "a start's requesting call has an empty id".into(),
        ));
    }
    let open = state
        .activations
        .get(&parent)
        .is_some_and(|activation| activation.open_calls.contains(&call.call_id));
    if !open {
        return Err(out_of_order(
            parent,
            OutOfOrder::CallNotOpen {
                call_id: call.call_id.clone(),
            },
        ));
    }
    Ok(())
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
        | Event::ToolReturned { turn, .. }
        | Event::AgentReported { turn, .. } => *turn,
        other => {
            return Err(SubagentError::BadRequest(format!(
                "{} is not a transcript entry",
                other.type_name()
            )))
        }
    };
    if entry_turn != turn {
        return Err(out_of_order(
            session,
            OutOfOrder::OtherTurn {
                entry: entry_turn,
                running: turn,
            },
        ));
    }
    Ok(turn)
}

/// The external run of `child`, in one of `phases` (`accepted` says
/// which, for the rejection).
pub(crate) fn run_in<'a>(
    state: &'a Projections,
    child: SessionId,
    phases: &[RunPhase],
    accepted: &'static str,
) -> Result<&'a RunState, SubagentError> {
    let run = state
        .runs
        .get(&child)
        .ok_or_else(|| out_of_order(child, OutOfOrder::NoRun))?;
    if phases.contains(&run.phase) {
        return Ok(run);
    }
    let phase = match run.phase {
        RunPhase::Requested => "requested",
        RunPhase::Started => "started",
        RunPhase::Settled => "settled",
        RunPhase::Disposed => "disposed",
        RunPhase::StartFailed => "refused at start",
    };
    Err(out_of_order(
        child,
        OutOfOrder::RunPhase { phase, accepted },
    ))
}
