//! The provider registry, lifecycle notices and the root inbox, each test
//! named after the spec behaviour it checks: an unsupported option or an
//! unknown provider is rejected before anything is recorded; the registry
//! lists in insertion order and a removal blocks only new starts; start and
//! end notices pair by run id and name the parent; a reserved child id is
//! used and scoped notices reach only their parent; a closed root's handle
//! is refused; the root inbox streams settlement notices and external
//! reports, and one opened late replays its history, then follows live.

mod common;

use common::{delegation, spec, start};

use std::sync::Arc;
use std::time::Duration;

use subagent_core::{content::plain_text, Delivery, ErrorCode, MessageSource, SubagentStopReason};
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::Notice;
use subagent_store::EventLog;

#[tokio::test]
async fn an_unsupported_option_or_unknown_provider_is_rejected_before_anything_is_recorded() {
    let h = delegation().open().await;
    let head = h.log.head();
    let mut with_persona = spec("process", "x", Delivery::Caller);
    with_persona.request.options.persona = Some("terse".into());
    let err = h.start(with_persona).await.err().unwrap();
    assert_eq!(err.code(), ErrorCode::CapabilityUnsupported);
    let err = h
        .start(spec("nope", "x", Delivery::Caller))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::UnknownProvider);
    assert_eq!(h.log.head(), head, "rejections append nothing");
}

#[tokio::test]
async fn the_registry_lists_in_insertion_order_and_removal_blocks_only_new_starts() {
    let h = delegation().open().await;
    assert_eq!(
        h.runtime.list().unwrap(),
        vec!["spawn", "fork", "process", "exit3"]
    );
    assert!(h.runtime.get_provider("fork").unwrap().is_some());
    let err = h
        .runtime
        .register_provider(Arc::new(SpawnProvider))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::DuplicateProvider);
    let running = h
        .start(spec("process", "kept", Delivery::Caller))
        .await
        .unwrap();
    h.runtime.remove_provider("process").await.unwrap();
    assert!(h.runtime.get_provider("process").unwrap().is_none());
    assert_eq!(
        running.result().await.unwrap().stop_reason,
        SubagentStopReason::Completed,
        "accepted runs are not revoked"
    );
    running.dispose().await.unwrap();
    let err = h
        .start(spec("process", "late", Delivery::Caller))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::UnknownProvider);
}

#[tokio::test]
async fn start_and_end_notices_pair_by_run_id_and_name_the_parent() {
    let h = delegation().open().await;
    let mut notices = h.runtime.notices().unwrap();
    let activation = h
        .start(spec("spawn", "research", Delivery::Caller))
        .await
        .unwrap();
    activation.result().await.unwrap();
    let mut start = None;
    let mut end = None;
    while start.is_none() || end.is_none() {
        match tokio::time::timeout(Duration::from_secs(30), notices.recv())
            .await
            .unwrap()
            .unwrap()
        {
            Notice::Start { parent, info } => start = Some((parent, info)),
            Notice::End { parent, info } => end = Some((parent, info)),
            _ => {}
        }
    }
    let (start, end) = (start.unwrap(), end.unwrap());
    assert_eq!((start.0, end.0), (h.root.session(), h.root.session()));
    assert_eq!(start.1.run_id, end.1.run_id);
    assert!(start.1.local && end.1.local);
    assert_eq!(end.1.stop_reason, SubagentStopReason::Completed);
    assert_eq!(
        end.1.last_assistant_message.as_deref().map(plain_text),
        Some("the answer is 42".into())
    );
    activation.dispose().await.unwrap();
}

#[tokio::test]
async fn a_reserved_child_id_is_used_and_scoped_notices_reach_only_that_parent() {
    let h = delegation().open().await;
    let other = h.runtime.open_root("other host").await.unwrap();
    let mut mine = h.runtime.notices_for(h.root.session()).unwrap();
    let reserved = subagent_core::SessionId::new();
    let mut reserved_spec = spec("spawn", "research", Delivery::Caller);
    reserved_spec.child_id = Some(reserved);
    let activation = h.start(reserved_spec).await.unwrap();
    assert_eq!(activation.child_id(), reserved);
    let foreign = start(&h.runtime, &other, spec("spawn", "plain", Delivery::Caller))
        .await
        .unwrap();
    activation.result().await.unwrap();
    foreign.result().await.unwrap();
    for _ in 0..2 {
        let notice = tokio::time::timeout(Duration::from_secs(30), mine.recv())
            .await
            .unwrap()
            .unwrap();
        match notice {
            Notice::Start { parent, info } => {
                assert_eq!((parent, info.id), (h.root.session(), reserved))
            }
            Notice::End { parent, info } => {
                assert_eq!((parent, info.id), (h.root.session(), reserved))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(50), mine.recv())
            .await
            .is_err(),
        "nothing from the other parent"
    );
    activation.dispose().await.unwrap();
    foreign.dispose().await.unwrap();
}

#[tokio::test]
async fn a_closed_root_handle_is_refused() {
    let h = delegation().open().await;
    h.runtime.close_root(&h.root).await.unwrap();
    let err = h
        .start(spec("spawn", "x", Delivery::Caller))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::Unauthorized);
}

#[tokio::test]
async fn the_root_inbox_streams_settlement_notices_and_external_reports() {
    let h = delegation().open().await;
    let mut inbox = h.runtime.inbox(&h.root).unwrap();
    let local = h
        .start(spec("spawn", "research", Delivery::Parent))
        .await
        .unwrap();
    let external = h
        .start(spec("process", "shout", Delivery::Parent))
        .await
        .unwrap();
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        let message = tokio::time::timeout(Duration::from_secs(30), inbox.recv())
            .await
            .unwrap()
            .unwrap();
        kinds.push(match message.source {
            MessageSource::SubagentSettled {
                sender_session_id, ..
            } => ("settled", sender_session_id),
            MessageSource::SubagentReport { sender_session_id } => ("report", sender_session_id),
            other => panic!("unexpected {other:?}"),
        });
    }
    kinds.sort();
    assert_eq!(
        kinds,
        vec![
            ("report", external.child_id()),
            ("settled", local.child_id())
        ]
    );
    local.dispose().await.unwrap();
    external.dispose().await.unwrap();
}

#[tokio::test]
async fn an_inbox_opened_late_replays_its_history_then_follows_live() {
    let h = delegation().open().await;
    let first = h
        .start(spec("process", "shout", Delivery::Parent))
        .await
        .unwrap();
    first.result().await.unwrap();
    // Unrelated traffic in other streams, before and after the inbox opens.
    let other = h.runtime.open_root("other").await.unwrap();
    let mut inbox = h.runtime.inbox(&h.root).unwrap();
    let second = h
        .start(spec("process", "shout", Delivery::Parent))
        .await
        .unwrap();
    h.runtime.close_root(&other).await.unwrap();
    let mut senders = Vec::new();
    while senders.len() < 2 {
        let message = tokio::time::timeout(Duration::from_secs(30), inbox.recv())
            .await
            .unwrap()
            .unwrap();
        match message.source {
            MessageSource::SubagentReport { sender_session_id } => senders.push(sender_session_id),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        senders,
        vec![first.child_id(), second.child_id()],
        "history first, then live, each once"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(50), inbox.recv())
            .await
            .is_err(),
        "nothing else"
    );
    first.dispose().await.unwrap();
    second.dispose().await.unwrap();
}
