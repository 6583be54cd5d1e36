//! Turns of a published activation: a turn begins by claiming every
//! pending message, records its transcript, claims steering at step
//! boundaries, and ends.

use subagent_core::{Event, SessionId, StreamId, SubagentError, SubagentStopReason};

use crate::state::Projections;

use super::command::{single, Decision};
use super::guards::{next_turn, running_turn, transcript_turn};

/// Begins the next turn, claiming every pending message in FIFO order.
pub(super) fn begin_turn(
    state: &Projections,
    session: SessionId,
) -> Result<Decision, SubagentError> {
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

/// Records a transcript entry of the running turn.
pub(super) fn record_transcript(
    state: &Projections,
    session: SessionId,
    entry: Event,
) -> Result<Decision, SubagentError> {
    transcript_turn(state, session, &entry)?;
    Ok(single(StreamId::Session(session), vec![entry]))
}

/// The running turn claims every pending message (nothing when none is).
pub(super) fn claim_steering(
    state: &Projections,
    session: SessionId,
) -> Result<Decision, SubagentError> {
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

/// Ends the running turn.
pub(super) fn end_turn(
    state: &Projections,
    session: SessionId,
    stop_reason: SubagentStopReason,
) -> Result<Decision, SubagentError> {
    let turn = running_turn(state, session)?;
    Ok(single(
        StreamId::Session(session),
        vec![Event::TurnEnded { turn, stop_reason }],
    ))
}
