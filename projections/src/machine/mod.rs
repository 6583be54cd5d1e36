//! The delegation state machine: [`decide`] turns a [`Command`] into the
//! events that record it, or a typed rejection, by reading the current
//! [`Projections`]. Pure: no IO, no clock, no randomness (ids come in the
//! command). The runtime appends the events atomically and folds them back
//! with [`Projections::apply`], and drivers report outcomes as new commands.
//!
//! `decide` reads the same fold the queries read, so there is one state, and
//! the property tests of that fold cover the state decisions are made on.
//!
//! Layout, one file per concern:
//! - [`command`]: the [`Command`] enum (imperative names, typed payloads)
//!   and [`Decision`];
//! - `guards`: the preconditions, one function per rule, shared with
//!   [`crate::admissible`];
//! - `registry`: roots and providers;
//! - `lifecycle`: a continuable child's activation, from start to release;
//! - `turns`: turns, transcript, tool calls and steering;
//! - `runs`: external one-shot runs;
//! - `messaging`: messages, interrupts and admission;
//! - `recovery`: settling what a dead host left live.

pub mod command;
mod guards;
mod lifecycle;
mod messaging;
mod recovery;
mod registry;
mod runs;
mod turns;

pub use command::{Command, Decision, StartChild, TurnOutput};
pub use lifecycle::{settlement_notice_id, settlement_summary};
pub use messaging::{cold_resumes, prompt_receipt};

pub(crate) use guards::{
    abandonable_live, check_registration, child_depth, child_mode, live, new_session, next_turn,
    registered, requested_live, requesting_turn, run_in, running_turn, start_parent,
    transcript_turn, unpublished_live, unsettled_live, unused_child_id, valid_label,
};
pub(crate) use messaging::{interrupt_authorized, route_message, route_prompt, runs_live_work};

use subagent_core::{Event, HostId, SessionId, StreamId, SubagentError};

use crate::ownership::{elsewhere, home_stream};
use crate::state::Projections;

/// Decides what `command` records for a single-writer runtime, given
/// `state`: [`decide_as`] with no host.
///
/// # Errors
/// A typed [`SubagentError`] with its stable code; a rejected command records
/// nothing.
pub fn decide(state: &Projections, command: Command) -> Result<Decision, SubagentError> {
    decide_as(state, None, command)
}

/// Decides what `command` records when `acting` decides it: a host
/// incarnation of a shared log, or `None` for a single-writer runtime.
/// One line per command, each handing off to its concern; then every tree
/// the decision touches (the session streams it appends to, the parents
/// whose admission it closes or reopens) must be one `acting` holds,
/// counting a claim the decision itself records.
///
/// # Errors
/// A typed [`SubagentError`] with its stable code; a rejected command records
/// nothing. `subagent/tree-elsewhere` for a tree `acting` does not hold.
pub fn decide_as(
    state: &Projections,
    acting: Option<HostId>,
    command: Command,
) -> Result<Decision, SubagentError> {
    let decision = dispatch(state, acting, command)?;
    held_by(state, acting, &decision)?;
    Ok(decision)
}

/// Checks that every tree `decision` touches is one `acting` holds: the
/// tree's last `TreeAcquired` names `acting` (or, for a single-writer
/// runtime, no host took it), counting a claim the decision itself
/// records. A decision touches the trees of the session streams it appends
/// to (a new session is in its parent's tree, a new root in its own) and
/// of the parents whose admission it closes or reopens. On a single-writer
/// log (no owners) with no acting host there is nothing to check.
///
/// # Errors
/// `subagent/tree-elsewhere` naming the first tree held elsewhere.
fn held_by(
    state: &Projections,
    acting: Option<HostId>,
    decision: &Decision,
) -> Result<(), SubagentError> {
    if acting.is_none() && state.owners.is_empty() {
        return Ok(());
    }
    for root in touched_trees(state, decision) {
        let claimed = decision.iter().any(|(stream, events)| {
            *stream == StreamId::Session(root)
                && events.iter().any(|event| {
                    matches!(event, Event::TreeAcquired { host, .. } if Some(*host) == acting)
                })
        });
        let owner = state.owners.get(&root);
        if !claimed && owner.map(|owner| owner.host) != acting {
            return Err(elsewhere(root, owner));
        }
    }
    Ok(())
}

