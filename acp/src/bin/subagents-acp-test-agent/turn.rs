//! One prompt turn of the test agent: plays a script turn's steps over ACP
//! (session updates, permission and file requests to the client), honours
//! `session/cancel`, and reports how the turn ends and what it said.

use std::path::PathBuf;
use std::time::Duration;

use agent_client_protocol::v1::{self, schema};
use agent_client_protocol::{Client, Error, ErrorCode};
use serde_json::Value;
use subagent_acp::script::{AcpStep, AgentStep, PlanItem, PlanPriority, PlanStatus, Step};
use tokio_util::sync::CancellationToken;

/// How long a `crash` step lets the updates sent before it reach stdout
/// before the process exits: they are written by another thread, which a
/// loaded machine may not run for a while.
const CRASH_SETTLE: Duration = Duration::from_secs(1);

/// What the client advertised, in `initialize`, that it does with files.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FsAccess {
    /// `fs.readTextFile`.
    pub(crate) read: bool,
    /// `fs.writeTextFile`.
    pub(crate) write: bool,
}

/// Everything one turn needs.
pub(crate) struct Turn {
    /// The connection to the client.
    pub(crate) cx: v1::ConnectionTo<Client>,
    /// The session the turn belongs to.
    pub(crate) session_id: schema::SessionId,
    /// The turn's number in its session (1-based); names tool calls and
    /// messages.
    pub(crate) number: usize,
    /// The steps to play.
    pub(crate) steps: Vec<AgentStep>,
    /// The prompt's content, for `describe`.
    pub(crate) prompt: Vec<schema::ContentBlock>,
    /// The session's working directory, which relative file paths start at.
    pub(crate) cwd: PathBuf,
    /// What the client lets the agent do with files.
    pub(crate) fs: FsAccess,
    /// Cancelled by `session/cancel` for this session.
    pub(crate) cancel: CancellationToken,
    /// Stdout's lines, for the steps that write past the protocol.
    pub(crate) raw: crate::RawLines,
}

/// How a turn ends.
#[derive(Debug)]
pub(crate) enum Ending {
    /// The prompt is answered with this stop reason.
    Stop(schema::StopReason),
    /// The prompt is answered with this JSON-RPC error.
    Fail(Error),
    /// The prompt is never answered.
    Hang,
}

/// A played turn: its ending and the assistant messages it said, in order.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// How the turn ends.
    pub(crate) ending: Ending,
    /// The text of each assistant message the turn sent.
    pub(crate) said: Vec<String>,
}

impl Turn {
    /// Plays the turn. A failure to send an update (the connection is gone)
    /// ends it with that error.
    pub(crate) async fn run(self) -> Outcome {
        let mut player = Player {
            turn: self,
            said: Vec::new(),
        };
        let ending = player.play().await.unwrap_or_else(Ending::Fail);
        Outcome {
            ending,
            said: player.said,
        }
    }
}

/// A turn being played.
struct Player {
    turn: Turn,
    said: Vec<String>,
}

/// What a step leads to: `None` to go on with the next step.
type StepResult = Result<Option<Ending>, Error>;

fn cancelled() -> StepResult {
    Ok(Some(Ending::Stop(schema::StopReason::Cancelled)))
}

impl Player {
    async fn play(&mut self) -> Result<Ending, Error> {
        let steps = std::mem::take(&mut self.turn.steps);
        for (index, step) in steps.into_iter().enumerate() {
            if self.turn.cancel.is_cancelled() {
                return Ok(Ending::Stop(schema::StopReason::Cancelled));
            }
            let ending = match step {
                AgentStep::Common(step) => self.common(index, step).await?,
                AgentStep::Acp(step) => self.acp(index, step).await?,
            };
            if let Some(ending) = ending {
                return Ok(ending);
            }
        }
        Ok(Ending::Stop(if self.turn.cancel.is_cancelled() {
            schema::StopReason::Cancelled
        } else {
            schema::StopReason::EndTurn
        }))
    }

