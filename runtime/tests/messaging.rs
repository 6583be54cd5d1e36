//! Messages, interruption, drains and waits through the runtime, each named
//! after the spec behaviour it checks. After each, the inbox invariants of
//! DESIGN.md (4 and 5) are checked through the projections.

mod common;

use common::{count, events, fold, start, stream_events, until};

use std::sync::Arc;
use std::time::Duration;

use subagent_core::{
    ContentBlock, Delivery, ErrorCode, Event, EventKind, MessageId, MessageSource, SessionId,
    StreamId, SubagentActivationSpec, SubagentStopReason,
};
use subagent_runtime::providers::ProcessProvider;
use subagent_runtime::scripted::Step;
use subagent_runtime::{
    InterruptAuthority, Script, ScriptedHost, SubagentActivation, SubagentRuntime,
};
use subagent_store::{EventLog, EventLogExt, MemoryLog};
use tokio_util::sync::CancellationToken;

fn spec(provider: &str, label: &str) -> SubagentActivationSpec {
    SubagentActivationSpec::with_text_prompt(provider, label, "task", Delivery::Caller)
}

async fn setup() -> (MemoryLog, SubagentRuntime) {
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
    let (log, runtime) =
        common::spawn_runtime(host, subagent_runtime::CapacityLimits::default()).await;
    runtime
        .register_provider(Arc::new(ProcessProvider::new("process", "cat", &[])))
        .await
        .unwrap();
    (log, runtime)
}

/// Waits until `done` holds for `stream`'s events.
async fn until_stream(
    log: &MemoryLog,
    what: &str,
    mut done: impl FnMut(&[Event]) -> bool,
    stream: StreamId,
) {
    until(what, || done(&stream_events(log, stream))).await;
}

async fn started(
    runtime: &SubagentRuntime,
    root: &subagent_runtime::LiveAgent,
    label: &str,
) -> SubagentActivation {
    start(runtime, root, spec("spawn", label)).await.unwrap()
}

