//! [`ScriptedAgent`]: the deterministic reference backend, driven by a script
//! so every stop reason can be produced on purpose. Tests and the demo use it.
//!
//! Script format (JSON): a list of turns, each a list of steps. Turn `n` of a
//! session plays `turns[n-1]`, or the last turn again once the list runs out.
//!
//! ```json
//! {"turns": [[
//!   {"say": "Looking at the files."},
//!   {"tool": {"name": "read_file", "input": {"path": "lib.rs"}, "output": "//! docs"}},
//!   {"sleepMs": 50},
//!   {"structured": {"answer": 42}},
//!   {"say": "Done."}
//! ]]}
//! ```
//!
//! Steps: `say` (an assistant message), `tool` (a call through the turn's
//! tool port; the host's scripted tool of that name returns `output`),
//! `sleepMs` (a pause that cancellation cuts short, ending the turn
//! `aborted`), `structured` (the turn's structured capture), `fail` (ends the
//! turn `error` with that diagnostic), `refuse` (says it, ends `refusal`),
//! `maxTokens` (says the partial text, ends `max-tokens`), `describe` (says
//! its text and then what the turn's messages held, images included),
//! `call` (a call of any tool, the runtime's delegation tools included,
//! whose result it then says), `quote` (says its text and a field of the
//! last tool result). A string `"$/pointer"` in a `tool` or `call` input is
//! a field of the last tool result:
//!
//! ```json
//! {"turns": [[
//!   {"tool": {"name": "subagent", "input": {"provider": "spawn", "label": "check", "prompt": "Check it"}}},
//!   {"tool": {"name": "subagent_control", "input": {"action": "wait", "child": "$/childId"}}},
//!   {"quote": {"text": "check says:", "pointer": "/children/0/output"}}
//! ]]}
//! ```
//!
//! Scripted agents play a model that takes images, except those of labels
//! marked with [`ScriptedHost::text_only`].
//!
//! The host's tools are the tools its scripts call, plus any added with
//! [`ScriptedHost::with_tool`]. A call the session's filter restricts is
//! refused by the runtime and the script goes on with its next step.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use subagent_core::{ContentBlock, Diagnostic, SessionId, SubagentError, SubagentStopReason};
use tokio_util::sync::CancellationToken;

use crate::agent::{
    Agent, AgentHost, AgentSpec, InputRoute, ToolCall, ToolDefinition, ToolOutput, TranscriptItem,
    TurnEnd, TurnInput,
};
use crate::BoxFuture;

/// One scripted step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Step {
    /// An assistant message with this text.
    Say(String),
    /// A tool call and its result.
    Tool {
        /// Tool name.
        name: String,
        /// Input.
        #[serde(default)]
        input: Value,
        /// Result text.
        #[serde(default)]
        output: String,
    },
    /// A call of any tool the session may call (a host tool, or one of the
    /// runtime's delegation tools), whose result the agent then says as
    /// its next assistant message.
    ///
    /// In the input of a `tool` or `call` step, a string `"$/pointer"` is
    /// replaced by the value at that JSON pointer (RFC 6901) in the turn's
    /// last tool result read as JSON (`null` when there is none), so a
    /// script can name the child its `subagent` call started.
    Call {
        /// Tool name.
        name: String,
        /// Input.
        #[serde(default)]
        input: Value,
    },
    /// Say `text` followed by the value at `pointer` (RFC 6901) in the
    /// turn's last tool result read as JSON: a string as itself, anything
    /// else as JSON; nothing when it is absent. How a script answers with
    /// what a child it waited for said.
    Quote {
        /// What comes first.
        text: String,
        /// Where, in the last result, what follows is.
        pointer: String,
    },
    /// Pause; cancellation ends the turn `aborted`.
    SleepMs(u64),
    /// The turn's structured capture.
    Structured(Value),
    /// End the turn `error` with this diagnostic.
    Fail(String),
    /// Say this and end the turn `refusal`.
    Refuse(String),
    /// Say this partial text and end the turn `max-tokens`.
    MaxTokens(String),
    /// Say this text followed by what the turn was given: each message's
    /// text, and each image's type, decoded size and attachment id (proof
    /// that the agent received the bytes, not only a reference).
    Describe(String),
}

/// A whole script.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Script {
    /// Turns, each a list of steps.
    pub turns: Vec<Vec<Step>>,
}

impl Script {
    /// A script whose every turn says `text`.
    #[must_use]
    pub fn reply(text: &str) -> Script {
        Script {
            turns: vec![vec![Step::Say(text.to_owned())]],
        }
    }

