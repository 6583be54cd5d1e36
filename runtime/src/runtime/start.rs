//! Starting a child: the reservation, then a local child's preparation and
//! driver, or an external run's start; a start refused after its
//! reservation is recorded as abandoned or failed.

use std::sync::Arc;

use serde_json::Value;
use subagent_core::content::require_content;
use subagent_core::{
    AbandonReason, Diagnostic, ErrorCode, MessageId, SessionId, StreamId, SubagentActivationSpec,
    SubagentError, SubagentRunId, SubagentRunInfo, ToolCallRef,
};
use subagent_projections::{Command, StartChild};
use subagent_store::EventLogExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::activation::{DriverHandle, SubagentActivation};
use crate::drivers::{ExternalDriver, LocalDriver};
use crate::engine::refuse_oversized_prompt;
use crate::provider::{ContinuableCreateRequest, ResolvedStartRequest, SubagentProvider};
use crate::telemetry::{in_span, TracedSpan};

use super::{lock, LiveAgent, Materializing, Notice, SubagentRuntime};

impl SubagentRuntime {
    /// Starts a local continuable child (provider with `prepare_continuable`)
    /// or an external one-shot run. Every requested option is checked against
    /// the provider's capabilities before anything is recorded.
    ///
    /// For a local child this returns once the prompt is durable in the
    /// child's inbox; for an external child once the provider published the
    /// run. A `signal` fired before that point abandons the start (recorded)
    /// and returns `gateway/cancelled`.
    ///
    /// A local child whose agent then fails (cannot be built, or its model
    /// or transport fails) is not a start failure: it settles through
    /// [`SubagentActivation::result`] with stop reason `error`.
    ///
    /// # Errors
    /// `subagent/unauthorized` for a stale parent, `gateway/bad-request` for
    /// a prompt with no content block, the start rejections of the state
    /// machine, `gateway/cancelled`, `subagent/closed`, or the provider's
    /// failure.
    pub async fn start_activation(
        &self,
        parent: &LiveAgent,
        spec: SubagentActivationSpec,
        signal: CancellationToken,
    ) -> Result<SubagentActivation, SubagentError> {
        self.start_requested(parent, spec, signal, None).await
    }

