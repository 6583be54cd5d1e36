//! Messages, interruption, drains and waits through the runtime, each named
//! after the spec behaviour it checks. After each, the inbox invariants of
//! DESIGN.md (4 and 5) are checked through the projections.

mod common;

use common::{count, spec, start, text, Harness, HarnessBuilder};

use std::sync::Arc;
use std::time::Duration;

use subagent_core::{
    Delivery, ErrorCode, Event, EventKind, MessageId, MessageSource, SessionId, StreamId,
    SubagentStopReason,
};
use subagent_runtime::providers::ProcessProvider;
use subagent_runtime::scripted::Step;
use subagent_runtime::{CapacityLimits, InterruptAuthority, Script, ScriptedHost};
use subagent_store::EventLog;
use tokio_util::sync::CancellationToken;

/// Agents answer "first", "second", then "later" on every turn; `slow` ones
/// say "working" and sleep a minute, then answer "resumed". `spawn` and a
/// `process` provider running `cat` are registered.
fn harness() -> HarnessBuilder {
    let host = ScriptedHost::new(Script {
        turns: vec![
            vec![Step::Say("first".into())],
            vec![Step::Say("second".into())],
            vec![Step::Say("later".into())],
        ],
    })
    .with(
        "slow",
        Script {
            turns: vec![
                vec![Step::Say("working".into()), Step::SleepMs(60_000)],
                vec![Step::Say("resumed".into())],
            ],
        },
    );
    Harness::builder(host).provider(Arc::new(ProcessProvider::new("process", "cat", &[])))
}

#[tokio::test]
async fn a_message_to_an_idle_child_starts_a_turn_with_relay_attribution() {
    let h = harness().open().await;
    let child = h
        .start(spec("spawn", "worker", Delivery::Caller))
        .await
        .unwrap();
    child.result().await.unwrap();
    let id = h.send(child.child_id(), "more please").await.unwrap();
    h.until_events("a second turn", child.child_id(), |events| {
        count(events, EventKind::TurnEnded) == 2
    })
    .await;
    let events = h.events(child.child_id());
    assert!(events.iter().any(|e| matches!(e,
        Event::MessageAccepted { message_id, source: MessageSource::AgentMessage { sender_session_id }, .. }
            if *message_id == id && *sender_session_id == h.root.session())));
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::MessagesClaimed { ids, turn: 2 } if *ids == vec![id])));
    assert!(events.iter().any(|e| matches!(e, Event::AssistantMessage { content, .. } if subagent_core::content::plain_text(content) == "second")));
    assert_eq!(
        count(&events, EventKind::ActivationSettled),
        1,
        "the activation settled once, on its first turn"
    );
    child.dispose().await.unwrap();
    h.assert_inbox_invariants();
}

#[tokio::test]
async fn an_absent_child_is_cold_resumed_from_its_durable_history() {
    let h = harness().open().await;
    let child = h
        .start(spec("spawn", "worker", Delivery::Caller))
        .await
        .unwrap();
    child.result().await.unwrap();
    child.dispose().await.unwrap();
    h.send(child.child_id(), "wake up").await.unwrap();
    h.until_events("the resumed epoch to settle", child.child_id(), |events| {
        count(events, EventKind::ActivationSettled) == 2
    })
    .await;
    let events = h.events(child.child_id());
    assert!(events.iter().any(|e| matches!(
        e,
        Event::ActivationRequested {
            epoch: 2,
            output_schema: None,
            ..
        }
    )));
    assert!(events.iter().any(|e| matches!(e, Event::ActivationSettled { epoch: 2, result } if subagent_core::content::plain_text(&result.output) == "second")),
        "the agent rebuilt from the log continues where it left off");
    h.runtime
        .drain_children(&h.root, &[child.child_id()])
        .await
        .unwrap();
    assert_eq!(h.count(child.child_id(), EventKind::ActivationReleased), 2);
    h.assert_inbox_invariants();
}