    /// Parses a script.
    ///
    /// # Errors
    /// `gateway/bad-request` naming the JSON problem.
    pub fn parse(json: &str) -> Result<Script, SubagentError> {
        serde_json::from_str(json)
            .map_err(|err| SubagentError::BadRequest(format!("bad script: {err}")))
    }
}

/// Scripts by session label, with a default, and the scripted tools they call.
#[derive(Clone, Debug, Default)]
pub struct ScriptedHost {
    by_label: HashMap<String, Script>,
    default: Script,
    /// Tool name to its canned results, by input (the first is the fallback).
    tools: BTreeMap<String, Vec<(Value, String)>>,
    /// Labels whose agents play a model without image input.
    text_only: HashSet<String>,
}

impl ScriptedHost {
    /// A host whose agents all play `default`.
    #[must_use]
    pub fn new(default: Script) -> Self {
        let mut host = ScriptedHost {
            by_label: HashMap::new(),
            default: Script::default(),
            tools: BTreeMap::new(),
            text_only: HashSet::new(),
        };
        host.learn_tools(&default);
        host.default = default;
        host
    }

    /// Agents of sessions labelled `label` play `script`.
    #[must_use]
    pub fn with(mut self, label: &str, script: Script) -> Self {
        self.learn_tools(&script);
        self.by_label.insert(label.to_owned(), script);
        self
    }

    /// The agents `subagents serve` runs, for a person to drive by hand:
    /// a child replies `done` each turn; one labelled `slow` works for a
    /// minute (to watch and interrupt); one labelled `eyes` describes what
    /// it was given, images included; one labelled `blind` plays a
    /// text-only model, so images to it are refused; one labelled
    /// `delegate` starts an `assistant` child through the `subagent` tool,
    /// waits for it and answers with what it said.
    #[must_use]
    pub fn showcase() -> Self {
        let tool = |name: &str, input: Value| Step::Tool {
            name: name.into(),
            input,
            output: String::new(),
        };
        ScriptedHost::new(Script::reply("done"))
            .with(
                "delegate",
                Script {
                    turns: vec![vec![
                        tool(
                            crate::delegation::SUBAGENT,
                            serde_json::json!({"provider": "spawn", "label": "assistant", "prompt": "lend a hand"}),
                        ),
                        tool(
                            crate::delegation::CONTROL,
                            serde_json::json!({"action": "wait", "child": "$/childId"}),
                        ),
                        Step::Quote {
                            text: "my assistant says:".into(),
                            pointer: "/children/0/output".into(),
                        },
                    ]],
                },
            )
            .with(
                "slow",
                Script {
                    turns: vec![vec![
                        Step::Say("working on it".into()),
                        Step::SleepMs(60_000),
                        Step::Say("finished".into()),
                    ]],
                },
            )
            .with(
                "eyes",
                Script {
                    turns: vec![vec![Step::Describe("I was given".into())]],
                },
            )
            .text_only("blind")
    }

    /// Agents of sessions labelled `label` play a model that takes text
    /// only: prompts with images to them are refused.
    #[must_use]
    pub fn text_only(mut self, label: &str) -> Self {
        self.text_only.insert(label.to_owned());
        self
    }

    /// Adds a tool no script calls (so a filter may name it); it returns
    /// `output` whatever its input.
    #[must_use]
    pub fn with_tool(mut self, name: &str, output: &str) -> Self {
        self.tools
            .entry(name.to_owned())
            .or_default()
            .push((Value::Null, output.to_owned()));
        self
    }

    fn learn_tools(&mut self, script: &Script) {
        for step in script.turns.iter().flatten() {
            if let Step::Tool {
                name,
                input,
                output,
            } = step
            {
                // The runtime's own tools are not the host's to offer.
                if crate::delegation::is_delegation(name) {
                    continue;
                }
                self.tools
                    .entry(name.clone())
                    .or_default()
                    .push((input.clone(), output.clone()));
            }
        }
    }
}

impl AgentHost for ScriptedHost {
    fn accepts_image_input(&self, route: &InputRoute<'_>) -> bool {
        !self.text_only.contains(route.label)
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        self.tools
            .keys()
            .map(|name| ToolDefinition::new(name, "a scripted tool"))
            .collect()
    }

