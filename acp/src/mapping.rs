//! The pure translation between ACP's vocabulary and ours, with no IO:
//! stop reasons, content blocks both ways, tool names, and the
//! [`Transcriber`] that turns a turn's `session/update` notifications into
//! transcript steps (message chunks joined into one assistant message,
//! tool calls announced and their results, plans and context use).

use agent_client_protocol::v1::schema as s;
use serde_json::{json, Value};
use subagent_core::{AgentReport, ContentBlock, Cost, PlanEntry, SubagentStopReason};
use subagent_runtime::{ToolCall, TranscriptItem};

/// The prefix of the tool names an ACP agent's own calls are recorded
/// under (`acp/read`, `acp/execute`, …): the names a tool filter uses to
/// restrict them.
pub const AGENT_TOOL_PREFIX: &str = "acp/";

/// ACP's tool kinds, as their wire names.
pub const TOOL_KINDS: [&str; 10] = [
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "switch_mode",
    "other",
];

/// The tool the agent's `fs/read_text_file` requests are recorded as.
pub const READ_TEXT_FILE: &str = "fs/read_text_file";
/// The tool the agent's `fs/write_text_file` requests are recorded as.
pub const WRITE_TEXT_FILE: &str = "fs/write_text_file";

/// The wire name of a serializable ACP enum value (`end_turn`, `read`, …).
fn wire_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        Ok(other) => other.to_string(),
        Err(_) => "unknown".to_owned(),
    }
}

/// How an ACP stop reason settles a turn: `end_turn` completed,
/// `max_tokens` and `max_turn_requests` max-tokens, `refusal` refusal,
/// `cancelled` aborted; a reason this version does not know is `error`,
/// with a diagnostic naming it.
#[must_use]
pub fn stop_reason(reason: &s::StopReason) -> (SubagentStopReason, Option<String>) {
    match wire_name(reason).as_str() {
        "end_turn" => (SubagentStopReason::Completed, None),
        "max_tokens" | "max_turn_requests" => (SubagentStopReason::MaxTokens, None),
        "refusal" => (SubagentStopReason::Refusal, None),
        "cancelled" => (SubagentStopReason::Aborted, None),
        other => (
            SubagentStopReason::Error,
            Some(format!(
                "the ACP agent ended its turn with an unknown stop reason {other}"
            )),
        ),
    }
}

/// The tool name a call of `kind` is recorded under: `acp/<kind>`.
#[must_use]
pub fn agent_tool_name(kind: Option<&s::ToolKind>) -> String {
    let kind = kind.map_or_else(|| "other".to_owned(), wire_name);
    format!("{AGENT_TOOL_PREFIX}{kind}")
}

/// Our content as ACP prompt content: text as text, an image with its
/// bytes as an image, anything else (a reference-only image, tool blocks)
/// as its JSON in a text block, so nothing is silently dropped.
#[must_use]
pub fn to_acp(block: &ContentBlock) -> s::ContentBlock {
    match block {
        ContentBlock::Text(text) => s::ContentBlock::Text(s::TextContent::new(text.text.clone())),
        ContentBlock::Image(image) if image.data.is_some() => {
            s::ContentBlock::Image(s::ImageContent::new(
                image.data.clone().unwrap_or_default(),
                image.mime_type.clone(),
            ))
        }
        other => s::ContentBlock::Text(s::TextContent::new(
            serde_json::to_string(other).unwrap_or_default(),
        )),
    }
}

/// ACP content as ours: text as text, an image as an inline image, any
/// other block kept verbatim (as its JSON object).
#[must_use]
pub fn from_acp(block: &s::ContentBlock) -> ContentBlock {
    match block {
        s::ContentBlock::Text(text) => ContentBlock::text(text.text.clone()),
        s::ContentBlock::Image(image) => serde_json::from_value(json!({
            "type": "image", "mimeType": image.mime_type, "data": image.data,
        }))
        .unwrap_or_else(|_| ContentBlock::text("[an image]")),
        other => match serde_json::to_value(other) {
            Ok(Value::Object(map)) => ContentBlock::Other(map),
            _ => ContentBlock::text("[content]"),
        },
    }
}

