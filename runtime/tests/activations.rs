//! The runtime end to end with the scripted agent: activations, results,
//! delivery, providers, cancellation, disposal and recovery. Each test is
//! named after the spec behaviour it checks.

mod common;

use common::{start, stream_events};

use std::sync::Arc;
use std::time::Duration;

use subagent_core::{
    content::plain_text, ContentBlock, Delivery, ErrorCode, Event, EventKind, MessageSource,
    StreamId, SubagentActivationSpec, SubagentError, SubagentStopReason,
};
use subagent_runtime::provider::ContinuableCreateRequest;
use subagent_runtime::providers::{ForkProvider, ProcessProvider, SpawnProvider};
use subagent_runtime::scripted::Step;
use subagent_runtime::BoxFuture;
use subagent_runtime::{Notice, Script, ScriptedHost, SubagentProvider, SubagentRuntime};
use subagent_store::{EventLog, EventLogExt, MemoryLog};
use tokio_util::sync::CancellationToken;

fn spec(provider: &str, label: &str, delivery: Delivery) -> SubagentActivationSpec {
    SubagentActivationSpec::with_text_prompt(provider, label, "hello world", delivery)
}

fn host() -> ScriptedHost {
    ScriptedHost::new(Script::reply("default answer"))
        .with(
            "research",
            Script {
                turns: vec![vec![
                    Step::Say("looking".into()),
                    Step::Tool {
                        name: "read_file".into(),
                        input: serde_json::json!({"path": "a"}),
                        output: "x".into(),
                    },
                    Step::Say("the answer is 42".into()),
                ]],
            },
        )
        .with(
            "slow",
            Script {
                turns: vec![vec![
                    Step::Say("started".into()),
                    Step::SleepMs(60_000),
                    Step::Say("never".into()),
                ]],
            },
        )
        .with(
            "failing",
            Script {
                turns: vec![vec![Step::Fail("model unavailable".into())]],
            },
        )
        .with(
            "refusing",
            Script {
                turns: vec![vec![Step::Refuse("I will not".into())]],
            },
        )
        .with(
            "ceiling",
            Script {
                turns: vec![vec![Step::MaxTokens("partial".into())]],
            },
        )
}

async fn runtime(log: &MemoryLog) -> SubagentRuntime {
    runtime_over(Arc::new(log.clone())).await
}

/// A runtime over `log` with `spawn`, `fork` and two `process` providers.
async fn runtime_over(log: Arc<dyn EventLog>) -> SubagentRuntime {
    let (runtime, _) = SubagentRuntime::open(log, Arc::new(host())).await.unwrap();
    let providers: [Arc<dyn SubagentProvider>; 4] = [
        Arc::new(SpawnProvider),
        Arc::new(ForkProvider),
        Arc::new(ProcessProvider::new("process", "sh", &["-c", "tr a-z A-Z"])),
        Arc::new(ProcessProvider::new(
            "exit3",
            "sh",
            &["-c", "echo partial; exit 3"],
        )),
    ];
    for provider in providers {
        runtime.register_provider(provider).await.unwrap();
    }
    runtime
}

#[tokio::test]
async fn a_local_child_returns_its_last_non_empty_assistant_message_and_notifies_its_parent() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let activation = start(&runtime, &root, spec("spawn", "research", Delivery::Parent))
        .await
        .unwrap();
    assert!(
        activation.message_id().is_some(),
        "a local child has an accepted initial message"
    );
    let result = activation.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    assert_eq!(plain_text(&result.output), "the answer is 42");
    let child_events = stream_events(&log, StreamId::Session(activation.child_id()));
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
    let notice = stream_events(&log, StreamId::Session(root.session()))
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
    assert!(
        stream_events(&log, StreamId::Session(activation.child_id()))
            .iter()
            .any(|e| e.kind() == EventKind::ActivationReleased)
    );
}

#[tokio::test]
async fn caller_delivery_suppresses_the_parent_notice() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let activation = start(&runtime, &root, spec("spawn", "plain", Delivery::Caller))
        .await
        .unwrap();
    assert_eq!(
        plain_text(&activation.result().await.unwrap().output),
        "default answer"
    );
    let accepted = stream_events(&log, StreamId::Session(root.session()))
        .into_iter()
        .filter(|e| e.kind() == EventKind::MessageAccepted)
        .count();
    assert_eq!(accepted, 0);
    activation.dispose().await.unwrap();
}

