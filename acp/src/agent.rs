//! [`AcpAgent`]: a continuable child's live agent, one ACP session in one
//! agent process. Each turn is a `session/prompt`; what the agent streams
//! meanwhile is recorded through the turn's ports ([`crate::mapping`] says
//! how), its permission and file requests pass the session's tool scope
//! through the [`ToolPort`], and the stop reason settles the turn.
//!
//! - **Interrupt and dispose** cancel the turn: `session/cancel` is sent
//!   and the turn waits for the agent's `cancelled`, at most the command's
//!   grace period; then the process group is killed and the turn ends
//!   `error`.
//! - **Steering** is taken as queued input: ACP cannot add input to a
//!   running turn, so messages sent meanwhile wait for the next turn.
//! - **Cold resume**: the first turn of a later activation loads the
//!   session the log names (`AgentReported` `agent-session`) with
//!   `session/load` when the agent offers it; otherwise it opens a new
//!   session and prefixes its first prompt with the durable transcript.
//! - **Failure**: a process that cannot start, exits or breaks the
//!   protocol ends the turn `error` with the redacted stderr tail; the next
//!   turn starts a new process.

use agent_client_protocol::v1::schema as s;
use agent_client_protocol::{self as acp};
use serde_json::{json, Map, Value};
use subagent_core::{content::plain_text, AgentReport, ContentBlock};
use subagent_runtime::{Agent, AgentSpec, Announced, ToolCall, TranscriptItem, TurnEnd, TurnInput};
use tokio::sync::mpsc;

use crate::command::AcpCommand;
use crate::connection::{Connection, Offer};
use crate::error::AcpError;
use crate::mapping::{self, TurnStep, READ_TEXT_FILE, WRITE_TEXT_FILE};
use crate::turn::{aborted, drive, failed, failed_with, Limits, Live, TurnSink};

/// A live agent over ACP.
pub struct AcpAgent {
    command: AcpCommand,
    label: String,
    persona: Option<String>,
    output_schema: Option<Value>,
    agent_options: Option<Value>,
    offer: Offer,
    /// The agent session the log names, to load on the next connection.
    resume: Option<String>,
    /// The completed turns so far, as text, for seeding a new session.
    transcript: Vec<(String, String)>,
    live: Option<Connected>,
    /// File requests so far: they are recorded under `fs-<n>` call ids.
    file_calls: u64,
}

/// The process and session a turn runs in.
struct Connected {
    live: Live,
    /// Text the next prompt begins with: the persona (when the agent takes
    /// no system prompt) and the seed of a new session after a resume.
    preamble: Option<String>,
}

/// The last agent session `history` names.
fn recorded_session(history: &[Value]) -> Option<String> {
    history.iter().rev().find_map(|event| {
        let data = event.get("data")?;
        (event.get("type")?.as_str()? == "AgentReported"
            && data.get("report")?.get("kind")?.as_str()? == "agent-session")
            .then(|| data["report"]["sessionId"].as_str().map(str::to_owned))
            .flatten()
    })
}

/// The messages and assistant text of `history`'s completed turns, in
/// order, as (`user` | `assistant`, text).
fn completed_transcript(history: &[Value]) -> Vec<(String, String)> {
    let end = history
        .iter()
        .rposition(|event| event.get("type").and_then(Value::as_str) == Some("TurnEnded"))
        .map_or(0, |index| index + 1);
    history[..end]
        .iter()
        .filter_map(|event| {
            let role = match event.get("type")?.as_str()? {
                "MessageAccepted" => "user",
                "AssistantMessage" => "assistant",
                _ => return None,
            };
            let content: Vec<ContentBlock> =
                serde_json::from_value(event.get("data")?.get("content")?.clone()).ok()?;
            let text = plain_text(&content);
            (!text.is_empty()).then(|| (role.to_owned(), text))
        })
        .collect()
}