    async fn common(&mut self, index: usize, step: Step) -> StepResult {
        match step {
            Step::Say(text) => self.say(index, text)?,
            Step::Tool {
                name,
                input,
                output,
            } => return self.tool(index, name, input, output).await,
            // Over ACP the agent runs its own tools: a call is a tool the
            // client permits or refuses, as `tool` plays it.
            Step::Call { name, input } => {
                return self.tool(index, name, input, String::new()).await
            }
            Step::SleepMs(millis) => {
                tokio::select! {
                    biased;
                    () = self.turn.cancel.cancelled() => return cancelled(),
                    () = tokio::time::sleep(Duration::from_millis(millis)) => {}
                }
            }
            Step::Structured(value) => self.say(index, value.to_string())?,
            Step::Fail(text) => return Ok(Some(Ending::Fail(internal_error(text)))),
            Step::Refuse(text) => {
                self.say(index, text)?;
                return Ok(Some(Ending::Stop(schema::StopReason::Refusal)));
            }
            Step::MaxTokens(text) => {
                self.say(index, text)?;
                return Ok(Some(Ending::Stop(schema::StopReason::MaxTokens)));
            }
            // Its tools' results stay with the agent's own runs of them:
            // nothing to quote, so it says the text alone.
            Step::Quote { text, .. } => self.say(index, text)?,
            Step::Describe(text) => {
                let seen = describe(&self.turn.prompt);
                self.say(index, format!("{text} {seen}"))?;
            }
        }
        Ok(None)
    }

    async fn acp(&mut self, index: usize, step: AcpStep) -> StepResult {
        match step {
            AcpStep::Chunks(parts) => {
                let message_id = self.message_id(index);
                for part in &parts {
                    self.notify(schema::SessionUpdate::AgentMessageChunk(
                        schema::ContentChunk::new(schema::ContentBlock::from(part.as_str()))
                            .message_id(message_id.clone()),
                    ))?;
                }
                if !parts.is_empty() {
                    self.said.push(parts.concat());
                }
            }
            AcpStep::ReadFile { path } => {
                if !self.turn.fs.read {
                    self.say(index, "no fs access".to_owned())?;
                    return Ok(None);
                }
                let request = schema::ReadTextFileRequest::new(
                    self.turn.session_id.clone(),
                    self.turn.cwd.join(&path),
                );
                let answer = tokio::select! {
                    biased;
                    () = self.turn.cancel.cancelled() => return cancelled(),
                    answer = self.turn.cx.send_request(request).block_task() => answer,
                };
                let text = match answer {
                    Ok(response) => format!("read {path}: {}", response.content),
                    Err(err) => format!("could not read {path}: {}", err.message),
                };
                self.say(index, text)?;
            }
            AcpStep::WriteFile { path, content } => {
                if !self.turn.fs.write {
                    self.say(index, "no fs access".to_owned())?;
                    return Ok(None);
                }
                let request = schema::WriteTextFileRequest::new(
                    self.turn.session_id.clone(),
                    self.turn.cwd.join(&path),
                    content,
                );
                let answer = tokio::select! {
                    biased;
                    () = self.turn.cancel.cancelled() => return cancelled(),
                    answer = self.turn.cx.send_request(request).block_task() => answer,
                };
                let text = match answer {
                    Ok(_) => format!("wrote {path}"),
                    Err(err) => format!("could not write {path}: {}", err.message),
                };
                self.say(index, text)?;
            }
            AcpStep::Plan(items) => {
                let entries = items.into_iter().map(plan_entry).collect();
                self.notify(schema::SessionUpdate::Plan(schema::Plan::new(entries)))?;
            }
            AcpStep::Usage { used, size } => {
                self.notify(schema::SessionUpdate::UsageUpdate(
                    schema::UsageUpdate::new(used, size),
                ))?;
            }
            AcpStep::MaxTurnRequests(text) => {
                self.say(index, text)?;
                return Ok(Some(Ending::Stop(schema::StopReason::MaxTurnRequests)));
            }
            AcpStep::Crash(text) => {
                tokio::time::sleep(CRASH_SETTLE).await;
                eprintln!("{text}");
                std::process::exit(3);
            }
            AcpStep::Hang => return Ok(Some(Ending::Hang)),
            AcpStep::Flood { count, text } => {
                let message_id = self.message_id(index);
                for _ in 0..count {
                    self.notify(schema::SessionUpdate::AgentMessageChunk(
                        schema::ContentChunk::new(schema::ContentBlock::from(text.as_str()))
                            .message_id(message_id.clone()),
                    ))?;
                    // Yields now and then, so a cancel is seen mid-flood.
                    tokio::task::yield_now().await;
                    if self.turn.cancel.is_cancelled() {
                        return cancelled();
                    }
                }
                if count > 0 {
                    self.said.push(text.repeat(count));
                }
            }
            AcpStep::RawLine(line) => self.raw(line).await?,
            AcpStep::LongLine(bytes) => self.raw("x".repeat(bytes)).await?,
            AcpStep::ProtocolError(text) => return Ok(Some(Ending::Fail(internal_error(text)))),
        }
        Ok(None)
    }

