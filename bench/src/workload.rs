//! Synthetic delegation histories for the benchmarks: trees of sessions whose
//! streams hold realistic traffic (catalog entries, activations, inbox
//! messages, turns, assistant messages and settlements), appended in
//! pipelined batches with `Buffered` durability to build large logs quickly.

use std::path::Path;

use serde_json::json;
use subagent_core::{
    ContentBlock, Delivery, Event, MessageDelivery, MessageId, MessageSource, NewEvent, SessionId,
    SessionMode, StreamId, SubagentResult, SubagentRunId, Usage,
};
use subagent_store::{
    AppendTicket, Durability, EventLog, ExpectedVersion, RocksLog, RocksOptions, StoreError,
};

/// Events one child session contributes (its own stream plus its catalog entry).
pub(super) const EVENTS_PER_CHILD: u64 = 14;

fn child_events(session: SessionId, parent: SessionId, depth: u64) -> Vec<NewEvent> {
    let message = MessageId::new();
    let text = vec![ContentBlock::text(
        "I looked at the files you named; here is what I found.",
    )];
    let result = SubagentResult::completed(text.clone());
    [
        Event::SessionCreated {
            session,
            parent: Some(parent),
            depth,
            label: "task".into(),
            provider: Some("spawn".into()),
            mode: SessionMode::Continuable,
            external: false,
            descriptor: json!({"version": 1, "provider": "spawn", "mode": "continuable", "inheritsParentContext": false}),
        },
        Event::ActivationRequested {
            epoch: 1,
            delivery: Delivery::Parent,
            output_schema: None,
            requested_by: None,
        },
        Event::MessageAccepted {
            message_id: message,
            source: MessageSource::Delegation { parent_session_id: parent },
            delivery: MessageDelivery::Queue,
            content: vec![ContentBlock::text("Summarize the module and list its public items.")],
        },
        Event::ActivationPrepared { epoch: 1, seeded_events: 0 },
        Event::ActivationPublished { epoch: 1, run_id: SubagentRunId::new() },
        Event::MessagesClaimed { ids: vec![message], turn: 1 },
        Event::TurnStarted { turn: 1, epoch: 1 },
        Event::ToolCalled { turn: 1, call_id: "c1".into(), name: "read_file".into(), input: json!({"path": "src/lib.rs"}) },
        Event::ToolReturned { turn: 1, call_id: "c1".into(), output: vec![ContentBlock::text("//! docs")], is_error: false, refused: false },
        Event::AssistantMessage { turn: 1, content: text, usage: Some(Usage { input_tokens: 900, output_tokens: 60 }) },
        Event::TurnEnded { turn: 1, stop_reason: result.stop_reason.clone() },
        Event::ActivationSettled { epoch: 1, result },
        Event::ActivationReleased { epoch: 1, cleanup_error: None },
    ]
    .into_iter()
    .map(NewEvent::new)
    .collect()
}

/// A generated log.
pub(super) struct Workload {
    /// The log.
    pub log: RocksLog,
    /// The first root.
    pub root: SessionId,
    /// A parent with exactly `children_of_probe` children, created first.
    pub probe_parent: SessionId,
}

/// Builds a log of about `events` events in `dir`: roots with `fanout`
/// children each, recursively, plus a probe parent with `probe_children`
/// children. Shows a bar on stderr while it builds, when stderr is a
/// terminal.
///
/// # Errors
/// Storage failures.
pub(super) fn build(
    dir: &Path,
    events: u64,
    fanout: usize,
    probe_children: usize,
) -> Result<Workload, StoreError> {
    let log = RocksLog::open(
        dir,
        RocksOptions {
            durability: Durability::Buffered,
        },
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StoreError::Io(e.to_string()))?;
    let root = SessionId::new();
    let mut pending: Vec<AppendTicket> = Vec::new();
    let root_event = |session: SessionId| vec![NewEvent::new(Event::root_created(session, "root"))];
    pending.push(log.append(
        StreamId::Session(root),
        ExpectedVersion::Any,
        root_event(root),
    ));
    let probe_parent = SessionId::new();
    pending.push(log.append(
        StreamId::Session(probe_parent),
        ExpectedVersion::Any,
        root_event(probe_parent),
    ));
    let mut queue: std::collections::VecDeque<(SessionId, u64, usize)> =
        std::collections::VecDeque::new();
    queue.push_back((probe_parent, 0, probe_children));
    queue.push_back((root, 0, fanout));
    let mut written = 2u64;
    let bar = super::progress::bar("building log", events, "events");
    let catalog = |child: SessionId| {
        NewEvent::new(Event::ChildCataloged {
            child,
            label: "task".into(),
            provider: "spawn".into(),
            mode: SessionMode::Continuable,
            external: false,
        })
    };
    while let Some((parent, depth, children)) = queue.pop_front() {
        for _ in 0..children {
            if written >= events {
                break;
            }
            let child = SessionId::new();
            pending.push(log.append(
                StreamId::Session(parent),
                ExpectedVersion::Any,
                vec![catalog(child)],
            ));
            pending.push(log.append(
                StreamId::Session(child),
                ExpectedVersion::NoStream,
                child_events(child, parent, depth + 1),
            ));
            written += EVENTS_PER_CHILD;
            if parent != probe_parent {
                queue.push_back((child, depth + 1, fanout));
            }
        }
        if pending.len() >= 2048 {
            runtime.block_on(settle(std::mem::take(&mut pending)))?;
        }
        bar.set_position(written.min(events));
        if written >= events {
            break;
        }
    }
    runtime.block_on(settle(pending))?;
    bar.finish_and_clear();
    Ok(Workload {
        log,
        root,
        probe_parent,
    })
}

async fn settle(pending: Vec<AppendTicket>) -> Result<(), StoreError> {
    for ticket in pending {
        ticket.await?;
    }
    Ok(())
}