    /// [`start_activation`](Self::start_activation), asked for by
    /// `requested_by` when a delegation tool call of `parent`'s running
    /// turn is (the child's request event names it). Such a start does not
    /// wait for capacity.
    ///
    /// # Errors
    /// As [`start_activation`](Self::start_activation),
    /// `subagent/out-of-order` for a call of no running turn of `parent`,
    /// and `subagent/delivery-unavailable` at capacity for a requested one.
    pub(crate) async fn start_requested(
        &self,
        parent: &LiveAgent,
        spec: SubagentActivationSpec,
        signal: CancellationToken,
        requested_by: Option<ToolCallRef>,
    ) -> Result<SubagentActivation, SubagentError> {
        // Refusals before any command are counted here; the engine counts
        // those of its commands.
        let checked = self.authorize(parent).and_then(|()| {
            let provider = self
                .provider(&spec.provider)
                .ok_or_else(|| SubagentError::UnknownProvider(spec.provider.clone()))?;
            // As `prompt` refuses an empty message: the child's first turn
            // would have nothing to answer.
            require_content(&spec.request.prompt, "a start's prompt")?;
            refuse_oversized_prompt(&spec.request.prompt)?;
            Ok(provider)
        });
        let provider = checked.inspect_err(|err| crate::metrics::refused(err.code()))?;
        let child = match (spec.child_id, provider.is_continuable()) {
            (Some(reserved), true) => reserved,
            _ => SessionId::new(),
        };
        let run_id = SubagentRunId::from_uuid(*child.as_uuid());
        // Capacity may delay a program's start, the signal owning the wait.
        // An agent's start does not wait: a turn blocked on capacity could
        // not close the idle children that hold it.
        let permits = match &requested_by {
            None => self.inner.capacity.admit(parent.session, &signal).await?,
            Some(_) => self.inner.capacity.try_admit(parent.session).map_err(|_| {
                SubagentError::DeliveryUnavailable(
                    "the runtime is at capacity: close a child you no longer need, or wait for one"
                        .into(),
                )
            })?,
        };
        self.authorize(parent)?;
        let materializing = Materializing::enter(&self.inner.gate)?;
        let settings = self.inner.deployment.snapshot();
        // The child's span, opened by the engine as it decides the start
        // (the request is recorded in it); the start runs in it too.
        let span = self
            .inner
            .engine
            .commit_opening(
                Command::StartChild(StartChild {
                    parent: parent.session,
                    child,
                    provider: spec.provider.clone(),
                    label: spec.label.clone(),
                    options: spec.request.options.clone(),
                    delivery: spec.delivery,
                    run_id,
                    requested_by,
                    settings,
                }),
                Vec::new(),
            )
            .await?
            .opened
            .unwrap_or_else(TracedSpan::none);
        // A new child's first activation is epoch 1.
        let handle = DriverHandle::new(child, parent.session, 1);
        *lock(&handle.permits) = Some(permits);
        lock(&self.inner.drivers).insert(child, Arc::clone(&handle));
        // Registered: a drain from now on finds and releases it.
        drop(materializing);
        let started = if provider.is_continuable() {
            let span = span.span;
            self.start_local(&provider, &handle, spec, signal, span.clone())
                .instrument(span)
                .await
        } else {
            // Issues its commands in the run's span and runs only the
            // provider's own steps inside it.
            self.start_external(&provider, &handle, spec, run_id, signal, span)
                .await
        };
        match started {
            Ok(message_id) => Ok(SubagentActivation {
                child_id: child,
                message_id,
                handle,
                runtime: self.clone(),
            }),
            Err(err) => {
                self.unregister_driver(&handle);
                // A drain, dispose or close stopped the driver (and then
                // released the activation) while the start went on: the
                // step that failed met that release, and the start was
                // cancelled from outside, as `start_local` says when it
                // sees the stop first.
                if handle.stop.is_cancelled() {
                    return Err(if self.is_closed() {
                        SubagentError::Closed
                    } else {
                        SubagentError::Cancelled
                    });
                }
                Err(err)
            }
        }
    }

    pub(crate) async fn session_history(
        &self,
        parent: SessionId,
    ) -> Result<Vec<Value>, SubagentError> {
        let mut history = Vec::new();
        for record in self.log().read_stream(StreamId::Session(parent), 1) {
            history.push(
                serde_json::to_value(&record.map_err(SubagentError::internal_from)?.event)
                    .map_err(SubagentError::internal_from)?,
            );
        }
        Ok(history)
    }

