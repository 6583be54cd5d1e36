//! The harness every module of this test binary shares: `World`, a state
//! and the history it was folded from, driven through `decide` the way the
//! runtime drives it, and builders of the commands the tests send.

use subagent_core::{
    AgentRoute, ContentBlock, Delivery, ErrorCode, Event, MessageId, ModelSelectionSettings,
    SessionId, StartOptions, StartSettings, SubagentCapabilities, SubagentError, SubagentRunId,
};
use subagent_projections::machine::{decide, decide_as, Command, Decision, StartChild};
use subagent_projections::testing::HistoryBuilder;
use subagent_projections::Projections;

use crate::common::capable_provider;

/// A state plus the history it was folded from; `commit` plays the runtime.
pub(crate) struct World {
    pub(crate) history: HistoryBuilder,
    pub(crate) state: Projections,
}

impl World {
    /// A world with two providers registered: `spawn` (continuable, with
    /// tool filters and depth limits) and `process` (one-shot, external).
    pub(crate) fn new() -> Self {
        let mut world = World {
            history: HistoryBuilder::new(),
            state: Projections::new(),
        };
        for (name, continuable, capabilities) in [
            (
                "spawn",
                true,
                SubagentCapabilities {
                    tool_filter: true,
                    depth_limit: true,
                    ..SubagentCapabilities::default()
                },
            ),
            ("process", false, SubagentCapabilities::default()),
        ] {
            world.run(Command::RegisterProvider {
                registration: Event::ProviderRegistered {
                    name: name.into(),
                    capabilities,
                    inherits_parent_context: false,
                    route_defaults: None,
                    continuable,
                    one_shot: !continuable,
                },
            });
        }
        world
    }

    fn commit(&mut self, decision: Decision) -> Vec<(subagent_core::StreamId, Event)> {
        let mut recorded = Vec::new();
        for (stream, events) in decision {
            for event in events {
                let record = self.history.push(stream, event.clone()).clone();
                self.state.apply(&record);
                recorded.push((stream, event));
            }
        }
        recorded
    }

    /// The state folded so far.
    pub(crate) fn state(&self) -> &Projections {
        &self.state
    }

    /// Every record so far, in position order.
    pub(crate) fn history(&self) -> &[subagent_core::RecordedEvent] {
        &self.history.records
    }

    /// Records `event` without deciding it (to build impossible histories).
    pub(crate) fn push_raw(&mut self, stream: subagent_core::StreamId, event: Event) {
        let record = self.history.push(stream, event).clone();
        self.state.apply(&record);
    }

    /// Decides `command`, which must be accepted, and commits its events;
    /// returns them with their streams.
    pub(crate) fn run(&mut self, command: Command) -> Vec<(subagent_core::StreamId, Event)> {
        let decision = decide(&self.state, command).expect("command accepted");
        self.commit(decision)
    }

    /// As [`run`](Self::run), decided by `host` (a host of a shared log).
    pub(crate) fn run_as(
        &mut self,
        host: subagent_core::HostId,
        command: Command,
    ) -> Vec<(subagent_core::StreamId, Event)> {
        let decision = decide_as(&self.state, Some(host), command).expect("command accepted");
        self.commit(decision)
    }

    /// The exact rejection of `command` decided by `host` (`None`: a
    /// single-writer runtime).
    pub(crate) fn refuse_as(
        &self,
        host: Option<subagent_core::HostId>,
        command: Command,
    ) -> SubagentError {
        decide_as(&self.state, host, command).expect_err("command rejected")
    }

    /// Registers a continuable provider with every start capability.
    pub(crate) fn register_capable(&mut self, name: &str) {
        self.run(Command::RegisterProvider {
            registration: capable_provider(name),
        });
    }

    /// The exact rejection of `command`.
    pub(crate) fn refuse(&self, command: Command) -> SubagentError {
        decide(&self.state, command).expect_err("command rejected")
    }

    /// The stable code of `command`'s rejection.
    pub(crate) fn reject(&self, command: Command) -> ErrorCode {
        decide(&self.state, command)
            .expect_err("command rejected")
            .code()
    }