#[tokio::test]
async fn every_stop_reason_can_be_produced_on_purpose() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
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
        let activation = start(&runtime, &root, spec("spawn", label, Delivery::Caller))
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
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let activation = start(&runtime, &root, spec("spawn", "slow", Delivery::Parent))
        .await
        .unwrap();
    // Wait until the turn is running.
    let child = StreamId::Session(activation.child_id());
    for _ in 0..200 {
        if stream_events(&log, child)
            .iter()
            .any(|e| e.kind() == EventKind::AssistantMessage)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    activation.dispose().await.unwrap();
    let result = activation.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Aborted);
    let types: Vec<_> = stream_events(&log, child)
        .iter()
        .map(Event::type_name)
        .collect();
    assert_eq!(
        types.iter().filter(|t| **t == "ActivationSettled").count(),
        1,
        "settled once: {types:?}"
    );
    assert_eq!(types.last(), Some(&"ActivationReleased"));
}

#[tokio::test]
async fn an_external_run_reports_its_final_text_and_status_to_the_parent_and_accepts_no_inbox() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let activation = start(&runtime, &root, spec("process", "shout", Delivery::Parent))
        .await
        .unwrap();
    assert!(
        activation.message_id().is_none(),
        "external runs have no inbox message"
    );
    let result = activation.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    assert_eq!(plain_text(&result.output), "HELLO WORLD");
    activation.dispose().await.unwrap();
    let report = stream_events(&log, StreamId::Session(root.session()))
        .into_iter()
        .find_map(|event| match event {
            Event::MessageAccepted {
                source: MessageSource::SubagentReport { .. },
                content,
                ..
            } => Some(plain_text(&content)),
            _ => None,
        })
        .expect("the parent receives the external report");
    assert!(
        report.contains("HELLO WORLD") && report.contains("status: completed"),
        "{report}"
    );
    let types: Vec<_> = stream_events(&log, StreamId::Session(activation.child_id()))
        .iter()
        .map(Event::type_name)
        .collect();
    assert_eq!(
        types,
        vec![
            "SessionCreated",
            "RunRequested",
            "RunStarted",
            "RunSettled",
            "RunDisposed"
        ]
    );
}

#[tokio::test]
async fn a_failing_command_settles_as_error_with_a_safe_diagnostic() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let activation = start(&runtime, &root, spec("exit3", "fails", Delivery::Caller))
        .await
        .unwrap();
    let result = activation.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    assert_eq!(
        result.diagnostic.as_ref().map(|d| d.as_str()),
        Some("the process exited with status 3")
    );
    assert_eq!(
        plain_text(&result.output),
        "partial",
        "output may be partial"
    );
    activation.dispose().await.unwrap();
}

#[tokio::test]
async fn an_unsupported_option_or_unknown_provider_is_rejected_before_anything_is_recorded() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let head = log.head();
    let mut with_persona = spec("process", "x", Delivery::Caller);
    with_persona.request.options.persona = Some("terse".into());
    let err = start(&runtime, &root, with_persona).await.err().unwrap();
    assert_eq!(err.code(), ErrorCode::CapabilityUnsupported);
    let err = start(&runtime, &root, spec("nope", "x", Delivery::Caller))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::UnknownProvider);
    assert_eq!(log.head(), head, "rejections append nothing");
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
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    runtime.register_provider(Arc::new(Stuck)).await.unwrap();
    let root = runtime.open_root("host").await.unwrap();
    let signal = CancellationToken::new();
    let cancel = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
    });
    let err = runtime
        .start_activation(&root, spec("stuck", "never", Delivery::Parent), signal)
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::Cancelled);
    let children = runtime.list_children(root.session()).await.unwrap();
    assert_eq!(children.len(), 1, "the reservation stays in the catalog");
    let types: Vec<_> = stream_events(&log, StreamId::Session(children[0].entry.child_id))
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
async fn a_fork_child_is_seeded_with_the_parent_completed_turn_prefix() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let activation = start(&runtime, &root, spec("fork", "forked", Delivery::Caller))
        .await
        .unwrap();
    activation.result().await.unwrap();
    let seeded = stream_events(&log, StreamId::Session(activation.child_id()))
        .into_iter()
        .find_map(|event| match event {
            Event::HistorySeeded { source, .. } => Some(source),
            _ => None,
        });
    assert_eq!(seeded, Some(root.session()));
    activation.dispose().await.unwrap();
}

