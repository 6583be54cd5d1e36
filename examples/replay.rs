//! `cargo run --example replay`: debugging a delegation from the log alone,
//! without running an agent.
//!
//! A root delegates two tasks; then the program looks back:
//! - [`subagent_replay::state_at`]: every projection as it was at a
//!   position (here, just after the first child was created);
//! - [`subagent_replay::diff`]: what changed from there to the head;
//! - [`subagent_replay::verify`]: the history against the state machine's
//!   rules, the indexes against the records, and a refold against the
//!   checkpoint.

use std::sync::Arc;

use subagent_core::{Delivery, Event, SubagentActivationSpec};
use subagent_replay::Change;
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::{Script, ScriptedHost, SubagentRuntime};
use subagent_store::{EventLog, EventLogExt, RocksLog, RocksOptions};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log = Arc::new(RocksLog::open(dir.path(), RocksOptions::default())?);
    let (runtime, _) = SubagentRuntime::open(
        log.clone(),
        Arc::new(ScriptedHost::new(Script::reply("done"))),
    )
    .await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    let root = runtime.open_root("host").await?;
    for label in ["first", "second"] {
        let task = SubagentActivationSpec::with_text_prompt(
            "spawn",
            label,
            "look into it",
            Delivery::Caller,
        );
        let child = runtime
            .start_activation(&root, task, CancellationToken::new())
            .await?;
        child.result().await?;
        child.dispose().await?;
    }
    runtime.close().await?;
    drop(runtime);

    // The position right after the first child's creation, found in the log.
    let created = log
        .read_all(1)
        .filter_map(Result::ok)
        .find(|record| matches!(&record.event, Event::SessionCreated { label, .. } if label == "first"))
        .ok_or("the first child is in the log")?
        .position;

    // ANCHOR: replay
    let then = subagent_replay::state_at(log.as_ref(), Some(created))?; // projections at that position
    let now = subagent_replay::state_at(log.as_ref(), None)?; // ... and at the head
    println!(
        "at position {created}: {} children, {} live",
        then.list_children(root.session()).len(),
        then.live_activations().len()
    );
    println!(
        "at the head {}: {} children, {} live",
        log.head(),
        now.list_children(root.session()).len(),
        now.live_activations().len()
    );
    for change in subagent_replay::diff(&then, &now) {
        match change {
            Change::SessionAdded { label, .. } => println!("  + session {label}"),
            Change::ActivationSettled { stop_reason, .. } => {
                println!("  settled {}", stop_reason.as_str())
            }
            Change::ActivationEnded { .. } => println!("  released"),
            _ => {}
        }
    }
    let report = subagent_replay::verify(log.as_ref())?;
    println!("verify: {} events, ok: {}", report.events, report.is_ok());
    // ANCHOR_END: replay
    if !report.is_ok() {
        return Err(format!("verify found problems: {report:?}").into());
    }
    Ok(())
}