    /// A tool the agent runs itself: announce it, ask the client's
    /// permission, then report it completed (allowed) or failed (rejected,
    /// cancelled, or the permission request failed).
    async fn tool(
        &mut self,
        index: usize,
        name: String,
        input: Value,
        output: String,
    ) -> StepResult {
        let call_id = format!("call-{}-{index}", self.turn.number);
        let kind = tool_kind(&name);
        let call = schema::ToolCall::new(call_id.clone(), name.clone())
            .name(name.clone())
            .kind(kind)
            .status(schema::ToolCallStatus::Pending)
            .raw_input(input.clone());
        self.notify(schema::SessionUpdate::ToolCall(call))?;

        let request = schema::RequestPermissionRequest::new(
            self.turn.session_id.clone(),
            schema::ToolCallUpdate::new(
                call_id.clone(),
                schema::ToolCallUpdateFields::new()
                    .title(name.clone())
                    .name(name)
                    .kind(kind)
                    .status(schema::ToolCallStatus::Pending)
                    .raw_input(input),
            ),
            vec![
                schema::PermissionOption::new(
                    "allow",
                    "Allow once",
                    schema::PermissionOptionKind::AllowOnce,
                ),
                schema::PermissionOption::new(
                    "reject",
                    "Reject once",
                    schema::PermissionOptionKind::RejectOnce,
                ),
            ],
        );
        let answer = tokio::select! {
            biased;
            () = self.turn.cancel.cancelled() => return cancelled(),
            answer = self.turn.cx.send_request(request).block_task() => answer,
        };
        let allowed = match answer {
            Ok(response) => matches!(
                &response.outcome,
                schema::RequestPermissionOutcome::Selected(selected)
                    if &*selected.option_id.0 == "allow"
            ),
            Err(err) => {
                eprintln!(
                    "subagents-acp-test-agent: permission request for {call_id} failed: {err}"
                );
                false
            }
        };
        let fields = if allowed {
            schema::ToolCallUpdateFields::new()
                .status(schema::ToolCallStatus::Completed)
                .content(vec![schema::ToolCallContent::from(output)])
        } else {
            schema::ToolCallUpdateFields::new()
                .status(schema::ToolCallStatus::Failed)
                .content(vec![schema::ToolCallContent::from("permission denied")])
        };
        self.notify(schema::SessionUpdate::ToolCallUpdate(
            schema::ToolCallUpdate::new(call_id, fields),
        ))?;
        Ok(None)
    }

    /// The id of the message step `index` of this turn sends.
    fn message_id(&self, index: usize) -> schema::MessageId {
        schema::MessageId::new(format!("msg-{}-{index}", self.turn.number))
    }

    /// One assistant message, as one `agent_message_chunk`.
    fn say(&mut self, index: usize, text: String) -> Result<(), Error> {
        self.notify(schema::SessionUpdate::AgentMessageChunk(
            schema::ContentChunk::new(schema::ContentBlock::from(text.as_str()))
                .message_id(self.message_id(index)),
        ))?;
        self.said.push(text);
        Ok(())
    }

    /// Writes `line` to stdout as it is, after the protocol's messages
    /// sent before it: the protocol library queues those for a task of its
    /// own, which a loaded machine may not run for a while, so the line
    /// waits as long as a `crash` step does.
    async fn raw(&self, line: String) -> Result<(), Error> {
        tokio::time::sleep(CRASH_SETTLE).await;
        self.turn
            .raw
            .unbounded_send(line)
            .map_err(|_| Error::internal_error().data("stdout is closed"))
    }

    fn notify(&self, update: schema::SessionUpdate) -> Result<(), Error> {
        self.turn
            .cx
            .send_notification(schema::SessionNotification::new(
                self.turn.session_id.clone(),
                update,
            ))
    }
}

/// The JSON-RPC error `fail` and `protocolError` answer with: an internal
/// error whose message and data are `text`.
fn internal_error(text: String) -> Error {
    Error::new(ErrorCode::INTERNAL_ERROR, text.clone()).data(text)
}