/// The roots of the trees `decision` touches (see [`held_by`]), in order
/// of first touch, each once.
fn touched_trees(state: &Projections, decision: &Decision) -> Vec<SessionId> {
    let mut roots: Vec<SessionId> = Vec::new();
    for (stream, events) in decision {
        let touched: Vec<Option<SessionId>> = match *stream {
            StreamId::Session(session) => vec![tree_of(state, session, events)],
            StreamId::Runtime | StreamId::Host(_) => events
                .iter()
                .filter_map(|event| match event {
                    Event::AdmissionClosed { parent } | Event::AdmissionReopened { parent } => {
                        Some(state.root_of(*parent))
                    }
                    _ => None,
                })
                .collect(),
        };
        // An unknown session with no creation: the state machine never
        // decides that, and the store's checks refuse it.
        for root in touched.into_iter().flatten() {
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
    }
    roots
}

/// The fence each tree of `decision` is appended under: the fencing token
/// of its holder, or of the claim the decision itself records (a new root,
/// a take). A tree without either (a single-writer log's) presents none.
#[must_use]
pub fn tree_fences(state: &Projections, decision: &Decision) -> Vec<(SessionId, u64)> {
    let mut fences: Vec<(SessionId, u64)> = touched_trees(state, decision)
        .into_iter()
        .filter_map(|root| {
            let claimed = decision.iter().find_map(|(stream, events)| {
                (*stream == StreamId::Session(root))
                    .then(|| {
                        events.iter().find_map(|event| match event {
                            Event::TreeAcquired { fence, .. } => Some(*fence),
                            _ => None,
                        })
                    })
                    .flatten()
            });
            claimed
                .or_else(|| state.owners.get(&root).map(|owner| owner.fence))
                .map(|fence| (root, fence))
        })
        .collect();
    fences.sort_unstable();
    fences
}

/// The root of the tree `session` is in: a known session's, or for one
/// `events` create, its parent's (itself for a root).
fn tree_of(state: &Projections, session: SessionId, events: &[Event]) -> Option<SessionId> {
    if let Some(root) = state.root_of(session) {
        return Some(root);
    }
    events.iter().find_map(|event| match event {
        Event::SessionCreated {
            parent: Some(parent),
            ..
        } => state.root_of(*parent),
        Event::SessionCreated { parent: None, .. } => Some(session),
        _ => None,
    })
}

fn dispatch(
    state: &Projections,
    acting: Option<HostId>,
    command: Command,
) -> Result<Decision, SubagentError> {
    match command {
        Command::OpenRoot {
            session,
            label,
            agent_options,
            claim,
        } => registry::open_root(state, acting, session, label, agent_options, claim),
        Command::TakeTree { root, claim } => recovery::take_tree(state, acting, root, claim),
        Command::ReopenRoot { session } => registry::reopen_root(state, session),
        Command::RegisterProvider { registration } => {
            registry::register_provider(state, acting, registration)
        }
        Command::RemoveProvider { name } => registry::remove_provider(state, acting, name),
        Command::StartChild(start) => lifecycle::start_child(state, start),
        Command::PrepareActivation {
            child,
            epoch,
            prompt,
            seed,
            seed_source,
        } => lifecycle::prepare(state, child, epoch, prompt, seed, seed_source),
        Command::PublishActivation {
            child,
            epoch,
            run_id,
        } => lifecycle::publish(state, child, epoch, run_id),
        Command::SettleActivation {
            child,
            epoch,
            result,
        } => lifecycle::settle_activation(state, child, epoch, result),
        Command::ReleaseActivation {
            child,
            epoch,
            cleanup_error,
        } => lifecycle::release(state, child, epoch, cleanup_error),
        Command::FailActivation {
            child,
            epoch,
            diagnostic,
        } => lifecycle::fail(state, child, epoch, diagnostic),
        Command::AbandonActivation {
            child,
            epoch,
            reason,
        } => lifecycle::abandon(state, child, epoch, reason),
        Command::BeginTurn { session } => turns::begin_turn(state, session),
        Command::RecordTranscript { session, entry } => {
            turns::record_transcript(state, session, entry)
        }
        Command::CallTool {
            session,
            turn,
            call_id,
            name,
            input,
            known,
        } => turns::call_tool(state, session, turn, call_id, name, input, known),
        Command::ClaimSteering { session } => turns::claim_steering(state, session),
        Command::EndTurn {
            session,
            stop_reason,
            output,
        } => turns::end_turn(state, session, stop_reason, output),
        Command::StartRun { child } => runs::start_run(state, child),
        Command::SettleRun { child, result } => runs::settle_started_run(state, child, result),
        Command::DisposeRun {
            child,
            cleanup_error,
        } => runs::dispose_run(state, child, cleanup_error),
        Command::FailRunStart { child, diagnostic } => {
            runs::fail_run_start(state, child, diagnostic)
        }
        Command::SendMessage {
            sender,
            target,
            message_id,
            content,
            delivery,
        } => messaging::send_message(state, sender, target, message_id, content, delivery),
        Command::Prompt {
            parent,
            child,
            request_id,
            zone,
            message_id,
            content,
            delivery,
        } => messaging::prompt(
            state, parent, child, request_id, zone, message_id, content, delivery,
        ),
        Command::Interrupt { target, authority } => messaging::interrupt(state, target, &authority),
        Command::CloseAdmission { parent } => Ok(messaging::close_admission(
            state,
            home_stream(acting),
            parent,
        )),
        Command::ReopenAdmission { parent } => Ok(messaging::reopen_admission(
            state,
            home_stream(acting),
            parent,
        )),
        Command::Recover if acting.is_some() => Err(SubagentError::BadRequest(
            "a host of a shared log recovers a tree by taking it".into(),
        )),
        Command::Recover => Ok(recovery::recover(state)),
    }
}