#[tokio::test]
async fn the_registry_lists_in_insertion_order_and_removal_blocks_only_new_starts() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    assert_eq!(
        runtime.list().unwrap(),
        vec!["spawn", "fork", "process", "exit3"]
    );
    assert!(runtime.get_provider("fork").unwrap().is_some());
    let err = runtime
        .register_provider(Arc::new(SpawnProvider))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::DuplicateProvider);
    let root = runtime.open_root("host").await.unwrap();
    let running = start(&runtime, &root, spec("process", "kept", Delivery::Caller))
        .await
        .unwrap();
    runtime.remove_provider("process").await.unwrap();
    assert!(runtime.get_provider("process").unwrap().is_none());
    assert_eq!(
        running.result().await.unwrap().stop_reason,
        SubagentStopReason::Completed,
        "accepted runs are not revoked"
    );
    running.dispose().await.unwrap();
    let err = start(&runtime, &root, spec("process", "late", Delivery::Caller))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::UnknownProvider);
}

#[tokio::test]
async fn start_and_end_notices_pair_by_run_id_and_name_the_parent() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let mut notices = runtime.notices().unwrap();
    let root = runtime.open_root("host").await.unwrap();
    let activation = start(&runtime, &root, spec("spawn", "research", Delivery::Caller))
        .await
        .unwrap();
    activation.result().await.unwrap();
    let mut start = None;
    let mut end = None;
    while start.is_none() || end.is_none() {
        match tokio::time::timeout(Duration::from_secs(5), notices.recv())
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
    assert_eq!((start.0, end.0), (root.session(), root.session()));
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
async fn a_closed_root_handle_is_refused() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    runtime.close_root(&root).await.unwrap();
    let err = start(&runtime, &root, spec("spawn", "x", Delivery::Caller))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::Unauthorized);
}

#[test]
fn reopening_after_the_host_died_settles_live_work_explicitly() {
    let log = MemoryLog::new();
    let (child, external) = {
        // The first host dies with its tokio runtime: its drivers stop mid-flight.
        let host_runtime = tokio::runtime::Runtime::new().unwrap();
        host_runtime.block_on(async {
            let runtime = runtime(&log).await;
            let root = runtime.open_root("host").await.unwrap();
            let slow = start(&runtime, &root, spec("spawn", "slow", Delivery::Parent))
                .await
                .unwrap();
            let mut sleeping = spec("process", "sleeper", Delivery::Parent);
            sleeping.provider = "sleeper".into();
            runtime
                .register_provider(Arc::new(ProcessProvider::new("sleeper", "sleep", &["60"])))
                .await
                .unwrap();
            let external = start(&runtime, &root, sleeping).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            (slow.child_id(), external.child_id())
        })
    };
    let host_runtime = tokio::runtime::Runtime::new().unwrap();
    host_runtime.block_on(async {
        let (runtime, report) = SubagentRuntime::open(Arc::new(log.clone()), Arc::new(host()))
            .await
            .unwrap();
        assert!(report.events > 0);
        let child_events = stream_events(&log, StreamId::Session(child));
        assert!(matches!(
            child_events.last(),
            Some(Event::ActivationAbandoned {
                reason: subagent_core::AbandonReason::HostRestart,
                ..
            })
        ));
        let external_events = stream_events(&log, StreamId::Session(external));
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
        let (_, again) = SubagentRuntime::open(Arc::new(log.clone()), Arc::new(host()))
            .await
            .unwrap();
        assert_eq!(again.events, 0, "a clean reopen appends nothing");
    });
}