#[tokio::test]
async fn a_child_messages_its_parent_and_non_adjacent_or_stale_senders_are_refused() {
    let h = harness().open().await;
    let child = h
        .start(spec("spawn", "slow", Delivery::Caller))
        .await
        .unwrap();
    let sibling = h
        .start(spec("spawn", "slow", Delivery::Caller))
        .await
        .unwrap();
    let id = h
        .runtime
        .send_message(
            &child.agent(),
            h.root.session(),
            text("status: halfway"),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(h.fold().pending_messages(h.root.session()).contains(&id));
    let head = h.log.head();
    let refusals = [
        (
            h.runtime
                .send_message(
                    &child.agent(),
                    sibling.child_id(),
                    vec![],
                    CancellationToken::new(),
                )
                .await,
            ErrorCode::Unauthorized,
        ),
        (
            h.runtime
                .send_message(&h.root, SessionId::new(), vec![], CancellationToken::new())
                .await,
            ErrorCode::Unauthorized,
        ),
    ];
    for (outcome, code) in refusals {
        assert_eq!(outcome.unwrap_err().code(), code);
    }
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let err = h
        .runtime
        .send_message(&h.root, child.child_id(), vec![], cancelled)
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Cancelled);
    let external = h
        .start(spec("process", "cat", Delivery::Caller))
        .await
        .unwrap();
    external.result().await.unwrap();
    let head_before_external = h.log.head();
    let err = h
        .runtime
        .send_message(
            &h.root,
            external.child_id(),
            vec![],
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        ErrorCode::NotResumable,
        "external executions reject follow-ups"
    );
    assert_eq!(h.log.head(), head_before_external);
    assert!(
        head_before_external > head,
        "only the external start appended"
    );
    sibling.dispose().await.unwrap();
    let err = h
        .runtime
        .send_message(
            &sibling.agent(),
            h.root.session(),
            vec![],
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        ErrorCode::Unauthorized,
        "a disposed child's handle is stale"
    );
    child.dispose().await.unwrap();
    external.dispose().await.unwrap();
    h.assert_inbox_invariants();
}

