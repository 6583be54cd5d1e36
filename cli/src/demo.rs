//! `subagents demo`: records a sample delegation (a root, a continuable
//! child that settles, an external one-shot run) through the real RocksDB log
//! and prints it. Stands in for the runtime-driven demo until the runtime
//! lands; every run adds a new root to the same log.

use std::path::Path;

use serde_json::json;
use subagent_core::{
    ContentBlock, Delivery, Event, MessageDelivery, MessageId, MessageSource, NewEvent, SessionId,
    SessionMode, StreamId, SubagentResult, SubagentRunId,
};
use subagent_store::{EventLog, ExpectedVersion, RocksLog, RocksOptions};

use crate::CliResult;

fn created(
    session: SessionId,
    parent: Option<SessionId>,
    depth: u64,
    label: &str,
    provider: Option<&str>,
    mode: SessionMode,
    external: bool,
) -> NewEvent {
    NewEvent::new(Event::SessionCreated {
        session,
        parent,
        depth,
        label: label.into(),
        provider: provider.map(Into::into),
        mode,
        external,
        descriptor: json!({"version": 1, "provider": provider.unwrap_or("host"), "mode": mode, "inheritsParentContext": false}),
    })
}

/// Runs the demo.
///
/// # Errors
/// Storage failures.
pub fn run(data: &Path) -> CliResult {
    let log = RocksLog::open(data, RocksOptions::default())?;
    let runtime = tokio::runtime::Runtime::new()?;
    let start = log.head() + 1;
    runtime.block_on(async {
        let (root, child, external) = (SessionId::new(), SessionId::new(), SessionId::new());
        let append = |stream: SessionId, events: Vec<NewEvent>| {
            log.append(StreamId::Session(stream), ExpectedVersion::Any, events)
        };
        println!("[1/4] root session {root}");
        append(
            root,
            vec![created(
                root,
                None,
                0,
                "demo root",
                None,
                SessionMode::Continuable,
                false,
            )],
        )
        .await?;
        println!("[2/4] continuable child {child} (spawn)");
        append(
            root,
            vec![NewEvent::new(Event::ChildCataloged {
                child,
                label: "summarize".into(),
                provider: "spawn".into(),
                mode: SessionMode::Continuable,
                external: false,
            })],
        )
        .await?;
        let prompt = MessageId::new();
        let result =
            SubagentResult::completed(vec![ContentBlock::text("The log is the source of truth.")]);
        append(
            child,
            vec![
                created(
                    child,
                    Some(root),
                    1,
                    "summarize",
                    Some("spawn"),
                    SessionMode::Continuable,
                    false,
                ),
                NewEvent::new(Event::ActivationRequested {
                    epoch: 1,
                    delivery: Delivery::Parent,
                    output_schema: None,
                }),
                NewEvent::new(Event::MessageAccepted {
                    message_id: prompt,
                    source: MessageSource::Delegation {
                        parent_session_id: root,
                    },
                    delivery: MessageDelivery::Queue,
                    content: vec![ContentBlock::text("Summarize DESIGN.md")],
                }),
                NewEvent::new(Event::ActivationPrepared {
                    epoch: 1,
                    seeded_events: 0,
                }),
                NewEvent::new(Event::ActivationPublished {
                    epoch: 1,
                    run_id: SubagentRunId::new(),
                }),
                NewEvent::new(Event::MessagesClaimed {
                    ids: vec![prompt],
                    turn: 1,
                }),
                NewEvent::new(Event::TurnStarted { turn: 1, epoch: 1 }),
                NewEvent::new(Event::AssistantMessage {
                    turn: 1,
                    content: result.output.clone(),
                    usage: None,
                }),
                NewEvent::new(Event::TurnEnded {
                    turn: 1,
                    stop_reason: result.stop_reason.clone(),
                }),
                NewEvent::new(Event::ActivationSettled {
                    epoch: 1,
                    result: result.clone(),
                }),
                NewEvent::new(Event::ActivationReleased {
                    epoch: 1,
                    cleanup_error: None,
                }),
            ],
        )
        .await?;
        println!("[3/4] external one-shot child {external} (process)");
        let run_id = SubagentRunId::new();
        append(
            root,
            vec![NewEvent::new(Event::ChildCataloged {
                child: external,
                label: "lint".into(),
                provider: "process".into(),
                mode: SessionMode::OneShot,
                external: true,
            })],
        )
        .await?;
        append(
            external,
            vec![
                created(
                    external,
                    Some(root),
                    1,
                    "lint",
                    Some("process"),
                    SessionMode::OneShot,
                    true,
                ),
                NewEvent::new(Event::RunRequested {
                    run_id,
                    provider: "process".into(),
                    delivery: Delivery::Caller,
                }),
                NewEvent::new(Event::RunStarted { run_id }),
                NewEvent::new(Event::RunSettled {
                    run_id,
                    result: SubagentResult::completed(vec![ContentBlock::text("no findings")]),
                }),
                NewEvent::new(Event::RunDisposed {
                    run_id,
                    cleanup_error: None,
                }),
            ],
        )
        .await?;
        println!("[4/4] durable at head {}\n", log.head());
        Ok::<_, subagent_store::StoreError>(())
    })?;
    // Keep the projections checkpoint current, as the runtime will.
    let (projections, _) = subagent_replay::Checkpointed::open(log, 10_000)?;
    let roots = projections.state().roots.clone();
    let log = projections.close()?;
    drop(log);
    crate::log_cmd::run(&crate::log_cmd::LogArgs::at(data, start))?;
    let log = RocksLog::open(data, RocksOptions::default())?;
    let state = subagent_replay::state_at(&log, None)?;
    if let Some(root) = roots.last() {
        println!("\n{}", crate::render::tree(&state, *root));
    }
    let dir = data.display();
    println!("Inspect it with:\n  subagents tree {dir}\n  subagents replay {dir} --at {start}\n  subagents verify {dir}\n  subagents log {dir}");
    Ok(())
}