#[tokio::test]
async fn dispose_releases_descendants_before_their_ancestors() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let child = start(&runtime, &root, spec("spawn", "slow", Delivery::Parent))
        .await
        .unwrap();
    let grandchild = start(
        &runtime,
        &child.agent(),
        spec("spawn", "slow", Delivery::Parent),
    )
    .await
    .unwrap();
    let tree = runtime.list_descendants(root.session()).await.unwrap();
    assert_eq!(
        tree.iter()
            .map(|e| (e.entry.entry.child_id, e.depth))
            .collect::<Vec<_>>(),
        vec![(child.child_id(), 1), (grandchild.child_id(), 2)]
    );
    child.dispose().await.unwrap();
    let released: Vec<_> = log
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
        ],
        "child-first"
    );
    assert_eq!(
        grandchild.result().await.unwrap().stop_reason,
        SubagentStopReason::Aborted
    );
    let err = start(
        &runtime,
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

#[tokio::test]
async fn the_root_inbox_streams_settlement_notices_and_external_reports() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let mut inbox = runtime.inbox(&root).unwrap();
    let local = start(&runtime, &root, spec("spawn", "research", Delivery::Parent))
        .await
        .unwrap();
    let external = start(&runtime, &root, spec("process", "shout", Delivery::Parent))
        .await
        .unwrap();
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        let message = tokio::time::timeout(Duration::from_secs(5), inbox.recv())
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
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let first = start(&runtime, &root, spec("process", "shout", Delivery::Parent))
        .await
        .unwrap();
    first.result().await.unwrap();
    // Unrelated traffic in other streams, before and after the inbox opens.
    let other = runtime.open_root("other").await.unwrap();
    let mut inbox = runtime.inbox(&root).unwrap();
    let second = start(&runtime, &root, spec("process", "shout", Delivery::Parent))
        .await
        .unwrap();
    runtime.close_root(&other).await.unwrap();
    let mut senders = Vec::new();
    while senders.len() < 2 {
        let message = tokio::time::timeout(Duration::from_secs(5), inbox.recv())
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

#[tokio::test]
async fn the_start_signal_after_publication_aborts_the_remaining_turn_work() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let signal = CancellationToken::new();
    let activation = runtime
        .start_activation(
            &root,
            spec("spawn", "slow", Delivery::Caller),
            signal.clone(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    signal.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), activation.result())
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

/// An external provider whose runs settle at once and whose cleanup fails,
/// or whose start waits for cancellation.
struct Flaky {
    name: &'static str,
    block_start: bool,
}

struct FlakyRun;

impl subagent_runtime::SubagentRun for FlakyRun {
    fn result(&mut self) -> BoxFuture<'_, Result<subagent_core::SubagentResult, SubagentError>> {
        Box::pin(async {
            Ok(subagent_core::SubagentResult::completed(vec![
                ContentBlock::text("kept"),
            ]))
        })
    }
    fn dispose(&mut self) -> BoxFuture<'_, Result<(), subagent_core::Diagnostic>> {
        Box::pin(async { Err(subagent_core::Diagnostic::new("socket still open")) })
    }
}

impl SubagentProvider for Flaky {
    fn name(&self) -> &str {
        self.name
    }
    fn capabilities(&self) -> subagent_core::SubagentCapabilities {
        subagent_core::SubagentCapabilities::default()
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn start(
        &self,
        request: subagent_runtime::provider::ResolvedStartRequest,
    ) -> BoxFuture<'static, Result<Box<dyn subagent_runtime::SubagentRun>, SubagentError>> {
        let block = self.block_start;
        Box::pin(async move {
            if block {
                request.signal.cancelled().await;
                return Err(SubagentError::Cancelled);
            }
            Ok(Box::new(FlakyRun) as Box<dyn subagent_runtime::SubagentRun>)
        })
    }
}

#[tokio::test]
async fn a_cleanup_failure_is_recorded_beside_the_settled_result_and_never_overwrites_it() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    runtime
        .register_provider(Arc::new(Flaky {
            name: "flaky",
            block_start: false,
        }))
        .await
        .unwrap();
    let root = runtime.open_root("host").await.unwrap();
    let activation = start(&runtime, &root, spec("flaky", "leaky", Delivery::Caller))
        .await
        .unwrap();
    assert_eq!(
        plain_text(&activation.result().await.unwrap().output),
        "kept"
    );
    activation.dispose().await.unwrap();
    let events = stream_events(&log, StreamId::Session(activation.child_id()));
    assert!(matches!(
        events.last(),
        Some(Event::RunDisposed { cleanup_error: Some(diagnostic), .. }) if diagnostic.as_str() == "socket still open"
    ));
    assert_eq!(
        activation.result().await.unwrap().stop_reason,
        SubagentStopReason::Completed,
        "the result stands"
    );
}