impl AcpAgent {
    /// The agent of the session `spec` describes, to run on `command`.
    /// Nothing starts until its first turn.
    #[must_use]
    pub fn new(command: AcpCommand, spec: &AgentSpec) -> AcpAgent {
        let visible = |name: &str| spec.tools.iter().any(|tool| tool.name == name);
        AcpAgent {
            label: spec.label.clone(),
            persona: spec.persona.clone(),
            output_schema: spec.output_schema.clone(),
            agent_options: spec
                .descriptor
                .as_ref()
                .and_then(|descriptor| descriptor.agent_options.as_ref())
                .and_then(|options| serde_json::to_value(options).ok()),
            offer: Offer {
                read_text_file: visible(READ_TEXT_FILE),
                write_text_file: visible(WRITE_TEXT_FILE),
            },
            resume: recorded_session(&spec.history),
            transcript: completed_transcript(&spec.history),
            command,
            live: None,
            file_calls: 0,
        }
    }

    /// The `_meta` of session requests: the child's label and agent
    /// options, under `subagents` (ACP has no field for a model).
    fn meta(&self) -> Map<String, Value> {
        let mut ours = Map::new();
        ours.insert("label".into(), json!(self.label));
        if let Some(options) = &self.agent_options {
            ours.insert("agentOptions".into(), options.clone());
        }
        let mut meta = Map::new();
        meta.insert("subagents".into(), Value::Object(ours));
        meta
    }

    /// Starts the process and opens the session: the recorded one loaded
    /// when the agent can, else a new one (whose id is reported, so the
    /// log names it) seeded with the durable transcript.
    async fn connect(&mut self, transcript: &mpsc::Sender<TranscriptItem>) -> Result<(), AcpError> {
        let mut connection = Connection::open(&self.command, self.offer).await?;
        let cwd = self.command.cwd.clone();
        let system_prompt = connection.takes_system_prompt();
        let mut preamble = Vec::new();
        if !system_prompt {
            if let Some(persona) = &self.persona {
                preamble.push(persona.clone());
            }
        }
        let loaded = match self.resume.clone() {
            Some(id) if connection.loads_sessions() => {
                let session = s::SessionId::new(id);
                match connection
                    .load_session(session.clone(), &cwd, self.meta())
                    .await
                {
                    Ok(()) => Some(session),
                    // The agent no longer has it (its store was wiped, the
                    // host moved): a new session, seeded, is the way on.
                    Err(AcpError::Protocol { .. }) => None,
                    Err(err) => return Err(err),
                }
            }
            _ => None,
        };
        let session = match loaded {
            Some(session) => session,
            None => {
                let persona = self.persona.as_deref().filter(|_| system_prompt);
                let session = connection.new_session(&cwd, self.meta(), persona).await?;
                if !self.transcript.is_empty() {
                    let lines: Vec<String> = self
                        .transcript
                        .iter()
                        .map(|(role, text)| format!("{role}: {text}"))
                        .collect();
                    preamble.push(format!(
                        "This conversation continues an earlier one. What was said so far:\n{}",
                        lines.join("\n")
                    ));
                }
                let _ = transcript
                    .send(TranscriptItem::Report(AgentReport::AgentSession {
                        session_id: session.0.to_string(),
                    }))
                    .await;
                self.resume = Some(session.0.to_string());
                session
            }
        };
        self.live = Some(Connected {
            live: Live {
                connection,
                session,
            },
            preamble: (!preamble.is_empty()).then(|| preamble.join("\n\n")),
        });
        Ok(())
    }

    /// The prompt of a turn: the preamble, the output schema's instruction
    /// and the claimed messages, flattened.
    fn prompt(
        &self,
        connected: &mut Connected,
        messages: &[Vec<ContentBlock>],
    ) -> Vec<s::ContentBlock> {
        let mut prompt = Vec::new();
        if let Some(preamble) = connected.preamble.take() {
            prompt.push(s::ContentBlock::Text(s::TextContent::new(preamble)));
        }
        if let Some(schema) = &self.output_schema {
            prompt.push(s::ContentBlock::Text(s::TextContent::new(format!(
                "End your answer with one JSON value, alone in your last message, that matches this JSON Schema: {schema}"
            ))));
        }
        let takes_images = connected.live.connection.takes_images();
        for block in messages.iter().flatten() {
            match block {
                ContentBlock::Image(image) if !takes_images => {
                    prompt.push(s::ContentBlock::Text(s::TextContent::new(format!(
                        "[an image ({}) this agent cannot take]",
                        image.mime_type
                    ))));
                }
                other => prompt.push(mapping::to_acp(other)),
            }
        }
        prompt
    }

