//! `cargo run --example custom_provider`: a host-written provider of
//! external one-shot runs. Each run is a job the host executes outside the
//! runtime (here a task that reverses its prompt; a real host calls a
//! remote service); the runtime records the request, the start, the
//! settlement and the disposal.
//!
//! Its capability flags say which start options it honours: it declares
//! `agentOptions` (it reads the reasoning effort), so a start carrying a persona,
//! which it does not declare, is refused before anything is recorded.

use std::sync::Arc;
use std::time::Duration;

use subagent_core::{
    content::plain_text, AgentOptions, ContentBlock, Delivery, Diagnostic, StreamId,
    SubagentActivationSpec, SubagentCapabilities, SubagentError, SubagentResult,
    SubagentStopReason,
};
use subagent_runtime::provider::ResolvedStartRequest;
use subagent_runtime::{
    BoxFuture, Script, ScriptedHost, SubagentProvider, SubagentRun, SubagentRuntime,
};
use subagent_store::{EventLog, EventLogExt, RocksLog, RocksOptions};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

// ANCHOR: provider
/// Runs each task as a background job that answers with the prompt
/// reversed. A prompt asking it to take its time works until stopped.
pub(crate) struct ReverseProvider;

impl SubagentProvider for ReverseProvider {
    fn name(&self) -> &str {
        "reverse"
    }
    /// Only `agentOptions`; every other start option is refused
    /// `subagent/capability-unsupported` by the runtime.
    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities {
            agent_options: true,
            ..SubagentCapabilities::default()
        }
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn start(
        &self,
        request: ResolvedStartRequest,
    ) -> BoxFuture<'static, Result<Box<dyn SubagentRun>, SubagentError>> {
        Box::pin(async move {
            let prompt = plain_text(&request.request.prompt);
            let effort = request
                .request
                .options
                .agent_options
                .and_then(|options| options.reasoning_effort);
            let signal = request.signal; // the caller's cancellation, before and after publication
            let job = tokio::spawn(async move {
                let work = async {
                    if prompt.contains("take your time") {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    let reversed: String = prompt.chars().rev().collect();
                    let effort = effort.unwrap_or_else(|| "default".to_owned());
                    SubagentResult::completed(vec![ContentBlock::text(format!(
                        "{reversed} (effort: {effort})"
                    ))])
                };
                tokio::select! {
                    result = work => result,
                    () = signal.cancelled() => SubagentResult::failed(SubagentStopReason::Aborted, Vec::new(), "cancelled"),
                }
            });
            Ok(Box::new(ReverseRun { job }) as Box<dyn SubagentRun>)
        })
    }
}

/// One job: its result once, and disposal that stops it.
struct ReverseRun {
    job: JoinHandle<SubagentResult>,
}

impl SubagentRun for ReverseRun {
    fn result(&mut self) -> BoxFuture<'_, Result<SubagentResult, SubagentError>> {
        Box::pin(async move {
            match (&mut self.job).await {
                Ok(result) => Ok(result),
                // Disposed (aborted) before it finished: the run was stopped.
                Err(error) if error.is_cancelled() => Ok(SubagentResult::failed(
                    SubagentStopReason::Aborted,
                    Vec::new(),
                    "disposed",
                )),
                Err(error) => Err(SubagentError::internal_from(error)), // it panicked
            }
        })
    }
    /// Idempotent: aborting a finished or aborted job does nothing.
    fn dispose(&mut self) -> BoxFuture<'_, Result<(), Diagnostic>> {
        self.job.abort();
        Box::pin(async { Ok(()) })
    }
}
// ANCHOR_END: provider

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log: Arc<dyn EventLog> = Arc::new(RocksLog::open(dir.path(), RocksOptions::default())?);
    let host = Arc::new(ScriptedHost::new(Script::reply(
        "unused: external runs have no agent",
    )));
    let (runtime, _) = SubagentRuntime::open(log.clone(), host).await?;
    // ANCHOR: register
    let registration = runtime.register_provider(Arc::new(ReverseProvider)).await?;
    let root = runtime.open_root("host").await?;

    let mut task =
        SubagentActivationSpec::with_text_prompt("reverse", "mirror", "stressed", Delivery::Caller);
    task.request.options.agent_options = Some(AgentOptions {
        reasoning_effort: Some("low".into()),
        ..AgentOptions::default()
    });
    let run = runtime
        .start_activation(&root, task, CancellationToken::new())
        .await?;
    let result = run.result().await?;
    run.dispose().await?;

    let mut undeclared =
        SubagentActivationSpec::with_text_prompt("reverse", "styled", "stressed", Delivery::Caller);
    undeclared.request.options.persona = Some("You are a pirate.".into());
    let refused = runtime
        .start_activation(&root, undeclared, CancellationToken::new())
        .await;
    // ANCHOR_END: register

    println!(
        "mirror settled {}: {}",
        result.stop_reason.as_str(),
        plain_text(&result.output)
    );
    match refused {
        Err(error) => println!(
            "a persona is refused: {} ({})",
            error.code().as_str(),
            error
        ),
        Ok(_) => return Err("a start with an undeclared option was accepted".into()),
    }
    let recorded: Vec<&'static str> = log
        .read_stream(StreamId::Session(run.child_id()), 1)
        .map(|record| record.map(|record| record.event.type_name()))
        .collect::<Result<_, _>>()?;
    println!("the run's stream: {}", recorded.join(", "));
    println!(
        "children of the root: {}",
        runtime.list_children(root.session()).await?.len()
    );
    registration.remove().await?;
    println!("providers after removal: {:?}", runtime.list()?);
    runtime.close().await?;
    Ok(())
}
