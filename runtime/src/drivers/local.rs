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

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use subagent_core::{
    content::ContentBlock, select_output, Event, MessageId, StreamId, SubagentDescriptor,
    SubagentError, SubagentResult, SubagentRunEndInfo, SubagentRunId, SubagentRunInfo,
    ToolRestriction,
};
use subagent_projections::Command;
use subagent_store::EventLogExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::activation::DriverHandle;
use crate::agent::{AgentSpec, ToolCall, ToolOutput, ToolPort, TranscriptItem, TurnInput};
use crate::engine::{internal, internal_error};
use crate::runtime::{lock, Notice, SubagentRuntime};
use crate::tools::visible_tools;

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
}

impl LocalDriver {
    pub(crate) async fn run(self) {
        if let Err(failure) = self.drive().await {
            self.fail(failure).await;
        }
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
                if let Some(result) = &settled {
                    // A parent-delivered settlement notice is a message to the parent.
                    runtime.wake(self.handle.parent);
                    // `subagent/end` pairs with the `subagent/start` of a
                    // published child; an agent that was never built had none.
                    if let (true, Some(run_id)) = (published, run_id) {
                        runtime.notify(Notice::End {
                            parent: self.handle.parent,
                            info: SubagentRunEndInfo {
                                run_id,
                                provider: self.provider.clone(),
                                id: child,
                                local: true,
                                stop_reason: result.stop_reason.clone(),
                                last_assistant_message: None,
                            },
                        });
                    }
                }
                let result = settled.or_else(|| {
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
                match result {
                    Some(result) => self.handle.settle(Ok(result)),
                    None => self
                        .handle
                        .settle(Err(SubagentError::Internal(diagnostic.to_string()))),
                }
            }
            Err(unrecorded) => {
                let error = runtime.clean_error(child, error);
                self.handle.settle(Err(SubagentError::Internal(format!(
                    "{doing} failed: {error}; recording the failure failed: {unrecorded}"
                ))));
            }
        }
    }

    async fn history(&self) -> Result<Vec<Value>, SubagentError> {
        self.runtime.session_history(self.handle.child).await
    }

