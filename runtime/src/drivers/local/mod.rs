//! The local (continuable) driver: builds the child's agent from its durable
//! history, publishes it, runs turns while its inbox has work (taking
//! steering at step boundaries and parking after an interrupt), settles the
//! epoch on its first turn, then stays live until stopped.
//!
//! When the driver cannot go on (the host cannot build the agent, a persona
//! no longer renders, the history cannot be read), the failure is a result,
//! not a silent stop: it records [`Command::FailActivation`], which settles the epoch
//! `error` with a redacted diagnostic (notifying the parent as any
//! settlement does) and releases the activation, and then it leaves the
//! registry. Nothing stays live to swallow messages; the next send
//! cold-resumes the child.

use std::sync::Arc;

use serde_json::Value;
use subagent_core::{Event, SubagentDescriptor, SubagentError, SubagentRunId, SubagentRunInfo};
use subagent_projections::Command;
use tokio_util::sync::CancellationToken;
use tracing::{warn, Instrument};

use crate::activation::DriverHandle;
use crate::agent::{Agent, AgentSpec};
use crate::runtime::{lock, Notice, SubagentRuntime};

use super::{announce_settled, end_info};
use crate::tools::visible_tools;

mod claims;
mod in_flight;
mod turn;

use turn::{Published, TurnState};

/// Why a driver stopped short: what it was doing, and the error.
struct Failure {
    doing: &'static str,
    error: SubagentError,
}

impl From<SubagentError> for Failure {
    fn from(error: SubagentError) -> Self {
        Failure {
            doing: "running the activation",
            error,
        }
    }
}

impl Failure {
    fn during(doing: &'static str) -> impl FnOnce(SubagentError) -> Failure {
        move |error| Failure { doing, error }
    }
}

/// Drives one continuable activation: build the agent, publish, run turns
/// while the inbox has work, settle on the first turn's end, then stay live
/// (idle) until stopped.
pub(crate) struct LocalDriver {
    pub(crate) runtime: SubagentRuntime,
    pub(crate) handle: Arc<DriverHandle>,
    pub(crate) provider: String,
    pub(crate) label: String,
    /// The start signal: after publication it cancels remaining turn work.
    pub(crate) signal: CancellationToken,
    /// Whether this is a cold resume (a later epoch): it prepares itself.
    pub(crate) resumed: bool,
    /// The epoch this driver runs.
    pub(crate) epoch: u64,
    /// The activation's span (`subagents.activation`), which the driver
    /// runs in and every turn's span is a child of.
    pub(crate) span: tracing::Span,
}

impl LocalDriver {
    pub(crate) async fn run(self) {
        let span = self.span.clone();
        async {
            if let Err(failure) = self.drive().await {
                self.fail(failure).await;
            }
        }
        .instrument(span)
        .await;
    }

    /// Records that this activation failed and takes it out of the registry:
    /// its live children are released first (child-first), then
    /// [`Command::FailActivation`] settles the epoch `error` (or records the cause
    /// beside a result already settled) and releases it, the parent is woken
    /// for the settlement notice, and `result()` resolves with the settled
    /// result. Only if even that cannot be recorded (the log failed) does
    /// `result()` resolve with the error, naming both causes.
    async fn fail(&self, failure: Failure) {
        let child = self.handle.child;
        let runtime = &self.runtime;
        let Failure { doing, error } = failure;
        crate::telemetry::record_error(&self.span, error.code().as_str());
        warn!(child = %child, epoch = self.epoch, error = %error, "{doing} failed");
        let children: Vec<Arc<DriverHandle>> = lock(&runtime.inner.drivers)
            .values()
            .filter(|driver| driver.parent == child)
            .cloned()
            .collect();
        for driver in children {
            if let Err(err) = runtime.dispose_driver(&driver).await {
                warn!(child = %driver.child, error = %err, "releasing a child of a failed activation failed");
            }
        }
        let (published, run_id) = {
            let state = runtime.inner.engine.state();
            let live = state
                .activations
                .get(&child)
                .and_then(|a| a.live.as_ref())
                .filter(|live| live.epoch == self.epoch);
            (
                live.is_some_and(|live| {
                    live.phase == subagent_projections::ActivationPhase::Published
                }),
                live.and_then(|live| live.run_id),
            )
        };
        // Host and agent text is cleaned before it is recorded or returned.
        let diagnostic = runtime.clean_diagnostic(child, &format!("{doing} failed: {error}"));
        let recorded = runtime
            .inner
            .engine
            .commit(Command::FailActivation {
                child,
                epoch: self.epoch,
                diagnostic: diagnostic.clone(),
            })
            .await;
        // Out of the registry before anyone hears of it: once `result()`
        // resolves, the handle is stale and the capacity is back.
        self.runtime.unregister_driver(&self.handle);
        if recorded.is_ok() {
            // The failed child left the registry: a drain's cutoff below it ends.
            if let Err(err) = runtime
                .inner
                .engine
                .commit(Command::ReopenAdmission { parent: child })
                .await
            {
                warn!(child = %child, error = %err, "ending the admission cutoff below a failed activation failed");
            }
        }
        match recorded {
            Ok(records) => {
                let settled = records.iter().find_map(|record| match &record.event {
                    Event::ActivationSettled { result, .. } => Some(result.clone()),
                    _ => None,
                });
                let result = settled.clone().or_else(|| {
                    runtime
                        .inner
                        .engine
                        .state()
                        .activations
                        .get(&child)
                        .and_then(|a| a.last_result.clone())
                        .filter(|(epoch, _)| *epoch == self.epoch)
                        .map(|(_, result)| result)
                });
                let result = result.ok_or_else(|| SubagentError::internal(diagnostic.to_string()));
                match settled {
                    Some(settled) => {
                        // `subagent/end` pairs with the `subagent/start` of a
                        // published child; an agent that was never built had none.
                        let end = run_id
                            .filter(|_| published)
                            .map(|run_id| end_info(run_id, &self.provider, child, true, &settled));
                        announce_settled(runtime, &self.handle, end, result);
                    }
                    None => self.handle.settle(result),
                }
            }
            Err(unrecorded) => {
                let error = runtime.clean_error(child, error);
                self.handle.settle(Err(SubagentError::internal(format!(
                    "{doing} failed: {error}; recording the failure failed: {unrecorded}"
                ))));
            }
        }
    }