#[tokio::test]
async fn an_interrupt_keeps_pending_messages_parked_until_a_waking_send_resumes_them_in_order() {
    let h = harness().open().await;
    let child = h
        .start(spec("spawn", "slow", Delivery::Caller))
        .await
        .unwrap();
    h.until_events("the first turn to run", child.child_id(), |events| {
        count(events, EventKind::AssistantMessage) == 1
    })
    .await;
    let mut queued = Vec::new();
    for content in ["one", "two"] {
        queued.push(h.send(child.child_id(), content).await.unwrap());
    }
    let err = h
        .runtime
        .interrupt(
            child.child_id(),
            InterruptAuthority::User {
                parent_session_id: SessionId::new(),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unauthorized);
    h.runtime
        .interrupt(
            child.child_id(),
            InterruptAuthority::User {
                parent_session_id: h.root.session(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        child.result().await.unwrap().stop_reason,
        SubagentStopReason::Aborted
    );
    h.until_events("the interrupted turn to end", child.child_id(), |events| {
        count(events, EventKind::TurnEnded) == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        h.fold().pending_messages(child.child_id()),
        queued,
        "parked, not run, after the interrupt"
    );
    let waking = h.send(child.child_id(), "three").await.unwrap();
    queued.push(waking);
    h.until_events("the resumed turn", child.child_id(), |events| {
        count(events, EventKind::TurnEnded) == 2
    })
    .await;
    let claimed: Vec<Vec<MessageId>> = h
        .events(child.child_id())
        .into_iter()
        .filter_map(|event| match event {
            Event::MessagesClaimed { ids, .. } => Some(ids),
            _ => None,
        })
        .collect();
    assert_eq!(claimed.len(), 2);
    assert_eq!(
        claimed[1], queued,
        "the parked FIFO order, then the waking message"
    );
    h.runtime
        .interrupt(SessionId::new(), InterruptAuthority::Ancestor(&h.root))
        .await
        .unwrap();
    child.dispose().await.unwrap();
    h.assert_inbox_invariants();
}

#[tokio::test]
async fn drain_children_releases_only_the_selected_children_of_that_parent() {
    let h = harness().open().await;
    let other_root = h.runtime.open_root("other").await.unwrap();
    let (a, b) = (
        h.start(spec("spawn", "slow", Delivery::Caller))
            .await
            .unwrap(),
        h.start(spec("spawn", "slow", Delivery::Caller))
            .await
            .unwrap(),
    );
    let foreign = start(
        &h.runtime,
        &other_root,
        spec("spawn", "slow", Delivery::Caller),
    )
    .await
    .unwrap();
    let err = h
        .runtime
        .drain_children(&h.root, &[a.child_id(), foreign.child_id()])
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unauthorized);
    assert_eq!(
        h.count(a.child_id(), EventKind::ActivationReleased),
        0,
        "nothing released on refusal"
    );
    h.runtime
        .drain_children(&h.root, &[a.child_id(), SessionId::new()])
        .await
        .unwrap();
    let live = h.fold();
    assert!(live.activations[&a.child_id()].live.is_none());
    assert!(
        live.activations[&b.child_id()].live.is_some(),
        "other children stay"
    );
    for activation in [&b, &foreign] {
        activation.dispose().await.unwrap();
    }
    h.assert_inbox_invariants();
}

#[tokio::test]
async fn drain_descendants_closes_admission_releases_child_first_and_spares_other_trees() {
    let h = harness().open().await;
    let other_root = h.runtime.open_root("other").await.unwrap();
    let child = h
        .start(spec("spawn", "slow", Delivery::Caller))
        .await
        .unwrap();
    let grandchild = start(
        &h.runtime,
        &child.agent(),
        spec("spawn", "slow", Delivery::Caller),
    )
    .await
    .unwrap();
    let unrelated = start(
        &h.runtime,
        &other_root,
        spec("spawn", "fast", Delivery::Caller),
    )
    .await
    .unwrap();
    h.runtime
        .drain_descendants(std::slice::from_ref(&h.root))
        .await
        .unwrap();
    let released: Vec<StreamId> = h
        .events_of(EventKind::ActivationReleased)
        .into_iter()
        .map(|r| r.stream)
        .collect();
    assert_eq!(
        released,
        vec![
            StreamId::Session(grandchild.child_id()),
            StreamId::Session(child.child_id())
        ]
    );
    let err = h
        .start(spec("spawn", "late", Delivery::Caller))
        .await
        .err()
        .unwrap();
    assert_eq!(
        err.code(),
        ErrorCode::AdmissionClosed,
        "no new child below a draining parent"
    );
    assert!(
        h.fold().activations[&unrelated.child_id()].live.is_some(),
        "unrelated trees stay live"
    );
    assert!(h.runtime.wait_for_children(&other_root).await.unwrap());
    h.runtime.close_root(&h.root).await.unwrap();
    assert!(
        h.fold().admission_closed.is_empty(),
        "the cutoff ends when the parent leaves"
    );
    unrelated.dispose().await.unwrap();
    assert!(
        !h.runtime.wait_for_children(&other_root).await.unwrap(),
        "no owned work left"
    );
    h.assert_inbox_invariants();
}

/// Agents answer "done"; `slow` ones say "working" and sleep a minute. Only
/// `spawn` is registered, under `limits`.
async fn limited(limits: CapacityLimits) -> Harness {
    let host = ScriptedHost::new(Script::reply("done")).with(
        "slow",
        Script {
            turns: vec![vec![Step::Say("working".into()), Step::SleepMs(60_000)]],
        },
    );
    Harness::builder(host).limits(limits).open().await
}

#[tokio::test]
async fn capacity_delays_a_start_until_a_sibling_is_released_and_its_signal_can_cancel_the_wait() {
    let h = limited(CapacityLimits {
        total: Some(1),
        per_parent: None,
    })
    .await;
    let first = h
        .start(spec("spawn", "slow", Delivery::Caller))
        .await
        .unwrap();
    let waiting = {
        let (runtime, root) = (h.runtime.clone(), h.root.clone());
        tokio::spawn(async move {
            start(&runtime, &root, spec("spawn", "next", Delivery::Caller)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "the second start waits for room");
    // The slow turn under way writes nothing more for a minute, so the
    // head taken now moves only if the cancelled start records something.
    h.until_events("the slow turn under way", first.child_id(), |events| {
        events
            .iter()
            .any(|event| matches!(event, Event::AssistantMessage { .. }))
    })
    .await;
    let head = h.log.head();
    let cancelled = CancellationToken::new();
    let cancel = cancelled.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
    });
    let err = h
        .runtime
        .start_activation(
            &h.root,
            spec("spawn", "given-up", Delivery::Caller),
            cancelled,
        )
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::Cancelled);
    assert_eq!(
        h.log.head(),
        head,
        "a start cancelled while waiting records nothing"
    );
    first.dispose().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        second.result().await.unwrap().stop_reason,
        SubagentStopReason::Completed
    );
    second.dispose().await.unwrap();
}

#[tokio::test]
async fn the_per_parent_limit_spares_other_parents_and_a_cold_resume_at_capacity_is_refused() {
    let h = limited(CapacityLimits {
        total: None,
        per_parent: Some(1),
    })
    .await;
    let other = h.runtime.open_root("other").await.unwrap();
    let resting = h
        .start(spec("spawn", "fast", Delivery::Caller))
        .await
        .unwrap();
    resting.result().await.unwrap();
    resting.dispose().await.unwrap();
    let busy = h
        .start(spec("spawn", "slow", Delivery::Caller))
        .await
        .unwrap();
    let elsewhere = tokio::time::timeout(
        Duration::from_secs(30),
        start(&h.runtime, &other, spec("spawn", "fast", Delivery::Caller)),
    )
    .await
    .expect("another parent is not limited")
    .unwrap();
    let head = h.log.head();
    let err = h.send(resting.child_id(), "wake").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::DeliveryUnavailable);
    assert_eq!(h.log.head(), head, "a refused cold resume records nothing");
    busy.dispose().await.unwrap();
    h.send(resting.child_id(), "wake").await.unwrap();
    h.runtime
        .drain_children(&h.root, &[resting.child_id()])
        .await
        .unwrap();
    elsewhere.dispose().await.unwrap();
    h.assert_inbox_invariants();
}

#[tokio::test]
async fn a_running_target_takes_a_message_at_its_next_step_boundary() {
    let host = ScriptedHost::new(Script {
        turns: vec![vec![
            Step::Say("start".into()),
            Step::SleepMs(300),
            Step::Say("end".into()),
        ]],
    });
    let h = Harness::open(host).await;
    let child = h
        .start(spec("spawn", "steered", Delivery::Caller))
        .await
        .unwrap();
    h.until_events("the turn to run", child.child_id(), |events| {
        count(events, EventKind::AssistantMessage) == 1
    })
    .await;
    let id = h
        .send(child.child_id(), "also check the tests")
        .await
        .unwrap();
    h.until_events("the turn to end", child.child_id(), |events| {
        count(events, EventKind::TurnEnded) == 1
    })
    .await;
    let events = h.events(child.child_id());
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::MessagesClaimed { ids, turn: 1 } if *ids == vec![id])),
        "claimed by the running turn"
    );
    let texts: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::AssistantMessage { content, .. } => {
                Some(subagent_core::content::plain_text(content))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        vec!["start", "(steered) also check the tests", "end"]
    );
    assert_eq!(count(&events, EventKind::TurnStarted), 1, "no extra turn");
    child.dispose().await.unwrap();
    h.assert_inbox_invariants();
}

#[tokio::test]
async fn interrupting_an_external_run_stops_its_one_execution() {
    let h = harness()
        .provider(Arc::new(ProcessProvider::new("sleeper", "sleep", &["60"])))
        .open()
        .await;
    let run = h
        .start(spec("sleeper", "nap", Delivery::Caller))
        .await
        .unwrap();
    h.runtime
        .interrupt(run.child_id(), InterruptAuthority::Ancestor(&h.root))
        .await
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(30), run.result())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Aborted);
    assert_eq!(h.count(run.child_id(), EventKind::InterruptRequested), 1);
    h.until_events("the run to be disposed", run.child_id(), |events| {
        count(events, EventKind::RunDisposed) == 1
    })
    .await;
    run.dispose().await.unwrap();
}
