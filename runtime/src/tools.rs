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

pub(crate) type ToolRequest = (ToolCall, oneshot::Sender<ToolOutput>);

/// Where an agent calls tools during a turn. Every call is recorded before
/// its result is returned; a restricted tool is refused, not executed.
pub struct ToolPort(pub(crate) mpsc::Sender<ToolRequest>);

impl ToolPort {
    /// A port that refuses every call (agents run outside a driver).
    #[must_use]
    pub fn disconnected() -> Self {
        ToolPort(mpsc::channel(1).0)
    }

    /// Calls a tool and waits for its recorded result.
    pub async fn call(&self, call: ToolCall) -> ToolOutput {
        let (reply, answer) = oneshot::channel();
        if self.0.send((call, reply)).await.is_err() {
            return ToolOutput::error("the turn has ended");
        }
        answer
            .await
            .unwrap_or_else(|_| ToolOutput::error("the turn has ended"))
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