    fn execute_tool(
        &self,
        _session: SessionId,
        call: ToolCall,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, ToolOutput> {
        let output = self.tools.get(&call.name).and_then(|results| {
            results
                .iter()
                .find(|(input, _)| *input == call.input)
                .or_else(|| results.first())
                .map(|(_, output)| output.clone())
        });
        Box::pin(async move {
            match output {
                Some(text) => ToolOutput {
                    output: vec![ContentBlock::text(text)],
                    is_error: false,
                    refused: false,
                },
                None => ToolOutput::error(format!("no scripted tool {}", call.name)),
            }
        })
    }

    fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        let script = self
            .by_label
            .get(&spec.label)
            .unwrap_or(&self.default)
            .clone();
        // Resume where the durable history left off: count the turns it records.
        let turns_done = spec
            .history
            .iter()
            .filter(|event| event.get("type").and_then(Value::as_str) == Some("TurnStarted"))
            .count();
        Box::pin(async move {
            Ok(Box::new(ScriptedAgent {
                script,
                turn: turns_done,
            }) as Box<dyn Agent>)
        })
    }
}

/// Calls `name` with `arguments` through the turn's tool port, as step
/// `index` (its call id is `call-<index>`).
async fn call_tool(input: &TurnInput, index: usize, name: String, arguments: Value) -> ToolOutput {
    input
        .tools
        .call(ToolCall {
            call_id: format!("call-{index}"),
            name,
            input: arguments,
        })
        .await
}

/// A tool result's text read as JSON, or as a JSON string when it is not.
fn result_value(output: &ToolOutput) -> Value {
    let text = subagent_core::content::plain_text(&output.output);
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// `input` with every string `"$/pointer"` replaced by the value at that
/// pointer in `last_result` (`null` when absent).
fn substitute(input: Value, last_result: &Value) -> Value {
    match input {
        Value::String(text) => match text.strip_prefix('$') {
            Some(pointer) if pointer.starts_with('/') => {
                last_result.pointer(pointer).cloned().unwrap_or(Value::Null)
            }
            _ => Value::String(text),
        },
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|item| substitute(item, last_result))
                .collect(),
        ),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(key, value)| (key, substitute(value, last_result)))
                .collect(),
        ),
        other => other,
    }
}

/// A live scripted agent.
#[derive(Debug)]
pub struct ScriptedAgent {
    script: Script,
    turn: usize,
}

fn end(
    stop_reason: SubagentStopReason,
    diagnostic: Option<&str>,
    structured: Option<Value>,
) -> TurnEnd {
    TurnEnd {
        stop_reason,
        diagnostic: diagnostic.map(Diagnostic::new),
        structured,
    }
}

impl Agent for ScriptedAgent {
    fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd> {
        let steps = self
            .script
            .turns
            .get(self.turn)
            .or_else(|| self.script.turns.last())
            .cloned()
            .unwrap_or_default();
        self.turn += 1;
        Box::pin(async move {
            let mut structured = None;
            let mut last_result = Value::Null;
            let mut input = input;
            let say = |text: &str| TranscriptItem::Assistant(vec![ContentBlock::text(text)]);
            for (index, step) in steps.into_iter().enumerate() {
                if !take_steering(&mut input).await {
                    return end(
                        SubagentStopReason::Aborted,
                        Some("transcript closed"),
                        structured,
                    );
                }
                if input.cancel.is_cancelled() {
                    return end(SubagentStopReason::Aborted, Some("interrupted"), structured);
                }
                let sent = match step {
                    Step::Say(text) => input.transcript.send(say(&text)).await,
                    Step::Tool {
                        name,
                        input: arguments,
                        ..
                    } => {
                        // A refusal or failure is recorded by the runtime;
                        // the script goes on either way.
                        let arguments = substitute(arguments, &last_result);
                        let output = call_tool(&input, index, name, arguments).await;
                        last_result = result_value(&output);
                        Ok(())
                    }
                    Step::Call {
                        name,
                        input: arguments,
                    } => {
                        let arguments = substitute(arguments, &last_result);
                        let output = call_tool(&input, index, name, arguments).await;
                        last_result = result_value(&output);
                        let text = subagent_core::content::plain_text(&output.output);
                        input.transcript.send(say(&text)).await
                    }
                    Step::Quote { text, pointer } => {
                        let quoted = match last_result.pointer(&pointer) {
                            Some(Value::String(quoted)) => format!("{text} {quoted}"),
                            Some(other) => format!("{text} {other}"),
                            None => text,
                        };
                        input.transcript.send(say(&quoted)).await
                    }
                    Step::SleepMs(millis) => {
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_millis(millis)) => Ok(()),
                            () = input.cancel.cancelled() => return end(SubagentStopReason::Aborted, Some("interrupted"), structured),
                        }
                    }
                    Step::Describe(text) => {
                        let seen = describe(&input.messages);
                        input.transcript.send(say(&format!("{text} {seen}"))).await
                    }
                    Step::Structured(value) => {
                        structured = Some(value);
                        Ok(())
                    }
                    Step::Fail(diagnostic) => {
                        return end(SubagentStopReason::Error, Some(&diagnostic), structured)
                    }
                    Step::Refuse(text) => {
                        let _ = input.transcript.send(say(&text)).await;
                        return end(
                            SubagentStopReason::Refusal,
                            Some("the agent declined"),
                            structured,
                        );
                    }
                    Step::MaxTokens(text) => {
                        let _ = input.transcript.send(say(&text)).await;
                        return end(
                            SubagentStopReason::MaxTokens,
                            Some("output token ceiling reached"),
                            structured,
                        );
                    }
                };
                if sent.is_err() {
                    return end(
                        SubagentStopReason::Aborted,
                        Some("transcript closed"),
                        structured,
                    );
                }
            }
            if !take_steering(&mut input).await {
                return end(
                    SubagentStopReason::Aborted,
                    Some("transcript closed"),
                    structured,
                );
            }
            end(SubagentStopReason::Completed, None, structured)
        })
    }
}

