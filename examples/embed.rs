//! `cargo run --example embed`: a host embeds the runtime with an agent of
//! its own. It opens the runtime on a RocksDB log, opens a root session,
//! delegates one task to a spawned child, takes the child's result and
//! disposes of it; then it reads back what the log recorded.
//!
//! A real host calls its model inside [`Agent::run_turn`]; this one counts
//! the words of its prompt, so the run is deterministic.

use std::sync::Arc;

use subagent_core::{
    content::plain_text, ContentBlock, Delivery, StreamId, SubagentActivationSpec, SubagentError,
    SubagentStopReason,
};
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::{
    Agent, AgentHost, AgentSpec, BoxFuture, SubagentRuntime, TranscriptItem, TurnEnd, TurnInput,
};
use subagent_store::{EventLog, EventLogExt, RocksLog, RocksOptions};
use tokio_util::sync::CancellationToken;

// ANCHOR: agent
/// The host's own agent: it answers each turn with the word count of the
/// messages it was given. Everything it says goes through `transcript`,
/// which the runtime records before the next step.
struct WordCounter;

impl Agent for WordCounter {
    fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd> {
        Box::pin(async move {
            let words: usize = input
                .messages
                .iter()
                .map(|message| plain_text(message).split_whitespace().count())
                .sum();
            let reply = ContentBlock::text(format!("{words} words"));
            let stop_reason = match input
                .transcript
                .send(TranscriptItem::Assistant(vec![reply]))
                .await
            {
                Ok(()) => SubagentStopReason::Completed,
                Err(_) => SubagentStopReason::Aborted, // the turn was torn down
            };
            TurnEnd {
                stop_reason,
                diagnostic: None,
                structured: None,
            }
        })
    }
}

/// Builds the agent of every session the runtime activates, from the
/// session's durable history (`spec`), so a child can be rebuilt after a
/// restart.
struct Host;

impl AgentHost for Host {
    fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        let _ = spec; // label, descriptor, history, persona, tools
        Box::pin(async { Ok(Box::new(WordCounter) as Box<dyn Agent>) })
    }
}
// ANCHOR_END: agent

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // ANCHOR: runtime
    let log: Arc<dyn EventLog> = Arc::new(RocksLog::open(dir.path(), RocksOptions::default())?);
    let (runtime, _recovery) = SubagentRuntime::open(log.clone(), Arc::new(Host)).await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    let root = runtime.open_root("host").await?;

    let task = SubagentActivationSpec::with_text_prompt(
        "spawn",                          // the provider
        "counter",                        // the child's label
        "count the words of this prompt", // its task
        Delivery::Caller,                 // this program awaits the result
    );
    let child = runtime
        .start_activation(&root, task, CancellationToken::new())
        .await?;
    let result = child.result().await?;
    child.dispose().await?; // child-first, idempotent, awaits quiescence
                            // ANCHOR_END: runtime

    println!(
        "child counter settled {}: {}",
        result.stop_reason.as_str(),
        plain_text(&result.output)
    );
    for entry in runtime.list_children(root.session()).await? {
        println!(
            "catalog: {} via {}",
            entry.entry.label, entry.entry.provider
        );
    }
    let recorded: Vec<&'static str> = log
        .read_stream(StreamId::Session(child.child_id()), 1)
        .map(|record| record.map(|record| record.event.type_name()))
        .collect::<Result<_, _>>()?;
    println!("the child's stream: {}", recorded.join(", "));
    runtime.close().await?;
    println!("closed; the log's head is {}", log.head());
    Ok(())
}
