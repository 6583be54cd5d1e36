//! One turn of a local activation: claiming the inbox, running the agent
//! while its transcript, steering claims and tool calls are recorded, then
//! ending the turn durably and, on the epoch's first, settling it.

use subagent_core::telemetry::attr;
use subagent_core::{content::ContentBlock, Event, RecordedEvent, SubagentError, SubagentRunId};
use subagent_projections::{Command, TurnOutput};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::in_flight::InFlight;
use crate::agent::{
    Agent, Announced, ToolCall, ToolOutput, ToolPort, TranscriptItem, TurnEnd, TurnInput,
};
use crate::engine::Issued;
use crate::runtime::lock;
use crate::telemetry::{execute_tool_span, record_error};
use crate::tools::ToolRequest;

use crate::drivers::{announce_settled, end_info};

use super::{Failure, LocalDriver};

/// What [`LocalDriver::prepare`] published: the run id pairing
/// `subagent/start` with `subagent/end`.
pub(super) struct Published {
    pub(super) run_id: SubagentRunId,
}

/// How a turn ran: the agent's end, the contents of its assistant
/// messages, the wake count an interrupt of this turn was taken at, and
/// the entries it recorded that are still becoming durable.
pub(super) struct TurnRan<'a> {
    pub(super) end: TurnEnd,
    pub(super) assistant: Vec<Vec<ContentBlock>>,
    pub(super) interrupted_at: Option<u64>,
    pub(super) in_flight: InFlight<'a>,
}

/// The calls a turn's agent announced ([`ToolPort::announce`]): every
/// answer by call id, and the permitted calls whose result is still open.
#[derive(Default)]
pub(super) struct Announcements {
    answers: std::collections::HashMap<String, Announced>,
    /// Each permitted call still open, with its `execute_tool` span, which
    /// ends when the call's result is recorded.
    open: std::collections::HashMap<String, Span>,
}

/// `error.type` of a tool call the runtime refused.
const REFUSED: &str = "refused";
/// `error.type` of a tool call that ran and failed.
const TOOL_ERROR: &str = "tool_error";

/// The driver's state across turns.
pub(super) struct TurnState {
    /// The stream version after the last claim (see `claimed_contents`).
    pub(super) scan_from: u64,
    /// After an interrupt the driver parks: pending messages wait for the
    /// next waking send, which resumes them in FIFO order.
    pub(super) parked: bool,
}