/// What a turn's messages held, in one line: each text part quoted, each
/// image as its type, decoded size and attachment id.
fn describe(messages: &[Vec<ContentBlock>]) -> String {
    use base64::Engine as _;
    let parts: Vec<String> = messages
        .iter()
        .flatten()
        .map(|block| match block {
            ContentBlock::Text(text) => format!("{:?}", text.text),
            ContentBlock::Image(image) => {
                let size = image
                    .data
                    .as_deref()
                    .and_then(|data| base64::engine::general_purpose::STANDARD.decode(data).ok())
                    .map_or_else(
                        || "no bytes".to_owned(),
                        |bytes| format!("{} bytes", bytes.len()),
                    );
                format!(
                    "{} ({size}, {})",
                    image.mime_type,
                    image.attachment.as_deref().unwrap_or("inline")
                )
            }
            other => other.type_name().unwrap_or("block").to_owned(),
        })
        .collect();
    format!("[{}]", parts.join("; "))
}

/// A step boundary: acknowledges each steering message with an assistant
/// message `(steered) <text>`. False when the transcript is closed.
async fn take_steering(input: &mut TurnInput) -> bool {
    for content in input.steering.take().await {
        let text = format!("(steered) {}", subagent_core::content::plain_text(&content));
        if input
            .transcript
            .send(TranscriptItem::Assistant(vec![ContentBlock::text(text)]))
            .await
            .is_err()
        {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_parse_every_step_kind() {
        let script = Script::parse(
            r#"{"turns": [[{"say": "hi"}, {"tool": {"name": "ls", "input": {"p": 1}, "output": "x"}}, {"sleepMs": 5},
               {"structured": {"a": 1}}, {"fail": "boom"}, {"refuse": "no"}, {"maxTokens": "par"}]]}"#,
        )
        .unwrap();
        assert_eq!(script.turns[0].len(), 7);
        assert!(matches!(
            Script::parse(r#"{"turns": [[{"dance": 1}]]}"#),
            Err(SubagentError::BadRequest(_))
        ));
    }

    #[test]
    fn a_field_of_the_last_result_fills_an_input() {
        let last =
            serde_json::json!({"childId": "c-1", "children": [{"output": "found it"}], "n": 3});
        let input = serde_json::json!({
            "child": "$/childId",
            "list": ["$/n", "$", "$childId", "plain"],
            "nested": {"said": "$/children/0/output"},
            "missing": "$/nope",
        });
        assert_eq!(
            substitute(input, &last),
            serde_json::json!({
                "child": "c-1",
                "list": [3, "$", "$childId", "plain"],
                "nested": {"said": "found it"},
                "missing": null,
            })
        );
        // A result that is not JSON is its text.
        assert_eq!(
            result_value(&ToolOutput::error("no such tool")),
            serde_json::json!("no such tool")
        );
        let quote = Script::parse(r#"{"turns": [[{"quote": {"text": "a", "pointer": "/b"}}]]}"#);
        assert_eq!(
            quote.unwrap().turns[0],
            [Step::Quote {
                text: "a".into(),
                pointer: "/b".into()
            }]
        );
    }
}
