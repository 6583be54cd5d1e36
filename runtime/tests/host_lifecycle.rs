//! The host's side of the runtime's life, each test named after the behaviour
//! it checks: an agent that cannot be built settles as an `error` result,
//! `close()` refuses every later call, a restarted host takes its root back,
//! and a storage failure names its cause.

mod common;

use common::{count, events, spec, start, text, until, Harness};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use subagent_core::{
    ContentBlock, Delivery, ErrorCode, Event, EventKind, MessageSource, ModelSelectionSettings,
    SessionId, SubagentActivationSpec, SubagentError, SubagentStopReason,
};
use subagent_projections::Activity;
use subagent_runtime::providers::{ForkProvider, SpawnProvider};
use subagent_runtime::scripted::Step;
use subagent_runtime::BoxFuture;
use subagent_runtime::{
    Agent, AgentHost, AgentSpec, InterruptAuthority, Notice, Script, ScriptedHost,
    SubagentActivation, SubagentRuntime, TranscriptItem, TurnEnd, TurnInput,
};
use subagent_store::filling::FillingLog;
use subagent_store::{EventLog, MemoryLog, RocksLog, RocksOptions, StoreError};
use tokio_util::sync::CancellationToken;

// ---- helpers ------------------------------------------------------------------

/// The scripts: a default two-turn agent, a slow one, and a parent that
/// answers every turn.
fn scripts() -> ScriptedHost {
    ScriptedHost::new(Script {
        turns: vec![
            vec![Step::Say("first".into())],
            vec![Step::Say("again".into())],
        ],
    })
    .with(
        "slow",
        Script {
            turns: vec![vec![Step::Say("working".into()), Step::SleepMs(60_000)]],
        },
    )
}

/// A host whose model endpoint can go down: while `down`, or for a session
/// labelled `broken`, building an agent fails with a message that carries a
/// credential (which must never reach the log or a caller).
struct FlakyHost {
    scripts: ScriptedHost,
    down: AtomicBool,
    creations: Mutex<Vec<String>>,
}

const ENDPOINT_DOWN: &str =
    "model endpoint down: POST https://models.example/v1 api_key=sk-live-0123456789abcdef refused";

impl FlakyHost {
    fn new() -> Arc<FlakyHost> {
        Arc::new(FlakyHost {
            scripts: scripts(),
            down: AtomicBool::new(false),
            creations: Mutex::new(Vec::new()),
        })
    }

    fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

impl AgentHost for FlakyHost {
    fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        self.creations.lock().unwrap().push(spec.label.clone());
        if self.down.load(Ordering::SeqCst) || spec.label == "broken" {
            return Box::pin(async { Err(SubagentError::internal(ENDPOINT_DOWN)) });
        }
        self.scripts.create(spec)
    }

    fn tools(&self) -> Vec<subagent_runtime::ToolDefinition> {
        self.scripts.tools()
    }
}

/// The settlement notices in `session`'s stream, by the child they are about.
fn notices_about(log: &dyn EventLog, session: SessionId, child: SessionId) -> Vec<String> {
    events(log, session)
        .into_iter()
        .filter_map(|event| match event {
            Event::MessageAccepted {
                source:
                    MessageSource::SubagentSettled {
                        summary,
                        sender_session_id,
                    },
                ..
            } if sender_session_id == child => Some(summary),
            _ => None,
        })
        .collect()
}

// ---- 5: an agent that cannot be built -------------------------------------------

