//! External one-shot runs (`machine/runs.rs`): an external start records a
//! run request and no inbox; only a started run settles, reporting its final
//! text, diagnostic and status to a parent-delivered parent; disposing an
//! unsettled run settles it `aborted`; a refused start is recorded and the
//! run never starts; each command out of phase is refused naming the phase.

use subagent_core::{
    ContentBlock, Delivery, Diagnostic, Event, MessageSource, OutOfOrder, SubagentError,
    SubagentResult, SubagentStopReason,
};
use subagent_projections::machine::Command;
use subagent_projections::RunPhase;

use crate::world::{types, World};

#[test]
fn starting_an_external_child_records_a_run_request_and_no_inbox() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "process", Delivery::Caller);
    assert!(world.state.sessions[&child].external);
    assert_eq!(world.state.runs[&child].phase, RunPhase::Requested);
    assert!(world.state.pending_messages(child).is_empty());
}

#[test]
fn an_external_run_reports_its_final_text_diagnostic_and_status_to_the_parent() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "process", Delivery::Parent);
    assert_eq!(
        world.refuse(Command::SettleRun {
            child,
            result: SubagentResult::completed(vec![])
        }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::RunPhase {
                phase: "requested",
                accepted: "only a started, unsettled run settles"
            }
        }
    );
    world.run(Command::StartRun { child });
    let result = SubagentResult::failed(
        SubagentStopReason::MaxTokens,
        vec![ContentBlock::text("partial answer")],
        "token ceiling",
    );
    let recorded = world.run(Command::SettleRun { child, result });
    let Event::MessageAccepted {
        source, content, ..
    } = &recorded[1].1
    else {
        panic!("no report")
    };
    assert_eq!(
        *source,
        MessageSource::SubagentReport {
            sender_session_id: child
        }
    );
    let text = subagent_core::content::plain_text(content);
    for part in [
        "partial answer",
        "diagnostic: token ceiling",
        "status: max-tokens",
    ] {
        assert!(text.contains(part), "{text}");
    }
    world.run(Command::DisposeRun {
        child,
        cleanup_error: None,
    });
    assert_eq!(world.state.runs[&child].phase, RunPhase::Disposed);
    assert_eq!(
        world.refuse(Command::DisposeRun {
            child,
            cleanup_error: None
        }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::RunPhase {
                phase: "disposed",
                accepted: "only a run not yet disposed is disposed"
            }
        }
    );
}

#[test]
fn disposing_an_unsettled_run_settles_it_aborted_and_failed_starts_are_recorded() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "process", Delivery::Caller);
    world.run(Command::StartRun { child });
    let recorded = world.run(Command::DisposeRun {
        child,
        cleanup_error: None,
    });
    assert_eq!(types(&recorded), vec!["RunSettled", "RunDisposed"]);
    assert_eq!(
        world.state.runs[&child]
            .result
            .as_ref()
            .map(|r| r.stop_reason.clone()),
        Some(SubagentStopReason::Aborted)
    );
    let failing = world.start(root, "process", Delivery::Caller);
    world.run(Command::FailRunStart {
        child: failing,
        diagnostic: Diagnostic::new("binary not found"),
    });
    assert_eq!(world.state.runs[&failing].phase, RunPhase::StartFailed);
    assert_eq!(
        world.refuse(Command::StartRun { child: failing }),
        SubagentError::OutOfOrder {
            session: failing,
            reason: OutOfOrder::RunPhase {
                phase: "refused at start",
                accepted: "only a requested run starts"
            }
        }
    );
}
