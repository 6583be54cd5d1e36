//! The races of messaging: a message arriving as a turn ends, an interrupt
//! during a claim, a drain during a start, a cold resume racing a second
//! send. Each runs many times; after each, the inbox invariants (DESIGN.md 4
//! and 5) are checked through the projections rebuilt from the log.

mod common;

use common::{assert_inbox_invariants, fold, spec, start, until, Harness, HarnessBuilder};

use std::collections::HashSet;
use std::time::Duration;

use subagent_core::{Delivery, Event, SessionId};
use subagent_runtime::scripted::Step;
use subagent_runtime::{InterruptAuthority, Script, ScriptedHost};
use subagent_store::MemoryLog;

const ROUNDS: usize = 15;
/// The drain-during-a-start race's rounds: more, so each of its moments
/// comes up several times; and, while one side of the race has not been
/// seen yet, more again up to the second figure.
const DRAIN_ROUNDS: usize = 44;
const DRAIN_ROUNDS_AT_MOST: usize = 220;
/// The drain's pauses after the start is spawned, in microseconds, round
/// after round. A start takes some 100 to 200 µs on an idle machine: the
/// short pauses mostly let the drain win, the long ones the start, and
/// those between meet the race itself.
const DRAIN_PAUSES_MICROS: [u64; 11] = [0, 25, 50, 75, 100, 150, 200, 300, 500, 1_000, 2_000];

/// Every agent says "a", pauses 2 ms and says "b": turns short enough to
/// race. Only `spawn` is registered.
fn harness() -> HarnessBuilder {
    Harness::builder(ScriptedHost::new(Script {
        turns: vec![vec![
            Step::Say("a".into()),
            Step::SleepMs(2),
            Step::Say("b".into()),
        ]],
    }))
}

