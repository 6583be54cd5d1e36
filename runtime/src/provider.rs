//! The provider seam: [`SubagentProvider`], how a host's children are
//! created (a continuable child's creation inputs) or started (an external
//! one-shot [`SubagentRun`]), and the requests it is handed.

use serde_json::Value;
use subagent_core::{
    AgentRoute, ContinuableCreateSpec, Diagnostic, SessionId, SubagentCapabilities,
    SubagentDescriptor, SubagentError, SubagentResult, SubagentStartRequest,
};
use tokio_util::sync::CancellationToken;

use crate::BoxFuture;

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
    /// The label the run is cataloged under in the parent.
    pub label: String,
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
///
/// # Example
///
/// An external provider whose runs answer at once. It declares no start
/// option, so the runtime refuses any (`subagent/capability-unsupported`)
/// before recording anything (`examples/custom_provider.rs` is a fuller
/// one, with cancellation and disposal):
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use subagent_core::{
///     content::plain_text, ContentBlock, Delivery, Diagnostic, ErrorCode,
///     SubagentActivationSpec, SubagentCapabilities, SubagentError, SubagentResult,
/// };
/// use subagent_runtime::provider::ResolvedStartRequest;
/// use subagent_runtime::{BoxFuture, Script, ScriptedHost, SubagentProvider, SubagentRun, SubagentRuntime};
/// use subagent_store::MemoryLog;
/// use tokio_util::sync::CancellationToken;
///
/// struct Echo;
/// struct EchoRun(String);
///
/// impl SubagentProvider for Echo {
///     fn name(&self) -> &str { "echo" }
///     fn capabilities(&self) -> SubagentCapabilities { SubagentCapabilities::default() }
///     fn inherits_parent_context(&self) -> bool { false }
///     fn start(&self, request: ResolvedStartRequest) -> BoxFuture<'static, Result<Box<dyn SubagentRun>, SubagentError>> {
///         let prompt = plain_text(&request.request.prompt);
///         Box::pin(async move { Ok(Box::new(EchoRun(prompt)) as Box<dyn SubagentRun>) })
///     }
/// }
///
/// impl SubagentRun for EchoRun {
///     fn result(&mut self) -> BoxFuture<'_, Result<SubagentResult, SubagentError>> {
///         let text = self.0.clone();
///         Box::pin(async move { Ok(SubagentResult::completed(vec![ContentBlock::text(text)])) })
///     }
///     fn dispose(&mut self) -> BoxFuture<'_, Result<(), Diagnostic>> {
///         Box::pin(async { Ok(()) })
///     }
/// }
///
/// let host = Arc::new(ScriptedHost::new(Script::reply("unused")));
/// let (runtime, _) = SubagentRuntime::open(Arc::new(MemoryLog::new()), host).await?;
/// runtime.register_provider(Arc::new(Echo)).await?;
/// let root = runtime.open_root("host").await?;
/// let spec = SubagentActivationSpec::with_text_prompt("echo", "e", "hello", Delivery::Caller);
/// let run = runtime.start_activation(&root, spec, CancellationToken::new()).await?;
/// assert_eq!(plain_text(&run.result().await?.output), "hello");
/// run.dispose().await?;
///
/// let mut styled = SubagentActivationSpec::with_text_prompt("echo", "s", "hello", Delivery::Caller);
/// styled.request.options.persona = Some("a pirate".into());
/// let refused = runtime.start_activation(&root, styled, CancellationToken::new()).await;
/// assert_eq!(refused.err().map(|e| e.code()), Some(ErrorCode::CapabilityUnsupported));
/// runtime.close().await?;
/// # Ok(()) }
/// ```
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
