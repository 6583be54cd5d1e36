//! Activation and activity state of one session: the live continuable
//! activation (at most one), its turns, and the last settled result; or, for
//! an external child, its one run.

use serde::{Deserialize, Serialize};
use subagent_core::{Delivery, Diagnostic, SubagentResult, SubagentRunId};

/// How far a live activation has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActivationPhase {
    /// Reserved; the provider has not contributed creation inputs yet.
    Requested,
    /// Prepared; not yet published.
    Prepared,
    /// Published: the child agent is live.
    Published,
}

/// The one live activation of a continuable session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveActivation {
    /// Epoch.
    pub epoch: u64,
    /// Phase.
    pub phase: ActivationPhase,
    /// Who receives the result.
    pub delivery: Delivery,
    /// The output schema of this activation: its structured capture closes
    /// input, and a later cold resume does not inherit it.
    #[serde(default)]
    pub output_schema: Option<serde_json::Value>,
    /// Run id once published.
    pub run_id: Option<SubagentRunId>,
    /// Whether this epoch's result has settled (before release).
    pub settled: bool,
    /// The activation's own span, as its `ActivationRequested` recorded it
    /// (see [`Projections::span_parent`](crate::Projections::span_parent)).
    /// Absent when no span was exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<subagent_core::TraceContext>,
    /// The span of the turn in progress, as its `TurnStarted` recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_trace: Option<subagent_core::TraceContext>,
}

impl LiveActivation {
    /// Whether this activation captures structured output (its input is closed).
    #[must_use]
    pub fn captures_structured_output(&self) -> bool {
        self.output_schema.is_some()
    }
}

/// Activity of a session, as `list_agents` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Activity {
    /// A live activation is running a turn.
    Running,
    /// A live activation waits for input.
    Idle,
    /// No live activation; cold-resumable from the log.
    Inactive,
}

/// Activation facts of one continuable session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationState {
    /// The latest epoch requested (0: never activated).
    pub epoch: u64,
    /// The live activation, if any.
    pub live: Option<LiveActivation>,
    /// The turn in progress.
    pub running_turn: Option<u64>,
    /// The last turn number started.
    pub turns: u64,
    /// The last settled result and its epoch.
    pub last_result: Option<(u64, SubagentResult)>,
    /// The last cleanup failure and its epoch, recorded beside the result.
    pub last_cleanup_error: Option<(u64, Diagnostic)>,
    /// The ids of the running turn's tool calls that have not returned, in
    /// the order they were called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open_calls: Vec<String>,
}

impl ActivationState {
    /// Current activity.
    #[must_use]
    pub fn activity(&self) -> Activity {
        match (&self.live, self.running_turn) {
            (Some(_), Some(_)) => Activity::Running,
            (Some(_), None) => Activity::Idle,
            (None, _) => Activity::Inactive,
        }
    }
}

/// Phase of an external one-shot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunPhase {
    /// Requested from the provider.
    Requested,
    /// Published by the provider.
    Started,
    /// Settled; handle not yet disposed.
    Settled,
    /// Handle disposed.
    Disposed,
    /// The provider refused to start it.
    StartFailed,
}

/// The one run of an external child.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunState {
    /// The run.
    pub run_id: SubagentRunId,
    /// The provider.
    pub provider: String,
    /// Who receives the result.
    pub delivery: Delivery,
    /// Phase.
    pub phase: RunPhase,
    /// The settled result.
    pub result: Option<SubagentResult>,
    /// A cleanup failure recorded beside the result.
    pub cleanup_error: Option<Diagnostic>,
}

impl RunState {
    /// Whether the run still holds backend resources.
    #[must_use]
    pub fn is_live(&self) -> bool {
        matches!(
            self.phase,
            RunPhase::Requested | RunPhase::Started | RunPhase::Settled
        )
    }
}