#[tokio::test]
async fn an_external_start_cancelled_before_publication_fails_and_is_recorded() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let registration = runtime
        .register_provider(Arc::new(Flaky {
            name: "blocked",
            block_start: true,
        }))
        .await
        .unwrap();
    let root = runtime.open_root("host").await.unwrap();
    let signal = CancellationToken::new();
    let cancel = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
    });
    let err = runtime
        .start_activation(&root, spec("blocked", "never", Delivery::Parent), signal)
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::Cancelled);
    let child = runtime.list_children(root.session()).await.unwrap()[0]
        .entry
        .child_id;
    let types: Vec<_> = stream_events(&log, StreamId::Session(child))
        .iter()
        .map(Event::type_name)
        .collect();
    assert_eq!(
        types,
        vec!["SessionCreated", "RunRequested", "RunStartFailed"]
    );
    assert_eq!(registration.name(), "blocked");
    registration.remove().await.unwrap();
    assert!(runtime.get_provider("blocked").unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_starts_pipeline_into_a_log_that_replays_to_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let log = subagent_store::RocksLog::open(dir.path(), subagent_store::RocksOptions::default())
        .unwrap();
    let runtime = runtime_over(Arc::new(log.clone())).await;
    let root = runtime.open_root("host").await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|index| {
            let (runtime, root) = (runtime.clone(), root.clone());
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
    let answered = runtime.list_descendants(root.session()).await.unwrap();
    assert_eq!(answered.len(), 32);
    let records: Vec<_> = log.read_all(1).map(|r| r.unwrap()).collect();
    assert_eq!(records.len() as u64, log.head());
    assert!(
        records
            .windows(2)
            .all(|w| w[1].position == w[0].position + 1),
        "gap-free"
    );
    let rebuilt = subagent_projections::Projections::fold(&records);
    assert_eq!(
        rebuilt.list_descendants(root.session()),
        answered,
        "the log replays to the runtime's answers"
    );
    assert_eq!(
        rebuilt.pending_messages(root.session()).len(),
        32,
        "one notice or report per child"
    );
}

#[tokio::test]
async fn a_reserved_child_id_is_used_and_scoped_notices_reach_only_that_parent() {
    let log = MemoryLog::new();
    let runtime = runtime(&log).await;
    let root = runtime.open_root("host").await.unwrap();
    let other = runtime.open_root("other host").await.unwrap();
    let mut mine = runtime.notices_for(root.session()).unwrap();
    let reserved = subagent_core::SessionId::new();
    let mut reserved_spec = spec("spawn", "research", Delivery::Caller);
    reserved_spec.child_id = Some(reserved);
    let activation = start(&runtime, &root, reserved_spec).await.unwrap();
    assert_eq!(activation.child_id(), reserved);
    let foreign = start(&runtime, &other, spec("spawn", "plain", Delivery::Caller))
        .await
        .unwrap();
    activation.result().await.unwrap();
    foreign.result().await.unwrap();
    for _ in 0..2 {
        let notice = tokio::time::timeout(Duration::from_secs(5), mine.recv())
            .await
            .unwrap()
            .unwrap();
        match notice {
            Notice::Start { parent, info } => {
                assert_eq!((parent, info.id), (root.session(), reserved))
            }
            Notice::End { parent, info } => {
                assert_eq!((parent, info.id), (root.session(), reserved))
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
async fn a_clean_close_checkpoints_so_reopening_folds_no_tail_and_a_bad_checkpoint_is_refolded() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        subagent_store::RocksLog::open(dir.path(), subagent_store::RocksOptions::default()).unwrap()
    };
    let (root, listed) = {
        let runtime = runtime_over(Arc::new(open())).await;
        let root = runtime.open_root("host").await.unwrap();
        let activation = start(&runtime, &root, spec("spawn", "research", Delivery::Parent))
            .await
            .unwrap();
        activation.result().await.unwrap();
        let listed = runtime.list_descendants(root.session()).await.unwrap();
        runtime.close().await.unwrap();
        (root.session(), listed)
    };
    let log = open();
    let head = log.head();
    let (runtime, report) = SubagentRuntime::open(Arc::new(log.clone()), Arc::new(host()))
        .await
        .unwrap();
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
    let (runtime, report) = SubagentRuntime::open(Arc::new(log.clone()), Arc::new(host()))
        .await
        .unwrap();
    assert!(report.opened.discarded_checkpoint.is_some());
    assert_eq!(report.opened.tail_events, head);
    assert_eq!(runtime.list_descendants(root).await.unwrap(), listed);
}

/// Records the persona each agent is built with.
struct PersonaProbe(std::sync::Mutex<Vec<Option<String>>>, ScriptedHost);

impl subagent_runtime::AgentHost for PersonaProbe {
    fn create(
        &self,
        spec: subagent_runtime::AgentSpec,
    ) -> BoxFuture<'static, Result<Box<dyn subagent_runtime::Agent>, SubagentError>> {
        self.0.lock().unwrap().push(spec.persona.clone());
        self.1.create(spec)
    }
}

#[tokio::test]
async fn a_persona_is_validated_at_start_and_rendered_for_the_child_alone() {
    let log = MemoryLog::new();
    let probe = Arc::new(PersonaProbe(std::sync::Mutex::new(Vec::new()), host()));
    let (runtime, _) = SubagentRuntime::open(Arc::new(log.clone()), probe.clone())
        .await
        .unwrap();
    runtime
        .register_provider(Arc::new(SpawnProvider))
        .await
        .unwrap();
    runtime
        .set_persona_variables(
            [("user".to_owned(), "Ada".to_owned())]
                .into_iter()
                .collect(),
        )
        .unwrap();
    let root = runtime.open_root("host").await.unwrap();
    let head = log.head();
    let mut bad = spec("spawn", "x", Delivery::Caller);
    bad.request.options.persona = Some("Serve {{nobody}}".into());
    let err = start(&runtime, &root, bad).await.err().unwrap();
    assert_eq!(err.code(), ErrorCode::InvalidPersona);
    assert_eq!(log.head(), head, "nothing recorded");
    let mut good = spec("spawn", "x", Delivery::Caller);
    good.request.options.persona = Some("You assist {{ user }}.".into());
    let with_persona = start(&runtime, &root, good).await.unwrap();
    with_persona.result().await.unwrap();
    let without = start(&runtime, &root, spec("spawn", "y", Delivery::Caller))
        .await
        .unwrap();
    without.result().await.unwrap();
    assert_eq!(
        *probe.0.lock().unwrap(),
        vec![Some("You assist Ada.".to_owned()), None],
        "the persona shadows only its own child"
    );
    with_persona.dispose().await.unwrap();
    without.dispose().await.unwrap();
}

#[tokio::test]
async fn an_output_schema_is_checked_at_start_and_the_capture_becomes_structured_or_an_error() {
    let log = MemoryLog::new();
    let host = ScriptedHost::new(Script::reply("no capture"))
        .with(
            "valid",
            Script {
                turns: vec![vec![
                    Step::Structured(serde_json::json!({"answer": 42})),
                    Step::Say("done".into()),
                ]],
            },
        )
        .with(
            "invalid",
            Script {
                turns: vec![vec![
                    Step::Structured(serde_json::json!({"answer": "many"})),
                    Step::Say("done".into()),
                ]],
            },
        );
    let (runtime, _) = SubagentRuntime::open(Arc::new(log.clone()), Arc::new(host))
        .await
        .unwrap();
    runtime
        .register_provider(Arc::new(SpawnProvider))
        .await
        .unwrap();
    let root = runtime.open_root("host").await.unwrap();
    let schema = serde_json::json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]});
    let with_schema = |label: &str, schema: serde_json::Value| {
        let mut request = spec("spawn", label, Delivery::Caller);
        request.request.options.output_schema = Some(schema);
        request
    };
    let head = log.head();
    let err = start(
        &runtime,
        &root,
        with_schema(
            "valid",
            serde_json::json!({"type": "object", "patternProperties": {}}),
        ),
    )
    .await
    .err()
    .unwrap();
    assert_eq!(err.code(), ErrorCode::InvalidOutputSchema);
    assert_eq!(log.head(), head, "a rejected schema records nothing");

    let valid = start(&runtime, &root, with_schema("valid", schema.clone()))
        .await
        .unwrap();
    let result = valid.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    assert_eq!(result.structured, Some(serde_json::json!({"answer": 42})));
    let err = runtime
        .send_message(
            &root,
            valid.child_id(),
            vec![ContentBlock::text("more")],
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        ErrorCode::DeliveryUnavailable,
        "structured capture closes input"
    );

    for label in ["invalid", "missing"] {
        let activation = start(&runtime, &root, with_schema(label, schema.clone()))
            .await
            .unwrap();
        let result = activation.result().await.unwrap();
        assert_eq!(result.stop_reason, SubagentStopReason::Error, "{label}");
        assert!(result.structured.is_none());
        assert!(result.diagnostic.is_some(), "{label}");
        activation.dispose().await.unwrap();
    }
    valid.dispose().await.unwrap();
    // A later cold resume does not inherit the schema: its input is open again.
    runtime
        .send_message(
            &root,
            valid.child_id(),
            vec![ContentBlock::text("again")],
            CancellationToken::new(),
        )
        .await
        .unwrap();
    runtime
        .drain_children(&root, &[valid.child_id()])
        .await
        .unwrap();
}
