//! The external (one-shot) driver: awaits the run's result or a stop,
//! records it, then disposes the backend handle when stopped and records that
//! (a cleanup failure beside the result, never over it).

use std::sync::Arc;

use subagent_core::{SubagentError, SubagentResult, SubagentRunId};
use subagent_projections::Command;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::activation::DriverHandle;
use crate::provider::SubagentRun;
use crate::runtime::SubagentRuntime;
use crate::telemetry::{in_span, TracedSpan};

use super::{announce_settled, end_info};

/// Drives one external run: await its result (or a stop), record it, then
/// dispose the handle when stopped and record that.
pub(crate) struct ExternalDriver {
    pub(crate) runtime: SubagentRuntime,
    pub(crate) handle: Arc<DriverHandle>,
    pub(crate) run: Box<dyn SubagentRun>,
    pub(crate) run_id: SubagentRunId,
    pub(crate) provider: String,
    pub(crate) signal: CancellationToken,
    /// The run's span (`subagents.run`): the driver issues its commands
    /// in it, and the provider's steps (`result`, `dispose`) run inside it.
    pub(crate) span: TracedSpan,
}

impl ExternalDriver {
    pub(crate) async fn run(mut self) {
        if let Err(err) = self.drive().await {
            self.span.span.in_scope(|| {
                warn!(child = %self.handle.child, error = %err, "external driver failed");
            });
            crate::telemetry::record_error(&self.span.span, err.code().as_str());
            self.handle.settle(Err(err));
        }
    }

    async fn drive(&mut self) -> Result<(), SubagentError> {
        let engine = &self.runtime.inner.engine;
        let child = self.handle.child;
        let stop = self.handle.stop.clone();
        let signal = self.signal.clone();
        let outcome = tokio::select! {
            result = in_span(&self.span.span, self.run.result()) => Some(result),
            () = stop.cancelled() => None,
            () = signal.cancelled() => None,
        };
        if let Some(result) = outcome {
            // Provider text is cleaned before it is recorded.
            let mut result = result.unwrap_or_else(|err| {
                SubagentResult::failed(
                    subagent_core::SubagentStopReason::Error,
                    Vec::new(),
                    err.to_string(),
                )
            });
            if let Some(diagnostic) = &result.diagnostic {
                result.diagnostic = Some(self.runtime.clean_diagnostic(child, diagnostic.as_str()));
            }
            if result.stop_reason != subagent_core::SubagentStopReason::Completed {
                crate::telemetry::record_error(&self.span.span, result.stop_reason.as_str());
            }
            engine
                .commit_in(
                    Command::SettleRun {
                        child,
                        result: result.clone(),
                    },
                    &self.span,
                )
                .await?;
            let end = end_info(self.run_id, &self.provider, child, false, &result);
            announce_settled(&self.runtime, &self.handle, Some(end), Ok(result));
            stop.cancelled().await;
        }
        let cleanup_error = in_span(&self.span.span, self.run.dispose())
            .await
            .err()
            .map(|error| self.runtime.clean_diagnostic(child, error.as_str()));
        engine
            .commit_in(
                Command::DisposeRun {
                    child,
                    cleanup_error,
                },
                &self.span,
            )
            .await?;
        let state = engine.state();
        if let Some(result) = state.runs.get(&child).and_then(|run| run.result.clone()) {
            self.handle.settle(Ok(result));
        }
        Ok(())
    }
}
