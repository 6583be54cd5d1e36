//! The agent seam: [`AgentHost`] builds a live [`Agent`] from a session's
//! durable history ([`AgentSpec`]), and the agent runs turns
//! ([`TurnInput`] in, [`TranscriptItem`]s and a [`TurnEnd`] out), steering
//! and calling tools through the ports it is given. The runtime never calls
//! a model itself.

use serde_json::Value;
use subagent_core::{
    AgentReport, ContentBlock, Diagnostic, SessionId, SubagentDescriptor, SubagentError,
    SubagentStopReason,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use crate::tools::{Announced, ToolCall, ToolDefinition, ToolOutput, ToolPort};
use crate::BoxFuture;

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
    /// transcript, inbox). Image parts appear as recorded: by attachment
    /// id (`SubagentRuntime::attachment` reads the bytes).
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

/// One transcript entry an agent produces during a turn. Tool calls the
/// host executes are not entries: they go through the turn's
/// [`ToolPort::call`], which records the call and its result.
#[derive(Clone, Debug, PartialEq)]
pub enum TranscriptItem {
    /// An assistant message.
    Assistant(Vec<ContentBlock>),
    /// The agent's report of its own progress: its plan, its context use.
    Report(AgentReport),
    /// The result of a call the agent ran itself, once
    /// [`ToolPort::announce`] permitted it (recorded as its `ToolReturned`).
    /// It is recorded once, for a call announced, permitted and still open
    /// in this turn; any other is dropped (a refusal already stands, or the
    /// call never ran through the port). A permitted call still open when
    /// the turn ends is closed with an error result.
    ToolResult {
        /// The announced call's id.
        call_id: String,
        /// What it returned.
        output: Vec<ContentBlock>,
        /// Whether it failed.
        is_error: bool,
    },
}

/// The input of one turn.
pub struct TurnInput {
    /// The claimed messages' content, in FIFO order. An image part that the
    /// log records by attachment id carries its bytes here again, as base64
    /// `data` beside the id.
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

/// The route a session's turns run on, as far as a host needs it to say
/// which input the session's model takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputRoute<'a> {
    /// The session.
    pub session: SessionId,
    /// Its creation label.
    pub label: &'a str,
    /// The model provider of its effective agent options, if set.
    pub provider: Option<&'a str>,
    /// The model of its effective agent options, if set.
    pub model: Option<&'a str>,
}

/// Builds live agents from durable history, and provides their tools.
///
/// # Example
///
/// A host whose agents answer every turn with one fixed line; the runtime
/// records what they say. A real host builds a model client from `spec`
/// (its label, options, persona, history and the tools it may see).
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use subagent_core::{content::plain_text, ContentBlock, Delivery, SubagentActivationSpec, SubagentError, SubagentStopReason};
/// use subagent_runtime::providers::SpawnProvider;
/// use subagent_runtime::{Agent, AgentHost, AgentSpec, BoxFuture, SubagentRuntime, TranscriptItem, TurnEnd, TurnInput};
/// use subagent_store::MemoryLog;
/// use tokio_util::sync::CancellationToken;
///
/// struct Fixed(String);
///
/// impl Agent for Fixed {
///     fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd> {
///         let line = TranscriptItem::Assistant(vec![ContentBlock::text(self.0.clone())]);
///         Box::pin(async move {
///             let stop_reason = match input.transcript.send(line).await {
///                 Ok(()) => SubagentStopReason::Completed,
///                 Err(_) => SubagentStopReason::Aborted,
///             };
///             TurnEnd { stop_reason, diagnostic: None, structured: None }
///         })
///     }
/// }
///
/// struct Host;
///
/// impl AgentHost for Host {
///     fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
///         let line = format!("{} reporting", spec.label);
///         Box::pin(async move { Ok(Box::new(Fixed(line)) as Box<dyn Agent>) })
///     }
/// }
///
/// let (runtime, _) = SubagentRuntime::open(Arc::new(MemoryLog::new()), Arc::new(Host)).await?;
/// runtime.register_provider(Arc::new(SpawnProvider)).await?;
/// let root = runtime.open_root("host").await?;
/// let spec = SubagentActivationSpec::with_text_prompt("spawn", "scout", "go", Delivery::Caller);
/// let child = runtime.start_activation(&root, spec, CancellationToken::new()).await?;
/// assert_eq!(plain_text(&child.result().await?.output), "scout reporting");
/// child.dispose().await?;
/// runtime.close().await?;
/// # Ok(()) }
/// ```
pub trait AgentHost: Send + Sync + 'static {
    /// Builds the agent of a session.
    fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>>;

    /// Every tool the host provides. Read once when the runtime opens; a
    /// tool filter may name only these.
    fn tools(&self) -> Vec<ToolDefinition> {
        Vec::new()
    }

    /// Whether the model `route` names takes image input. A prompt with
    /// image parts to a session whose route does not is refused
    /// (`subagent/attachment-invalid`) before anything is stored. Deny by
    /// default: a host that says nothing receives no images.
    fn accepts_image_input(&self, route: &InputRoute<'_>) -> bool {
        let _ = route;
        false
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
