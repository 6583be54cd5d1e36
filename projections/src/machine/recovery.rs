//! Recovery: settling what a dead host left live. A single-writer runtime
//! recovers on reopen (`Recover`): everything live in the trees no host of
//! a shared log holds is settled explicitly, the previous host's provider
//! registrations and admission cutoffs end, and a `HostRecovered` marker
//! says how much. A host of a shared log recovers one tree at a time, when
//! it takes the tree (`TakeTree`): the claim, the same settling events
//! limited to that tree, and its marker in the taker's own stream.

use subagent_core::{
    AbandonReason, Diagnostic, Event, HostId, SessionId, StreamId, SubagentError, SubagentResult,
    SubagentStopReason,
};

use crate::activation::RunPhase;
use crate::ownership::{home_stream, TreeClaim};
use crate::state::Projections;

use super::command::{push_to, Decision};
use super::registry::acquired;
use super::runs::settle_run;

/// Decides [`super::Command::Recover`].
pub(super) fn recover(state: &Projections) -> Decision {
    let unowned = |session: SessionId| state.owner_of(session).is_none();
    let mut decision = Vec::new();
    let settled = settle_live(state, &unowned, &mut decision);
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
    reopen_cutoffs(state, &unowned, StreamId::Runtime, &mut decision);
    mark(state, settled, StreamId::Runtime, &mut decision);
    decision
}

/// Decides [`super::Command::TakeTree`]: `acting` records its claim on
/// `root`'s tree and settles what the tree has live.
///
/// # Errors
/// `subagent/parent-unavailable` for an unknown root;
/// `subagent/unauthorized` for a child session; `gateway/bad-request` for
/// a claim by another host, or one whose fence does not exceed the
/// current holder's.
pub(super) fn take_tree(
    state: &Projections,
    acting: Option<HostId>,
    root: SessionId,
    claim: TreeClaim,
) -> Result<Decision, SubagentError> {
    super::registry::reopen_root(state, root)?;
    if acting != Some(claim.host) {
        return Err(SubagentError::BadRequest(
            "a tree is taken by the host that claims it".into(),
        ));
    }
    let previous = state.owners.get(&root).map_or(0, |owner| owner.fence);
    if claim.fence <= previous {
        return Err(SubagentError::BadRequest(format!(
            "the claim's fence {} does not exceed the holder's {previous}",
            claim.fence
        )));
    }
    let home = home_stream(acting);
    let mut decision = vec![(StreamId::Session(root), vec![acquired(claim)])];
    let in_tree = |session: SessionId| state.root_of(session) == Some(root);
    let settled = settle_live(state, &in_tree, &mut decision);
    reopen_cutoffs(state, &in_tree, home, &mut decision);
    mark(state, settled, home, &mut decision);
    Ok(decision)
}

/// How much a recovery settled.
#[derive(Clone, Copy, Default)]
struct Settled {
    abandoned: u64,
    failed: u64,
}

/// Adds to `decision` the events settling every live activation and run
/// of the sessions `covered` accepts.
fn settle_live(
    state: &Projections,
    covered: &dyn Fn(SessionId) -> bool,
    decision: &mut Decision,
) -> Settled {
    let mut settled = Settled::default();
    for (child, activation) in state.live_activations() {
        if !covered(child) {
            continue;
        }
        settled.abandoned += 1;
        let mut events = Vec::new();
        if let Some(turn) = state.activations.get(&child).and_then(|a| a.running_turn) {
            events.extend(super::turns::turn_ending(
                state,
                child,
                turn,
                SubagentStopReason::Aborted,
                "abandoned: the host stopped before this call returned",
            ));
        }
        events.push(Event::ActivationAbandoned {
            epoch: activation.epoch,
            reason: AbandonReason::HostRestart,
        });
        push_to(decision, StreamId::Session(child), events);
    }
    let mut runs: Vec<_> = state
        .runs
        .iter()
        .filter(|(id, run)| run.is_live() && covered(**id))
        .map(|(id, run)| (*id, run))
        .collect();
    runs.sort_by_key(|(id, _)| *id);
    for (child, run) in runs {
        settled.failed += 1;
        if run.phase != RunPhase::Settled {
            let result = SubagentResult::failed(
                SubagentStopReason::Error,
                Vec::new(),
                "the host restarted while the run was live",
            );
            for (stream, events) in settle_run(state, child, run.run_id, run.delivery, result) {
                push_to(decision, stream, events);
            }
        }
        push_to(
            decision,
            StreamId::Session(child),
            vec![Event::RunDisposed {
                run_id: run.run_id,
                cleanup_error: Some(Diagnostic::new("backend handle lost in a host restart")),
            }],
        );
    }
    settled
}

/// Adds to `decision`, in `home`, the end of every admission cutoff of the
/// parents `covered` accepts: the host that drained them is gone.
fn reopen_cutoffs(
    state: &Projections,
    covered: &dyn Fn(SessionId) -> bool,
    home: StreamId,
    decision: &mut Decision,
) {
    let reopened: Vec<Event> = state
        .admission_closed
        .iter()
        .filter(|parent| covered(**parent))
        .map(|parent| Event::AdmissionReopened { parent: *parent })
        .collect();
    if !reopened.is_empty() {
        push_to(decision, home, reopened);
    }
}

/// Adds the `HostRecovered` marker to `home` when anything was settled.
fn mark(state: &Projections, settled: Settled, home: StreamId, decision: &mut Decision) {
    if settled.abandoned + settled.failed > 0 {
        push_to(
            decision,
            home,
            vec![Event::HostRecovered {
                previous_head: state.position,
                abandoned_activations: settled.abandoned,
                failed_runs: settled.failed,
            }],
        );
    }
}