    async fn history(&self) -> Result<Vec<Value>, SubagentError> {
        self.runtime.session_history(self.handle.child).await
    }

    /// The activation's life after its reservation: [`Self::prepare`] the
    /// agent, then, while not stopped, wait for inbox work (parking after an
    /// interrupt until a waking send), [`Self::run_turn`] and
    /// [`Self::finish_turn`].
    async fn drive(&self) -> Result<(), Failure> {
        let (mut agent, live) = self.prepare().await?;
        let child = self.handle.child;
        let mut turns = TurnState {
            scan_from: 1,
            parked: false,
        };
        let mut wakes = self.handle.wake.subscribe();
        loop {
            if self.handle.stop.is_cancelled() {
                return Ok(());
            }
            let has_work = !self
                .runtime
                .inner
                .engine
                .state()
                .pending_messages(child)
                .is_empty();
            if !has_work || turns.parked {
                tokio::select! {
                    () = self.handle.stop.cancelled() => return Ok(()),
                    changed = wakes.changed() => {
                        if changed.is_err() {
                            return Ok(());
                        }
                        turns.parked = false;
                        continue;
                    }
                }
            }
            let turn_span = crate::telemetry::invoke_agent_span(
                &self.runtime.inner.engine.state(),
                child,
                &self.label,
            );
            let ran = self
                .run_turn(agent.as_mut(), &mut turns)
                .instrument(turn_span.clone())
                .await?;
            if let Some(at) = ran.interrupted_at {
                // Sends accepted before the interrupt do not wake it; one
                // accepted after it already did.
                turns.parked = *wakes.borrow_and_update() <= at;
            }
            if ran.end.stop_reason != subagent_core::SubagentStopReason::Completed {
                crate::telemetry::record_error(&turn_span, ran.end.stop_reason.as_str());
            }
            self.finish_turn(&live, ran.end, ran.assistant, ran.in_flight)
                .instrument(turn_span)
                .await?;
        }
    }

    /// Prepares a resumed epoch, builds the agent from the durable history
    /// (persona rendered with today's variables, tools filtered down the
    /// lineage), publishes it and announces `subagent/start`.
    async fn prepare(&self) -> Result<(Box<dyn Agent>, Published), Failure> {
        let engine = &self.runtime.inner.engine;
        let child = self.handle.child;
        if self.resumed {
            engine
                .commit(Command::PrepareActivation {
                    child,
                    epoch: self.epoch,
                    prompt: None,
                    seed: None,
                    seed_source: None,
                })
                .await
                .map_err(Failure::during("preparing the resumed activation"))?;
        }
        let (descriptor, output_schema) = {
            let state = engine.state();
            let descriptor: Option<SubagentDescriptor> = state
                .sessions
                .get(&child)
                .and_then(|record| record.descriptor.clone());
            let live = state
                .activations
                .get(&child)
                .and_then(|a| a.live.clone())
                .filter(|live| live.epoch == self.epoch)
                .ok_or_else(|| {
                    SubagentError::internal(format!("activation {} is not live", self.epoch))
                })?;
            (descriptor, live.output_schema)
        };
        // The persona was validated at start; render it with today's variables
        // (a cold resume after they changed fails loudly rather than guess).
        let settings = self.runtime.inner.deployment.snapshot();
        let persona = descriptor
            .as_ref()
            .and_then(|descriptor| descriptor.persona.as_deref())
            .map(|template| subagent_core::persona::render(template, &settings.persona_variables))
            .transpose()
            .map_err(Failure::during("rendering the persona"))?;
        // The host's tools and the delegation tools, composed now from the
        // providers registered now; a delegation name is the runtime's.
        let offered: Vec<_> = self
            .runtime
            .inner
            .deployment
            .tools
            .iter()
            .filter(|tool| !crate::delegation::is_delegation(&tool.name))
            .cloned()
            .chain(self.runtime.delegation_tools(child))
            .collect();
        let tools = visible_tools(&offered, &engine.state().tool_lineage(child));
        let spec = AgentSpec {
            session: child,
            label: self.label.clone(),
            descriptor,
            history: self
                .history()
                .await
                .map_err(Failure::during("reading the history"))?,
            output_schema: output_schema.clone(),
            persona,
            tools,
        };
        let agent = self
            .runtime
            .inner
            .host
            .create(spec)
            .await
            .map_err(Failure::during("creating the agent"))?;
        let run_id = SubagentRunId::from_uuid(*child.as_uuid());
        engine
            .commit(Command::PublishActivation {
                child,
                epoch: self.epoch,
                run_id,
            })
            .await?;
        self.runtime.notify(Notice::Start {
            parent: self.handle.parent,
            info: SubagentRunInfo {
                run_id,
                provider: self.provider.clone(),
                id: child,
                local: true,
            },
        });
        Ok((agent, Published { run_id }))
    }
}
