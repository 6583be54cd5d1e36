//! `cargo run --example messages`: talking to a child while it works and
//! after the host restarts.
//!
//! 1. **Steering.** A message sent to a running child is taken at its next
//!    step boundary, inside the running turn.
//! 2. **A queued message** wakes an idle child for a new turn.
//! 3. **An interrupt** stops the running turn; it settles `aborted`.
//! 4. **A cold resume.** The host closes the runtime (a restart), opens it
//!    again on the same log, takes its root back, and messages the child:
//!    the child is rebuilt from its durable history and runs its next turn.
//!
//! The child is the runtime's scripted agent, so the run is deterministic.

use std::path::Path;
use std::sync::Arc;

use subagent_core::{
    content::plain_text, ContentBlock, Delivery, Event, SessionId, StreamId, SubagentActivationSpec,
};
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::scripted::Step;
use subagent_runtime::{InterruptAuthority, Script, ScriptedHost, SubagentRuntime};
use subagent_store::{EventLog, EventLogExt, RocksLog, RocksOptions, SubscriptionItem};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

type Error = Box<dyn std::error::Error>;

/// The worker's three turns: a slow first pass, a second task that runs
/// until it is interrupted, and what it does once resumed.
fn host() -> Arc<ScriptedHost> {
    let say = |text: &str| Step::Say(text.to_owned());
    Arc::new(ScriptedHost::new(Script::reply("done")).with(
        "worker",
        Script {
            turns: vec![
                vec![
                    say("reading the code"),
                    // Room for the note to be sent and recorded before the
                    // step boundary, on a loaded machine too.
                    Step::SleepMs(3_000),
                    say("first pass done"),
                ],
                vec![say("on the second task"), Step::SleepMs(3_600_000)],
                vec![say("resumed from the log, carrying on")],
            ],
        },
    ))
}

/// Waits, through a catch-up subscription from `from`, for the first event
/// of `session`'s stream that `wanted` accepts; returns its position.
async fn until(
    log: &dyn EventLog,
    session: SessionId,
    from: u64,
    wanted: impl Fn(&Event) -> bool,
) -> Result<u64, Error> {
    let mut events = log.subscribe(from);
    while let Some(item) = events.next().await {
        if let SubscriptionItem::Event(record) = item? {
            if record.stream == StreamId::Session(session) && wanted(&record.event) {
                return Ok(record.position);
            }
        }
    }
    Err("the log closed".into())
}

fn said(event: &Event, text: &str) -> bool {
    matches!(event, Event::AssistantMessage { content, .. } if plain_text(content) == text)
}

fn open_log(dir: &Path) -> Result<Arc<dyn EventLog>, Error> {
    Ok(Arc::new(RocksLog::open(dir, RocksOptions::default())?))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let dir = tempfile::tempdir()?;
    let log = open_log(dir.path())?;
    let (runtime, _) = SubagentRuntime::open(log.clone(), host()).await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    let root = runtime.open_root("host").await?;
    let task = SubagentActivationSpec::with_text_prompt(
        "spawn",
        "worker",
        "review the store",
        Delivery::Caller,
    );
    let child = runtime
        .start_activation(&root, task, CancellationToken::new())
        .await?;
    let worker = child.child_id();

    // ANCHOR: steer
    // 1. The turn is running: a message is taken at its next step boundary.
    until(log.as_ref(), worker, 1, |event| {
        said(event, "reading the code")
    })
    .await?;
    let note = vec![ContentBlock::text("also check the tests")];
    runtime
        .send_message(&root, worker, note, CancellationToken::new())
        .await?;
    let first = child.result().await?; // the first turn's settlement
                                       // ANCHOR_END: steer
    println!(
        "turn 1 settled {}: {}",
        first.stop_reason.as_str(),
        plain_text(&first.output)
    );

    // ANCHOR: interrupt
    // 2. The child is idle: a message wakes it for turn 2.
    let next = vec![ContentBlock::text("now the second task")];
    runtime
        .send_message(&root, worker, next, CancellationToken::new())
        .await?;
    until(log.as_ref(), worker, 1, |event| {
        said(event, "on the second task")
    })
    .await?;
    // 3. Stop it, under the durable authority of its direct parent.
    runtime
        .interrupt(
            worker,
            InterruptAuthority::User {
                parent_session_id: root.session(),
            },
        )
        .await?;
    until(log.as_ref(), worker, 1, |event| {
        matches!(event, Event::TurnEnded { turn: 2, .. })
    })
    .await?;
    // ANCHOR_END: interrupt

    // 4. A restart: close, drop every handle, open the same directory again.
    let root_id = root.session();
    runtime.close().await?;
    drop((runtime, child, root, log));
    // ANCHOR: resume
    let log = open_log(dir.path())?;
    let (runtime, recovery) = SubagentRuntime::open(log.clone(), host()).await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    let root = runtime.reopen_root(root_id).await?;
    let head = log.head();
    let resume = vec![ContentBlock::text("carry on")];
    runtime
        .send_message(&root, worker, resume, CancellationToken::new())
        .await?; // cold-resumes it
    until(log.as_ref(), worker, head + 1, |event| {
        matches!(event, Event::TurnEnded { turn: 3, .. })
    })
    .await?;
    // ANCHOR_END: resume
    println!("reopened: recovery appended {} events", recovery.events);

    for record in log.read_stream(StreamId::Session(worker), 1) {
        match record?.event {
            Event::AssistantMessage { content, .. } => {
                println!("  worker: {}", plain_text(&content))
            }
            Event::TurnEnded { turn, stop_reason } => {
                println!("  turn {turn} ended {}", stop_reason.as_str())
            }
            _ => {}
        }
    }
    runtime
        .drain_descendants(std::slice::from_ref(&root))
        .await?;
    runtime.close().await?;
    Ok(())
}
