//! `ToolPort::announce` and `TranscriptItem::ToolResult`, for agents that
//! run their own tools (as agents over ACP do): an announced call is
//! recorded and checked like a host call but never executed by the host;
//! a refusal is its recorded result; a permitted call's result is recorded
//! once; a result for a refused, unknown or already closed call is
//! dropped; a second announcement of an id records nothing and repeats
//! the first answer; a permitted call left open is closed with an error at
//! the turn's end. `TranscriptItem::Report` records `AgentReported`.

mod common;

use std::sync::{Arc, Mutex};

use common::{spec, Harness};
use serde_json::json;
use subagent_core::{
    AgentReport, ContentBlock, Event, PlanEntry, SessionId, SubagentError, SubagentStopReason,
    ToolRestriction,
};
use subagent_runtime::{
    Agent, AgentHost, AgentSpec, Announced, BoxFuture, ToolCall, ToolDefinition, ToolOutput,
    TranscriptItem, TurnEnd, TurnInput,
};
use tokio_util::sync::CancellationToken;

/// A host whose agents run their own `run` and `delete` tools; it records
/// every call it is asked to execute (there must be none).
#[derive(Default)]
struct SelfRunning {
    answers: Arc<Mutex<Vec<Announced>>>,
    executed: Arc<Mutex<Vec<String>>>,
}

struct SelfRunningAgent {
    answers: Arc<Mutex<Vec<Announced>>>,
}

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall {
        call_id: id.into(),
        name: name.into(),
        input: json!({"id": id}),
    }
}

fn result(id: &str, text: &str) -> TranscriptItem {
    TranscriptItem::ToolResult {
        call_id: id.into(),
        output: vec![ContentBlock::text(text)],
        is_error: false,
    }
}

impl Agent for SelfRunningAgent {
    fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd> {
        Box::pin(async move {
            let mut answers = Vec::new();
            answers.push(input.tools.announce(call("a", "run")).await);
            input.transcript.send(result("a", "ran")).await.unwrap();
            // A second result for the same call, and one for a call never announced.
            input
                .transcript
                .send(result("a", "ran twice"))
                .await
                .unwrap();
            input
                .transcript
                .send(result("ghost", "never announced"))
                .await
                .unwrap();
            answers.push(input.tools.announce(call("d", "delete")).await);
            input
                .transcript
                .send(result("d", "deleted anyway"))
                .await
                .unwrap();
            // Announced again: nothing new is recorded.
            answers.push(input.tools.announce(call("a", "run")).await);
            answers.push(input.tools.announce(call("u", "unlisted")).await);
            // Permitted, and its result never reported.
            answers.push(input.tools.announce(call("b", "run")).await);
            input
                .transcript
                .send(TranscriptItem::Report(AgentReport::Plan {
                    entries: vec![PlanEntry {
                        content: "step".into(),
                        priority: "high".into(),
                        status: "pending".into(),
                    }],
                }))
                .await
                .unwrap();
            input
                .transcript
                .send(TranscriptItem::Assistant(vec![ContentBlock::text("done")]))
                .await
                .unwrap();
            self.answers.lock().unwrap().extend(answers);
            TurnEnd {
                stop_reason: SubagentStopReason::Completed,
                diagnostic: None,
                structured: None,
            }
        })
    }
}

impl AgentHost for SelfRunning {
    fn create(
        &self,
        _spec: AgentSpec,
    ) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        let answers = Arc::clone(&self.answers);
        Box::pin(async move { Ok(Box::new(SelfRunningAgent { answers }) as Box<dyn Agent>) })
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        vec![
            ToolDefinition::new("run", "runs"),
            ToolDefinition::new("delete", "deletes"),
        ]
    }

    fn execute_tool(
        &self,
        _session: SessionId,
        call: ToolCall,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, ToolOutput> {
        self.executed.lock().unwrap().push(call.name);
        Box::pin(async { ToolOutput::error("the host must not run announced calls") })
    }
}

#[tokio::test]
async fn announced_calls_are_recorded_and_checked_but_never_executed_by_the_host() {
    let host = Arc::new(SelfRunning::default());
    let harness = Harness::open(Arc::clone(&host)).await;
    let mut restricted = spec("spawn", "worker", subagent_core::Delivery::Caller);
    restricted.request.options.tool_filter = Some(ToolRestriction::Deny(vec!["delete".into()]));
    let child = harness.start(restricted).await.unwrap();
    assert_eq!(
        child.result().await.unwrap().stop_reason,
        SubagentStopReason::Completed
    );

    let answers = host.answers.lock().unwrap().clone();
    assert_eq!(answers[0], Announced::Permitted);
    assert!(
        matches!(&answers[1], Announced::Refused(out) if out.refused),
        "{answers:?}"
    );
    assert_eq!(
        answers[2],
        Announced::Permitted,
        "a repeated id repeats its answer"
    );
    assert!(
        matches!(&answers[3], Announced::Refused(out) if !out.refused && out.is_error),
        "an unlisted tool is refused as unknown: {answers:?}"
    );
    assert!(
        host.executed.lock().unwrap().is_empty(),
        "the host ran an announced call"
    );

    let recorded: Vec<(String, String)> = harness
        .events(child.child_id())
        .into_iter()
        .filter_map(|event| match event {
            Event::ToolCalled { call_id, name, .. } => Some((format!("called {call_id}"), name)),
            Event::ToolReturned {
                call_id,
                output,
                refused,
                ..
            } => Some((
                format!(
                    "returned {call_id}{}",
                    if refused { " refused" } else { "" }
                ),
                subagent_core::content::plain_text(&output),
            )),
            Event::AgentReported {
                report: AgentReport::Plan { entries },
                ..
            } => Some(("plan".into(), entries[0].content.clone())),
            _ => None,
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("called a", "run"),
        ("returned a", "ran"),
        ("called d", "delete"),
        (
            "returned d refused",
            "tool delete is not available to this agent",
        ),
        ("called u", "unlisted"),
        ("returned u", "unknown tool unlisted"),
        ("called b", "run"),
        ("plan", "step"),
        (
            "returned b",
            "the turn ended before the agent reported this call's result",
        ),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(recorded, expected);
}