#[tokio::test]
async fn a_message_to_an_idle_child_starts_a_turn_with_relay_attribution() {
    let (log, runtime) = setup().await;
    let root = runtime.open_root("host").await.unwrap();
    let child = started(&runtime, &root, "worker").await;
    child.result().await.unwrap();
    let id = runtime
        .send_message(
            &root,
            child.child_id(),
            vec![ContentBlock::text("more please")],
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let stream = StreamId::Session(child.child_id());
    until_stream(
        &log,
        "a second turn",
        |events| count(events, EventKind::TurnEnded) == 2,
        stream,
    )
    .await;
    let events: Vec<Event> = log
        .read_stream(stream, 1)
        .map(|r| r.unwrap().event)
        .collect();
    assert!(events.iter().any(|e| matches!(e,
        Event::MessageAccepted { message_id, source: MessageSource::AgentMessage { sender_session_id }, .. }
            if *message_id == id && *sender_session_id == root.session())));
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
    common::assert_inbox_invariants(&log);
}

#[tokio::test]
async fn an_absent_child_is_cold_resumed_from_its_durable_history() {
    let (log, runtime) = setup().await;
    let root = runtime.open_root("host").await.unwrap();
    let child = started(&runtime, &root, "worker").await;
    child.result().await.unwrap();
    child.dispose().await.unwrap();
    runtime
        .send_message(
            &root,
            child.child_id(),
            vec![ContentBlock::text("wake up")],
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let stream = StreamId::Session(child.child_id());
    until_stream(
        &log,
        "the resumed epoch to settle",
        |events| count(events, EventKind::ActivationSettled) == 2,
        stream,
    )
    .await;
    let events: Vec<Event> = log
        .read_stream(stream, 1)
        .map(|r| r.unwrap().event)
        .collect();
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
    runtime
        .drain_children(&root, &[child.child_id()])
        .await
        .unwrap();
    let events: Vec<Event> = log
        .read_stream(stream, 1)
        .map(|r| r.unwrap().event)
        .collect();
    assert_eq!(count(&events, EventKind::ActivationReleased), 2);
    common::assert_inbox_invariants(&log);
}

#[tokio::test]
async fn a_child_messages_its_parent_and_non_adjacent_or_stale_senders_are_refused() {
    let (log, runtime) = setup().await;
    let root = runtime.open_root("host").await.unwrap();
    let child = started(&runtime, &root, "slow").await;
    let sibling = started(&runtime, &root, "slow").await;
    let id = runtime
        .send_message(
            &child.agent(),
            root.session(),
            vec![ContentBlock::text("status: halfway")],
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(fold(&log).pending_messages(root.session()).contains(&id));
    let head = log.head();
    let refusals = [
        (
            runtime
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
            runtime
                .send_message(&root, SessionId::new(), vec![], CancellationToken::new())
                .await,
            ErrorCode::Unauthorized,
        ),
    ];
    for (outcome, code) in refusals {
        assert_eq!(outcome.unwrap_err().code(), code);
    }
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let err = runtime
        .send_message(&root, child.child_id(), vec![], cancelled)
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Cancelled);
    let external = start(&runtime, &root, spec("process", "cat"))
        .await
        .unwrap();
    external.result().await.unwrap();
    let head_before_external = log.head();
    let err = runtime
        .send_message(&root, external.child_id(), vec![], CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        ErrorCode::NotResumable,
        "external executions reject follow-ups"
    );
    assert_eq!(log.head(), head_before_external);
    assert!(
        head_before_external > head,
        "only the external start appended"
    );
    sibling.dispose().await.unwrap();
    let err = runtime
        .send_message(
            &sibling.agent(),
            root.session(),
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
    common::assert_inbox_invariants(&log);
}

#[tokio::test]
async fn an_interrupt_keeps_pending_messages_parked_until_a_waking_send_resumes_them_in_order() {
    let (log, runtime) = setup().await;
    let root = runtime.open_root("host").await.unwrap();
    let child = started(&runtime, &root, "slow").await;
    let stream = StreamId::Session(child.child_id());
    until_stream(
        &log,
        "the first turn to run",
        |events| count(events, EventKind::AssistantMessage) == 1,
        stream,
    )
    .await;
    let mut queued = Vec::new();
    for text in ["one", "two"] {
        queued.push(
            runtime
                .send_message(
                    &root,
                    child.child_id(),
                    vec![ContentBlock::text(text)],
                    CancellationToken::new(),
                )
                .await
                .unwrap(),
        );
    }
    let err = runtime
        .interrupt(
            child.child_id(),
            InterruptAuthority::User {
                parent_session_id: SessionId::new(),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unauthorized);
    runtime
        .interrupt(
            child.child_id(),
            InterruptAuthority::User {
                parent_session_id: root.session(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        child.result().await.unwrap().stop_reason,
        SubagentStopReason::Aborted
    );
    until_stream(
        &log,
        "the interrupted turn to end",
        |events| count(events, EventKind::TurnEnded) == 1,
        stream,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        fold(&log).pending_messages(child.child_id()),
        queued,
        "parked, not run, after the interrupt"
    );
    let waking = runtime
        .send_message(
            &root,
            child.child_id(),
            vec![ContentBlock::text("three")],
            CancellationToken::new(),
        )
        .await
        .unwrap();
    queued.push(waking);
    until_stream(
        &log,
        "the resumed turn",
        |events| count(events, EventKind::TurnEnded) == 2,
        stream,
    )
    .await;
    let claimed: Vec<Vec<MessageId>> = log
        .read_stream(stream, 1)
        .filter_map(|r| match r.unwrap().event {
            Event::MessagesClaimed { ids, .. } => Some(ids),
            _ => None,
        })
        .collect();
    assert_eq!(claimed.len(), 2);
    assert_eq!(
        claimed[1], queued,
        "the parked FIFO order, then the waking message"
    );
    runtime
        .interrupt(SessionId::new(), InterruptAuthority::Ancestor(&root))
        .await
        .unwrap();
    child.dispose().await.unwrap();
    common::assert_inbox_invariants(&log);
}

#[tokio::test]
async fn drain_children_releases_only_the_selected_children_of_that_parent() {
    let (log, runtime) = setup().await;
    let root = runtime.open_root("host").await.unwrap();
    let other_root = runtime.open_root("other").await.unwrap();
    let (a, b) = (
        started(&runtime, &root, "slow").await,
        started(&runtime, &root, "slow").await,
    );
    let foreign = started(&runtime, &other_root, "slow").await;
    let err = runtime
        .drain_children(&root, &[a.child_id(), foreign.child_id()])
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unauthorized);
    assert_eq!(
        count(&events(&log, a.child_id()), EventKind::ActivationReleased),
        0,
        "nothing released on refusal"
    );
    runtime
        .drain_children(&root, &[a.child_id(), SessionId::new()])
        .await
        .unwrap();
    let live = fold(&log);
    assert!(live.activations[&a.child_id()].live.is_none());
    assert!(
        live.activations[&b.child_id()].live.is_some(),
        "other children stay"
    );
    for activation in [&b, &foreign] {
        activation.dispose().await.unwrap();
    }
    common::assert_inbox_invariants(&log);
}

#[tokio::test]
async fn drain_descendants_closes_admission_releases_child_first_and_spares_other_trees() {
    let (log, runtime) = setup().await;
    let root = runtime.open_root("host").await.unwrap();
    let other_root = runtime.open_root("other").await.unwrap();
    let child = started(&runtime, &root, "slow").await;
    let grandchild = start(&runtime, &child.agent(), spec("spawn", "slow"))
        .await
        .unwrap();
    let unrelated = started(&runtime, &other_root, "fast").await;
    runtime
        .drain_descendants(std::slice::from_ref(&root))
        .await
        .unwrap();
    let released: Vec<StreamId> = log
        .read_all(1)
        .map(|r| r.unwrap())
        .filter(|r| r.event.kind() == EventKind::ActivationReleased)
        .map(|r| r.stream)
        .collect();
    assert_eq!(
        released,
        vec![
            StreamId::Session(grandchild.child_id()),
            StreamId::Session(child.child_id())
        ]
    );
    let err = start(&runtime, &root, spec("spawn", "late"))
        .await
        .err()
        .unwrap();
    assert_eq!(
        err.code(),
        ErrorCode::AdmissionClosed,
        "no new child below a draining parent"
    );
    assert!(
        fold(&log).activations[&unrelated.child_id()].live.is_some(),
        "unrelated trees stay live"
    );
    assert!(runtime.wait_for_children(&other_root).await.unwrap());
    runtime.close_root(&root).await.unwrap();
    assert!(
        fold(&log).admission_closed.is_empty(),
        "the cutoff ends when the parent leaves"
    );
    unrelated.dispose().await.unwrap();
    assert!(
        !runtime.wait_for_children(&other_root).await.unwrap(),
        "no owned work left"
    );
    common::assert_inbox_invariants(&log);
}

async fn limited(limits: subagent_runtime::CapacityLimits) -> (MemoryLog, SubagentRuntime) {
    let host = ScriptedHost::new(Script::reply("done")).with(
        "slow",
        Script {
            turns: vec![vec![Step::Say("working".into()), Step::SleepMs(60_000)]],
        },
    );
    let (log, runtime) = common::spawn_runtime(host, limits).await;
    (log, runtime)
}

#[tokio::test]
async fn capacity_delays_a_start_until_a_sibling_is_released_and_its_signal_can_cancel_the_wait() {
    let (log, runtime) = limited(subagent_runtime::CapacityLimits {
        total: Some(1),
        per_parent: None,
    })
    .await;
    let root = runtime.open_root("host").await.unwrap();
    let first = started(&runtime, &root, "slow").await;
    let waiting = {
        let (runtime, root) = (runtime.clone(), root.clone());
        tokio::spawn(async move { start(&runtime, &root, spec("spawn", "next")).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "the second start waits for room");
    let head = log.head();
    let cancelled = CancellationToken::new();
    let cancel = cancelled.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
    });
    let err = runtime
        .start_activation(&root, spec("spawn", "given-up"), cancelled)
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::Cancelled);
    assert_eq!(
        log.head(),
        head,
        "a start cancelled while waiting records nothing"
    );
    first.dispose().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
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
    let (log, runtime) = limited(subagent_runtime::CapacityLimits {
        total: None,
        per_parent: Some(1),
    })
    .await;
    let root = runtime.open_root("host").await.unwrap();
    let other = runtime.open_root("other").await.unwrap();
    let resting = started(&runtime, &root, "fast").await;
    resting.result().await.unwrap();
    resting.dispose().await.unwrap();
    let busy = started(&runtime, &root, "slow").await;
    let elsewhere = tokio::time::timeout(Duration::from_secs(5), started(&runtime, &other, "fast"))
        .await
        .expect("another parent is not limited");
    let head = log.head();
    let err = runtime
        .send_message(
            &root,
            resting.child_id(),
            vec![ContentBlock::text("wake")],
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::DeliveryUnavailable);
    assert_eq!(log.head(), head, "a refused cold resume records nothing");
    busy.dispose().await.unwrap();
    runtime
        .send_message(
            &root,
            resting.child_id(),
            vec![ContentBlock::text("wake")],
            CancellationToken::new(),
        )
        .await
        .unwrap();
    runtime
        .drain_children(&root, &[resting.child_id()])
        .await
        .unwrap();
    elsewhere.dispose().await.unwrap();
    common::assert_inbox_invariants(&log);
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
    let (log, runtime) =
        common::spawn_runtime(host, subagent_runtime::CapacityLimits::default()).await;
    let root = runtime.open_root("host").await.unwrap();
    let child = started(&runtime, &root, "steered").await;
    let stream = StreamId::Session(child.child_id());
    until_stream(
        &log,
        "the turn to run",
        |events| count(events, EventKind::AssistantMessage) == 1,
        stream,
    )
    .await;
    let id = runtime
        .send_message(
            &root,
            child.child_id(),
            vec![ContentBlock::text("also check the tests")],
            CancellationToken::new(),
        )
        .await
        .unwrap();
    until_stream(
        &log,
        "the turn to end",
        |events| count(events, EventKind::TurnEnded) == 1,
        stream,
    )
    .await;
    let events: Vec<Event> = log
        .read_stream(stream, 1)
        .map(|r| r.unwrap().event)
        .collect();
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
    common::assert_inbox_invariants(&log);
}

#[tokio::test]
async fn interrupting_an_external_run_stops_its_one_execution() {
    let (log, runtime) = setup().await;
    runtime
        .register_provider(Arc::new(ProcessProvider::new("sleeper", "sleep", &["60"])))
        .await
        .unwrap();
    let root = runtime.open_root("host").await.unwrap();
    let run = start(&runtime, &root, spec("sleeper", "nap"))
        .await
        .unwrap();
    runtime
        .interrupt(run.child_id(), InterruptAuthority::Ancestor(&root))
        .await
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), run.result())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Aborted);
    let events: Vec<Event> = log
        .read_stream(StreamId::Session(run.child_id()), 1)
        .map(|r| r.unwrap().event)
        .collect();
    assert_eq!(count(&events, EventKind::InterruptRequested), 1);
    until_stream(
        &log,
        "the run to be disposed",
        |events| count(events, EventKind::RunDisposed) == 1,
        StreamId::Session(run.child_id()),
    )
    .await;
    run.dispose().await.unwrap();
}
