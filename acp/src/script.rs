//! The script format of the deterministic ACP test agent
//! (`subagents-acp-test-agent`), shared by the agent binary and the tests
//! that write its scripts.
//!
//! A script (JSON, camelCase; every top-level field optional):
//!
//! ```json
//! {
//!   "loadSession": true,
//!   "hangOnInitialize": false,
//!   "updatesBeforeSession": 0,
//!   "default": {"turns": [[{"say": "done"}]]},
//!   "byLabel": {"research": {"turns": [[
//!     {"chunks": ["Look", "ing..."]},
//!     {"tool": {"name": "read", "input": {"path": "a.txt"}, "output": "text"}},
//!     {"readFile": {"path": "/abs/a.txt"}},
//!     {"plan": [{"content": "step", "priority": "high", "status": "in_progress"}]},
//!     {"usage": {"used": 10, "size": 100}},
//!     {"flood": {"count": 100000, "text": "x"}},
//!     {"rawLine": "not json"},
//!     {"longLine": 50000000},
//!     "hang"
//!   ]]}}
//! }
//! ```
//!
//! A session plays the script of its label (the `_meta` of `session/new`:
//! `{"subagents": {"label": "research"}}`), or `default`. Turn `n` of a
//! session (1-based, counted per ACP session and continuing across
//! `session/load`) plays `turns[n-1]`, or the last turn again once the list
//! runs out, exactly like the runtime's scripted agent.
//!
//! Steps are the runtime's scripted steps ([`Step`], the same JSON) plus the
//! ACP-only steps of [`AcpStep`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use subagent_runtime::scripted::Step;

/// A whole test-agent script: agent-level switches and the turn scripts,
/// by session label with a default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct AgentScript {
    /// Advertise `loadSession` in `initialize` (only honoured when the agent
    /// was also given `--sessions DIR`, where sessions are persisted).
    pub load_session: bool,
    /// Never answer `initialize` (to test the client's handshake timeout).
    pub hang_on_initialize: bool,
    /// How many `agent_message_chunk` updates `session/new` sends before
    /// its answer (to test a client that must keep reading meanwhile).
    pub updates_before_session: usize,
    /// The script of sessions whose label has no entry in `by_label`, and of
    /// sessions without a label.
    pub default: AcpScript,
    /// Scripts by session label.
    pub by_label: BTreeMap<String, AcpScript>,
}

impl Default for AgentScript {
    /// No session loading, an answered `initialize`, every session replying
    /// `done` each turn, no labelled scripts.
    fn default() -> Self {
        AgentScript::new(AcpScript::reply("done"))
    }
}

impl AgentScript {
    /// A script whose sessions all play `default`, with the switches off.
    #[must_use]
    pub fn new(default: AcpScript) -> Self {
        AgentScript {
            load_session: false,
            hang_on_initialize: false,
            updates_before_session: 0,
            default,
            by_label: BTreeMap::new(),
        }
    }

    /// The same script, with sessions labelled `label` playing `script`.
    #[must_use]
    pub fn with(mut self, label: &str, script: AcpScript) -> Self {
        self.by_label.insert(label.to_owned(), script);
        self
    }

    /// Parses a script.
    ///
    /// # Errors
    /// The JSON problem: malformed JSON, an unknown field or step, a
    /// mistyped value.
    pub fn parse(json: &str) -> Result<AgentScript, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// The script a session labelled `label` plays: its `by_label` entry, or
    /// `default` when the label is absent or has no entry.
    #[must_use]
    pub fn for_label(&self, label: Option<&str>) -> &AcpScript {
        label
            .and_then(|label| self.by_label.get(label))
            .unwrap_or(&self.default)
    }
}

/// The turns one session plays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpScript {
    /// Turns, each a list of steps.
    pub turns: Vec<Vec<AgentStep>>,
}

impl AcpScript {
    /// A script whose every turn says `text` and ends `end_turn`.
    #[must_use]
    pub fn reply(text: &str) -> Self {
        AcpScript {
            turns: vec![vec![AgentStep::Common(Step::Say(text.to_owned()))]],
        }
    }

    /// The steps of turn `number` (1-based): `turns[number - 1]`, or the last
    /// turn once the list runs out; empty when there are no turns (such a
    /// turn ends `end_turn` at once).
    #[must_use]
    pub fn turn(&self, number: usize) -> &[AgentStep] {
        self.turns
            .get(number.saturating_sub(1))
            .or_else(|| self.turns.last())
            .map(Vec::as_slice)
            .unwrap_or_default()
    }
}

