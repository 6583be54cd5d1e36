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
    nonempty_label, registered, requested_live, run_in, running_turn, start_parent,
    transcript_turn, unpublished_live, unsettled_live, unused_child_id,
};
pub(crate) use messaging::{interrupt_authorized, route_message, route_prompt, runs_live_work};

use subagent_core::SubagentError;

use crate::state::Projections;

/// Decides what `command` records, given `state`: one line per command,
/// each handing off to its concern.
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
        } => registry::open_root(state, session, label, agent_options),
        Command::ReopenRoot { session } => registry::reopen_root(state, session),
        Command::RegisterProvider { registration } => {
            registry::register_provider(state, registration)
        }
        Command::RemoveProvider { name } => registry::remove_provider(state, name),
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
        Command::CloseAdmission { parent } => Ok(messaging::close_admission(state, parent)),
        Command::ReopenAdmission { parent } => Ok(messaging::reopen_admission(state, parent)),
        Command::Recover => Ok(recovery::recover(state)),
    }
}
