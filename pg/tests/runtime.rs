//! The runtime on a PostgreSQL log, and the server restarted under it
//! mid-workload: every event durable before the restart is still there
//! after it, by event id at its position (as the RocksDB crash test
//! checks), every delegation the runtime acknowledged survives (a start
//! after the restart counts only if it was acknowledged), a runtime
//! opened on a new handle ends every activation exactly once (released by
//! the close, or abandoned by recovery when the close could not write),
//! `verify` passes, and a cold resume of an interrupted child completes.

use std::sync::Arc;
use std::time::Duration;

use subagent_core::{
    content::plain_text, ContentBlock, Delivery, Event, EventId, StreamId, SubagentActivationSpec,
};
use subagent_pg::testing::{unique_schema, TestServer};
use subagent_pg::PgLog;
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::scripted::Step;
use subagent_runtime::{Script, ScriptedHost, SubagentRuntime};
use subagent_store::{EventLog, EventLogExt};
use tokio_util::sync::CancellationToken;

/// Children that append steadily (a message every few milliseconds, so the
/// restart lands on appends in flight), then wait to be stopped.
fn host() -> Arc<ScriptedHost> {
    let mut busy = Vec::new();
    for _ in 0..400 {
        busy.push(Step::Say("working".into()));
        busy.push(Step::SleepMs(3));
    }
    busy.push(Step::SleepMs(60_000));
    Arc::new(ScriptedHost::new(Script {
        turns: vec![busy, vec![Step::Say("resumed and done".into())]],
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_mid_workload_loses_nothing_acknowledged_and_the_runtime_recovers() {
    let mut server = TestServer::start().expect("a PostgreSQL server of its own");
    let schema = unique_schema("runtime");
    let log: Arc<dyn EventLog> =
        Arc::new(PgLog::connect(server.options(&schema)).expect("connect"));
    let (runtime, _) = SubagentRuntime::open(log.clone(), host())
        .await
        .expect("open");
    runtime
        .register_provider(Arc::new(SpawnProvider))
        .await
        .expect("provider");
    let root = runtime.open_root("host").await.expect("root");
    let mut children = Vec::new();
    for index in 0..4 {
        let spec = SubagentActivationSpec::with_text_prompt(
            "spawn",
            &format!("worker-{index}"),
            "go",
            Delivery::Caller,
        );
        let child = runtime
            .start_activation(&root, spec, CancellationToken::new())
            .await
            .expect("start");
        children.push(child.child_id());
    }
    // Wait until every child's turn is running (its first message is durable).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let said: usize = children
            .iter()
            .filter(|child| {
                log.read_stream(StreamId::Session(**child), 1)
                    .filter_map(Result::ok)
                    .any(|record| matches!(record.event, Event::AssistantMessage { .. }))
            })
            .count();
        if said == children.len() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the children did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Everything durable before the restart, by event id and position: the
    // appends the runtime had acknowledged (a record is read back only once
    // its append committed).
    let acknowledged_head = log.head();
    let acknowledged: Vec<(EventId, u64)> = log
        .read_all(1)
        .map(|record| record.expect("read before the restart"))
        .take_while(|record| record.position <= acknowledged_head)
        .map(|record| (record.event_id, record.position))
        .collect();
    assert_eq!(
        acknowledged.len() as u64,
        acknowledged_head,
        "a gap-free log up to the head"
    );

    server.restart().expect("restart the server mid-workload");
    // A start after the restart is acknowledged only if it is durable: the
    // pool reconnects, unless an append in flight was lost, after which the
    // log refuses appends (fail-stop) and the start fails.
    let spec = SubagentActivationSpec::with_text_prompt("spawn", "late", "go", Delivery::Caller);
    if let Ok(late) = runtime
        .start_activation(&root, spec, CancellationToken::new())
        .await
    {
        children.push(late.child_id());
    }
    let root_id = root.session();
    let _ = runtime.close().await;
    drop((runtime, root, log));

    let log: Arc<dyn EventLog> =
        Arc::new(PgLog::connect(server.options(&schema)).expect("reconnect"));
    // Nothing acknowledged was lost or moved: each acknowledged event is
    // still at its position (events appended after the restart cannot make
    // up for a lost one, as a comparison of heads would let them).
    let after: Vec<(EventId, u64)> = log
        .read_all(1)
        .map(|record| record.expect("read after the restart"))
        .take(acknowledged.len())
        .map(|record| (record.event_id, record.position))
        .collect();
    assert_eq!(after.len(), acknowledged.len(), "acknowledged events lost");
    for ((id, position), found) in acknowledged.iter().zip(&after) {
        assert_eq!(
            found,
            &(*id, *position),
            "acknowledged event {id} lost or moved from position {position}"
        );
        let located = log.locate_event(id).expect("the id index reads");
        assert_eq!(
            located.map(|location| location.position),
            Some(*position),
            "acknowledged event {id} is indexed at its position"
        );
    }
    for child in &children {
        assert!(
            log.read_stream(StreamId::Session(*child), 1)
                .filter_map(Result::ok)
                .any(|record| matches!(record.event, Event::SessionCreated { .. })),
            "child {child} survives"
        );
    }
    let (runtime, _recovery) = SubagentRuntime::open(log.clone(), host())
        .await
        .expect("recover");
    runtime
        .register_provider(Arc::new(SpawnProvider))
        .await
        .expect("provider");
    let records: Vec<_> = log.read_all(1).map(|r| r.expect("read")).collect();
    // Each child's activation ended exactly once: released by the close, or
    // abandoned by the recovery when the close could not write.
    for child in &children {
        let ended = records
            .iter()
            .filter(|r| r.stream == StreamId::Session(*child))
            .filter(|r| {
                matches!(
                    r.event,
                    Event::ActivationAbandoned { .. } | Event::ActivationReleased { .. }
                )
            })
            .count();
        assert_eq!(ended, 1, "child {child}'s activation ended once");
    }
    assert!(
        runtime.projections().live_activations().is_empty(),
        "nothing is left live"
    );
    let report = subagent_replay::verify(log.as_ref()).expect("verify");
    assert!(report.is_ok(), "{report:?}");

    // The interrupted child resumes from its durable history.
    let root = runtime.reopen_root(root_id).await.expect("reopen root");
    let head = log.head();
    runtime
        .send_message(
            &root,
            children[0],
            vec![ContentBlock::text("carry on")],
            CancellationToken::new(),
        )
        .await
        .expect("cold resume");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let resumed = log
            .read_all(head + 1)
            .filter_map(Result::ok)
            .any(|r| r.stream == StreamId::Session(children[0]) && matches!(&r.event, Event::AssistantMessage { content, .. } if plain_text(content) == "resumed and done"));
        if resumed {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the resumed child did not finish"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runtime.close().await.expect("close");
    assert!(subagent_replay::verify(log.as_ref())
        .expect("verify")
        .is_ok());
}
