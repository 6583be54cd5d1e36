//! Recovery and replay through the runtime, each test named after the spec
//! behaviour it checks: reopening after the host died settles its live work
//! explicitly (abandoned activations, runs settled `error`, one
//! `HostRecovered`) and a second reopen appends nothing; concurrent starts
//! pipeline into a gap-free log that replays to the runtime's answers; a
//! clean close checkpoints, so reopening folds no tail, and a bad checkpoint
//! is discarded and the log folded again.

mod common;

use common::{delegation, delegation_host, events, records, spec, start, stream_events, Harness};

use std::sync::Arc;
use std::time::Duration;

use subagent_core::{Delivery, Event, EventKind, StreamId, SubagentStopReason};
use subagent_runtime::providers::ProcessProvider;
use subagent_store::{EventLog, MemoryLog, RocksLog, RocksOptions};

#[test]
fn reopening_after_the_host_died_settles_live_work_explicitly() {
    let log = MemoryLog::new();
    let (child, external) = {
        // The first host dies with its tokio runtime: its drivers stop mid-flight.
        let host_runtime = tokio::runtime::Runtime::new().unwrap();
        host_runtime.block_on(async {
            let h = delegation().over(log.clone()).open().await;
            let slow = h
                .start(spec("spawn", "slow", Delivery::Parent))
                .await
                .unwrap();
            let mut sleeping = spec("process", "sleeper", Delivery::Parent);
            sleeping.provider = "sleeper".into();
            h.runtime
                .register_provider(Arc::new(ProcessProvider::new("sleeper", "sleep", &["60"])))
                .await
                .unwrap();
            let external = h.start(sleeping).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            (slow.child_id(), external.child_id())
        })
    };
    let host_runtime = tokio::runtime::Runtime::new().unwrap();
    host_runtime.block_on(async {
        // The new host has not registered its providers yet.
        let (runtime, report) = Harness::builder(delegation_host())
            .no_providers()
            .over(log.clone())
            .open_runtime()
            .await;
        assert!(report.events > 0);
        let child_events = events(&log, child);
        assert!(matches!(
            child_events.last(),
            Some(Event::ActivationAbandoned {
                reason: subagent_core::AbandonReason::HostRestart,
                ..
            })
        ));
        let external_events = events(&log, external);
        let settled = external_events.iter().find_map(|e| match e {
            Event::RunSettled { result, .. } => Some(result.clone()),
            _ => None,
        });
        let settled = settled.expect("the external run settles");
        assert_eq!(settled.stop_reason, SubagentStopReason::Error);
        assert!(settled
            .diagnostic
            .unwrap()
            .as_str()
            .contains("host restarted"));
        assert!(stream_events(&log, StreamId::Runtime)
            .iter()
            .any(|e| e.kind() == EventKind::HostRecovered));
        assert!(
            runtime.list().unwrap().is_empty(),
            "providers are registered again by the new host"
        );
        let (_, again) = Harness::builder(delegation_host())
            .no_providers()
            .over(log.clone())
            .open_runtime()
            .await;
        assert_eq!(again.events, 0, "a clean reopen appends nothing");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_starts_pipeline_into_a_log_that_replays_to_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let log = RocksLog::open(dir.path(), RocksOptions::default()).unwrap();
    let h = delegation().over(log).open().await;
    let tasks: Vec<_> = (0..32)
        .map(|index| {
            let (runtime, root) = (h.runtime.clone(), h.root.clone());
            tokio::spawn(async move {
                let provider = if index % 4 == 0 { "process" } else { "spawn" };
                let activation = start(
                    &runtime,
                    &root,
                    spec(provider, "research", Delivery::Parent),
                )
                .await
                .unwrap();
                let result = activation.result().await.unwrap();
                activation.dispose().await.unwrap();
                result.stop_reason
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), SubagentStopReason::Completed);
    }
    let answered = h.runtime.list_descendants(h.root.session()).await.unwrap();
    assert_eq!(answered.len(), 32);
    let records = records(&h.log);
    assert_eq!(records.len() as u64, h.log.head());
    assert!(
        records
            .windows(2)
            .all(|w| w[1].position == w[0].position + 1),
        "gap-free"
    );
    let rebuilt = subagent_projections::Projections::fold(&records);
    assert_eq!(
        rebuilt.list_descendants(h.root.session()),
        answered,
        "the log replays to the runtime's answers"
    );
    assert_eq!(
        rebuilt.pending_messages(h.root.session()).len(),
        32,
        "one notice or report per child"
    );
}

#[tokio::test]
async fn a_clean_close_checkpoints_so_reopening_folds_no_tail_and_a_bad_checkpoint_is_refolded() {
    let dir = tempfile::tempdir().unwrap();
    let open = || RocksLog::open(dir.path(), RocksOptions::default()).unwrap();
    let (root, listed) = {
        let h = delegation().over(open()).open().await;
        let activation = h
            .start(spec("spawn", "research", Delivery::Parent))
            .await
            .unwrap();
        activation.result().await.unwrap();
        let listed = h.runtime.list_descendants(h.root.session()).await.unwrap();
        h.runtime.close().await.unwrap();
        (h.root.session(), listed)
    };
    let log = open();
    let head = log.head();
    // Beside the checkpoint, the sizes of its maps, for the next refold.
    let sizes = log
        .read_checkpoint(subagent_projections::MAP_SIZES_NAME)
        .unwrap()
        .and_then(|bytes| subagent_projections::MapSizes::decode(&bytes))
        .unwrap();
    let state = subagent_replay::state_at(&log, None).unwrap();
    assert_eq!(sizes, subagent_projections::MapSizes::of(&state));
    assert_eq!((sizes.position, sizes.sessions), (head, 2));
    // Reopened with no providers and no root: reopening records nothing.
    let reopen = || {
        Harness::builder(delegation_host())
            .no_providers()
            .over(log.clone())
            .open_runtime()
    };
    let (runtime, report) = reopen().await;
    assert_eq!(report.opened.checkpoint_position, Some(head));
    assert_eq!(report.opened.tail_events, 0);
    assert_eq!(report.events, 0, "a clean close leaves nothing to recover");
    assert_eq!(runtime.list_descendants(root).await.unwrap(), listed);
    drop(runtime);
    log.write_checkpoint(
        subagent_projections::checkpoint::CHECKPOINT_NAME,
        b"not a checkpoint",
    )
    .unwrap();
    let (runtime, report) = reopen().await;
    assert!(report.opened.discarded_checkpoint.is_some());
    assert_eq!(report.opened.tail_events, head);
    assert_eq!(runtime.list_descendants(root).await.unwrap(), listed);
}
