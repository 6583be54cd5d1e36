//! `cargo run --example delegate`: a host's own agent delegates through the
//! runtime's tools. The host starts a `planner` child. Its agent is offered
//! the runtime's `subagent`, `list_agents`, `send_message` and
//! `subagent_control` tools beside the host's own (in `AgentSpec::tools`).
//! It starts a `counter` grandchild with `subagent`, waits for it with
//! `subagent_control` and answers with what the counter said. The log
//! records each call, the start it caused and its result, and the tree
//! shows the grandchild under the call that started it.
//!
//! A real host gives `spec.tools` to its model and runs the calls the model
//! asks for; this planner always makes the same two, so the run is
//! deterministic.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use subagent_core::{
    content::plain_text, ContentBlock, Delivery, StreamId, SubagentActivationSpec, SubagentError,
    SubagentStopReason,
};
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::{
    Agent, AgentHost, AgentSpec, BoxFuture, SubagentRuntime, ToolCall, ToolOutput, TranscriptItem,
    TurnEnd, TurnInput,
};
use subagent_store::{EventLog, EventLogExt, RocksLog, RocksOptions};
use tokio_util::sync::CancellationToken;

/// A tool result's text, read as JSON (`null` when it is not).
fn json_of(output: &ToolOutput) -> Value {
    serde_json::from_str(&plain_text(&output.output)).unwrap_or(Value::Null)
}

/// Says `text` and ends the turn: `completed`, or `aborted` when the turn
/// was torn down first.
async fn answer(input: &TurnInput, text: String) -> TurnEnd {
    let said = input
        .transcript
        .send(TranscriptItem::Assistant(vec![ContentBlock::text(text)]))
        .await;
    TurnEnd {
        stop_reason: match said {
            Ok(()) => SubagentStopReason::Completed,
            Err(_) => SubagentStopReason::Aborted,
        },
        diagnostic: None,
        structured: None,
    }
}

// ANCHOR: planner
/// The host's delegating agent. Where a model would pick a tool call, it
/// starts a counter, waits for it, and answers with its result.
struct Planner;

impl Agent for Planner {
    fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd> {
        Box::pin(async move {
            // `subagent` returns at once with the child's id.
            let started = input
                .tools
                .call(ToolCall {
                    call_id: "call-1".into(),
                    name: "subagent".into(),
                    input: json!({
                        "provider": "spawn",
                        "label": "counter",
                        "prompt": "count the words of this prompt",
                    }),
                })
                .await;
            let child = json_of(&started)["childId"].clone();
            // `wait` answers once the child stops working, with its result.
            let waited = input
                .tools
                .call(ToolCall {
                    call_id: "call-2".into(),
                    name: "subagent_control".into(),
                    input: json!({"action": "wait", "child": child}),
                })
                .await;
            let said = json_of(&waited)["children"][0]["output"].clone();
            // The child's completion notice is in the inbox by now: taking
            // it in this turn (a model would read it) starts no other turn.
            input.steering.take().await;
            answer(
                &input,
                format!("the counter says: {}", said.as_str().unwrap_or("nothing")),
            )
            .await
        })
    }
}
// ANCHOR_END: planner

/// The counter: the word count of the messages it was given.
struct WordCounter;

impl Agent for WordCounter {
    fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd> {
        Box::pin(async move {
            let words: usize = input
                .messages
                .iter()
                .map(|message| plain_text(message).split_whitespace().count())
                .sum();
            answer(&input, format!("{words} words")).await
        })
    }
}

/// Builds the planner for a session labelled `planner`, a counter for any
/// other, and keeps the names of the tools each label was offered.
#[derive(Default)]
struct Host {
    offered: Mutex<Vec<(String, Vec<String>)>>,
}

impl AgentHost for Host {
    fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        // `spec.tools`: each tool's name, description and input schema, to
        // give the model.
        let mut names: Vec<String> = spec.tools.iter().map(|tool| tool.name.clone()).collect();
        names.sort();
        if let Ok(mut offered) = self.offered.lock() {
            offered.push((spec.label.clone(), names));
        }
        let agent: Box<dyn Agent> = if spec.label == "planner" {
            Box::new(Planner)
        } else {
            Box::new(WordCounter)
        };
        Box::pin(async move { Ok(agent) })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log: Arc<dyn EventLog> = Arc::new(RocksLog::open(dir.path(), RocksOptions::default())?);
    let host = Arc::new(Host::default());
    let (runtime, _recovery) = SubagentRuntime::open(log.clone(), host.clone()).await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    let root = runtime.open_root("host").await?;

    let task = SubagentActivationSpec::with_text_prompt(
        "spawn",
        "planner",
        "get the words of a prompt counted",
        Delivery::Caller,
    );
    let planner = runtime
        .start_activation(&root, task, CancellationToken::new())
        .await?;
    let result = planner.result().await?;
    println!(
        "planner settled {}: {}",
        result.stop_reason.as_str(),
        plain_text(&result.output)
    );
    if let Ok(offered) = host.offered.lock() {
        for (label, tools) in offered.iter() {
            println!("{label} was offered: {}", tools.join(", "));
        }
    }

    // The tree: the counter sits under the planner's call that started it.
    if let Some(tree) = runtime.tree(root.session()).await? {
        for node in &tree.nodes {
            let started_by = node.requested_by.as_ref().map_or(String::new(), |call| {
                format!(", started by {} of turn {}", call.call_id, call.turn)
            });
            println!(
                "{}{} ({}{started_by})",
                "  ".repeat(usize::try_from(node.depth).unwrap_or(0)),
                node.label,
                node.status.state.as_str(),
            );
        }
    }
    // The planner's stream: the call, the events it caused, its result.
    let recorded: Vec<String> = log
        .read_stream(StreamId::Session(planner.child_id()), 1)
        .map(|record| {
            record.map(|record| match &record.event {
                subagent_core::Event::ToolCalled { name, .. } => format!("ToolCalled({name})"),
                event => event.type_name().to_owned(),
            })
        })
        .collect::<Result<_, _>>()?;
    println!("the planner's stream: {}", recorded.join(", "));
    planner.dispose().await?;
    runtime.close().await?;
    Ok(())
}