/// One step of a test-agent turn: an ACP-only step, or one of the runtime's
/// scripted steps (same JSON as in the runtime's scripts).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AgentStep {
    /// A step only the ACP test agent knows.
    Acp(AcpStep),
    /// A step of the runtime's scripted agent, played over ACP:
    /// `say` is one `agent_message_chunk`; `tool` is a `tool_call`, a
    /// `session/request_permission` to the client and a `tool_call_update`
    /// (completed with the output when allowed, failed with
    /// `permission denied` otherwise); `sleepMs` pauses (a `session/cancel`
    /// ends the turn `cancelled`); `structured` says the value as compact
    /// JSON; `fail` answers the prompt with a JSON-RPC error; `refuse` says
    /// its text and ends `refusal`; `maxTokens` says its text and ends
    /// `max_tokens`; `describe` says its text followed by what the prompt
    /// held.
    Common(Step),
}

/// The steps only the ACP test agent knows (externally tagged, camelCase).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum AcpStep {
    /// One assistant message streamed as one `agent_message_chunk` per
    /// string, all with the same message id.
    Chunks(Vec<String>),
    /// Reads `path` through the client's `fs/read_text_file` (a relative
    /// path is taken from the session's cwd), then says
    /// `read <path>: <content>`, or `could not read <path>: <message>` on an
    /// error response; says `no fs access` when the client did not advertise
    /// `fs.readTextFile`.
    ReadFile {
        /// The path, as the script writes it.
        path: String,
    },
    /// Writes `content` to `path` through the client's `fs/write_text_file`,
    /// then says `wrote <path>`, or `could not write <path>: <message>`;
    /// says `no fs access` when the client did not advertise
    /// `fs.writeTextFile`.
    WriteFile {
        /// The path, as the script writes it.
        path: String,
        /// The text to write.
        content: String,
    },
    /// A `plan` update with these entries.
    Plan(Vec<PlanItem>),
    /// A `usage_update`: `used` tokens of a `size`-token context window.
    Usage {
        /// Tokens in context.
        used: u64,
        /// Context window size in tokens.
        size: u64,
    },
    /// Says this text and ends the turn `max_turn_requests`.
    MaxTurnRequests(String),
    /// Writes this text to stderr and exits the agent process with status 3.
    Crash(String),
    /// Stops answering: the prompt is never answered and `session/cancel` is
    /// ignored. JSON: the plain string `"hang"`.
    Hang,
    /// Answers the prompt with a JSON-RPC internal error whose message and
    /// data are this text.
    ProtocolError(String),
    /// One assistant message streamed as `count` `agent_message_chunk`s of
    /// `text`, all with the same message id, as fast as the client reads
    /// them (a `session/cancel` ends the turn `cancelled`).
    Flood {
        /// How many chunks.
        count: usize,
        /// The text of each.
        text: String,
    },
    /// Writes this text to stdout as one line, past the protocol (to test
    /// a client's handling of a line that is not JSON-RPC).
    RawLine(String),
    /// Writes one line of this many `x` bytes to stdout, past the protocol.
    LongLine(usize),
}

/// One entry of a [`AcpStep::Plan`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanItem {
    /// What the entry is about.
    pub content: String,
    /// Its priority.
    pub priority: PlanPriority,
    /// Its status.
    pub status: PlanStatus,
}

/// A plan entry's priority (`high`, `medium`, `low`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanPriority {
    /// `high`.
    High,
    /// `medium`.
    Medium,
    /// `low`.
    Low,
}

