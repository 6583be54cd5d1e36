//! Recovery after a host restart (`machine/recovery.rs`): everything live is
//! settled explicitly and only once (activations abandoned, their pending
//! messages kept; started runs settled `error` and disposed), the previous
//! host's provider registrations and admission cutoffs end, and a root taken
//! back afterwards admits children again.

use subagent_core::{Delivery, Event, MessageId, SessionId, SubagentStopReason};
use subagent_projections::machine::Command;
use subagent_projections::Activity;

use crate::world::{prepared, types, World};

#[test]
fn recovery_settles_everything_that_was_live_explicitly_and_only_once() {
    let mut world = World::new();
    let root = world.root();
    let running = world.running(root);
    let queued = world.start(root, "spawn", Delivery::Parent);
    world.run(prepared(queued, MessageId::new()));
    let external = world.start(root, "process", Delivery::Parent);
    world.run(Command::StartRun { child: external });
    let recorded = world.run(Command::Recover);
    let kinds = types(&recorded);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "ActivationAbandoned")
            .count(),
        2
    );
    assert!(
        kinds.contains(&"RunSettled")
            && kinds.contains(&"RunDisposed")
            && kinds.contains(&"HostRecovered")
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "ProviderRemoved").count(),
        2,
        "registrations end with the host"
    );
    assert!(world.state.providers.is_empty());
    for child in [running, queued] {
        assert_eq!(
            world.state.activity(child),
            Activity::Inactive,
            "cold-resumable"
        );
    }
    assert_eq!(
        world.state.pending_messages(queued).len(),
        1,
        "pending messages stay pending"
    );
    let run = &world.state.runs[&external];
    assert_eq!(
        run.result.as_ref().map(|r| r.stop_reason.clone()),
        Some(SubagentStopReason::Error)
    );
    assert!(run
        .result
        .as_ref()
        .and_then(|r| r.diagnostic.as_ref())
        .is_some_and(|d| d.as_str().contains("host restarted")));
    assert!(
        world.run(Command::Recover).is_empty(),
        "nothing is live any more"
    );
}

#[test]
fn a_call_left_open_by_a_dead_host_is_answered_abandoned_before_its_turn_ends() {
    let mut world = World::new();
    let root = world.root();
    let running = world.running(root);
    // call-0 returned; call-1 and call-2 were in flight when the host died.
    world.call(running, "call-0", "subagent");
    world.returned(running, "call-0");
    world.call(running, "call-1", "subagent");
    world.call(running, "call-2", "read_file");
    assert_eq!(
        world.state.activations[&running].open_calls,
        ["call-1", "call-2"]
    );
    let recorded = world.run(Command::Recover);
    let in_session: Vec<&Event> = recorded
        .iter()
        .filter(|(stream, _)| *stream == subagent_core::StreamId::Session(running))
        .map(|(_, event)| event)
        .collect();
    let answered: Vec<&str> = in_session
        .iter()
        .filter_map(|event| match event {
            Event::ToolReturned {
                turn: 1,
                call_id,
                is_error: true,
                refused: false,
                output,
            } if subagent_core::content::plain_text(output).contains("abandoned") => {
                Some(call_id.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(answered, ["call-1", "call-2"], "{in_session:?}");
    let turn_end = in_session
        .iter()
        .position(|event| matches!(event, Event::TurnEnded { turn: 1, .. }))
        .expect("the turn ends");
    assert_eq!(turn_end, 2, "the calls are answered before the turn ends");
    assert!(world.state.activations[&running].open_calls.is_empty());
}

#[test]
fn a_turn_ended_with_a_call_open_answers_it_first() {
    let mut world = World::new();
    let root = world.root();
    let child = world.running(root);
    world.call(child, "call-7", "read_file");
    let recorded = world.run(Command::EndTurn {
        session: child,
        stop_reason: SubagentStopReason::Aborted,
        output: Default::default(),
    });
    assert_eq!(types(&recorded)[..2], ["ToolReturned", "TurnEnded"]);
    assert!(world.state.activations[&child].open_calls.is_empty());
}

#[test]
fn recovery_ends_every_admission_cutoff_of_the_previous_host() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Caller);
    world.run(Command::CloseAdmission { parent: root });
    world.run(Command::CloseAdmission { parent: child });
    let recorded = world.run(Command::Recover);
    let reopened: Vec<SessionId> = recorded
        .iter()
        .filter_map(|(_, event)| match event {
            Event::AdmissionReopened { parent } => Some(*parent),
            _ => None,
        })
        .collect();
    assert_eq!(reopened.len(), 2);
    assert!(reopened.contains(&root) && reopened.contains(&child));
    assert!(world.state.admission_closed.is_empty());
    // A root taken back after the restart admits children again (once the
    // new host registered its providers).
    world.run(Command::ReopenRoot { session: root });
    world.register_capable("spawn");
    world.start(root, "spawn", Delivery::Caller);
}