#[tokio::test]
async fn an_agent_that_cannot_be_built_settles_error_notifies_the_parent_and_is_released() {
    let host = FlakyHost::new();
    let h = Harness::open(host.clone()).await;
    let mut inbox = h.runtime.inbox(&h.root).unwrap();
    let mut notices = h.runtime.notices_for(h.root.session()).unwrap();
    host.set_down(true);
    let activation = h
        .start(spec("spawn", "worker", Delivery::Parent))
        .await
        .expect("the prompt was accepted: the failure settles through the result");
    let child = activation.child_id();
    let prompt = activation.message_id().expect("a local child's prompt id");

    // The result is the settled failure, not an infrastructure error.
    let result = activation.result().await.expect("a result, not Err");
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    assert!(result.output.is_empty());
    let diagnostic = result.diagnostic.clone().expect("a diagnostic").to_string();
    assert!(
        diagnostic.contains("creating the agent failed")
            && diagnostic.contains("model endpoint down"),
        "{diagnostic}"
    );
    assert!(
        !diagnostic.contains("sk-live-0123456789abcdef"),
        "the credential is redacted: {diagnostic}"
    );

    // Recorded durably: settled `error`, then released; never published.
    let child_events = h.events(child);
    let settled = child_events.iter().find_map(|event| match event {
        Event::ActivationSettled { epoch: 1, result } => Some(result.clone()),
        _ => None,
    });
    assert_eq!(
        settled.as_ref(),
        Some(&result),
        "the log holds what result() returned"
    );
    assert_eq!(count(&child_events, EventKind::ActivationReleased), 1);
    assert_eq!(count(&child_events, EventKind::ActivationPublished), 0);
    assert!(
        !serde_json::to_string(&child_events)
            .unwrap()
            .contains("sk-live-0123456789abcdef"),
        "no credential in the log"
    );

    // The parent is notified as for any settlement: a status-only notice.
    let notice = tokio::time::timeout(Duration::from_secs(30), inbox.recv())
        .await
        .expect("the notice arrives")
        .expect("the inbox is open");
    assert!(matches!(
        notice.source,
        MessageSource::SubagentSettled { sender_session_id, .. } if sender_session_id == child
    ));
    assert!(
        subagent_core::content::plain_text(&notice.content).ends_with("error"),
        "{:?}",
        notice.content
    );
    // No `subagent/start` was announced (no agent was ever published), so
    // no unpaired `subagent/end` either.
    assert!(matches!(
        notices.try_recv(),
        Err(tokio::sync::mpsc::error::TryRecvError::Empty)
    ));

    // Nothing stays live to swallow messages; the prompt stays pending.
    let state = h.runtime.projections();
    assert_eq!(state.activity(child), Activity::Inactive);
    assert!(state.live_activations().is_empty());
    assert_eq!(state.pending_messages(child), vec![prompt]);
    let refused = h
        .runtime
        .send_message(
            &activation.agent(),
            h.root.session(),
            text("from a dead agent"),
            CancellationToken::new(),
        )
        .await
        .expect_err("the failed activation's handle is stale");
    assert_eq!(refused.code(), ErrorCode::Unauthorized);
    assert!(
        !h.runtime.wait_for_children(&h.root).await.unwrap(),
        "no live child work"
    );

    // Once the endpoint is back, a send cold-resumes the child, and its first
    // turn takes the original prompt and the new message, in order.
    host.set_down(false);
    let later = h.send(child, "try again").await.unwrap();
    h.until_events("the resumed turn", child, |events| {
        count(events, EventKind::TurnEnded) == 1
    })
    .await;
    let claimed = h.events(child).into_iter().find_map(|event| match event {
        Event::MessagesClaimed { ids, turn: 1 } => Some(ids),
        _ => None,
    });
    assert_eq!(claimed, Some(vec![prompt, later]));

    // Disposing the failed activation's handle does not touch the resumed
    // epoch (a handle addresses its own activation only).
    activation.dispose().await.unwrap();
    let state = h.runtime.projections();
    assert_eq!(
        state.activations[&child].live.as_ref().map(|l| l.epoch),
        Some(2)
    );
    h.runtime.drain_children(&h.root, &[child]).await.unwrap();
    assert_eq!(h.runtime.projections().activity(child), Activity::Inactive);
    h.assert_inbox_invariants();
    h.runtime.close().await.unwrap();
}

#[tokio::test]
async fn a_live_parent_is_woken_by_the_failure_notice_of_its_child() {
    let h = Harness::open(FlakyHost::new()).await;
    let parent = h
        .start(spec("spawn", "coordinator", Delivery::Caller))
        .await
        .unwrap();
    parent.result().await.unwrap();
    let parent_id = parent.child_id();
    assert_eq!(h.count(parent_id, EventKind::TurnStarted), 1);
    // The parent delegates to a child whose agent cannot be built.
    let broken = start(
        &h.runtime,
        &parent.agent(),
        spec("spawn", "broken", Delivery::Parent),
    )
    .await
    .unwrap();
    let result = broken.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    // The idle parent runs a turn on the notice, as for any settlement.
    h.until_events("the parent's turn on the notice", parent_id, |events| {
        count(events, EventKind::TurnEnded) == 2
    })
    .await;
    let notice = notices_about(&h.log, parent_id, broken.child_id());
    assert_eq!(notice.len(), 1);
    assert!(h
        .runtime
        .projections()
        .pending_messages(parent_id)
        .is_empty());
    parent.dispose().await.unwrap();
    h.assert_inbox_invariants();
}

#[tokio::test]
async fn a_cold_resume_whose_agent_cannot_be_built_settles_error_and_the_message_waits() {
    let host = FlakyHost::new();
    let h = Harness::open(host.clone()).await;
    let activation = h
        .start(spec("spawn", "worker", Delivery::Caller))
        .await
        .unwrap();
    activation.result().await.unwrap();
    activation.dispose().await.unwrap();
    let child = activation.child_id();

    host.set_down(true);
    let message = h
        .send(child, "more")
        .await
        .expect("accepted: the resume's failure settles, it does not refuse");
    h.until_events("the resumed epoch to fail", child, |events| {
        count(events, EventKind::ActivationReleased) == 2
    })
    .await;
    let failed = h
        .events(child)
        .into_iter()
        .find_map(|event| match event {
            Event::ActivationSettled { epoch: 2, result } => Some(result),
            _ => None,
        })
        .expect("the resumed epoch settled");
    assert_eq!(failed.stop_reason, SubagentStopReason::Error);
    assert!(failed.diagnostic.as_ref().is_some_and(
        |d| d.as_str().contains("model endpoint down") && !d.as_str().contains("sk-live")
    ));
    // A resume reports to the parent (its delivery is `parent`).
    let notices = notices_about(&h.log, h.root.session(), child);
    assert_eq!(notices.len(), 1, "{notices:?}");
    let state = h.runtime.projections();
    assert_eq!(state.activity(child), Activity::Inactive);
    assert_eq!(state.pending_messages(child), vec![message]);

    // The next send resumes again and the message is finally taken.
    host.set_down(false);
    let next = h.send(child, "and this").await.unwrap();
    h.until_events("the third epoch's turn", child, |events| {
        count(events, EventKind::TurnEnded) == 2
    })
    .await;
    let claimed = h.events(child).into_iter().find_map(|event| match event {
        Event::MessagesClaimed { ids, turn: 2 } => Some(ids),
        _ => None,
    });
    assert_eq!(claimed, Some(vec![message, next]));
    h.runtime.close().await.unwrap();
    h.assert_inbox_invariants();
}

