//! The session corpus: one [`SessionRecord`] per `SessionCreated`, with its
//! interpreted descriptor.

use serde::{Deserialize, Serialize};
use subagent_core::{AgentOptions, SessionId, SessionMode, SubagentDescriptor, ToolCallRef};

/// What the log says about one session at its creation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// The session.
    pub id: SessionId,
    /// The delegating parent; `None` for a host root.
    pub parent: Option<SessionId>,
    /// Edges from the host root.
    pub depth: u64,
    /// Creation label.
    pub label: String,
    /// Creating provider; `None` for a root.
    pub provider: Option<String>,
    /// Execution mode.
    pub mode: SessionMode,
    /// External one-shot execution.
    pub external: bool,
    /// The descriptor, when this version can interpret it (children only).
    pub descriptor: Option<SubagentDescriptor>,
    /// The agent options this session runs with: a child's effective
    /// options from its descriptor, a root's from its creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_options: Option<AgentOptions>,
    /// Log position of the `SessionCreated`.
    pub created_at: u64,
    /// The trace context the `SessionCreated` kept: for a root, its
    /// `create_agent` span, the parent of every activation of its tree
    /// that no in-tree span started (`Projections::span_parent`), and the
    /// tree's trace (`Projections::tree_trace`). A child's keeps one only
    /// when it was recorded outside its tree's trace
    /// (`subagent_core::kept_trace`). Absent when no span was exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<subagent_core::TraceContext>,
    /// The delegation tool call of its parent's turn that started it: what
    /// its first request (`ActivationRequested` or `RunRequested`) named.
    /// `None` for a root, and for a child its host started directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<ToolCallRef>,
}

impl SessionRecord {
    /// Whether this session can be resumed and messaged: a continuable,
    /// non-external session whose descriptor is understood (or a root).
    #[must_use]
    pub fn is_resumable(&self) -> bool {
        self.mode == SessionMode::Continuable
            && !self.external
            && (self.parent.is_none() || self.descriptor.is_some())
    }
}
