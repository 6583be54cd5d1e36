//! [`World`]: a runtime over a memory log whose `acp` children run the
//! real test agent binary over real stdio, in a directory of the test's
//! own (the agent's working directory, its script, its session store);
//! and the reads the ACP tests repeat.

#![allow(dead_code)] // Each test binary uses its own subset.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use subagent_acp::{AcpCommand, AcpHost, AcpProvider, AcpTimeouts};
use subagent_core::{ContentBlock, Delivery, Event, SessionId, StreamId, SubagentActivationSpec};
use subagent_runtime::{
    InterruptAuthority, LiveAgent, Script, ScriptedHost, SubagentActivation, SubagentRuntime,
};
use subagent_store::{EventLog, EventLogExt, MemoryLog};
use tokio_util::sync::CancellationToken;

/// The test agent under test.
pub(crate) const AGENT: &str = env!("CARGO_BIN_EXE_subagents-acp-test-agent");

/// A runtime with `acp` (continuable) and `acp-once` (one-shot) providers
/// on the test agent playing one script.
pub(crate) struct World {
    pub(crate) runtime: SubagentRuntime,
    pub(crate) root: LiveAgent,
    pub(crate) log: Arc<dyn EventLog>,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) command: AcpCommand,
}

/// How a world's agent runs.
pub(crate) struct Setup {
    /// Short limits, so interrupts of a hung agent end quickly.
    pub(crate) timeouts: AcpTimeouts,
    /// A log of the test's own (a fresh memory log by default).
    pub(crate) log: Option<Arc<dyn EventLog>>,
    /// Environment variables of the agent command.
    pub(crate) env: Vec<(&'static str, &'static str)>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            timeouts: AcpTimeouts {
                initialize: Duration::from_secs(10),
                session: Duration::from_secs(10),
                // An agent's `cancelled` crosses four threads on its way
                // back: room for a loaded machine. The test of a hung turn
                // sets a short grace of its own.
                cancel_grace: Duration::from_secs(5),
                idle: Duration::from_secs(60),
            },
            log: None,
            env: Vec::new(),
        }
    }
}

impl World {
    /// A world whose agent plays `script` (the test agent's JSON).
    pub(crate) async fn start(script: Value) -> World {
        World::with(script, Setup::default()).await
    }

    /// As [`start`](Self::start), set up by `setup`.
    pub(crate) async fn with(script: Value, setup: Setup) -> World {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let script_path = dir.path().join("script.json");
        std::fs::write(&script_path, serde_json::to_vec(&script).unwrap()).unwrap();
        let sessions = dir.path().join("sessions");
        let command = AcpCommand::new(
            AGENT,
            &[
                "--script",
                script_path.to_str().unwrap(),
                "--sessions",
                sessions.to_str().unwrap(),
            ],
        )
        .cwd(&work)
        .timeouts(setup.timeouts);
        let command = setup
            .env
            .iter()
            .fold(command, |command, (name, value)| command.env(name, value));
        let log = setup.log.unwrap_or_else(|| Arc::new(MemoryLog::new()));
        World::open(dir, command, log, None).await
    }

    /// A world whose agent command is `program args… DIR` (not the test
    /// agent), run in the world's directory DIR, which ends its command
    /// line so [`agent_processes`](Self::agent_processes) counts it.
    pub(crate) async fn with_command(program: &str, args: &[&str]) -> World {
        let dir = tempfile::tempdir().unwrap();
        let mut args = args.to_vec();
        let marker = dir.path().to_str().unwrap().to_owned();
        args.push(&marker);
        let command = AcpCommand::new(program, &args)
            .cwd(dir.path())
            .timeouts(Setup::default().timeouts);
        World::open(dir, command, Arc::new(MemoryLog::new()), None).await
    }