/// A tool call's content as ours: its content blocks, a diff and a
/// terminal as one line naming them.
fn tool_content(content: &[s::ToolCallContent]) -> Vec<ContentBlock> {
    content
        .iter()
        .map(|item| match item {
            s::ToolCallContent::Content(content) => from_acp(&content.content),
            s::ToolCallContent::Diff(diff) => {
                ContentBlock::text(format!("diff of {}", diff.path.display()))
            }
            s::ToolCallContent::Terminal(terminal) => {
                ContentBlock::text(format!("terminal {}", terminal.terminal_id.0))
            }
            other => ContentBlock::text(serde_json::to_string(other).unwrap_or_default()),
        })
        .collect()
}

/// What one update asks of the turn, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnStep {
    /// Record this transcript item.
    Record(TranscriptItem),
    /// Announce this call (recorded and checked; an id already announced in
    /// the turn repeats its first answer and records nothing).
    Announce(ToolCall),
}

/// Turns a turn's updates into [`TurnStep`]s. Message chunks accumulate
/// into one assistant message, recorded when a chunk of another message
/// (another `messageId`) arrives, when any other update arrives, or when
/// the turn ends ([`flush`](Self::flush)). A message is never split by
/// time: a model that pauses mid-message still records one message.
#[derive(Debug, Default)]
pub struct Transcriber {
    message: Vec<ContentBlock>,
    message_id: Option<String>,
    /// The accumulated message's size: its texts' bytes, and each other
    /// block's JSON bytes.
    pending_bytes: usize,
}

/// The bytes a block adds to an accumulating message.
fn block_bytes(block: &ContentBlock) -> usize {
    match block {
        ContentBlock::Text(text) => text.text.len(),
        other => serde_json::to_vec(other).map_or(usize::MAX, |json| json.len()),
    }
}

impl Transcriber {
    /// A transcriber with nothing pending.
    #[must_use]
    pub fn new() -> Transcriber {
        Transcriber::default()
    }

    /// The assistant message accumulated so far, if any, as its record
    /// step; the accumulator is emptied.
    pub fn flush(&mut self) -> Option<TurnStep> {
        self.pending_bytes = 0;
        if self.message.is_empty() {
            None
        } else {
            Some(TurnStep::Record(TranscriptItem::Assistant(std::mem::take(
                &mut self.message,
            ))))
        }
    }

    /// The size of the assistant message accumulated so far (its texts'
    /// bytes, and each other block's JSON bytes): what a client bounds,
    /// since a message is held whole until it is recorded.
    #[must_use]
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Appends a chunk: text to the last text block, anything else as its
    /// own block.
    fn chunk(&mut self, block: ContentBlock) {
        self.pending_bytes = self.pending_bytes.saturating_add(block_bytes(&block));
        if let (ContentBlock::Text(next), Some(ContentBlock::Text(last))) =
            (&block, self.message.last_mut())
        {
            last.text.push_str(&next.text);
            return;
        }
        self.message.push(block);
    }

