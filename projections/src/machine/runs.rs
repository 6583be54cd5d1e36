//! External one-shot runs: started, settled (with the report a
//! parent-delivered result sends), disposed, or refused at start.

use subagent_core::{
    ContentBlock, Delivery, Diagnostic, Event, MessageDelivery, MessageId, MessageSource,
    SessionId, StreamId, SubagentError, SubagentResult, SubagentRunId, SubagentStopReason,
};

use crate::activation::RunPhase;
use crate::state::Projections;

use super::command::{push_to, single, Decision};
use super::guards::run_in;

/// Records that the provider published a requested run.
pub(super) fn start_run(state: &Projections, child: SessionId) -> Result<Decision, SubagentError> {
    let run = run_in(
        state,
        child,
        &[RunPhase::Requested],
        "only a requested run starts",
    )?;
    Ok(single(
        StreamId::Session(child),
        vec![Event::RunStarted { run_id: run.run_id }],
    ))
}

/// Records a started run's result (and its report).
pub(super) fn settle_started_run(
    state: &Projections,
    child: SessionId,
    result: SubagentResult,
) -> Result<Decision, SubagentError> {
    let run = run_in(
        state,
        child,
        &[RunPhase::Started],
        "only a started, unsettled run settles",
    )?;
    Ok(settle_run(state, child, run.run_id, run.delivery, result))
}

/// Disposes a run's handle, settling it `aborted` first when it had no
/// result.
pub(super) fn dispose_run(
    state: &Projections,
    child: SessionId,
    cleanup_error: Option<Diagnostic>,
) -> Result<Decision, SubagentError> {
    let run = run_in(
        state,
        child,
        &[RunPhase::Requested, RunPhase::Started, RunPhase::Settled],
        "only a run not yet disposed is disposed",
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

/// Records that the provider refused to start a requested run.
pub(super) fn fail_run_start(
    state: &Projections,
    child: SessionId,
    diagnostic: Diagnostic,
) -> Result<Decision, SubagentError> {
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

pub(super) fn settle_run(
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