    pub(crate) async fn start_local(
        &self,
        provider: &Arc<dyn SubagentProvider>,
        handle: &Arc<DriverHandle>,
        spec: SubagentActivationSpec,
        signal: CancellationToken,
        span: tracing::Span,
    ) -> Result<Option<MessageId>, SubagentError> {
        let child = handle.child;
        let request = ContinuableCreateRequest {
            session_id: child,
            parent: handle.parent,
            parent_history: if provider.inherits_parent_context() {
                self.session_history(handle.parent).await?
            } else {
                Vec::new()
            },
            signal: signal.clone(),
        };
        let prepared = tokio::select! {
            prepared = provider.prepare_continuable(request) => prepared,
            () = signal.cancelled() => Err(SubagentError::Cancelled),
            // A drain or dispose released the reservation meanwhile.
            () = handle.stop.cancelled() => return Err(SubagentError::Cancelled),
        };
        let created = match prepared {
            Ok(created) if !signal.is_cancelled() => created,
            outcome => {
                let (reason, error) = match outcome {
                    Err(SubagentError::Cancelled) | Ok(_) => {
                        (AbandonReason::Cancelled, SubagentError::Cancelled)
                    }
                    Err(err) => {
                        let err = self.clean_error(child, err);
                        (
                            AbandonReason::PreparationFailed {
                                diagnostic: Diagnostic::new(err.to_string()),
                            },
                            err,
                        )
                    }
                };
                self.inner
                    .engine
                    .commit(Command::AbandonActivation {
                        child,
                        epoch: 1,
                        reason,
                    })
                    .await?;
                return Err(error);
            }
        };
        let message_id = MessageId::new();
        let seed_source = created
            .seed
            .as_ref()
            .map(|seed| (handle.parent, seed.len() as u64));
        let prepared = self
            .inner
            .engine
            .commit(Command::PrepareActivation {
                child,
                epoch: 1,
                prompt: Some((message_id, spec.request.prompt.clone())),
                seed: created.seed,
                seed_source,
            })
            .await;
        if let Err(refused) = prepared {
            // Refused, not failed (a fork's seed too large, say): the
            // reservation is abandoned rather than left live.
            if refused.code() != ErrorCode::Internal {
                self.inner
                    .engine
                    .commit(Command::AbandonActivation {
                        child,
                        epoch: 1,
                        reason: AbandonReason::PreparationFailed {
                            diagnostic: Diagnostic::new(refused.to_string()),
                        },
                    })
                    .await?;
            }
            return Err(refused);
        }
        let driver = LocalDriver {
            runtime: self.clone(),
            handle: Arc::clone(handle),
            provider: spec.provider,
            label: spec.label,
            signal,
            resumed: false,
            epoch: 1,
            span,
        };
        let task = self.inner.tasks.spawn(driver.run());
        *lock(&handle.task) = Some(task);
        Ok(Some(message_id))
    }

    pub(crate) async fn start_external(
        &self,
        provider: &Arc<dyn SubagentProvider>,
        handle: &Arc<DriverHandle>,
        spec: SubagentActivationSpec,
        run_id: SubagentRunId,
        signal: CancellationToken,
        span: TracedSpan,
    ) -> Result<Option<MessageId>, SubagentError> {
        let child = handle.child;
        let descriptor = self
            .inner
            .engine
            .state()
            .sessions
            .get(&child)
            .and_then(|record| record.descriptor.clone())
            .ok_or_else(|| SubagentError::internal("external child has no descriptor"))?;
        let request = ResolvedStartRequest {
            run_id: child,
            parent: handle.parent,
            label: spec.label.clone(),
            request: spec.request,
            descriptor,
            signal: signal.clone(),
        };
        let run = match in_span(&span.span, provider.start(request)).await {
            Ok(run) if !signal.is_cancelled() => run,
            outcome => {
                let error = match outcome {
                    Ok(mut run) => {
                        let _ = in_span(&span.span, run.dispose()).await;
                        SubagentError::Cancelled
                    }
                    Err(err) if signal.is_cancelled() => {
                        let _ = err;
                        SubagentError::Cancelled
                    }
                    Err(err) => self.clean_error(child, err),
                };
                self.inner
                    .engine
                    .commit_in(
                        Command::FailRunStart {
                            child,
                            diagnostic: Diagnostic::new(error.to_string()),
                        },
                        &span,
                    )
                    .await?;
                return Err(error);
            }
        };
        self.inner
            .engine
            .commit_in(Command::StartRun { child }, &span)
            .await?;
        self.notify(Notice::Start {
            parent: handle.parent,
            info: SubagentRunInfo {
                run_id,
                provider: spec.provider.clone(),
                id: child,
                local: false,
            },
        });
        let driver = ExternalDriver {
            runtime: self.clone(),
            handle: Arc::clone(handle),
            run,
            run_id,
            provider: spec.provider,
            signal,
            span,
        };
        let task = self.inner.tasks.spawn(driver.run());
        *lock(&handle.task) = Some(task);
        Ok(None)
    }
}