    /// The steps `update` asks for. Thoughts, user chunks (a replay),
    /// commands, modes and other updates record nothing.
    pub fn update(&mut self, update: &s::SessionUpdate) -> Vec<TurnStep> {
        if let s::SessionUpdate::AgentMessageChunk(chunk) = update {
            let id = chunk.message_id.as_ref().map(|id| id.0.to_string());
            let mut steps = Vec::new();
            if id.is_some() && id != self.message_id {
                steps.extend(self.flush());
            }
            if id.is_some() {
                self.message_id = id;
            }
            self.chunk(from_acp(&chunk.content));
            return steps;
        }
        let mut steps: Vec<TurnStep> = self.flush().into_iter().collect();
        match update {
            s::SessionUpdate::ToolCall(call) => {
                let call_id = call.tool_call_id.0.to_string();
                steps.push(TurnStep::Announce(ToolCall {
                    call_id: call_id.clone(),
                    name: agent_tool_name(Some(&call.kind)),
                    input: json!({
                        "title": call.title,
                        "rawInput": call.raw_input,
                        "locations": call.locations.iter().map(|l| l.path.display().to_string()).collect::<Vec<_>>(),
                    }),
                }));
                if let Some(step) = finished(&call_id, &call.status, &call.content) {
                    steps.push(step);
                }
            }
            s::SessionUpdate::ToolCallUpdate(update) => {
                let fields = &update.fields;
                if let Some(status) = &fields.status {
                    let call_id = update.tool_call_id.0.to_string();
                    let content = fields.content.as_deref().unwrap_or_default();
                    if let Some(step) = finished(&call_id, status, content) {
                        steps.push(TurnStep::Announce(ToolCall {
                            call_id,
                            name: agent_tool_name(fields.kind.as_ref()),
                            input: json!({"title": fields.title, "rawInput": fields.raw_input}),
                        }));
                        steps.push(step);
                    }
                }
            }
            s::SessionUpdate::Plan(plan) => {
                let entries = plan
                    .entries
                    .iter()
                    .map(|entry| PlanEntry {
                        content: entry.content.clone(),
                        priority: wire_name(&entry.priority),
                        status: wire_name(&entry.status),
                    })
                    .collect();
                steps.push(TurnStep::Record(TranscriptItem::Report(
                    AgentReport::Plan { entries },
                )));
            }
            s::SessionUpdate::UsageUpdate(usage) => {
                steps.push(TurnStep::Record(TranscriptItem::Report(
                    AgentReport::ContextUsage {
                        used: usage.used,
                        size: usage.size,
                        cost: usage.cost.as_ref().map(|cost| Cost {
                            amount: cost.amount,
                            currency: cost.currency.clone(),
                        }),
                    },
                )));
            }
            _ => {}
        }
        steps
    }
}

/// The result step of a call whose status is final (`completed` or
/// `failed`).
fn finished(
    call_id: &str,
    status: &s::ToolCallStatus,
    content: &[s::ToolCallContent],
) -> Option<TurnStep> {
    let is_error = match wire_name(status).as_str() {
        "completed" => false,
        "failed" => true,
        _ => return None,
    };
    Some(TurnStep::Record(TranscriptItem::ToolResult {
        call_id: call_id.to_owned(),
        output: tool_content(content),
        is_error,
    }))
}

