//! Results and their delivery through the runtime, each test named after
//! the spec behaviour it checks: a local child's result is its last
//! non-empty assistant message and its parent gets a status-only notice;
//! `caller` delivery sends no notice; every stop reason can be produced;
//! a fork child is seeded with its parent's completed turns; dispose aborts
//! a running turn, releases child-first and is idempotent; the start signal
//! cancels before publication (recording the abandoned reservation) and
//! aborts the remaining turn work after it.

mod common;

use common::{delegation, spec, start};

use std::sync::Arc;
use std::time::Duration;

use subagent_core::{
    content::plain_text, Delivery, ErrorCode, Event, EventKind, MessageSource, StreamId,
    SubagentError, SubagentStopReason,
};
use subagent_runtime::provider::ContinuableCreateRequest;
use subagent_runtime::{BoxFuture, SubagentProvider};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_local_child_returns_its_last_non_empty_assistant_message_and_notifies_its_parent() {
    let h = delegation().open().await;
    let activation = h
        .start(spec("spawn", "research", Delivery::Parent))
        .await
        .unwrap();
    assert!(
        activation.message_id().is_some(),
        "a local child has an accepted initial message"
    );
    let result = activation.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    assert_eq!(plain_text(&result.output), "the answer is 42");
    let child_events = h.events(activation.child_id());
    let types: Vec<_> = child_events.iter().map(Event::type_name).collect();
    for expected in [
        "SessionCreated",
        "ActivationRequested",
        "ActivationPrepared",
        "MessageAccepted",
        "ActivationPublished",
        "MessagesClaimed",
        "TurnStarted",
        "ToolCalled",
        "ToolReturned",
        "AssistantMessage",
        "TurnEnded",
        "ActivationSettled",
    ] {
        assert!(types.contains(&expected), "missing {expected} in {types:?}");
    }
    let notice = h
        .events(h.root.session())
        .into_iter()
        .find_map(|event| match event {
            Event::MessageAccepted {
                source:
                    MessageSource::SubagentSettled {
                        summary,
                        sender_session_id,
                    },
                content,
                ..
            } => Some((summary, sender_session_id, content)),
            _ => None,
        })
        .expect("the parent receives a settlement notice");
    assert_eq!(notice.1, activation.child_id());
    assert!(
        !plain_text(&notice.2).contains("42"),
        "status only, never the child's words"
    );
    activation.dispose().await.unwrap();
    activation.dispose().await.unwrap();
    assert!(h
        .events(activation.child_id())
        .iter()
        .any(|e| e.kind() == EventKind::ActivationReleased));
}

#[tokio::test]
async fn caller_delivery_suppresses_the_parent_notice() {
    let h = delegation().open().await;
    let activation = h
        .start(spec("spawn", "plain", Delivery::Caller))
        .await
        .unwrap();
    assert_eq!(
        plain_text(&activation.result().await.unwrap().output),
        "default answer"
    );
    let accepted = h.count(h.root.session(), EventKind::MessageAccepted);
    assert_eq!(accepted, 0);
    activation.dispose().await.unwrap();
}

#[tokio::test]
async fn every_stop_reason_can_be_produced_on_purpose() {
    let h = delegation().open().await;
    for (label, reason, diagnostic) in [
        (
            "failing",
            SubagentStopReason::Error,
            Some("model unavailable"),
        ),
        (
            "refusing",
            SubagentStopReason::Refusal,
            Some("the agent declined"),
        ),
        (
            "ceiling",
            SubagentStopReason::MaxTokens,
            Some("output token ceiling reached"),
        ),
    ] {
        let activation = h
            .start(spec("spawn", label, Delivery::Caller))
            .await
            .unwrap();
        let result = activation.result().await.unwrap();
        assert_eq!(result.stop_reason, reason, "{label}");
        assert_eq!(
            result.diagnostic.as_ref().map(|d| d.as_str()),
            diagnostic,
            "{label}"
        );
        activation.dispose().await.unwrap();
    }
}

#[tokio::test]
async fn disposing_mid_turn_aborts_the_result_and_releases_the_activation() {
    let h = delegation().open().await;
    let activation = h
        .start(spec("spawn", "slow", Delivery::Parent))
        .await
        .unwrap();
    // Wait until the turn is running.
    let child = activation.child_id();
    for _ in 0..200 {
        if h.count(child, EventKind::AssistantMessage) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    activation.dispose().await.unwrap();
    let result = activation.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Aborted);
    let types: Vec<_> = h.events(child).iter().map(Event::type_name).collect();
    assert_eq!(
        types.iter().filter(|t| **t == "ActivationSettled").count(),
        1,
        "settled once: {types:?}"
    );
    assert_eq!(types.last(), Some(&"ActivationReleased"));
}