    /// Runs one turn on the live connection: how it ended, and the text of
    /// its last assistant message. A lost connection is dropped (the next
    /// turn starts a new process); a refused prompt keeps it.
    async fn run(&mut self, input: TurnInput) -> (TurnEnd, String) {
        let Some(mut connected) = self.live.take() else {
            return (failed_with("the ACP agent is not connected"), String::new());
        };
        let prompt = self.prompt(&mut connected, &input.messages);
        let mut sink = PortSink {
            input: &input,
            file_calls: &mut self.file_calls,
        };
        let driven = drive(
            &mut connected.live,
            prompt,
            &input.cancel,
            Limits::from(&self.command.timeouts),
            self.output_schema.as_ref(),
            &mut sink,
        )
        .await;
        if driven.alive {
            self.live = Some(connected);
        }
        (driven.end, driven.last_text)
    }
}

/// A turn's traffic into the runtime's ports: records into the
/// transcript, calls and permissions through [`ToolPort::announce`], file
/// requests through [`ToolPort::call`] (recorded as `fs-<n>`).
struct PortSink<'a> {
    input: &'a TurnInput,
    file_calls: &'a mut u64,
}

impl TurnSink for PortSink<'_> {
    async fn step(&mut self, step: TurnStep) {
        match step {
            TurnStep::Record(item) => {
                let _ = self.input.transcript.send(item).await;
            }
            // The agent does not wait for this answer; a permission request
            // for the call gets it.
            TurnStep::Announce(call) => {
                let _ = self.input.tools.announce(call).await;
            }
        }
    }

    async fn permitted(&mut self, request: &s::RequestPermissionRequest) -> bool {
        let call = ToolCall {
            call_id: request.tool_call.tool_call_id.0.to_string(),
            name: mapping::agent_tool_name(request.tool_call.fields.kind.as_ref()),
            input: json!({
                "title": request.tool_call.fields.title,
                "rawInput": request.tool_call.fields.raw_input,
            }),
        };
        self.input.tools.announce(call).await == Announced::Permitted
    }

    async fn file(&mut self, name: &'static str, input: Value) -> Result<String, acp::Error> {
        *self.file_calls += 1;
        let output = self
            .input
            .tools
            .call(ToolCall {
                call_id: format!("fs-{}", self.file_calls),
                name: name.to_owned(),
                input,
            })
            .await;
        let text = plain_text(&output.output);
        if output.is_error {
            Err(acp::Error::new(acp::ErrorCode::INTERNAL_ERROR, text))
        } else {
            Ok(text)
        }
    }
}

impl Agent for AcpAgent {
    fn run_turn(&mut self, input: TurnInput) -> subagent_runtime::BoxFuture<'_, TurnEnd> {
        Box::pin(async move {
            if self.live.is_none() {
                // An interrupt or dispose during setup ends it: the
                // half-open connection is dropped, which kills the group.
                let connected = tokio::select! {
                    connected = self.connect(&input.transcript) => connected,
                    () = input.cancel.cancelled() => return aborted("cancelled while the ACP agent was starting"),
                };
                if let Err(err) = connected {
                    return failed(&err);
                }
            }
            if input.cancel.is_cancelled() {
                return aborted("cancelled before the prompt was sent");
            }
            let asked: Vec<String> = input.messages.iter().map(|m| plain_text(m)).collect();
            let (end, said) = self.run(input).await;
            // Kept for seeding a new session should this process be lost.
            for text in asked.into_iter().filter(|text| !text.is_empty()) {
                self.transcript.push(("user".to_owned(), text));
            }
            if !said.is_empty() {
                self.transcript.push(("assistant".to_owned(), said));
            }
            end
        })
    }
}