/// A plan entry's status (`pending`, `in_progress`, `completed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    /// `pending`.
    Pending,
    /// `in_progress`.
    InProgress,
    /// `completed`.
    Completed,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn steps(json: &str) -> Vec<AgentStep> {
        let script = AgentScript::parse(&format!(r#"{{"default": {{"turns": [{json}]}}}}"#))
            .expect("the script parses");
        script.default.turns[0].clone()
    }

    #[test]
    fn every_step_kind_parses() {
        let parsed = steps(
            r#"[{"chunks": ["a", "b"]}, {"readFile": {"path": "/x"}},
                {"writeFile": {"path": "/y", "content": "c"}},
                {"plan": [{"content": "p", "priority": "medium", "status": "in_progress"}]},
                {"usage": {"used": 1, "size": 2}}, {"maxTurnRequests": "m"},
                {"crash": "bye"}, "hang", {"protocolError": "bad"},
                {"say": "hi"}, {"tool": {"name": "read", "input": {"p": 1}, "output": "x"}},
                {"sleepMs": 5}, {"structured": {"a": 1}}, {"fail": "boom"},
                {"refuse": "no"}, {"maxTokens": "par"}, {"describe": "saw"},
                {"flood": {"count": 3, "text": "z"}}, {"rawLine": "oops"}, {"longLine": 9}]"#,
        );
        assert_eq!(
            parsed,
            vec![
                AgentStep::Acp(AcpStep::Chunks(vec!["a".into(), "b".into()])),
                AgentStep::Acp(AcpStep::ReadFile { path: "/x".into() }),
                AgentStep::Acp(AcpStep::WriteFile {
                    path: "/y".into(),
                    content: "c".into()
                }),
                AgentStep::Acp(AcpStep::Plan(vec![PlanItem {
                    content: "p".into(),
                    priority: PlanPriority::Medium,
                    status: PlanStatus::InProgress,
                }])),
                AgentStep::Acp(AcpStep::Usage { used: 1, size: 2 }),
                AgentStep::Acp(AcpStep::MaxTurnRequests("m".into())),
                AgentStep::Acp(AcpStep::Crash("bye".into())),
                AgentStep::Acp(AcpStep::Hang),
                AgentStep::Acp(AcpStep::ProtocolError("bad".into())),
                AgentStep::Common(Step::Say("hi".into())),
                AgentStep::Common(Step::Tool {
                    name: "read".into(),
                    input: json!({"p": 1}),
                    output: "x".into(),
                }),
                AgentStep::Common(Step::SleepMs(5)),
                AgentStep::Common(Step::Structured(json!({"a": 1}))),
                AgentStep::Common(Step::Fail("boom".into())),
                AgentStep::Common(Step::Refuse("no".into())),
                AgentStep::Common(Step::MaxTokens("par".into())),
                AgentStep::Common(Step::Describe("saw".into())),
                AgentStep::Acp(AcpStep::Flood {
                    count: 3,
                    text: "z".into()
                }),
                AgentStep::Acp(AcpStep::RawLine("oops".into())),
                AgentStep::Acp(AcpStep::LongLine(9)),
            ]
        );
    }

    #[test]
    fn scripts_round_trip_through_json() {
        let script = AgentScript::new(AcpScript {
            turns: vec![steps(
                r#"["hang", {"say": "hi"}, {"chunks": ["x"]}, {"usage": {"used": 3, "size": 9}}]"#,
            )],
        })
        .with("research", AcpScript::reply("found it"));
        let json = serde_json::to_string(&script).expect("a script serializes");
        assert_eq!(AgentScript::parse(&json).expect("and parses back"), script);
    }

    #[test]
    fn unknown_fields_and_steps_are_refused() {
        assert!(AgentScript::parse(r#"{"loadSessions": true}"#).is_err());
        assert!(AgentScript::parse(r#"{"default": {"turns": [], "extra": 1}}"#).is_err());
        assert!(AgentScript::parse(r#"{"default": {"turns": [[{"dance": 1}]]}}"#).is_err());
        assert!(AgentScript::parse(
            r#"{"default": {"turns": [[{"readFile": {"path": "/x", "line": 2}}]]}}"#
        )
        .is_err());
        assert!(AgentScript::parse(
            r#"{"default": {"turns": [[{"plan": [{"content": "p", "priority": "urgent", "status": "pending"}]}]]}}"#
        )
        .is_err());
    }

    #[test]
    fn defaults_and_turn_selection() {
        let script = AgentScript::parse("{}").expect("an empty script parses");
        assert_eq!(script, AgentScript::default());
        assert!(!script.load_session && !script.hang_on_initialize);
        assert_eq!(
            script.for_label(None).turn(1),
            [AgentStep::Common(Step::Say("done".into()))]
        );

        let script = AgentScript::parse(
            r#"{"loadSession": true, "byLabel": {"two": {"turns": [[{"say": "one"}], [{"say": "two"}]]}}}"#,
        )
        .expect("the script parses");
        assert!(script.load_session);
        let two = script.for_label(Some("two"));
        assert_eq!(two.turn(1), [AgentStep::Common(Step::Say("one".into()))]);
        assert_eq!(two.turn(2), [AgentStep::Common(Step::Say("two".into()))]);
        assert_eq!(two.turn(7), [AgentStep::Common(Step::Say("two".into()))]);
        assert_eq!(script.for_label(Some("other")), &script.default);
        assert!(AcpScript { turns: vec![] }.turn(1).is_empty());
    }
}
