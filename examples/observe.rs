//! `cargo run --example observe`: the three ways a host watches its
//! children.
//!
//! - **Notices** (`notices_for`): `subagent/start` and `subagent/end` for
//!   one parent's children, as they happen. Live only: nothing is replayed.
//! - **The root's inbox** (`inbox`): what the parent's model should read:
//!   a `Delivery::Parent` child's settlement arrives as a message.
//! - **A catch-up subscription to the log** (`subscribe`): every event from
//!   a position, then `CaughtUp`, then live events, never skipping or
//!   repeating one. This is what a projection, a console or an audit
//!   trail follows.

use std::sync::Arc;

use subagent_core::{content::plain_text, Delivery, MessageSource, SubagentActivationSpec};
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::{Notice, Script, ScriptedHost, SubagentRuntime};
use subagent_store::{EventLog, RocksLog, RocksOptions, SubscriptionItem};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log: Arc<dyn EventLog> = Arc::new(RocksLog::open(dir.path(), RocksOptions::default())?);
    let host = ScriptedHost::new(Script::reply("the store is sound"));
    let (runtime, _) = SubagentRuntime::open(log.clone(), Arc::new(host)).await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    let root = runtime.open_root("host").await?;

    // ANCHOR: observe
    let mut notices = runtime.notices_for(root.session())?; // this parent's start/end
    let mut inbox = runtime.inbox(&root)?; // what the root's model reads
    let task = SubagentActivationSpec::with_text_prompt(
        "spawn",
        "auditor",
        "audit the store",
        Delivery::Parent,
    );
    let child = runtime
        .start_activation(&root, task, CancellationToken::new())
        .await?;

    while let Some(notice) = notices.recv().await {
        match notice {
            Notice::Start { info, .. } => println!(
                "notice: start of {} via {}",
                if info.id == child.child_id() {
                    "the auditor"
                } else {
                    "another child"
                },
                info.provider
            ),
            Notice::End { info, .. } => {
                let last = info
                    .last_assistant_message
                    .as_deref()
                    .map(plain_text)
                    .unwrap_or_default();
                println!("notice: end {}, saying {last:?}", info.stop_reason.as_str());
                break;
            }
            _ => {}
        }
    }
    let message = inbox.recv().await.ok_or("the inbox closed")?;
    if let MessageSource::SubagentSettled { summary, .. } = &message.source {
        println!("inbox: {summary}");
    }
    // ANCHOR_END: observe
    child.dispose().await?;

    // ANCHOR: subscribe
    let mut events = log.subscribe(1); // from the first position
    let mut replayed = 0;
    while let Some(item) = events.next().await {
        match item? {
            SubscriptionItem::Event(_) => replayed += 1,
            SubscriptionItem::CaughtUp { head } => {
                println!("subscription: caught up at head {head} after {replayed} events");
                break;
            }
        }
    }
    // Live from here: the next delegation's events arrive as they are durable.
    let task =
        SubagentActivationSpec::with_text_prompt("spawn", "second", "and again", Delivery::Caller);
    let second = runtime
        .start_activation(&root, task, CancellationToken::new())
        .await?;
    if let Some(item) = events.next().await {
        if let SubscriptionItem::Event(record) = item? {
            println!(
                "subscription: live {} at position {}",
                record.event.type_name(),
                record.position
            );
        }
    }
    // ANCHOR_END: subscribe
    second.result().await?;
    second.dispose().await?;
    runtime.close().await?;
    Ok(())
}
