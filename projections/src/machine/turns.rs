//! Turns of a published activation: a turn begins by claiming every
//! pending message, records its transcript, has its tool calls answered
//! (refused down the lineage, or let through), claims steering at step
//! boundaries, and ends.

use serde_json::Value;
use subagent_core::{
    select_output, ContentBlock, Diagnostic, Event, SessionId, StreamId, SubagentError,
    SubagentResult, SubagentStopReason, ToolRestriction,
};

use crate::state::Projections;

use crate::activation::LiveActivation;

use super::command::{push_to, single, Decision, TurnOutput};
use super::guards::{next_turn, published, running_turn, transcript_turn};
use super::lifecycle::settle;

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

/// Why a call is answered when its turn ends first.
pub(super) const ENDED_FIRST: &str = "abandoned: the turn ended before this call returned";

/// The events that end `session`'s running turn `turn` with `stop_reason`:
/// an error result, saying `why`, for each of its calls that has not
/// returned (so no call is left hanging), then `TurnEnded`.
pub(super) fn turn_ending(
    state: &Projections,
    session: SessionId,
    turn: u64,
    stop_reason: SubagentStopReason,
    why: &str,
) -> Vec<Event> {
    let open = state
        .activations
        .get(&session)
        .map_or(&[][..], |activation| activation.open_calls.as_slice());
    let mut events: Vec<Event> = open
        .iter()
        .map(|call_id| Event::ToolReturned {
            turn,
            call_id: call_id.clone(),
            output: vec![ContentBlock::text(why)],
            is_error: true,
            refused: false,
        })
        .collect();
    events.push(Event::TurnEnded { turn, stop_reason });
    events
}

/// Ends the running turn; on the epoch's first turn end, settles the epoch
/// with the result built from `output` ([`turn_result`]).
pub(super) fn end_turn(
    state: &Projections,
    session: SessionId,
    stop_reason: SubagentStopReason,
    output: TurnOutput,
) -> Result<Decision, SubagentError> {
    let turn = running_turn(state, session)?;
    let live = published(state, session)?;
    let mut decision = single(
        StreamId::Session(session),
        turn_ending(state, session, turn, stop_reason.clone(), ENDED_FIRST),
    );
    if !live.settled {
        let result = turn_result(live, stop_reason, output);
        for (stream, events) in settle(state, session, live, result) {
            push_to(&mut decision, stream, events);
        }
    }
    Ok(decision)
}

/// The result a first turn settles its epoch with: the last non-empty
/// assistant message, the agent's diagnostic, and, when the activation asked
/// for an output schema, the capture it validates (a completed turn without
/// a valid one settles `error`, naming why).
fn turn_result(
    live: &LiveActivation,
    stop_reason: SubagentStopReason,
    output: TurnOutput,
) -> SubagentResult {
    let mut result = SubagentResult {
        output: select_output(output.assistant.iter().map(Vec::as_slice), ""),
        structured: None,
        diagnostic: output.diagnostic,
        stop_reason,
    };
    if let Some(schema) = &live.output_schema {
        match subagent_core::schema::validate_capture(schema, output.structured.as_ref()) {
            Ok(capture) => result.structured = Some(capture),
            Err(reason) if result.stop_reason == SubagentStopReason::Completed => {
                result.stop_reason = SubagentStopReason::Error;
                result.diagnostic = Some(Diagnostic::new(reason));
            }
            Err(_) => {}
        }
    }
    result
}

/// A tool call of the running turn, and the runtime's answer to it.
/// (`name`, `input` and `known` as in [`super::Command::CallTool`].)
pub(super) fn call_tool(
    state: &Projections,
    session: SessionId,
    turn: u64,
    call_id: String,
    name: String,
    input: Value,
    known: bool,
) -> Result<Decision, SubagentError> {
    let called = Event::ToolCalled {
        turn,
        call_id: call_id.clone(),
        name: name.clone(),
        input,
    };
    transcript_turn(state, session, &called)?;
    let refusal = if !ToolRestriction::permits_in(state.tool_lineage(session), &name) {
        Some((format!("tool {name} is not available to this agent"), true))
    } else if !known {
        Some((format!("unknown tool {name}"), false))
    } else {
        None
    };
    let mut events = vec![called];
    if let Some((text, refused)) = refusal {
        events.push(Event::ToolReturned {
            turn,
            call_id,
            output: vec![ContentBlock::text(text)],
            is_error: true,
            refused,
        });
    }
    Ok(single(StreamId::Session(session), events))
}