/// The ACP tool kind whose wire name is `name` (`read`, `edit`, `delete`,
/// `move`, `search`, `execute`, `think`, `fetch`, `switch_mode`), else
/// `other`.
fn tool_kind(name: &str) -> schema::ToolKind {
    // The schema's `ToolKind` falls back to `Other` for unknown names.
    serde_json::from_value(Value::String(name.to_owned())).unwrap_or(schema::ToolKind::Other)
}

fn plan_entry(item: PlanItem) -> schema::PlanEntry {
    let priority = match item.priority {
        PlanPriority::High => schema::PlanEntryPriority::High,
        PlanPriority::Medium => schema::PlanEntryPriority::Medium,
        PlanPriority::Low => schema::PlanEntryPriority::Low,
    };
    let status = match item.status {
        PlanStatus::Pending => schema::PlanEntryStatus::Pending,
        PlanStatus::InProgress => schema::PlanEntryStatus::InProgress,
        PlanStatus::Completed => schema::PlanEntryStatus::Completed,
    };
    schema::PlanEntry::new(item.content, priority, status)
}

/// The text of a prompt's text blocks, one per line (what the transcript
/// records of the user's turn).
pub(crate) fn prompt_text(prompt: &[schema::ContentBlock]) -> String {
    prompt
        .iter()
        .filter_map(|block| match block {
            schema::ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a prompt held, in one line: `[part; part; ...]`, each text block
/// quoted, each image as `image <mime> <decoded size> bytes` (or
/// `image <mime> no bytes` when its data is not base64), other blocks by
/// type.
fn describe(prompt: &[schema::ContentBlock]) -> String {
    let parts: Vec<String> = prompt
        .iter()
        .map(|block| match block {
            schema::ContentBlock::Text(text) => format!("{:?}", text.text),
            schema::ContentBlock::Image(image) => match decoded_len(&image.data) {
                Some(bytes) => format!("image {} {bytes} bytes", image.mime_type),
                None => format!("image {} no bytes", image.mime_type),
            },
            schema::ContentBlock::Audio(audio) => format!("audio {}", audio.mime_type),
            schema::ContentBlock::ResourceLink(link) => format!("resource_link {}", link.uri),
            schema::ContentBlock::Resource(_) => "resource".to_owned(),
            _ => "block".to_owned(),
        })
        .collect();
    format!("[{}]", parts.join("; "))
}

/// The number of bytes standard (padded or unpadded) base64 `data` decodes
/// to, ignoring ASCII whitespace; `None` when it is not base64.
fn decoded_len(data: &str) -> Option<usize> {
    let chars: Vec<u8> = data
        .bytes()
        .filter(|byte| !byte.is_ascii_whitespace())
        .collect();
    let body = chars
        .strip_suffix(b"==")
        .or_else(|| chars.strip_suffix(b"="))
        .unwrap_or(&chars);
    let padded = body.len() != chars.len();
    let alphabet = |byte: &u8| byte.is_ascii_alphanumeric() || matches!(*byte, b'+' | b'/');
    if !body.iter().all(alphabet)
        || body.len() % 4 == 1
        || (padded && !chars.len().is_multiple_of(4))
    {
        return None;
    }
    Some(body.len() / 4 * 3 + (body.len() % 4).saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoded_lengths_match_base64() {
        assert_eq!(decoded_len(""), Some(0));
        assert_eq!(decoded_len("iVBO"), Some(3));
        assert_eq!(decoded_len("aGk="), Some(2));
        assert_eq!(decoded_len("aGk"), Some(2));
        assert_eq!(decoded_len("aA=="), Some(1));
        assert_eq!(decoded_len("aGVsbG8gd29ybGQ="), Some(11));
        assert_eq!(decoded_len("aGVs\nbG8="), Some(5));
        assert_eq!(decoded_len("a"), None);
        assert_eq!(decoded_len("a!b="), None);
        assert_eq!(decoded_len("aGk=="), None);
    }

    #[test]
    fn tool_names_pick_kinds() {
        assert_eq!(tool_kind("read"), schema::ToolKind::Read);
        assert_eq!(tool_kind("switch_mode"), schema::ToolKind::SwitchMode);
        assert_eq!(tool_kind("read_file"), schema::ToolKind::Other);
    }

    #[test]
    fn descriptions_list_text_and_images() {
        let prompt = vec![
            schema::ContentBlock::from("look"),
            schema::ContentBlock::Image(schema::ImageContent::new("aGk=", "image/png")),
        ];
        assert_eq!(describe(&prompt), r#"["look"; image image/png 2 bytes]"#);
        assert_eq!(prompt_text(&prompt), "look");
    }
}
