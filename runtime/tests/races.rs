//! The races of messaging: a message arriving as a turn ends, an interrupt
//! during a claim, a drain during a start, a cold resume racing a second
//! send. Each runs many times; after each, the inbox invariants (DESIGN.md 4
//! and 5) are checked through the projections rebuilt from the log.

mod common;

use common::{fold, start};

use std::collections::HashSet;
use std::time::Duration;

use subagent_core::{ContentBlock, Delivery, Event, SubagentActivationSpec};
use subagent_runtime::scripted::Step;
use subagent_runtime::{InterruptAuthority, Script, ScriptedHost, SubagentRuntime};
use subagent_store::{EventLogExt, MemoryLog};
use tokio_util::sync::CancellationToken;

const ROUNDS: usize = 15;

fn spec(label: &str) -> SubagentActivationSpec {
    SubagentActivationSpec::with_text_prompt("spawn", label, "go", Delivery::Caller)
}

async fn setup() -> (MemoryLog, SubagentRuntime) {
    let host = ScriptedHost::new(Script {
        turns: vec![vec![
            Step::Say("a".into()),
            Step::SleepMs(2),
            Step::Say("b".into()),
        ]],
    });
    let (log, runtime) =
        common::spawn_runtime(host, subagent_runtime::CapacityLimits::default()).await;
    (log, runtime)
}

async fn settle_inbox(log: &MemoryLog, child: subagent_core::SessionId) {
    for _ in 0..500 {
        let state = fold(log);
        if state.pending_messages(child).is_empty()
            && state
                .activations
                .get(&child)
                .is_some_and(|a| a.running_turn.is_none())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the child never drained its inbox");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_arriving_as_a_turn_ends_is_claimed_exactly_once() {
    let (log, runtime) = setup().await;
    let root = runtime.open_root("host").await.unwrap();
    for round in 0..ROUNDS {
        let child = start(&runtime, &root, spec("worker")).await.unwrap();
        // Sends land while the first turn runs, as it ends, and after.
        for _ in 0..3 {
            runtime
                .send_message(
                    &root,
                    child.child_id(),
                    vec![ContentBlock::text("x")],
                    CancellationToken::new(),
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(round as u64 % 4)).await;
        }
        settle_inbox(&log, child.child_id()).await;
        child.dispose().await.unwrap();
        common::assert_inbox_invariants(&log);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupt_during_a_claim_never_requeues_or_loses_messages() {
    let (log, runtime) = setup().await;
    let root = runtime.open_root("host").await.unwrap();
    for _ in 0..ROUNDS {
        let child = start(&runtime, &root, spec("worker")).await.unwrap();
        let sends = {
            let (runtime, root, target) = (runtime.clone(), root.clone(), child.child_id());
            tokio::spawn(async move {
                for _ in 0..3 {
                    runtime
                        .send_message(
                            &root,
                            target,
                            vec![ContentBlock::text("y")],
                            CancellationToken::new(),
                        )
                        .await
                        .unwrap();
                }
            })
        };
        runtime
            .interrupt(
                child.child_id(),
                InterruptAuthority::User {
                    parent_session_id: root.session(),
                },
            )
            .await
            .unwrap();
        sends.await.unwrap();
        common::assert_inbox_invariants(&log);
        // A waking send resumes whatever is parked.
        runtime
            .send_message(
                &root,
                child.child_id(),
                vec![ContentBlock::text("wake")],
                CancellationToken::new(),
            )
            .await
            .unwrap();
        settle_inbox(&log, child.child_id()).await;
        child.dispose().await.unwrap();
        common::assert_inbox_invariants(&log);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_during_a_start_leaves_nothing_live_below_the_parent() {
    let (log, runtime) = setup().await;
    for _ in 0..ROUNDS {
        let root = runtime.open_root("host").await.unwrap();
        let start = {
            let (runtime, root) = (runtime.clone(), root.clone());
            tokio::spawn(async move { start(&runtime, &root, spec("worker")).await })
        };
        tokio::task::yield_now().await;
        runtime
            .drain_descendants(std::slice::from_ref(&root))
            .await
            .unwrap();
        // The start either lost the race (refused or cancelled) or was drained.
        if let Ok(activation) = start.await.unwrap() {
            activation.dispose().await.unwrap();
        }
        let state = fold(&log);
        let below: Vec<_> = state
            .list_descendants(root.session())
            .into_iter()
            .map(|e| e.entry.entry.child_id)
            .collect();
        for child in below {
            assert!(
                state
                    .activations
                    .get(&child)
                    .is_none_or(|a| a.live.is_none()),
                "a child stayed live after the drain"
            );
        }
        runtime.close_root(&root).await.unwrap();
        common::assert_inbox_invariants(&log);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cold_resume_racing_a_second_send_resumes_once_and_keeps_both_messages() {
    let (log, runtime) = setup().await;
    let root = runtime.open_root("host").await.unwrap();
    for _ in 0..ROUNDS {
        let child = start(&runtime, &root, spec("worker")).await.unwrap();
        child.result().await.unwrap();
        runtime
            .drain_children(&root, &[child.child_id()])
            .await
            .unwrap();
        let (first, second) = tokio::join!(
            runtime.send_message(
                &root,
                child.child_id(),
                vec![ContentBlock::text("1")],
                CancellationToken::new()
            ),
            runtime.send_message(
                &root,
                child.child_id(),
                vec![ContentBlock::text("2")],
                CancellationToken::new()
            ),
        );
        let (first, second) = (first.unwrap(), second.unwrap());
        settle_inbox(&log, child.child_id()).await;
        let events: Vec<Event> = log
            .read_stream(subagent_core::StreamId::Session(child.child_id()), 1)
            .map(|r| r.unwrap().event)
            .collect();
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
        runtime
            .drain_children(&root, &[child.child_id()])
            .await
            .unwrap();
        common::assert_inbox_invariants(&log);
    }
}