    /// Opens a root labelled `root`, with no agent options.
    pub(crate) fn root(&mut self) -> SessionId {
        let session = SessionId::new();
        self.run(Command::OpenRoot {
            session,
            label: "root".into(),
            agent_options: None,
            claim: None,
        });
        session
    }

    /// Starts a child of `parent` as the free `start` describes it.
    pub(crate) fn start(
        &mut self,
        parent: SessionId,
        provider: &str,
        delivery: Delivery,
    ) -> SessionId {
        let start = start(parent, provider, delivery);
        let child = start.child;
        self.run(Command::StartChild(start));
        child
    }

    /// Starts a `spawn` child of `parent` (delivery `parent`), publishes
    /// its first activation and begins its turn 1.
    pub(crate) fn running(&mut self, parent: SessionId) -> SessionId {
        let child = self.start(parent, "spawn", Delivery::Parent);
        self.run(Command::PublishActivation {
            child,
            epoch: 1,
            run_id: SubagentRunId::new(),
        });
        self.run(Command::BeginTurn { session: child });
        child
    }

    /// `session`'s running turn 1 calls the known tool `name` as `call_id`.
    pub(crate) fn call(&mut self, session: SessionId, call_id: &str, name: &str) {
        self.run(Command::CallTool {
            session,
            turn: 1,
            call_id: call_id.into(),
            name: name.into(),
            input: serde_json::json!({}),
            known: true,
        });
    }

    /// The call `call_id` of `session`'s turn 1 returns.
    pub(crate) fn returned(&mut self, session: SessionId, call_id: &str) {
        self.run(Command::RecordTranscript {
            session,
            entry: Event::ToolReturned {
                turn: 1,
                call_id: call_id.into(),
                output: Vec::new(),
                is_error: false,
                refused: false,
            },
        });
    }
}

/// A start of a child labelled `task` below `parent`, with default options
/// and the deployment `settings`.
pub(crate) fn start(parent: SessionId, provider: &str, delivery: Delivery) -> StartChild {
    StartChild {
        parent,
        child: SessionId::new(),
        provider: provider.into(),
        label: "task".into(),
        options: StartOptions::default(),
        delivery,
        run_id: SubagentRunId::new(),
        requested_by: None,
        settings: std::sync::Arc::new(settings()),
    }
}

/// Persona variable `user`; tools `read_file`, `write_file`, `shell`; model
/// selection enabled for `openai/gpt-5` only.
pub(crate) fn settings() -> StartSettings {
    StartSettings {
        persona_variables: [("user".to_owned(), "Ada".to_owned())]
            .into_iter()
            .collect(),
        tools: ["read_file", "write_file", "shell"]
            .iter()
            .map(|name| (*name).to_owned())
            .collect(),
        model_selection: ModelSelectionSettings {
            enabled: true,
            allowed_routes: vec![AgentRoute {
                provider: "openai".into(),
                model: "gpt-5".into(),
            }],
        },
    }
}

/// The type names of `recorded`'s events, in order.
pub(crate) fn types(recorded: &[(subagent_core::StreamId, Event)]) -> Vec<&'static str> {
    recorded
        .iter()
        .map(|(_, event)| event.type_name())
        .collect()
}

/// Prepares `child`'s first activation with the prompt `prompt` and no seed.
pub(crate) fn prepared(child: SessionId, prompt: MessageId) -> Command {
    Command::PrepareActivation {
        child,
        epoch: 1,
        prompt: Some((prompt, vec![ContentBlock::text("do it")])),
        seed: None,
        seed_source: None,
    }
}

/// A queued message from `sender` to `target`.
pub(crate) fn send(sender: SessionId, target: SessionId) -> Command {
    Command::SendMessage {
        sender,
        target,
        message_id: MessageId::new(),
        content: vec![ContentBlock::text("psst")],
        delivery: subagent_core::MessageDelivery::Queue,
    }
}

/// A parent-delivered `start` with `options`.
pub(crate) fn with_options(parent: SessionId, provider: &str, options: StartOptions) -> StartChild {
    StartChild {
        options,
        ..start(parent, provider, Delivery::Parent)
    }
}
