//! Tools: what the host provides, and the scope a session reaches them
//! through.
//!
//! The host lists its tools ([`AgentHost::tools`](crate::agent::AgentHost::tools))
//! and executes them ([`AgentHost::execute_tool`](crate::agent::AgentHost::execute_tool)).
//! An agent reaches a tool only through the [`ToolPort`] of its turn, which
//! the driver serves: it records `ToolCalled`, then either refuses a tool the
//! session's lineage restricts (recorded as a `ToolReturned` with
//! `refused: true`, and never executed) or executes it through the host and
//! records the result. One visibility: a restricted tool is absent from
//! [`AgentSpec::tools`](crate::agent::AgentSpec::tools) and refused by the
//! port, for the child and every descendant.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use subagent_core::{ContentBlock, ToolRestriction};
use tokio::sync::{mpsc, oneshot};

/// One tool as the host describes it to agents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDefinition {
    /// Unique name; what a tool filter lists.
    pub name: String,
    /// What the tool does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the input.
    #[serde(default)]
    pub input_schema: Value,
}

impl ToolDefinition {
    /// A tool with a name and description and an open input schema.
    #[must_use]
    pub fn new(name: &str, description: &str) -> Self {
        ToolDefinition {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema: serde_json::json!({"type": "object"}),
        }
    }
}

/// One call an agent makes.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The agent's id for the call, echoed in the recorded result.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// Its input.
    pub input: Value,
}

/// What a call returned to the agent.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    /// The result content (for a refusal, the reason).
    pub output: Vec<ContentBlock>,
    /// Whether the call failed.
    pub is_error: bool,
    /// Whether the runtime refused to execute it.
    pub refused: bool,
}

impl ToolOutput {
    /// A failed call with a one-line reason.
    #[must_use]
    pub fn error(reason: impl Into<String>) -> Self {
        ToolOutput {
            output: vec![ContentBlock::text(reason)],
            is_error: true,
            refused: false,
        }
    }
}

/// What the runtime answered an announced call ([`ToolPort::announce`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Announced {
    /// Recorded; the agent may run it (and reports its result as a
    /// [`TranscriptItem::ToolResult`](crate::agent::TranscriptItem::ToolResult)).
    Permitted,
    /// Recorded and refused (restricted for this session, or not a tool
    /// the host lists); the refusal is the call's recorded result.
    Refused(ToolOutput),
}

/// One request of a turn's [`ToolPort`] to its driver.
pub(crate) enum ToolRequest {
    /// Record, check, execute through the host, record the result.
    Execute(ToolCall, oneshot::Sender<ToolOutput>),
    /// Record and check only: the agent runs the tool itself.
    Announce(ToolCall, oneshot::Sender<Announced>),
}

/// Where an agent calls tools during a turn. Every call is recorded before
/// its result is returned; a restricted tool is refused, not executed.
pub struct ToolPort(pub(crate) mpsc::Sender<ToolRequest>);

/// The answer when the turn is gone.
fn turn_ended() -> ToolOutput {
    ToolOutput::error("the turn has ended")
}

impl ToolPort {
    /// A port that refuses every call (agents run outside a driver).
    #[must_use]
    pub fn disconnected() -> Self {
        ToolPort(mpsc::channel(1).0)
    }

    /// Calls a host tool and waits for its recorded result.
    pub async fn call(&self, call: ToolCall) -> ToolOutput {
        let (reply, answer) = oneshot::channel();
        if self
            .0
            .send(ToolRequest::Execute(call, reply))
            .await
            .is_err()
        {
            return turn_ended();
        }
        answer.await.unwrap_or_else(|_| turn_ended())
    }

    /// Announces a call the agent runs itself (an agent that executes its
    /// own tools, as agents over ACP do): the call is recorded and checked
    /// against the session's tool scope exactly like [`call`](Self::call),
    /// but never executed by the host. A refused call's refusal is
    /// recorded as its result; a permitted one's result is the agent's to
    /// report. Outside a turn every call is refused.
    pub async fn announce(&self, call: ToolCall) -> Announced {
        let (reply, answer) = oneshot::channel();
        if self
            .0
            .send(ToolRequest::Announce(call, reply))
            .await
            .is_err()
        {
            return Announced::Refused(turn_ended());
        }
        answer
            .await
            .unwrap_or_else(|_| Announced::Refused(turn_ended()))
    }
}

/// The host's tools a session with this lineage of restrictions sees.
pub(crate) fn visible_tools(
    host_tools: &[ToolDefinition],
    lineage: &[&ToolRestriction],
) -> Vec<ToolDefinition> {
    host_tools
        .iter()
        .filter(|tool| ToolRestriction::permits_in(lineage.iter().copied(), &tool.name))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lineage_only_narrows_what_is_visible() {
        let host: Vec<ToolDefinition> = ["read", "write", "shell"]
            .iter()
            .map(|name| ToolDefinition::new(name, ""))
            .collect();
        let names = |tools: Vec<ToolDefinition>| -> Vec<String> {
            tools.into_iter().map(|tool| tool.name).collect()
        };
        assert_eq!(names(visible_tools(&host, &[])).len(), 3);
        let deny_shell = ToolRestriction::Deny(vec!["shell".into()]);
        let allow_shell_read = ToolRestriction::Allow(vec!["shell".into(), "read".into()]);
        assert_eq!(
            names(visible_tools(&host, &[&deny_shell])),
            ["read", "write"]
        );
        // A child allowed `shell` below a parent denied it still cannot see it.
        assert_eq!(
            names(visible_tools(&host, &[&allow_shell_read, &deny_shell])),
            ["read"]
        );
    }
}