    /// A runtime over `log` with the providers on `command`, and a root:
    /// a new one, or `root` taken back.
    async fn open(
        dir: tempfile::TempDir,
        command: AcpCommand,
        log: Arc<dyn EventLog>,
        root: Option<SessionId>,
    ) -> World {
        let host = AcpHost::new(Arc::new(ScriptedHost::new(Script::reply("host"))))
            .route("acp", command.clone());
        let (runtime, _) = SubagentRuntime::open(Arc::clone(&log), Arc::new(host))
            .await
            .unwrap();
        for provider in [
            AcpProvider::continuable("acp"),
            AcpProvider::one_shot("acp-once", command.clone()),
        ] {
            runtime.register_provider(Arc::new(provider)).await.unwrap();
        }
        let root = match root {
            Some(root) => runtime.reopen_root(root).await.unwrap(),
            None => runtime.open_root("host").await.unwrap(),
        };
        World {
            runtime,
            root,
            log,
            dir,
            command,
        }
    }

    /// Closes the runtime and opens a new one on the same log and agent
    /// (a host restart), taking the root back.
    pub(crate) async fn restart(self) -> World {
        let root = self.root.session();
        self.runtime.close().await.unwrap();
        World::open(self.dir, self.command, self.log, Some(root)).await
    }

    /// Starts `spec` below the root.
    pub(crate) async fn child(&self, spec: SubagentActivationSpec) -> SubagentActivation {
        self.runtime
            .start_activation(&self.root, spec, CancellationToken::new())
            .await
            .unwrap()
    }

    /// The root sends `text` to `child`.
    pub(crate) async fn send(&self, child: SessionId, text: &str) {
        self.runtime
            .send_message(
                &self.root,
                child,
                vec![ContentBlock::text(text)],
                CancellationToken::new(),
            )
            .await
            .unwrap();
    }

    /// The root's user interrupts `child`.
    pub(crate) async fn interrupt(&self, child: SessionId) {
        self.runtime
            .interrupt(
                child,
                InterruptAuthority::User {
                    parent_session_id: self.root.session(),
                },
            )
            .await
            .unwrap();
    }

    /// The agent's working directory.
    pub(crate) fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The events of `session`'s stream, in order.
    pub(crate) fn events(&self, session: SessionId) -> Vec<Event> {
        self.log
            .read_stream(StreamId::Session(session), 1)
            .map(|record| record.unwrap().event)
            .collect()
    }

    /// How many live (not zombie) processes run this world's agent: those
    /// whose command line names its directory.
    pub(crate) fn agent_processes(&self) -> usize {
        subagent_runtime::conformance::live_processes_named(self.dir.path().to_str().unwrap())
    }

    /// Waits up to 10 s until no process of this world's agent is left.
    pub(crate) async fn until_no_agent_process(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.agent_processes() > 0 {
            assert!(
                Instant::now() < deadline,
                "{} agent processes outlived their activation",
                self.agent_processes()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A continuable `acp` child labelled `label`, prompted with `prompt`.
pub(crate) fn spec(label: &str, prompt: &str) -> SubagentActivationSpec {
    SubagentActivationSpec::with_text_prompt("acp", label, prompt, Delivery::Caller)
}

/// A one-shot run on `acp-once`.
pub(crate) fn once(label: &str, prompt: &str) -> SubagentActivationSpec {
    SubagentActivationSpec::with_text_prompt("acp-once", label, prompt, Delivery::Caller)
}

/// The test agent's script: every session plays `turns`.
pub(crate) fn script(turns: Value) -> Value {
    serde_json::json!({"default": {"turns": turns}})
}

/// The type names of `events`.
pub(crate) fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(Event::type_name).collect()
}

/// The text of every assistant message in `events`.
pub(crate) fn said(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::AssistantMessage { content, .. } => {
                Some(subagent_core::content::plain_text(content))
            }
            _ => None,
        })
        .collect()
}

/// Waits up to 10 s for `check` on `session`'s events.
pub(crate) async fn until_events(
    world: &World,
    session: SessionId,
    what: &str,
    check: impl Fn(&[Event]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = world.events(session);
        if check(&events) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            types(&events)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
