//! The seams the host plugs into: [`SubagentProvider`] (how children are
//! created or started) and [`AgentHost`] / [`Agent`] (how a live agent runs
//! turns). The runtime never calls a model itself.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;
use subagent_core::{
    AgentRoute, ContentBlock, ContinuableCreateSpec, Diagnostic, SessionId, SubagentCapabilities,
    SubagentDescriptor, SubagentError, SubagentResult, SubagentStartRequest, SubagentStopReason,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use crate::tools::{ToolCall, ToolDefinition, ToolOutput, ToolPort};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What `prepare_continuable` is asked (`ContinuableCreateRequest`).
#[derive(Clone, Debug)]
pub struct ContinuableCreateRequest {
    /// The reserved child session id.
    pub session_id: SessionId,
    /// The delegating parent.
    pub parent: SessionId,
    /// The parent's completed-turn history (lossless JSON of its events), for
    /// seeding providers.
    pub parent_history: Vec<Value>,
    /// Caller cancellation; owns preparation until the prompt is accepted.
    pub signal: CancellationToken,
}

/// What `start` is asked (`ResolvedSubagentStartRequest`).
#[derive(Clone, Debug)]
pub struct ResolvedStartRequest {
    /// The run's id (the external child's id).
    pub run_id: SessionId,
    /// The delegating parent.
    pub parent: SessionId,
    /// The task.
    pub request: SubagentStartRequest,
    /// The durable descriptor.
    pub descriptor: SubagentDescriptor,
    /// Cancellation before and after publication.
    pub signal: CancellationToken,
}

/// An external execution handle (`SubagentRun`), owned by the external driver
/// until disposal completes.
pub trait SubagentRun: Send {
    /// Resolves with the terminal result. A child-level failure is a result
    /// with a non-`completed` stop reason; `Err` is an infrastructure fault.
    fn result(&mut self) -> BoxFuture<'_, Result<SubagentResult, SubagentError>>;
    /// Cancels remaining work, reaches quiescence, releases resources.
    /// Idempotent. `Err` is a cleanup failure, recorded beside the result.
    fn dispose(&mut self) -> BoxFuture<'_, Result<(), Diagnostic>>;
}

/// One registered transport for child agents.
pub trait SubagentProvider: Send + Sync + 'static {
    /// Unique registry name.
    fn name(&self) -> &str;
    /// Supported start-time options.
    fn capabilities(&self) -> SubagentCapabilities;
    /// Whether children see the parent's completed-turn prefix.
    fn inherits_parent_context(&self) -> bool;
    /// Optional static model route.
    fn agent_route_defaults(&self) -> Option<AgentRoute> {
        None
    }
    /// Whether this provider prepares local continuable children (the
    /// presence of `prepareContinuable`).
    fn is_continuable(&self) -> bool {
        false
    }
    /// Contributes the detached creation inputs of a continuable child.
    fn prepare_continuable(
        &self,
        request: ContinuableCreateRequest,
    ) -> BoxFuture<'static, Result<ContinuableCreateSpec, SubagentError>> {
        let _ = request;
        Box::pin(async {
            Err(SubagentError::NotResumable(
                "provider has no continuable capability".into(),
            ))
        })
    }
    /// Establishes one external execution and returns its handle.
    fn start(
        &self,
        request: ResolvedStartRequest,
    ) -> BoxFuture<'static, Result<Box<dyn SubagentRun>, SubagentError>> {
        let _ = request;
        Box::pin(async {
            Err(SubagentError::NotResumable(
                "provider has no one-shot capability".into(),
            ))
        })
    }
}

/// Everything a live agent is built from: the session's durable history.
#[derive(Clone, Debug)]
pub struct AgentSpec {
    /// The session.
    pub session: SessionId,
    /// Its label.
    pub label: String,
    /// Its descriptor (options, tool filter, persona).
    pub descriptor: Option<SubagentDescriptor>,
    /// The session's recorded events, lossless JSON, oldest first (seed,
    /// transcript, inbox).
    pub history: Vec<Value>,
    /// The output schema of this activation, if any.
    pub output_schema: Option<Value>,
    /// The child's persona, rendered: it shadows the deployment persona for
    /// this child alone.
    pub persona: Option<String>,
    /// The host's tools this session may see: restricted ones (by its own
    /// filter or an ancestor's) are absent, and its [`ToolPort`] refuses them.
    pub tools: Vec<ToolDefinition>,
}

/// One transcript entry an agent produces during a turn. Tool calls and
/// results are not entries: they go through the turn's [`ToolPort`], which
/// records both.
#[derive(Clone, Debug, PartialEq)]
pub enum TranscriptItem {
    /// An assistant message.
    Assistant(Vec<ContentBlock>),
}

/// The input of one turn.
pub struct TurnInput {
    /// The claimed messages' content, in FIFO order.
    pub messages: Vec<Vec<ContentBlock>>,
    /// Cancellation (interrupt, dispose).
    pub cancel: CancellationToken,
    /// Where transcript entries go; each is recorded before the next step.
    pub transcript: mpsc::Sender<TranscriptItem>,
    /// Steering input, taken at the agent's step boundaries.
    pub steering: SteeringPort,
    /// The only way to run a tool: calls are recorded, restricted ones refused.
    pub tools: ToolPort,
}

/// Where an agent takes steering input at a step boundary. Each call claims,
/// durably and for the running turn, every message pending in the inbox and
/// returns their contents in FIFO order. Messages are claimed only when the
/// agent takes them, so none is claimed by a turn that never saw it.
pub struct SteeringPort(
    pub(crate) mpsc::Sender<tokio::sync::oneshot::Sender<Vec<Vec<ContentBlock>>>>,
);

impl SteeringPort {
    /// A port whose `take` always returns nothing (agents run outside a driver).
    #[must_use]
    pub fn disconnected() -> Self {
        SteeringPort(mpsc::channel(1).0)
    }

    /// Claims and returns the messages that arrived since the turn began or
    /// since the last `take`; empty when there are none.
    pub async fn take(&self) -> Vec<Vec<ContentBlock>> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        if self.0.send(reply).await.is_err() {
            return Vec::new();
        }
        answer.await.unwrap_or_default()
    }
}

/// How a turn ended.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnEnd {
    /// Why.
    pub stop_reason: SubagentStopReason,
    /// Failure detail for a non-completed turn.
    pub diagnostic: Option<Diagnostic>,
    /// A structured capture, when the turn produced one.
    pub structured: Option<Value>,
}

/// A live agent.
pub trait Agent: Send {
    /// Runs one turn to its end.
    fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd>;
}

/// Builds live agents from durable history, and provides their tools.
pub trait AgentHost: Send + Sync + 'static {
    /// Builds the agent of a session.
    fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>>;

    /// Every tool the host provides. Read once when the runtime opens; a
    /// tool filter may name only these.
    fn tools(&self) -> Vec<ToolDefinition> {
        Vec::new()
    }

    /// Executes one permitted call for `session`. The runtime has already
    /// recorded the call and checked the session's tool scope; `cancel`
    /// fires when the turn is interrupted or disposed.
    fn execute_tool(
        &self,
        session: SessionId,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ToolOutput> {
        let _ = (session, cancel);
        let name = call.name;
        Box::pin(async move { ToolOutput::error(format!("the host cannot execute {name}")) })
    }
}