impl LocalDriver {
    /// Runs one turn: claims every pending message, hands them to the
    /// agent, and records its transcript, steering claims and tool calls as
    /// they come, until the turn ends or is stopped. Transcript entries are
    /// issued without waiting for each to be durable ([`InFlight`]); the
    /// ones still in flight when the agent ends are handed back, for
    /// [`finish_turn`](Self::finish_turn) to await with the turn's end.
    pub(super) async fn run_turn(
        &self,
        agent: &mut dyn Agent,
        turns: &mut TurnState,
    ) -> Result<TurnRan<'_>, Failure> {
        // A turn stops on dispose (the driver's token) or on the caller's
        // start signal, and on an interrupt. Its token is in place before
        // the turn can be seen running: an interrupt decided once
        // `BeginTurn` is (the projections show the turn) finds it, even
        // while the claim is still being made durable.
        let cancel = self.handle.stop.child_token();
        *lock(&self.handle.turn) = Some(cancel.clone());
        let claimed = match self
            .runtime
            .inner
            .engine
            .commit(Command::BeginTurn {
                session: self.handle.child,
            })
            .await
        {
            Ok(claimed) => claimed,
            Err(err) => {
                lock(&self.handle.turn).take();
                return Err(err.into());
            }
        };
        let turn = claimed
            .iter()
            .find_map(|record| match record.event {
                Event::TurnStarted { turn, .. } => Some(turn),
                _ => None,
            })
            .unwrap_or(0);
        tracing::Span::current().record(attr::TURN, turn);
        let messages = match self.claimed_contents(&claimed, &mut turns.scan_from) {
            Ok(messages) => messages,
            Err(err) => {
                lock(&self.handle.turn).take();
                return Err(err.into());
            }
        };
        let (transcript, mut items) = mpsc::channel(64);
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
        let mut announced = Announcements::default();
        let mut in_flight = InFlight::default();
        let mut turn_future = agent.run_turn(input);
        let end = loop {
            // In this order: what is ready is recorded before anything
            // waits for the entries in flight, so they and the turn's end
            // share a group commit when the agent is quick.
            tokio::select! {
                biased;
                end = &mut turn_future => break end,
                Some(item) = items.recv() => self.record(turn, item, &mut assistant, &mut announced, &mut in_flight).await?,
                Some(reply) = steer_requests.recv() => {
                    // Transcript entries the agent sent before asking come first.
                    while let Ok(item) = items.try_recv() {
                        self.record(turn, item, &mut assistant, &mut announced, &mut in_flight).await?;
                    }
                    let _ = reply.send(self.steer(&mut turns.scan_from).await?);
                }
                Some(request) = tool_requests.recv() => {
                    while let Ok(item) = items.try_recv() {
                        self.record(turn, item, &mut assistant, &mut announced, &mut in_flight).await?;
                    }
                    match request {
                        ToolRequest::Execute(call, reply) => {
                            let span = execute_tool_span(&call.name, &call.call_id);
                            let output = self.call_tool(turn, call, &cancel, &mut in_flight).instrument(span.clone()).await?;
                            if output.is_error {
                                record_error(&span, if output.refused { REFUSED } else { TOOL_ERROR });
                            }
                            let _ = reply.send(output);
                        }
                        ToolRequest::Announce(call, reply) => {
                            let span = execute_tool_span(&call.name, &call.call_id);
                            let answer = self.announce_tool(turn, call, &mut announced, &span).instrument(span.clone()).await?;
                            if matches!(answer, Announced::Refused(_)) {
                                record_error(&span, REFUSED);
                            }
                            let _ = reply.send(answer);
                        }
                    }
                }
                durable = in_flight.next_durable(), if !in_flight.is_empty() => durable?,
            }
        };
        drop(turn_future);
        lock(&self.handle.turn).take();
        let interrupted_at = lock(&self.handle.interrupted_at)
            .take()
            .filter(|_| !self.handle.stop.is_cancelled());
        while let Some(item) = items.recv().await {
            self.record(turn, item, &mut assistant, &mut announced, &mut in_flight)
                .await?;
        }
        // A permitted call whose result the agent never reported ends with
        // its turn: every recorded call has a recorded result.
        let mut open: Vec<(String, Span)> = announced.open.drain().collect();
        open.sort_by(|left, right| left.0.cmp(&right.0));
        for (call_id, span) in open {
            record_error(&span, TOOL_ERROR);
            let issued = span.in_scope(|| {
                self.issue_transcript(Event::ToolReturned {
                    turn,
                    call_id,
                    output: vec![ContentBlock::text(
                        "the turn ended before the agent reported this call's result",
                    )],
                    is_error: true,
                    refused: false,
                })
            });
            in_flight.push(issued).await?;
        }
        Ok(TurnRan {
            end,
            assistant,
            interrupted_at,
            in_flight,
        })
    }

    /// Ends the turn durably with the agent's raw output; `decide` settles
    /// the epoch on its first turn end (output selection and capture
    /// validation are its rules), and a settlement is announced. The turn's
    /// entries still `in_flight` share the end's group commit: it is issued
    /// first, then they and it are awaited.
    pub(super) async fn finish_turn(
        &self,
        live: &Published,
        end: TurnEnd,
        assistant: Vec<Vec<ContentBlock>>,
        mut in_flight: InFlight<'_>,
    ) -> Result<(), Failure> {
        let child = self.handle.child;
        let ending = self.runtime.inner.engine.issue_here(Command::EndTurn {
            session: child,
            stop_reason: end.stop_reason,
            output: TurnOutput {
                assistant,
                structured: end.structured,
                // Agent text is cleaned before it is recorded.
                diagnostic: end
                    .diagnostic
                    .as_ref()
                    .map(|text| self.runtime.clean_diagnostic(child, text.as_str())),
            },
        });
        in_flight.settle().await?;
        let recorded = ending.durable().await?.records;
        let settled = recorded.into_iter().find_map(|record| match record.event {
            Event::ActivationSettled { result, .. } => Some(result),
            _ => None,
        });
        if let Some(result) = settled {
            if result.stop_reason != subagent_core::SubagentStopReason::Completed {
                record_error(&self.span, result.stop_reason.as_str());
            }
            let end = end_info(live.run_id, &self.provider, child, true, &result);
            announce_settled(&self.runtime, &self.handle, Some(end), Ok(result));
        }
        Ok(())
    }

    /// Records one transcript item, issued into `in_flight`. A tool result
    /// is recorded once, for a call announced and permitted in this turn;
    /// any other (a refused call's, a second one, an unknown id's) is
    /// dropped (logged at debug level), since the call's recorded result
    /// already stands or it never ran through the port.
    pub(super) async fn record<'a>(
        &'a self,
        turn: u64,
        item: TranscriptItem,
        assistant: &mut Vec<Vec<ContentBlock>>,
        announced: &mut Announcements,
        in_flight: &mut InFlight<'a>,
    ) -> Result<(), SubagentError> {
        let entry = match item {
            TranscriptItem::Assistant(content) => {
                assistant.push(content.clone());
                Event::AssistantMessage {
                    turn,
                    content,
                    usage: None,
                }
            }
            TranscriptItem::Report(report) => Event::AgentReported { turn, report },
            TranscriptItem::ToolResult {
                call_id,
                output,
                is_error,
            } => {
                let Some(span) = announced.open.remove(&call_id) else {
                    tracing::debug!(child = %self.handle.child, call_id, "dropping a tool result for a call not permitted and open in this turn");
                    return Ok(());
                };
                if is_error {
                    record_error(&span, TOOL_ERROR);
                }
                // Recorded in the call's span, which ends with it.
                let issued = span.in_scope(|| {
                    self.issue_transcript(Event::ToolReturned {
                        turn,
                        call_id,
                        output,
                        is_error,
                        refused: false,
                    })
                });
                return in_flight.push(issued).await;
            }
        };
        in_flight.push(self.issue_transcript(entry)).await
    }

    /// Serves one announced call: `decide` records it and answers a call
    /// the lineage refuses (or an unknown tool) at once, as for
    /// [`call_tool`](Self::call_tool); a permitted one stays open for the
    /// agent's result. A second announcement of an id already recorded in
    /// this turn records nothing and repeats the first answer.
    pub(super) async fn announce_tool(
        &self,
        turn: u64,
        call: ToolCall,
        announced: &mut Announcements,
        span: &Span,
    ) -> Result<Announced, SubagentError> {
        if let Some(answer) = announced.answers.get(&call.call_id) {
            return Ok(answer.clone());
        }
        let call_id = call.call_id.clone();
        let answer = match self.decide_call(turn, &call, None).await? {
            Some(refusal) => Announced::Refused(refusal),
            None => {
                announced.open.insert(call_id.clone(), span.clone());
                Announced::Permitted
            }
        };
        announced.answers.insert(call_id, answer.clone());
        Ok(answer)
    }

    /// Records `call` through `decide`; the refusal it recorded, if any.
    /// Durable before it returns, but for a delegation tool the runtime runs
    /// when `in_flight` is given: then in flight.
    async fn decide_call<'a>(
        &'a self,
        turn: u64,
        call: &ToolCall,
        in_flight: Option<&mut InFlight<'a>>,
    ) -> Result<Option<ToolOutput>, SubagentError> {
        let delegation = crate::delegation::is_delegation(&call.name);
        let known = delegation
            || self
                .runtime
                .inner
                .deployment
                .tools
                .iter()
                .any(|tool| tool.name == call.name);
        let issued = self.runtime.inner.engine.issue_here(Command::CallTool {
            session: self.handle.child,
            turn,
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
            known,
        });
        match (issued.decided(), in_flight) {
            // A delegation tool the runtime runs acts only through the log,
            // in commands the engine orders after the call: its record need
            // not be durable before the tool runs, and is recorded in flight.
            (Some(recorded), Some(in_flight)) if delegation => {
                let refusal = refusal_in(recorded);
                in_flight.push(issued).await?;
                Ok(refusal)
            }
            _ => Ok(refusal_in(&issued.durable().await?.records)),
        }
    }

    /// Issues `entry` to the session's transcript, in the current span.
    fn issue_transcript(&self, entry: Event) -> Issued<'_> {
        self.runtime
            .inner
            .engine
            .issue_here(Command::RecordTranscript {
                session: self.handle.child,
                entry,
            })
    }

    /// Serves one tool call: `decide` records it and answers a call the
    /// session's lineage refuses (or an unknown tool) at once; a delegation
    /// tool is run by the runtime as the calling agent, any other is executed
    /// through the host (either cut short by the turn's cancellation), and
    /// its result recorded.
    ///
    /// A host tool acts outside the log, so its call is durable before it
    /// runs, and its result before the agent has it; every entry `in_flight`
    /// is then durable too, and taken off before the tool runs, so their
    /// append latency is not measured across it. A delegation tool acts
    /// only through commands the engine orders after its call, whose own
    /// durability is awaited where they are made (a start's reservation,
    /// say): its call and result are transcript entries in flight, as an
    /// assistant message is, durable before anything the turn acts on.
    pub(super) async fn call_tool<'a>(
        &'a self,
        turn: u64,
        call: ToolCall,
        cancel: &CancellationToken,
        in_flight: &mut InFlight<'a>,
    ) -> Result<ToolOutput, SubagentError> {
        let child = self.handle.child;
        let delegation = crate::delegation::is_delegation(&call.name);
        let refused = if delegation {
            self.decide_call(turn, &call, Some(in_flight)).await?
        } else {
            let refused = self.decide_call(turn, &call, None).await?;
            in_flight.settle().await?;
            refused
        };
        if let Some(answer) = refused {
            return Ok(answer);
        }
        let call_id = call.call_id.clone();
        // A delegation tool the runtime runs itself, as the calling agent; the
        // events it causes fall between the call and its result. It is not
        // raced here: dropped halfway it would leave a start, a wake or a
        // release undone. Its waits race the turn's cancellation inside.
        let delegated = self
            .runtime
            .run_delegation_tool(child, turn, &call, cancel)
            .await;
        let output = match delegated {
            Some(output) => output,
            None => {
                let execution =
                    self.runtime
                        .inner
                        .host
                        .execute_tool(child, call, cancel.child_token());
                tokio::select! {
                    output = execution => ToolOutput { refused: false, ..output },
                    () = cancel.cancelled() => ToolOutput::error("interrupted"),
                }
            }
        };
        let returned = self.issue_transcript(Event::ToolReturned {
            turn,
            call_id,
            output: output.output.clone(),
            is_error: output.is_error,
            refused: output.refused,
        });
        if delegation {
            in_flight.push(returned).await?;
        } else {
            returned.durable().await?;
        }
        Ok(output)
    }
}

/// The answer `decide` recorded with a tool call, when it refused it (a
/// restricted or unknown tool): the call's `ToolReturned` among `recorded`.
fn refusal_in(recorded: &[RecordedEvent]) -> Option<ToolOutput> {
    recorded.iter().find_map(|record| match &record.event {
        Event::ToolReturned {
            output,
            is_error,
            refused,
            ..
        } => Some(ToolOutput {
            output: output.clone(),
            is_error: *is_error,
            refused: *refused,
        }),
        _ => None,
    })
}
