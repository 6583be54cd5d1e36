//! Recovery after a host restart: everything live when the host stopped is
//! settled explicitly, the previous host's provider registrations and
//! admission cutoffs end, and a `HostRecovered` marker says how much.

use subagent_core::{
    AbandonReason, Diagnostic, Event, StreamId, SubagentResult, SubagentStopReason,
};

use crate::activation::RunPhase;
use crate::state::Projections;

use super::command::{push_to, Decision};
use super::runs::settle_run;

/// Decides [`super::Command::Recover`].
pub(super) fn recover(state: &Projections) -> Decision {
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