/// A provider whose preparation never finishes, to cancel it.
struct Stuck;

impl SubagentProvider for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    fn capabilities(&self) -> subagent_core::SubagentCapabilities {
        subagent_core::SubagentCapabilities::default()
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn is_continuable(&self) -> bool {
        true
    }
    fn prepare_continuable(
        &self,
        _request: ContinuableCreateRequest,
    ) -> BoxFuture<'static, Result<subagent_core::ContinuableCreateSpec, SubagentError>> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn cancelling_before_publication_fails_the_start_and_records_the_abandoned_reservation() {
    let h = delegation().provider(Arc::new(Stuck)).open().await;
    let signal = CancellationToken::new();
    let cancel = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
    });
    let err = h
        .runtime
        .start_activation(&h.root, spec("stuck", "never", Delivery::Parent), signal)
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::Cancelled);
    let children = h.runtime.list_children(h.root.session()).await.unwrap();
    assert_eq!(children.len(), 1, "the reservation stays in the catalog");
    let types: Vec<_> = h
        .events(children[0].entry.child_id)
        .iter()
        .map(Event::type_name)
        .collect();
    assert_eq!(
        types,
        vec![
            "SessionCreated",
            "ActivationRequested",
            "ActivationAbandoned"
        ]
    );
}

#[tokio::test]
async fn the_start_signal_after_publication_aborts_the_remaining_turn_work() {
    let h = delegation().open().await;
    let signal = CancellationToken::new();
    let activation = h
        .runtime
        .start_activation(
            &h.root,
            spec("spawn", "slow", Delivery::Caller),
            signal.clone(),
        )
        .await
        .unwrap();
    // Once the turn is under way (it said "started"), the signal aborts
    // what is left of it.
    h.until_events("the turn's first words", activation.child_id(), |events| {
        events
            .iter()
            .any(|event| matches!(event, Event::AssistantMessage { .. }))
    })
    .await;
    signal.cancel();
    let result = tokio::time::timeout(Duration::from_secs(30), activation.result())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Aborted);
    assert_eq!(
        plain_text(&result.output),
        "started",
        "partial output is kept"
    );
    activation.dispose().await.unwrap();
}

#[tokio::test]
async fn a_fork_child_is_seeded_with_the_parent_completed_turn_prefix() {
    let h = delegation().open().await;
    let activation = h
        .start(spec("fork", "forked", Delivery::Caller))
        .await
        .unwrap();
    activation.result().await.unwrap();
    let seeded = h
        .events(activation.child_id())
        .into_iter()
        .find_map(|event| match event {
            Event::HistorySeeded { source, .. } => Some(source),
            _ => None,
        });
    assert_eq!(seeded, Some(h.root.session()));
    activation.dispose().await.unwrap();
}

#[tokio::test]
async fn dispose_releases_descendants_before_their_ancestors() {
    let h = delegation().open().await;
    let child = h
        .start(spec("spawn", "slow", Delivery::Parent))
        .await
        .unwrap();
    let grandchild = start(
        &h.runtime,
        &child.agent(),
        spec("spawn", "slow", Delivery::Parent),
    )
    .await
    .unwrap();
    let tree = h.runtime.list_descendants(h.root.session()).await.unwrap();
    assert_eq!(
        tree.iter()
            .map(|e| (e.entry.entry.child_id, e.depth))
            .collect::<Vec<_>>(),
        vec![(child.child_id(), 1), (grandchild.child_id(), 2)]
    );
    child.dispose().await.unwrap();
    let released: Vec<_> = h
        .events_of(EventKind::ActivationReleased)
        .into_iter()
        .map(|r| r.stream)
        .collect();
    assert_eq!(
        released,
        vec![
            StreamId::Session(grandchild.child_id()),
            StreamId::Session(child.child_id())
        ],
        "child-first"
    );
    assert_eq!(
        grandchild.result().await.unwrap().stop_reason,
        SubagentStopReason::Aborted
    );
    let err = start(
        &h.runtime,
        &child.agent(),
        spec("spawn", "late", Delivery::Parent),
    )
    .await
    .err()
    .unwrap();
    assert_eq!(
        err.code(),
        ErrorCode::Unauthorized,
        "a disposed child's handle is stale"
    );
    grandchild.dispose().await.unwrap();
}