/// The structured capture of a completed turn whose activation asked for
/// an output schema: the last assistant message's text as JSON, alone or
/// in a fenced block (ACP has no structured output of its own). `None`
/// when it is not JSON; the runtime's capture check then says why.
#[must_use]
pub fn structured_capture(last_message: &str) -> Option<Value> {
    let text = last_message.trim();
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return Some(value);
    }
    let start = text.find("```")?;
    let body = &text[start + 3..];
    let body = body.strip_prefix("json").unwrap_or(body);
    let end = body.find("```")?;
    serde_json::from_str(body[..end].trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(name: &str) -> s::StopReason {
        serde_json::from_value(json!(name)).unwrap()
    }

    #[test]
    fn every_stop_reason_maps_as_documented() {
        assert_eq!(
            stop_reason(&reason("end_turn")).0,
            SubagentStopReason::Completed
        );
        assert_eq!(
            stop_reason(&reason("max_tokens")).0,
            SubagentStopReason::MaxTokens
        );
        assert_eq!(
            stop_reason(&reason("max_turn_requests")).0,
            SubagentStopReason::MaxTokens
        );
        assert_eq!(
            stop_reason(&reason("refusal")).0,
            SubagentStopReason::Refusal
        );
        assert_eq!(
            stop_reason(&reason("cancelled")).0,
            SubagentStopReason::Aborted
        );
    }

    fn update(value: Value) -> s::SessionUpdate {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn chunks_join_into_one_message_recorded_when_something_else_happens() {
        let mut transcriber = Transcriber::new();
        for text in ["Hel", "lo"] {
            let chunk = update(
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
            );
            assert!(transcriber.update(&chunk).is_empty());
        }
        let plan = update(json!({"sessionUpdate": "plan", "entries": [
            {"content": "look", "priority": "high", "status": "in_progress"}]}));
        let steps = transcriber.update(&plan);
        assert_eq!(
            steps,
            vec![
                TurnStep::Record(TranscriptItem::Assistant(vec![ContentBlock::text("Hello")])),
                TurnStep::Record(TranscriptItem::Report(AgentReport::Plan {
                    entries: vec![PlanEntry {
                        content: "look".into(),
                        priority: "high".into(),
                        status: "in_progress".into()
                    }]
                })),
            ]
        );
        assert_eq!(transcriber.flush(), None);
    }

    #[test]
    fn a_chunk_of_another_message_records_the_one_before() {
        let mut transcriber = Transcriber::new();
        let chunk = |id: &str, text: &str| {
            update(
                json!({"sessionUpdate": "agent_message_chunk", "messageId": id,
                "content": {"type": "text", "text": text}}),
            )
        };
        assert!(transcriber.update(&chunk("m1", "one")).is_empty());
        assert!(transcriber.update(&chunk("m1", " more")).is_empty());
        assert_eq!(
            transcriber.update(&chunk("m2", "two")),
            vec![TurnStep::Record(TranscriptItem::Assistant(vec![
                ContentBlock::text("one more")
            ]))]
        );
        assert_eq!(
            transcriber.flush(),
            Some(TurnStep::Record(TranscriptItem::Assistant(vec![
                ContentBlock::text("two")
            ])))
        );
    }

    #[test]
    fn a_tool_call_is_announced_and_its_final_update_is_its_result() {
        let mut transcriber = Transcriber::new();
        let started = transcriber.update(&update(json!({
            "sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ls", "kind": "execute",
            "status": "pending", "rawInput": {"cmd": "ls"}})));
        let [TurnStep::Announce(call)] = started.as_slice() else {
            panic!("{started:?}")
        };
        assert_eq!(
            (call.call_id.as_str(), call.name.as_str()),
            ("c1", "acp/execute")
        );
        assert_eq!(call.input["rawInput"], json!({"cmd": "ls"}));
        let progress = transcriber.update(&update(json!({
            "sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress"})));
        assert!(progress.is_empty());
        let done = transcriber.update(&update(json!({
            "sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": "no such file"}}]})));
        assert_eq!(done.len(), 2);
        assert_eq!(
            done[1],
            TurnStep::Record(TranscriptItem::ToolResult {
                call_id: "c1".into(),
                output: vec![ContentBlock::text("no such file")],
                is_error: true
            })
        );
    }

    #[test]
    fn usage_becomes_a_context_report() {
        let steps = Transcriber::new().update(&update(json!({
            "sessionUpdate": "usage_update", "used": 10, "size": 100,
            "cost": {"amount": 0.5, "currency": "USD"}})));
        assert_eq!(
            steps,
            vec![TurnStep::Record(TranscriptItem::Report(
                AgentReport::ContextUsage {
                    used: 10,
                    size: 100,
                    cost: Some(Cost {
                        amount: 0.5,
                        currency: "USD".into()
                    })
                }
            ))]
        );
    }

    #[test]
    fn content_crosses_both_ways() {
        let image: ContentBlock = serde_json::from_value(
            json!({"type": "image", "mimeType": "image/png", "data": "AAAA"}),
        )
        .unwrap();
        let there = to_acp(&image);
        assert!(
            matches!(&there, s::ContentBlock::Image(i) if i.data == "AAAA" && i.mime_type == "image/png")
        );
        assert_eq!(from_acp(&there), image);
        assert_eq!(
            from_acp(&to_acp(&ContentBlock::text("hi"))),
            ContentBlock::text("hi")
        );
    }

    #[test]
    fn a_capture_is_the_last_message_as_json_alone_or_fenced() {
        assert_eq!(structured_capture(" {\"a\": 1} "), Some(json!({"a": 1})));
        assert_eq!(
            structured_capture("Here:\n```json\n{\"a\": 2}\n```"),
            Some(json!({"a": 2}))
        );
        assert_eq!(structured_capture("no json here"), None);
    }
}
