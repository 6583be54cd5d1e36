//! Incremental projections agree with an independently written fold at
//! every position, also when the fold resumes from an encoded-and-decoded
//! checkpoint (DESIGN invariant 10).
//!
//! The comparison is with [`ReferenceFold`], written apart from
//! `Projections::apply`: rebuilding with `Projections::fold` would run the
//! same loop of `apply` again and could not fail. The reference is itself
//! shown to notice each kind of wrong projection it compares.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use subagent_core::{MessageDelivery, MessageId, SessionId, SubagentRunId};
use subagent_projections::fuzzing::ReferenceFold;
use subagent_projections::testing::{history, steps};
use subagent_projections::{checkpoint, ActivationPhase, Projections, RunPhase};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn incremental_equals_rebuilt_at_every_position_across_checkpoints(
        steps in steps(60),
        checkpoint_every in 1usize..20,
    ) {
        let records = history(&steps);
        let mut incremental = Projections::new();
        let mut resumed = Projections::new();
        let mut reference = ReferenceFold::default();
        for (index, record) in records.iter().enumerate() {
            incremental.apply(record);
            resumed.apply(record);
            reference.apply(record);
            if index % checkpoint_every == 0 {
                resumed = checkpoint::decode(&checkpoint::encode(&resumed)).expect("own checkpoint decodes");
            }
            let disagreement = reference.disagreement(&incremental);
            prop_assert!(
                disagreement.is_none(),
                "incremental at position {}: {}",
                record.position,
                disagreement.unwrap_or_default()
            );
            prop_assert_eq!(&resumed, &incremental, "resumed from checkpoint at position {}", record.position);
        }
        // Invariant 1: never more than one live activation per child, and
        // invariant 9: descendants are consistent with the tree.
        let root = records[0].stream.session().expect("root stream");
        for entry in incremental.list_descendants(root) {
            let record = &incremental.sessions[&entry.entry.entry.child_id];
            prop_assert_eq!(record.parent, Some(entry.parent_id));
            prop_assert_eq!(record.depth, entry.depth);
        }
    }
}

/// The reference fold is not vacuous: on long built histories it agrees
/// with the projections, and it names each wrong projection planted in them
/// (a session's depth, a catalog's order, a live activation lost or its
/// phase wrong, a turn left running, a run's phase or id, an inbox's
/// pending or claimed messages, the registry, a closed admission, the
/// position).
#[test]
fn the_reference_fold_notices_each_wrong_projection() {
    type Plant = fn(&mut Projections) -> bool;
    let plants: [(&str, Plant); 13] = [
        ("position", |state| {
            state.position += 1;
            true
        }),
        ("session depth", |state| {
            state
                .sessions
                .values_mut()
                .next()
                .map(|s| s.depth += 1)
                .is_some()
        }),
        ("catalog order", |state| {
            state
                .catalogs
                .values_mut()
                .find(|facts| facts.len() > 1)
                .map(|facts| facts.reverse())
                .is_some()
        }),
        ("live activation lost", |state| {
            state
                .activations
                .values_mut()
                .find(|a| a.live.is_some())
                .map(|a| a.live = None)
                .is_some()
        }),
        ("activation phase", |state| {
            state
                .activations
                .values_mut()
                .filter_map(|a| a.live.as_mut())
                .find(|live| live.phase == ActivationPhase::Published)
                .map(|live| live.phase = ActivationPhase::Prepared)
                .is_some()
        }),
        ("turn left running", |state| {
            state
                .activations
                .values_mut()
                .find(|a| a.running_turn.is_none() && a.turns > 0)
                .map(|a| a.running_turn = Some(a.turns))
                .is_some()
        }),
        ("run phase", |state| {
            state
                .runs
                .values_mut()
                .next()
                .map(|run| {
                    run.phase = if run.phase == RunPhase::Disposed {
                        RunPhase::Settled
                    } else {
                        RunPhase::Disposed
                    }
                })
                .is_some()
        }),
        ("pending message lost", |state| {
            state
                .inboxes
                .values_mut()
                .find(|inbox| !inbox.pending.is_empty())
                .map(|inbox| inbox.pending.pop_front())
                .is_some()
        }),
        ("unaccepted pending message", |state| {
            state
                .inboxes
                .values_mut()
                .next()
                .map(|inbox| {
                    inbox
                        .pending
                        .push_back((MessageId::new(), MessageDelivery::Queue));
                })
                .is_some()
        }),
        ("claimed turn", |state| {
            state
                .inboxes
                .values_mut()
                .find_map(|inbox| inbox.claimed.values_mut().next())
                .map(|turn| *turn += 1)
                .is_some()
        }),
        ("registry", |state| state.providers.pop().is_some()),
        ("admission", |state| {
            state.admission_closed.insert(SessionId::new());
            true
        }),
        ("run id", |state| {
            state
                .runs
                .values_mut()
                .next()
                .map(|run| run.run_id = SubagentRunId::new())
                .is_some()
        }),
    ];
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut planted = vec![0usize; plants.len()];
    for _ in 0..64 {
        let records = history(&steps(120).new_tree(&mut runner).unwrap().current());
        let state = Projections::fold(&records);
        let reference = ReferenceFold::fold(&records);
        reference.assert_agrees(&state, "a built history");
        for (index, (name, plant)) in plants.iter().enumerate() {
            let mut wrong = state.clone();
            if plant(&mut wrong) {
                planted[index] += 1;
                assert!(
                    reference.disagreement(&wrong).is_some(),
                    "the reference fold missed a wrong {name}"
                );
            }
        }
    }
    for ((name, _), count) in plants.iter().zip(&planted) {
        assert!(*count > 0, "no history had a {name} to get wrong");
    }
}