// ---- 6: close() closes ----------------------------------------------------------

/// Panics unless `outcome` is the `subagent/closed` refusal of `what`.
fn assert_closed<T: std::fmt::Debug>(what: &str, outcome: Result<T, SubagentError>) {
    match outcome {
        Err(err) => assert_eq!(err.code(), ErrorCode::Closed, "{what}: {err}"),
        Ok(value) => panic!("{what} succeeded after close: {value:?}"),
    }
}

#[tokio::test]
async fn after_close_every_entry_point_is_refused_with_subagent_closed() {
    let h = Harness::open(FlakyHost::new()).await;
    let registration = h
        .runtime
        .register_provider(Arc::new(ForkProvider))
        .await
        .unwrap();
    let idle = h
        .start(spec("spawn", "worker", Delivery::Parent))
        .await
        .unwrap();
    idle.result().await.unwrap();
    let running = h
        .start(spec("spawn", "slow", Delivery::Caller))
        .await
        .unwrap();
    until("the slow child to run", || {
        h.runtime.projections().activity(running.child_id()) == Activity::Running
    })
    .await;
    let mut inbox = h.runtime.inbox(&h.root).unwrap();
    let mut scoped = h.runtime.notices_for(h.root.session()).unwrap();
    let mut all = h.runtime.notices().unwrap();

    h.runtime.close().await.unwrap();
    assert!(h.runtime.is_closed());
    let head = h.log.head();
    // Closing again is a no-op.
    h.runtime.close().await.unwrap();

    // Every activation was released by the close, child-first; results stand.
    assert_eq!(
        running.result().await.unwrap().stop_reason,
        SubagentStopReason::Aborted
    );
    assert_eq!(
        idle.result().await.unwrap().stop_reason,
        SubagentStopReason::Completed
    );
    let state = h.runtime.projections();
    assert!(state.live_activations().is_empty());
    assert!(
        state.providers.is_empty(),
        "registrations ended with the host"
    );

    let (runtime, root) = (&h.runtime, &h.root);
    let child = idle.agent();
    let signal = CancellationToken::new;
    assert_closed("open_root", runtime.open_root("late").await);
    assert_closed("open_root_with", runtime.open_root_with("late", None).await);
    assert_closed("reopen_root", runtime.reopen_root(root.session()).await);
    assert_closed("close_root", runtime.close_root(root).await);
    assert_closed(
        "start_activation (root)",
        h.start(spec("spawn", "worker", Delivery::Parent))
            .await
            .map(|a| a.child_id()),
    );
    assert_closed(
        "start_activation (child)",
        start(runtime, &child, spec("spawn", "worker", Delivery::Parent))
            .await
            .map(|a| a.child_id()),
    );
    assert_closed(
        "send_message (to a child)",
        runtime
            .send_message(root, idle.child_id(), text("hi"), signal())
            .await,
    );
    assert_closed(
        "send_message (to the parent)",
        runtime
            .send_message(&child, root.session(), text("hi"), signal())
            .await,
    );
    assert_closed(
        "interrupt (user)",
        runtime
            .interrupt(
                running.child_id(),
                InterruptAuthority::User {
                    parent_session_id: root.session(),
                },
            )
            .await,
    );
    assert_closed(
        "interrupt (ancestor)",
        runtime
            .interrupt(running.child_id(), InterruptAuthority::Ancestor(root))
            .await,
    );
    assert_closed(
        "drain_children",
        runtime.drain_children(root, &[idle.child_id()]).await,
    );
    assert_closed(
        "drain_descendants",
        runtime.drain_descendants(std::slice::from_ref(root)).await,
    );
    assert_closed(
        "drain_descendants (none)",
        runtime.drain_descendants(&[]).await,
    );
    assert_closed("wait_for_children", runtime.wait_for_children(root).await);
    assert_closed(
        "register_provider",
        runtime
            .register_provider(Arc::new(SpawnProvider))
            .await
            .map(|r| r.name().to_owned()),
    );
    assert_closed("remove_provider", runtime.remove_provider("fork").await);
    assert_closed("ProviderRegistration::remove", registration.remove().await);
    assert_closed("inbox", runtime.inbox(root).map(|_| ()));
    assert_closed("inbox (child)", runtime.inbox(&child).map(|_| ()));
    assert_closed("notices", runtime.notices().map(|_| ()));
    assert_closed(
        "notices_for",
        runtime.notices_for(root.session()).map(|_| ()),
    );
    assert_closed(
        "get_provider",
        runtime.get_provider("spawn").map(|p| p.is_some()),
    );
    assert_closed("list", runtime.list());
    assert_closed("list_children", runtime.list_children(root.session()).await);
    assert_closed(
        "list_descendants",
        runtime.list_descendants(root.session()).await,
    );
    assert_closed(
        "set_persona_variables",
        runtime.set_persona_variables([("user".to_owned(), "Ada".to_owned())].into()),
    );
    assert_closed(
        "set_model_selection",
        runtime.set_model_selection(ModelSelectionSettings::default()),
    );
    assert_closed("model_selection", runtime.model_selection());
    assert_closed(
        "set_max_depth_setting",
        runtime.set_max_depth_setting(Some(2)),
    );
    assert_closed("resolve_max_depth", runtime.resolve_max_depth(None));
    assert_closed("tools", runtime.tools().map(<[_]>::len));
    // A clone is the same runtime.
    assert_closed("a clone", runtime.clone().open_root("late").await);
    assert_eq!(h.log.head(), head, "nothing was recorded after close");

    // The handles' own outcomes stay readable; disposing again is a no-op.
    idle.dispose().await.unwrap();
    running.dispose().await.unwrap();
    assert_eq!(h.log.head(), head);

    // Readers opened before the close end with it.
    for ended in [
        tokio::time::timeout(Duration::from_secs(30), async {
            while inbox.recv().await.is_some() {}
        })
        .await,
        tokio::time::timeout(Duration::from_secs(30), async {
            while scoped.recv().await.is_some() {}
        })
        .await,
    ] {
        assert!(ended.is_ok(), "a reader outlived the close");
    }
    // The broadcast saw the close's own provider removals, and nothing after.
    let mut removed = Vec::new();
    while let Ok(notice) = all.try_recv() {
        if let Notice::ProviderRemoved(name) = notice {
            removed.push(name);
        }
    }
    assert_eq!(removed, vec!["spawn".to_owned(), "fork".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn starts_and_sends_racing_close_are_refused_or_released_never_left_live() {
    for round in 0..20 {
        let h = Harness::open(FlakyHost::new()).await;
        let resident = h
            .start(spec("spawn", "worker", Delivery::Caller))
            .await
            .unwrap();
        resident.result().await.unwrap();
        resident.dispose().await.unwrap();
        let mut racers = Vec::new();
        for _ in 0..4 {
            let (runtime, root) = (h.runtime.clone(), h.root.clone());
            racers.push(tokio::spawn(async move {
                start(&runtime, &root, spec("spawn", "slow", Delivery::Parent))
                    .await
                    .map(|activation| activation.child_id())
            }));
        }
        {
            let (sender, child) = (h.clone(), resident.child_id());
            racers.push(tokio::spawn(async move {
                sender.send(child, "wake up").await.map(|_| child)
            }));
        }
        tokio::task::yield_now().await;
        h.runtime.close().await.unwrap();
        for racer in racers {
            match racer.await.unwrap() {
                Ok(_) => {}
                Err(err) => assert!(
                    matches!(err.code(), ErrorCode::Closed | ErrorCode::Cancelled),
                    "round {round}: {err}"
                ),
            }
        }
        let head = h.log.head();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(h.log.head(), head, "round {round}: recorded after close");
        let rebuilt = h.fold();
        assert!(
            rebuilt.live_activations().is_empty(),
            "round {round}: {:?} live after close",
            rebuilt.live_activations()
        );
        h.assert_inbox_invariants();
    }
}

// ---- 7: a restarted host takes its root back ------------------------------------

/// Opens the RocksDB log in `dir`, waiting for the previous handle to go.
fn open_rocks(dir: &std::path::Path) -> RocksLog {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match RocksLog::open(dir, RocksOptions::default()) {
            Ok(log) => return log,
            Err(StoreError::Locked { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(err) => panic!("opening the log: {err}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_host_reopens_its_root_and_messages_drains_and_lists_its_children() {
    let dir = tempfile::tempdir().unwrap();
    // The first host delegates twice, then shuts down cleanly.
    let (root_id, first, second) = {
        let h = Harness::builder(scripts())
            .over(open_rocks(dir.path()))
            .open()
            .await;
        let mut ids = Vec::new();
        for label in ["one", "two"] {
            let activation = h
                .start(spec("spawn", label, Delivery::Parent))
                .await
                .unwrap();
            activation.result().await.unwrap();
            ids.push(activation.child_id());
        }
        // One process per log: a second opener is locked out.
        assert!(matches!(
            RocksLog::open(dir.path(), RocksOptions::default()),
            Err(StoreError::Locked { .. })
        ));
        h.runtime.close().await.unwrap();
        (h.root.session(), ids[0], ids[1])
    };

    // The second host takes the same root back.
    let Harness {
        log, runtime, root, ..
    } = Harness::builder(scripts())
        .over(open_rocks(dir.path()))
        .reopen(root_id)
        .open()
        .await;
    assert_eq!(root.session(), root_id);
    let held = runtime.reopen_root(root_id).await.unwrap_err();
    assert_eq!(held.code(), ErrorCode::RootHeld, "{held}");
    let child_session = runtime.reopen_root(first).await.unwrap_err();
    assert_eq!(child_session.code(), ErrorCode::Unauthorized);
    let unknown = runtime.reopen_root(SessionId::new()).await.unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::ParentUnavailable);
    let fresh = runtime.open_root("another").await.unwrap();
    assert_eq!(
        runtime
            .reopen_root(fresh.session())
            .await
            .unwrap_err()
            .code(),
        ErrorCode::RootHeld,
        "a root opened by this runtime is held too"
    );

    // It lists its children from the durable catalog ...
    let listed: Vec<SessionId> = runtime
        .list_children(root_id)
        .await
        .unwrap()
        .iter()
        .map(|entry| entry.entry.child_id)
        .collect();
    assert_eq!(listed, vec![first, second]);
    assert_eq!(runtime.list_descendants(root_id).await.unwrap().len(), 2);
    let agents = runtime.projections().list_agents(root_id);
    assert_eq!(
        agents.len(),
        2,
        "both inactive children are listed as agents"
    );
    // ... messages one (a cold resume in a new epoch) ...
    let mut inbox = runtime.inbox(&root).unwrap();
    runtime
        .send_message(&root, first, text("follow up"), CancellationToken::new())
        .await
        .unwrap();
    until("the resumed turn", || {
        count(&events(&log, first), EventKind::TurnEnded) == 2
    })
    .await;
    assert!(runtime.wait_for_children(&root).await.unwrap());
    // The resumed epoch's settlement reaches the reopened root's inbox.
    let is_about_first = |message: &subagent_runtime::InboxMessage| matches!(message.source, MessageSource::SubagentSettled { sender_session_id, .. } if sender_session_id == first);
    let mut about_first = 0;
    while about_first < 2 {
        let message = tokio::time::timeout(Duration::from_secs(10), inbox.recv())
            .await
            .expect("the first epoch's notice and the resume's arrive")
            .expect("the inbox stays open");
        about_first += usize::from(is_about_first(&message));
    }
    // And no third (a late one would be counted here).
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(300), inbox.recv()).await
    {
        about_first += usize::from(is_about_first(&message));
    }
    assert_eq!(about_first, 2, "the first epoch's notice and the resume's");
    // ... drains them ...
    runtime
        .drain_children(&root, &[first, second])
        .await
        .unwrap();
    let state = runtime.projections();
    assert_eq!(state.activity(first), Activity::Inactive);
    assert_eq!(
        count(&events(&log, first), EventKind::ActivationReleased),
        2,
        "both epochs released"
    );
    // ... and delegates anew.
    let third = start(&runtime, &root, spec("spawn", "three", Delivery::Parent))
        .await
        .unwrap();
    third.result().await.unwrap();
    assert_eq!(runtime.list_children(root_id).await.unwrap().len(), 3);

    // A drain's cutoff below the root ends with the host, so the next host
    // can delegate from it again; and a closed root can be taken back.
    runtime
        .drain_descendants(std::slice::from_ref(&root))
        .await
        .unwrap();
    assert_eq!(
        start(&runtime, &root, spec("spawn", "four", Delivery::Parent))
            .await
            .map(|a| a.child_id())
            .unwrap_err()
            .code(),
        ErrorCode::AdmissionClosed
    );
    runtime.close_root(&root).await.unwrap();
    assert_eq!(
        runtime.close_root(&root).await.unwrap_err().code(),
        ErrorCode::Unauthorized,
        "a closed root's handle is stale"
    );
    let root = runtime.reopen_root(root_id).await.unwrap();
    let after_close_root = start(&runtime, &root, spec("spawn", "five", Delivery::Caller))
        .await
        .expect("closing the root ended the cutoff");
    after_close_root.result().await.unwrap();
    runtime
        .drain_descendants(std::slice::from_ref(&root))
        .await
        .unwrap();
    runtime.close().await.unwrap();
    // The directory is free once the runtime and every handle that holds it
    // (an activation holds its runtime) are gone.
    drop((runtime, third, after_close_root, log));

    let h = Harness::builder(scripts())
        .over(open_rocks(dir.path()))
        .reopen(root_id)
        .open()
        .await;
    assert_eq!(
        h.report.events, 0,
        "the close ended the held root's cutoff itself: nothing to recover"
    );
    let fourth = h
        .start(spec("spawn", "four", Delivery::Parent))
        .await
        .expect("the cutoff ended with the previous host");
    fourth.result().await.unwrap();
    h.runtime.close().await.unwrap();
}

#[test]
fn after_a_crash_the_reopened_root_finds_its_children_abandoned_and_resumable() {
    let log = MemoryLog::new();
    let (root_id, child) = {
        // The first host dies with its tokio runtime, its child mid-turn and
        // admission closed below the root by a drain in progress.
        let tokio = tokio::runtime::Runtime::new().unwrap();
        tokio.block_on(async {
            let h = Harness::builder(scripts()).over(log.clone()).open().await;
            let slow = h
                .start(spec("spawn", "slow", Delivery::Parent))
                .await
                .unwrap();
            until("the slow child to run", || {
                h.runtime.projections().activity(slow.child_id()) == Activity::Running
            })
            .await;
            (h.root.session(), slow.child_id())
        })
    };
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async {
        let h = Harness::builder(scripts())
            .over(log.clone())
            .reopen(root_id)
            .open()
            .await;
        assert!(h.report.events > 0, "recovery settled the live child");
        assert_eq!(h.runtime.projections().activity(child), Activity::Inactive);
        h.send(child, "carry on").await.unwrap();
        until("the resumed child to run", || {
            h.runtime.projections().activity(child) == Activity::Running
        })
        .await;
        h.runtime.drain_children(&h.root, &[child]).await.unwrap();
        assert!(h.runtime.projections().live_activations().is_empty());
        h.runtime.close().await.unwrap();
    });
}

/// Agents that say what their turn was given, then work until cancelled
/// without ever taking steering: a message sent while one works stays
/// pending, whatever the timing.
struct Unsteerable;

struct UnsteerableAgent;

impl AgentHost for Unsteerable {
    fn create(&self, _: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        Box::pin(async { Ok(Box::new(UnsteerableAgent) as Box<dyn Agent>) })
    }
}

impl Agent for UnsteerableAgent {
    fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd> {
        Box::pin(async move {
            let given: Vec<String> = input
                .messages
                .iter()
                .flatten()
                .filter_map(|block| match block {
                    ContentBlock::Text(text) => Some(text.text.clone()),
                    _ => None,
                })
                .collect();
            let said = format!("given [{}]", given.join("; "));
            let _ = input
                .transcript
                .send(TranscriptItem::Assistant(vec![ContentBlock::text(said)]))
                .await;
            input.cancel.cancelled().await;
            TurnEnd {
                stop_reason: SubagentStopReason::Aborted,
                diagnostic: None,
                structured: None,
            }
        })
    }
}

/// A message accepted before a crash is still pending after it, and the
/// resumed activation's first turn is given it with the message that
/// resumed it, in order. The new host never saw the first accepted, so its
/// engine does not keep it, and the claim of both reads them from the log.
#[test]
fn a_message_pending_at_a_crash_reaches_the_resumed_turn_from_the_log() {
    let log = MemoryLog::new();
    let said = |h: &Harness, child| -> Vec<String> {
        h.events(child)
            .into_iter()
            .filter_map(|event| match event {
                Event::AssistantMessage { content, .. } => Some(
                    content
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text(text) => Some(text.text.as_str()),
                            _ => None,
                        })
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    };
    let (root_id, child) = {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        tokio.block_on(async {
            let h = Harness::builder(Arc::new(Unsteerable))
                .over(log.clone())
                .open()
                .await;
            let worker = h
                .start(spec("spawn", "worker", Delivery::Parent))
                .await
                .unwrap();
            let child = worker.child_id();
            until("the child to say what it was given", || {
                said(&h, child).len() == 1
            })
            .await;
            h.send(child, "while you work").await.unwrap();
            assert_eq!(h.runtime.projections().pending_messages(child).len(), 1);
            (h.root.session(), child)
        })
    };
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async {
        let h = Harness::builder(Arc::new(Unsteerable))
            .over(log.clone())
            .reopen(root_id)
            .open()
            .await;
        assert_eq!(h.runtime.projections().pending_messages(child).len(), 1);
        h.send(child, "carry on").await.unwrap();
        until("the resumed child to say what it was given", || {
            said(&h, child).len() == 2
        })
        .await;
        assert_eq!(
            said(&h, child)[1],
            "given [while you work; carry on]",
            "{:?}",
            said(&h, child)
        );
        h.runtime.drain_children(&h.root, &[child]).await.unwrap();
        h.runtime.close().await.unwrap();
    });
}

// ---- 11: a storage failure names its cause ----------------------------------------

#[tokio::test]
async fn a_full_disk_is_named_in_every_failure_it_causes() {
    let log = FillingLog::new();
    let h = Harness::builder(scripts()).over(log.clone()).open().await;
    let mut children: Vec<SubagentActivation> = Vec::new();
    for label in ["a", "b", "c"] {
        let child = h
            .start(spec("spawn", label, Delivery::Caller))
            .await
            .unwrap();
        child.result().await.unwrap();
        children.push(child);
    }
    log.set_full(true);

    // Releasing three children fails on every branch; the aggregate names
    // each cause, and each names the full disk.
    let ids: Vec<SessionId> = children.iter().map(SubagentActivation::child_id).collect();
    let drained = h.runtime.drain_children(&h.root, &ids).await.unwrap_err();
    assert_eq!(drained.code(), ErrorCode::Aggregate);
    let text = drained.to_string();
    assert!(
        text.starts_with("3 branches failed: [store/unavailable]"),
        "{text}"
    );
    assert_eq!(text.matches("No space left on device").count(), 3, "{text}");
    // Every later refusal still names the first cause.
    let drained = h
        .runtime
        .drain_descendants(std::slice::from_ref(&h.root))
        .await
        .unwrap_err();
    assert_eq!(drained.code(), ErrorCode::StoreUnavailable);
    assert!(
        drained.to_string().contains("No space left on device"),
        "{drained}"
    );
    let later = h.runtime.open_root("later").await.unwrap_err();
    assert_eq!(later.code(), ErrorCode::StoreUnavailable);
    assert!(
        later.to_string().contains("No space left on device"),
        "{later}"
    );
    let listed = h.runtime.list_children(h.root.session()).await.unwrap_err();
    assert!(
        listed.to_string().contains("No space left on device"),
        "{listed}"
    );

    // Close does not hang on a checkpoint that can never be durable, and its
    // error says why.
    let closed = tokio::time::timeout(Duration::from_secs(10), h.runtime.close())
        .await
        .expect("close returns")
        .unwrap_err();
    assert!(
        closed.to_string().contains("No space left on device"),
        "{closed}"
    );
    assert_eq!(
        h.runtime.open_root("after").await.unwrap_err().code(),
        ErrorCode::Closed
    );
}

/// A supervised runtime whose disk fills: `failed` reports it, every call
/// through the supervisor is `store/unavailable` naming the cause and
/// when the next reopen is due, reopens fail while the disk is full, and
/// once it has room the runtime is reopened (recovery settling what was
/// live), takes its root back, and serves; what was acknowledged is there.
#[tokio::test]
async fn a_supervised_runtime_is_reopened_once_the_disk_has_room() {
    use subagent_runtime::{Health, RecoveryPolicy, Supervised};
    let log = FillingLog::new();
    let h = Harness::builder(scripts()).over(log.clone()).open().await;
    let done = h
        .start(spec("spawn", "done", Delivery::Caller))
        .await
        .unwrap();
    done.result().await.unwrap();
    let reopenings = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let reopen: subagent_runtime::supervisor::Reopen = {
        let (log, reopenings) = (log.clone(), Arc::clone(&reopenings));
        Arc::new(move || {
            let (log, reopenings) = (log.clone(), Arc::clone(&reopenings));
            Box::pin(async move {
                reopenings.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (runtime, _) =
                    SubagentRuntime::open(Arc::new(log), Arc::new(scripts())).await?;
                runtime.register_provider(Arc::new(SpawnProvider)).await?;
                Ok(runtime)
            })
        })
    };
    let policy = RecoveryPolicy {
        first_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(100),
        give_up_after: Duration::from_secs(60),
    };
    let supervised = Supervised::new(h.runtime.clone(), reopen, policy);
    let mut health = supervised.watch();

    log.set_full(true);
    let refused = h.runtime.open_root("while full").await.unwrap_err();
    assert_eq!(refused.code(), ErrorCode::StoreUnavailable, "{refused}");
    health
        .wait_for(|now| matches!(now, Health::Recovering { attempts, .. } if *attempts >= 2))
        .await
        .unwrap();
    let waiting = supervised.runtime().err().expect("no runtime while full");
    assert_eq!(waiting.code(), ErrorCode::StoreUnavailable);
    let text = waiting.to_string();
    assert!(
        text.contains("being reopened") && text.contains("retry in"),
        "{text}"
    );
    assert!(text.contains("No space left on device"), "{text}");
    assert!(h.runtime.is_closed(), "the failed runtime was closed");

    log.set_full(false);
    health
        .wait_for(|now| matches!(now, Health::Serving { generation: 1, .. }))
        .await
        .unwrap();
    assert!(reopenings.load(std::sync::atomic::Ordering::SeqCst) >= 3);
    let runtime = supervised.runtime().expect("serving again");
    // The root is held again, and the child acknowledged before is there.
    let children = runtime.list_children(h.root.session()).await.unwrap();
    assert!(
        children
            .iter()
            .any(|child| child.entry.child_id == done.child_id()),
        "{children:?}"
    );
    let again = runtime
        .start_activation(
            &h.root,
            spec("spawn", "after", Delivery::Caller),
            CancellationToken::new(),
        )
        .await
        .expect("the reopened runtime takes starts below the held root");
    again.result().await.unwrap();
    supervised.close().await.unwrap();
    assert!(matches!(supervised.health(), Health::Closed));
    assert_eq!(
        supervised.runtime().err().map(|err| err.code()),
        Some(ErrorCode::Closed)
    );
}

/// A supervisor whose store never comes back gives up after its policy's
/// time, and says so.
#[tokio::test]
async fn a_supervisor_gives_up_after_its_policy_s_time() {
    use subagent_runtime::{Health, RecoveryPolicy, Supervised};
    let log = FillingLog::new();
    let h = Harness::builder(scripts()).over(log.clone()).open().await;
    let reopen: subagent_runtime::supervisor::Reopen = {
        let log = log.clone();
        Arc::new(move || {
            let log = log.clone();
            Box::pin(async move {
                SubagentRuntime::open(Arc::new(log), Arc::new(scripts()))
                    .await
                    .map(|(runtime, _)| runtime)
            })
        })
    };
    let policy = RecoveryPolicy {
        first_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        give_up_after: Duration::from_millis(300),
    };
    let supervised = Supervised::new(h.runtime.clone(), reopen, policy);
    log.set_full(true);
    let _ = h.runtime.open_root("while full").await.unwrap_err();
    let mut health = supervised.watch();
    health
        .wait_for(|now| matches!(now, Health::GaveUp { .. }))
        .await
        .unwrap();
    let refused = supervised.runtime().err().expect("given up");
    assert_eq!(refused.code(), ErrorCode::StoreUnavailable);
    assert!(
        refused.to_string().contains("could not be reopened"),
        "{refused}"
    );
}

// ---- 12: the largest event ------------------------------------------------------

/// Text whose event is past [`subagent_core::MAX_EVENT_BYTES`].
fn oversized_text() -> String {
    "x".repeat(subagent_core::MAX_EVENT_BYTES + 1)
}

#[tokio::test]
async fn an_oversized_prompt_or_message_is_refused_and_records_nothing() {
    let h = Harness::open(FlakyHost::new()).await;
    let head = h.log.head();

    let refused = h
        .start(SubagentActivationSpec::with_text_prompt(
            "spawn",
            "worker",
            &oversized_text(),
            Delivery::Caller,
        ))
        .await
        .err()
        .expect("the prompt is too large");
    assert_eq!(refused.code(), ErrorCode::EventTooLarge, "{refused}");
    assert!(
        matches!(
            refused,
            SubagentError::EventTooLarge { bytes, limit, .. }
                if bytes > limit && limit == subagent_core::MAX_CONTENT_BYTES
        ),
        "{refused:?}"
    );
    assert_eq!(h.log.head(), head, "a refused start records nothing");

    // The engine keeps going: the same start with a small prompt works, and
    // an oversized message to the live child is refused the same way.
    let child = h
        .start(spec("spawn", "slow", Delivery::Caller))
        .await
        .unwrap();
    let head = h.log.head();
    let refused = h
        .send(child.child_id(), &oversized_text())
        .await
        .expect_err("the message is too large");
    assert_eq!(refused.code(), ErrorCode::EventTooLarge, "{refused}");
    assert!(refused.to_string().contains("MessageAccepted"), "{refused}");
    assert_eq!(h.log.head(), head, "a refused send records nothing");
    h.send(child.child_id(), "small")
        .await
        .expect("a small message after the refusal is accepted");
    child.dispose().await.unwrap();
    h.runtime.close().await.unwrap();
}

#[tokio::test]
async fn an_agent_that_says_too_much_settles_error_and_the_runtime_goes_on() {
    let host = ScriptedHost::new(Script {
        turns: vec![vec![Step::Say(oversized_text())]],
    });
    let h = Harness::open(host).await;
    let child = h
        .start(spec("spawn", "talker", Delivery::Caller))
        .await
        .unwrap();
    let result = child.result().await.expect("a settled result");
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    let diagnostic = result.diagnostic.expect("a diagnostic").to_string();
    assert!(
        diagnostic.contains("larger than the 1048576-byte limit"),
        "{diagnostic}"
    );
    let child_events = h.events(child.child_id());
    assert_eq!(
        count(&child_events, EventKind::AssistantMessage),
        0,
        "nothing oversized was recorded"
    );
    assert_eq!(count(&child_events, EventKind::ActivationReleased), 1);
    assert!(h.runtime.projections().live_activations().is_empty());
    // Later commands are decided as usual.
    h.runtime
        .open_root("later")
        .await
        .expect("the engine still accepts");
    h.runtime.close().await.unwrap();
}

#[tokio::test]
async fn a_fork_whose_seed_is_too_large_is_abandoned_not_left_live() {
    // The parent says two chunks that each fit but together do not.
    let chunk = "y".repeat(subagent_core::MAX_EVENT_BYTES * 3 / 4);
    let host = ScriptedHost::new(Script {
        turns: vec![vec![Step::Say(chunk.clone()), Step::Say(chunk)]],
    })
    .with(
        "slow",
        Script {
            turns: vec![vec![Step::Say("working".into()), Step::SleepMs(60_000)]],
        },
    );
    let h = Harness::builder(host)
        .provider(Arc::new(ForkProvider))
        .open()
        .await;
    let talker = h
        .start(spec("spawn", "talker", Delivery::Caller))
        .await
        .unwrap();
    talker.result().await.expect("the talker's turn ends");

    let refused = start(
        &h.runtime,
        &talker.agent(),
        SubagentActivationSpec::with_text_prompt("fork", "copy", "go on", Delivery::Caller),
    )
    .await
    .err()
    .expect("the seed is too large");
    assert_eq!(refused.code(), ErrorCode::EventTooLarge, "{refused}");
    assert!(refused.to_string().contains("HistorySeeded"), "{refused}");

    // The reservation was abandoned, naming why, and nothing is live below
    // the talker.
    let state = h.runtime.projections();
    let forks: Vec<SessionId> = state
        .sessions
        .values()
        .filter(|session| session.parent == Some(talker.child_id()))
        .map(|session| session.id)
        .collect();
    assert_eq!(forks.len(), 1, "one reservation was made");
    assert_eq!(state.activity(forks[0]), Activity::Inactive);
    let abandoned = h
        .events(forks[0])
        .into_iter()
        .find_map(|event| match event {
            Event::ActivationAbandoned { reason, .. } => Some(reason),
            _ => None,
        });
    assert!(
        matches!(
            &abandoned,
            Some(subagent_core::AbandonReason::PreparationFailed { diagnostic })
                if diagnostic.to_string().contains("larger than")
        ),
        "{abandoned:?}"
    );
    h.runtime.close().await.unwrap();
}