/// Waits until `child` has nothing pending and no turn running.
async fn settle_inbox(h: &Harness, child: SessionId) {
    until("the child to drain its inbox", || {
        let state = h.fold();
        state.pending_messages(child).is_empty()
            && state
                .activations
                .get(&child)
                .is_some_and(|a| a.running_turn.is_none())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_arriving_as_a_turn_ends_is_claimed_exactly_once() {
    let h = harness().open().await;
    for round in 0..ROUNDS {
        let child = h
            .start(spec("spawn", "worker", Delivery::Caller))
            .await
            .unwrap();
        // Sends land while the first turn runs, as it ends, and after.
        for _ in 0..3 {
            h.send(child.child_id(), "x").await.unwrap();
            tokio::time::sleep(Duration::from_millis(round as u64 % 4)).await;
        }
        settle_inbox(&h, child.child_id()).await;
        child.dispose().await.unwrap();
        h.assert_inbox_invariants();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupt_during_a_claim_never_requeues_or_loses_messages() {
    let h = harness().open().await;
    for _ in 0..ROUNDS {
        let child = h
            .start(spec("spawn", "worker", Delivery::Caller))
            .await
            .unwrap();
        let sends = {
            let (sender, target) = (h.clone(), child.child_id());
            tokio::spawn(async move {
                for _ in 0..3 {
                    sender.send(target, "y").await.unwrap();
                }
            })
        };
        h.runtime
            .interrupt(
                child.child_id(),
                InterruptAuthority::User {
                    parent_session_id: h.root.session(),
                },
            )
            .await
            .unwrap();
        sends.await.unwrap();
        h.assert_inbox_invariants();
        // A waking send resumes whatever is parked.
        h.send(child.child_id(), "wake").await.unwrap();
        settle_inbox(&h, child.child_id()).await;
        child.dispose().await.unwrap();
        h.assert_inbox_invariants();
    }
}

/// A drain of a root's descendants races a start below it. Whichever side
/// wins, once both have returned nothing below the root is live: checked on
/// the log before the winning child's handle is disposed, so a drain that
/// missed a concurrent start (leaving its child live) fails here. The
/// drain's moment moves from round to round (at once, then after pauses
/// from 25 µs to 2 ms), and both outcomes must have been seen across the
/// rounds: a start the drain refused or cancelled, and a start that won and
/// was then drained; otherwise the check never met the race it is about.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_during_a_start_leaves_nothing_live_below_the_parent() {
    // A root per round, so no harness root.
    let log = MemoryLog::new();
    let (runtime, _) = harness().over(log.clone()).open_runtime().await;
    // Rounds won by the start (it returned a child, which the drain then
    // ended) and lost by it (refused or cancelled by the drain).
    let (mut won, mut lost) = (0usize, 0usize);
    let mut round = 0;
    while round < DRAIN_ROUNDS || ((won == 0 || lost == 0) && round < DRAIN_ROUNDS_AT_MOST) {
        round += 1;
        let root = runtime.open_root("host").await.unwrap();
        let start = {
            let (runtime, root) = (runtime.clone(), root.clone());
            tokio::spawn(async move {
                start(&runtime, &root, spec("spawn", "worker", Delivery::Caller)).await
            })
        };
        // The drain's moment: at once, or after a pause (yielding) that
        // sweeps the window in which the start is under way.
        let pause = DRAIN_PAUSES_MICROS[round % DRAIN_PAUSES_MICROS.len()];
        let until = std::time::Instant::now() + Duration::from_micros(pause);
        while std::time::Instant::now() < until {
            tokio::task::yield_now().await;
        }
        runtime
            .drain_descendants(std::slice::from_ref(&root))
            .await
            .unwrap();
        let started = start.await.unwrap();
        // Before anything is disposed: the drain alone must have ended
        // whatever the start created.
        let state = fold(&log);
        let below: Vec<_> = state
            .list_descendants(root.session())
            .into_iter()
            .map(|e| e.entry.entry.child_id)
            .collect();
        for child in &below {
            assert!(
                state
                    .activations
                    .get(child)
                    .is_none_or(|a| a.live.is_none()),
                "round {round}: a child stayed live after the drain (start {})",
                if started.is_ok() { "won" } else { "lost" }
            );
        }
        match started {
            Ok(activation) => {
                won += 1;
                assert_eq!(
                    below,
                    vec![activation.child_id()],
                    "round {round}: the started child is the one below the root"
                );
                activation.dispose().await.unwrap();
            }
            Err(_) => lost += 1,
        }
        runtime.close_root(&root).await.unwrap();
        assert_inbox_invariants(&log);
    }
    println!("drain during a start: the start won {won} and lost {lost} of {round} rounds");
    assert!(
        won > 0 && lost > 0,
        "both sides of the race must be seen: the start won {won} and lost {lost} rounds"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cold_resume_racing_a_second_send_resumes_once_and_keeps_both_messages() {
    let h = harness().open().await;
    for _ in 0..ROUNDS {
        let child = h
            .start(spec("spawn", "worker", Delivery::Caller))
            .await
            .unwrap();
        child.result().await.unwrap();
        h.runtime
            .drain_children(&h.root, &[child.child_id()])
            .await
            .unwrap();
        let (first, second) =
            tokio::join!(h.send(child.child_id(), "1"), h.send(child.child_id(), "2"),);
        let (first, second) = (first.unwrap(), second.unwrap());
        settle_inbox(&h, child.child_id()).await;
        let events: Vec<Event> = h.events(child.child_id());
        let requested = events
            .iter()
            .filter(|e| matches!(e, Event::ActivationRequested { epoch: 2, .. }))
            .count();
        assert_eq!(requested, 1, "one cold resume");
        assert!(!events
            .iter()
            .any(|e| matches!(e, Event::ActivationRequested { epoch: 3, .. })));
        let claimed: HashSet<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::MessagesClaimed { ids, .. } => Some(ids.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert!(claimed.contains(&first) && claimed.contains(&second));
        h.runtime
            .drain_children(&h.root, &[child.child_id()])
            .await
            .unwrap();
        h.assert_inbox_invariants();
    }
}