    async fn drive(&self) -> Result<(), Failure> {
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
        let (descriptor, epoch, output_schema) = {
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
                .ok_or_else(|| internal(format!("activation {} is not live", self.epoch)))?;
            (descriptor, live.epoch, live.output_schema)
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
        let tools = visible_tools(
            &self.runtime.inner.deployment.tools,
            &engine.state().tool_lineage(child),
        );
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
        let mut agent = self
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
                epoch,
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
        let mut settled = false;
        // The stream version after the last claim (see `claimed_contents`).
        let mut scan_from = 1;
        // After an interrupt the driver parks: pending messages wait for the
        // next waking send, which resumes them in FIFO order.
        let mut parked = false;
        let mut wakes = self.handle.wake.subscribe();
        loop {
            if self.handle.stop.is_cancelled() {
                return Ok(());
            }
            let has_work = !engine.state().pending_messages(child).is_empty();
            if !has_work || parked {
                tokio::select! {
                    () = self.handle.stop.cancelled() => return Ok(()),
                    changed = wakes.changed() => {
                        if changed.is_err() {
                            return Ok(());
                        }
                        parked = false;
                        continue;
                    }
                }
            }
            let claimed = engine.commit(Command::BeginTurn { session: child }).await?;
            let turn = claimed
                .iter()
                .find_map(|record| match record.event {
                    Event::TurnStarted { turn, .. } => Some(turn),
                    _ => None,
                })
                .unwrap_or(0);
            let messages = self.claimed_contents(&claimed, &mut scan_from)?;
            let (transcript, mut items) = mpsc::channel(64);
            // A turn stops on dispose (the driver's token) or on the caller's
            // start signal.
            let cancel = self.handle.stop.child_token();
            *lock(&self.handle.turn) = Some(cancel.clone());
            let (signal, turn_cancel) = (self.signal.clone(), cancel.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = signal.cancelled() => turn_cancel.cancel(),
                    () = turn_cancel.cancelled() => {}
                }
            });
            let (steering, mut steer_requests) = mpsc::channel(4);
            let (tools, mut tool_requests) = mpsc::channel(4);
            let input = TurnInput {
                messages,
                cancel: cancel.clone(),
                transcript,
                steering: crate::agent::SteeringPort(steering),
                tools: ToolPort(tools),
            };
            let mut assistant: Vec<Vec<ContentBlock>> = Vec::new();
            let mut turn_future = agent.run_turn(input);
            let end = loop {
                tokio::select! {
                    end = &mut turn_future => break end,
                    Some(item) = items.recv() => self.record(turn, item, &mut assistant).await?,
                    Some(reply) = steer_requests.recv() => {
                        // Transcript entries the agent sent before asking come first.
                        while let Ok(item) = items.try_recv() {
                            self.record(turn, item, &mut assistant).await?;
                        }
                        let _ = reply.send(self.steer(&mut scan_from).await?);
                    }
                    Some((call, reply)) = tool_requests.recv() => {
                        while let Ok(item) = items.try_recv() {
                            self.record(turn, item, &mut assistant).await?;
                        }
                        let _ = reply.send(self.call_tool(turn, call, &cancel).await?);
                    }
                }
            };
            drop(turn_future);
            lock(&self.handle.turn).take();
            let interrupted_at = lock(&self.handle.interrupted_at).take();
            parked = false;
            if let Some(at) = interrupted_at.filter(|_| !self.handle.stop.is_cancelled()) {
                // Sends accepted before the interrupt do not wake it; one
                // accepted after it already did.
                parked = *wakes.borrow_and_update() <= at;
            }
            while let Some(item) = items.recv().await {
                self.record(turn, item, &mut assistant).await?;
            }
            engine
                .commit(Command::EndTurn {
                    session: child,
                    stop_reason: end.stop_reason.clone(),
                })
                .await?;
            if !settled {
                settled = true;
                let mut result = SubagentResult {
                    output: select_output(assistant.iter().map(Vec::as_slice), ""),
                    structured: None,
                    // Agent text is cleaned before it is recorded.
                    diagnostic: end
                        .diagnostic
                        .as_ref()
                        .map(|text| self.runtime.clean_diagnostic(child, text.as_str())),
                    stop_reason: end.stop_reason.clone(),
                };
                // A requested schema is satisfied only by a valid capture; a
                // completed turn without one ends as `error`.
                if let Some(schema) = &output_schema {
                    match subagent_core::schema::validate_capture(schema, end.structured.as_ref()) {
                        Ok(capture) => result.structured = Some(capture),
                        Err(reason)
                            if result.stop_reason
                                == subagent_core::SubagentStopReason::Completed =>
                        {
                            result.stop_reason = subagent_core::SubagentStopReason::Error;
                            result.diagnostic = Some(subagent_core::Diagnostic::new(reason));
                        }
                        Err(_) => {}
                    }
                }
                engine
                    .commit(Command::SettleActivation {
                        child,
                        epoch,
                        result: result.clone(),
                    })
                    .await?;
                // A parent-delivered settlement notice is a message to the parent.
                self.runtime.wake(self.handle.parent);
                self.runtime.notify(Notice::End {
                    parent: self.handle.parent,
                    info: SubagentRunEndInfo {
                        run_id,
                        provider: self.provider.clone(),
                        id: child,
                        local: true,
                        stop_reason: result.stop_reason.clone(),
                        last_assistant_message: (!result.output.is_empty())
                            .then(|| result.output.clone()),
                    },
                });
                self.handle.settle(Ok(result));
            }
        }
    }

    /// The agent is at a step boundary: claim every pending message for the
    /// running turn, durably, and return their contents in FIFO order.
    async fn steer(&self, scan_from: &mut u64) -> Result<Vec<Vec<ContentBlock>>, SubagentError> {
        let records = self
            .runtime
            .inner
            .engine
            .commit(Command::ClaimSteering {
                session: self.handle.child,
            })
            .await?;
        self.claimed_contents(&records, scan_from)
    }

    /// The contents of the messages a claim (`MessagesClaimed` among
    /// `records`) took, in its order.
    ///
    /// A claim takes every pending message, so the messages of one claim were
    /// all accepted after the previous claim: the scan starts at `scan_from`
    /// (the stream version after the previous claim) and stops at the claim,
    /// instead of rereading the whole stream every turn. Should a message be
    /// missing from that window, the whole stream is read instead.
    fn claimed_contents(
        &self,
        records: &[subagent_core::RecordedEvent],
        scan_from: &mut u64,
    ) -> Result<Vec<Vec<ContentBlock>>, SubagentError> {
        let Some((ids, claimed_at)) = records.iter().find_map(|record| match &record.event {
            Event::MessagesClaimed { ids, .. } => Some((ids, record.version)),
            _ => None,
        }) else {
            return Ok(Vec::new());
        };
        let mut contents = self.accepted_between(ids, *scan_from, claimed_at)?;
        if contents.len() < ids.len() {
            contents = self.accepted_between(ids, 1, claimed_at)?;
        }
        *scan_from = claimed_at + 1;
        Ok(ids.iter().filter_map(|id| contents.remove(id)).collect())
    }

    /// The contents of the `ids` accepted at stream versions `from..until`.
    fn accepted_between(
        &self,
        ids: &[MessageId],
        from: u64,
        until: u64,
    ) -> Result<HashMap<MessageId, Vec<ContentBlock>>, SubagentError> {
        let mut by_id = HashMap::new();
        for record in self
            .runtime
            .log()
            .read_stream(StreamId::Session(self.handle.child), from)
        {
            let record = record.map_err(internal_error)?;
            if record.version >= until {
                break;
            }
            if let Event::MessageAccepted {
                message_id,
                content,
                ..
            } = record.event
            {
                if ids.contains(&message_id) {
                    by_id.insert(message_id, content);
                }
            }
        }
        Ok(by_id)
    }

    async fn record(
        &self,
        turn: u64,
        item: TranscriptItem,
        assistant: &mut Vec<Vec<ContentBlock>>,
    ) -> Result<(), SubagentError> {
        let TranscriptItem::Assistant(content) = item;
        assistant.push(content.clone());
        self.transcribe(Event::AssistantMessage {
            turn,
            content,
            usage: None,
        })
        .await
    }

    async fn transcribe(&self, entry: Event) -> Result<(), SubagentError> {
        self.runtime
            .inner
            .engine
            .commit(Command::RecordTranscript {
                session: self.handle.child,
                entry,
            })
            .await?;
        Ok(())
    }

    /// Serves one tool call: record it, then refuse it when the session's
    /// lineage restricts the tool, or execute it through the host (cut short
    /// by the turn's cancellation); record the result either way.
    async fn call_tool(
        &self,
        turn: u64,
        call: ToolCall,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, SubagentError> {
        let child = self.handle.child;
        self.transcribe(Event::ToolCalled {
            turn,
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        })
        .await?;
        let permitted = ToolRestriction::permits_in(
            self.runtime.inner.engine.state().tool_lineage(child),
            &call.name,
        );
        let known = self
            .runtime
            .inner
            .deployment
            .tools
            .iter()
            .any(|tool| tool.name == call.name);
        let call_id = call.call_id.clone();
        let output = if !permitted {
            ToolOutput {
                output: vec![ContentBlock::text(format!(
                    "tool {} is not available to this agent",
                    call.name
                ))],
                is_error: true,
                refused: true,
            }
        } else if !known {
            ToolOutput::error(format!("unknown tool {}", call.name))
        } else {
            let execution = self
                .runtime
                .inner
                .host
                .execute_tool(child, call, cancel.child_token());
            tokio::select! {
                output = execution => ToolOutput { refused: false, ..output },
                () = cancel.cancelled() => ToolOutput::error("interrupted"),
            }
        };
        self.transcribe(Event::ToolReturned {
            turn,
            call_id,
            output: output.output.clone(),
            is_error: output.is_error,
            refused: output.refused,
        })
        .await?;
        Ok(output)
    }
}
