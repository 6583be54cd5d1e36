//! The `acp` provider end to end over real stdio with the test agent:
//! the transcript mapping (chunks, tool calls, plans, usage), every stop
//! reason, the tool filter on permission and file requests, interrupt and
//! its grace period, a hung `initialize`, cold resume with and without
//! `session/load`, one-shot runs, and that no agent process outlives its
//! activation.

mod common;

use std::time::Duration;

use common::{said, script, spec, types, until_events, World};
use serde_json::json;
use subagent_acp::AcpTimeouts;
use subagent_core::{AgentReport, ContentBlock, Event, SubagentStopReason, ToolRestriction};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_turn_streams_chunks_a_plan_and_usage_into_the_transcript() {
    let world = World::start(script(json!([[
        {"chunks": ["Hel", "lo, ", "world"]},
        {"plan": [{"content": "look around", "priority": "high", "status": "in_progress"}]},
        {"usage": {"used": 120, "size": 1000}},
        {"say": "done"}
    ]])))
    .await;
    let child = world.child(spec("worker", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    assert_eq!(result.output, vec![ContentBlock::text("done")]);
    let events = world.events(child.child_id());
    assert_eq!(
        said(&events),
        ["Hello, world", "done"],
        "three chunks are one message"
    );
    let reports: Vec<&AgentReport> = events
        .iter()
        .filter_map(|event| match event {
            Event::AgentReported { report, .. } => Some(report),
            _ => None,
        })
        .collect();
    assert!(
        matches!(reports[0], AgentReport::AgentSession { session_id } if session_id.starts_with("test-"))
    );
    assert!(
        matches!(reports[1], AgentReport::Plan { entries } if entries[0].content == "look around" && entries[0].status == "in_progress")
    );
    assert_eq!(
        reports[2],
        &AgentReport::ContextUsage {
            used: 120,
            size: 1000,
            cost: None
        }
    );
    child.dispose().await.unwrap();
    world.until_no_agent_process().await;
}

#[tokio::test]
async fn every_stop_reason_maps_over_real_stdio() {
    let world = World::start(json!({"byLabel": {
        "ends": {"turns": [[{"say": "fine"}]]},
        "refuses": {"turns": [[{"refuse": "I will not"}]]},
        "runs-out": {"turns": [[{"maxTokens": "partial"}]]},
        "too-many": {"turns": [[{"maxTurnRequests": "stopping"}]]},
        "breaks": {"turns": [[{"protocolError": "model endpoint down"}]]},
    }}))
    .await;
    for (label, stop, text) in [
        ("ends", SubagentStopReason::Completed, Some("fine")),
        ("refuses", SubagentStopReason::Refusal, Some("I will not")),
        ("runs-out", SubagentStopReason::MaxTokens, Some("partial")),
        ("too-many", SubagentStopReason::MaxTokens, Some("stopping")),
        ("breaks", SubagentStopReason::Error, None),
    ] {
        let child = world.child(spec(label, "go")).await;
        let result = child.result().await.unwrap();
        assert_eq!(result.stop_reason, stop, "{label}");
        if let Some(text) = text {
            assert_eq!(result.output, vec![ContentBlock::text(text)], "{label}");
        } else {
            let diagnostic = result
                .diagnostic
                .expect("a protocol error has a diagnostic")
                .to_string();
            assert!(
                diagnostic.contains("session/prompt") && diagnostic.contains("model endpoint down"),
                "{diagnostic}"
            );
        }
        child.dispose().await.unwrap();
    }
    world.until_no_agent_process().await;
}

#[tokio::test]
async fn a_crash_settles_error_with_the_redacted_stderr_tail() {
    let world = World::with(
        script(json!([[
            {"say": "about to fail"},
            {"crash": "fatal: lost the socket; key sk-abcdefghijklmnop; region plainvalue42"}
        ]])),
        common::Setup {
            env: vec![("AGENT_REGION", "plainvalue42")],
            ..common::Setup::default()
        },
    )
    .await;
    let child = world.child(spec("crasher", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    let diagnostic = result.diagnostic.unwrap().to_string();
    assert!(diagnostic.contains("exited with status 3"), "{diagnostic}");
    assert!(
        diagnostic.contains("fatal: lost the socket"),
        "{diagnostic}"
    );
    assert!(
        !diagnostic.contains("sk-abcdefghijklmnop"),
        "the key was not redacted: {diagnostic}"
    );
    assert!(
        !diagnostic.contains("plainvalue42") && diagnostic.contains("region [redacted]"),
        "the command's environment value was not redacted: {diagnostic}"
    );
    assert_eq!(said(&world.events(child.child_id())), ["about to fail"]);
    world.until_no_agent_process().await;
    // The next turn starts a new process.
    world.send(child.child_id(), "again").await;
    until_events(&world, child.child_id(), "a second turn", |events| {
        events
            .iter()
            .filter(|e| matches!(e, Event::TurnEnded { .. }))
            .count()
            == 2
    })
    .await;
    child.dispose().await.unwrap();
    world.until_no_agent_process().await;
}

#[tokio::test]
async fn tool_calls_are_recorded_and_a_restricted_one_is_refused() {
    let world = World::start(script(json!([[
        {"tool": {"name": "execute", "input": {"cmd": "ls"}, "output": "a.txt"}},
        {"tool": {"name": "read", "input": {"path": "a.txt"}, "output": "contents"}},
        {"say": "finished"}
    ]])))
    .await;
    let mut restricted = spec("careful", "go");
    restricted.request.options.tool_filter =
        Some(ToolRestriction::Deny(vec!["acp/execute".into()]));
    let child = world.child(restricted).await;
    assert_eq!(
        child.result().await.unwrap().stop_reason,
        SubagentStopReason::Completed
    );
    let events = world.events(child.child_id());
    let calls: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|event| match event {
            Event::ToolCalled { call_id, name, .. } => Some((call_id.as_str(), name.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls.len(),
        2,
        "each call recorded once: {:?}",
        types(&events)
    );
    assert_eq!(calls[0].1, "acp/execute");
    assert_eq!(calls[1].1, "acp/read");
    let returns: Vec<(&str, bool, String)> = events
        .iter()
        .filter_map(|event| match event {
            Event::ToolReturned {
                call_id,
                refused,
                output,
                ..
            } => Some((
                call_id.as_str(),
                *refused,
                subagent_core::content::plain_text(output),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(returns.len(), 2, "one result per call: {returns:?}");
    assert_eq!(
        (returns[0].0, returns[0].1),
        (calls[0].0, true),
        "execute refused"
    );
    assert!(returns[0].2.contains("not available"), "{returns:?}");
    assert_eq!(
        returns[1],
        (calls[1].0, false, "contents".to_owned()),
        "read permitted and run"
    );
    child.dispose().await.unwrap();
}

#[tokio::test]
async fn file_requests_go_through_the_tool_port_and_stay_in_the_workspace() {
    let world = World::start(script(json!([[
        {"readFile": {"path": "notes.txt"}},
        {"readFile": {"path": "../script.json"}},
        {"writeFile": {"path": "out.txt", "content": "written by the agent"}}
    ]])))
    .await;
    std::fs::write(world.work().join("notes.txt"), "remember the milk").unwrap();
    let child = world.child(spec("reader", "go")).await;
    child.result().await.unwrap();
    let events = world.events(child.child_id());
    let texts = said(&events);
    assert!(
        texts.iter().any(|t| t.contains("remember the milk")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("could not read ../script.json") && t.contains("outside")),
        "{texts:?}"
    );
    assert_eq!(
        std::fs::read_to_string(world.work().join("out.txt")).unwrap(),
        "written by the agent"
    );
    let names: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            Event::ToolCalled { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        [
            "fs/read_text_file",
            "fs/read_text_file",
            "fs/write_text_file"
        ]
    );
    child.dispose().await.unwrap();

    // Restricted: the capability is not even offered.
    let mut denied = spec("denied", "go");
    denied.request.options.tool_filter = Some(ToolRestriction::Deny(vec![
        "fs/read_text_file".into(),
        "fs/write_text_file".into(),
    ]));
    let child = world.child(denied).await;
    child.result().await.unwrap();
    let texts = said(&world.events(child.child_id()));
    assert!(
        texts.iter().all(|t| !t.contains("remember the milk")),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|t| t.contains("no fs access")),
        "{texts:?}"
    );
    child.dispose().await.unwrap();
}

#[tokio::test]
async fn an_interrupt_cancels_the_turn_and_settles_aborted() {
    let world = World::start(script(json!([
        [{"say": "working"}, {"usage": {"used": 1, "size": 10}}, {"sleepMs": 60000}, {"say": "never"}],
        [{"say": "back"}]
    ]))).await;
    let child = world.child(spec("sleeper", "go")).await;
    until_events(&world, child.child_id(), "the turn under way", |events| {
        said(events) == ["working"]
    })
    .await;
    world.interrupt(child.child_id()).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Aborted);
    // The agent answered `cancelled`: its process lives on for the next turn.
    assert_eq!(world.agent_processes(), 1);
    world.send(child.child_id(), "again").await;
    until_events(&world, child.child_id(), "the next turn", |events| {
        said(events).last().map(String::as_str) == Some("back")
    })
    .await;
    child.dispose().await.unwrap();
    world.until_no_agent_process().await;
}

#[tokio::test]
async fn a_hung_turn_is_killed_after_the_grace_period() {
    let world = World::with(
        script(json!([[{"say": "stuck"}, {"usage": {"used": 1, "size": 10}}, "hang"]])),
        common::Setup {
            timeouts: AcpTimeouts {
                initialize: Duration::from_secs(10),
                session: Duration::from_secs(10),
                cancel_grace: Duration::from_millis(300),
                idle: Duration::from_secs(60),
            },
            ..common::Setup::default()
        },
    )
    .await;
    let child = world.child(spec("hung", "go")).await;
    until_events(&world, child.child_id(), "the turn under way", |events| {
        said(events) == ["stuck"]
    })
    .await;
    world.interrupt(child.child_id()).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    let diagnostic = result.diagnostic.unwrap().to_string();
    assert!(
        diagnostic.contains("did not answer session/cancel"),
        "{diagnostic}"
    );
    world.until_no_agent_process().await;
    child.dispose().await.unwrap();
}

#[tokio::test]
async fn a_hung_initialize_times_out_with_a_clear_error() {
    let world = World::with(
        json!({"hangOnInitialize": true}),
        common::Setup {
            timeouts: AcpTimeouts {
                initialize: Duration::from_millis(300),
                session: Duration::from_secs(10),
                cancel_grace: Duration::from_millis(300),
                idle: Duration::from_secs(60),
            },
            ..common::Setup::default()
        },
    )
    .await;
    let child = world.child(spec("mute", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    let diagnostic = result.diagnostic.unwrap().to_string();
    assert!(
        diagnostic.contains("did not answer initialize within 300ms"),
        "{diagnostic}"
    );
    world.until_no_agent_process().await;
}

/// The agent sessions `events` report.
fn agent_sessions(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::AgentReported {
                report: AgentReport::AgentSession { session_id },
                ..
            } => Some(session_id.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_cold_resume_loads_the_agent_session_when_the_agent_offers_it() {
    let world = World::start(json!({"loadSession": true, "default": {"turns": [[{"say": "first"}], [{"describe": "second turn saw"}]]}})).await;
    let child = world.child(spec("keeper", "hello")).await;
    child.result().await.unwrap();
    let id = child.child_id();
    drop(child);
    let world = world.restart().await;
    world.until_no_agent_process().await;
    world.send(id, "are you back?").await;
    until_events(&world, id, "the resumed turn", |events| {
        said(events).len() == 2
    })
    .await;
    let events = world.events(id);
    assert_eq!(
        agent_sessions(&events).len(),
        1,
        "the same agent session, loaded"
    );
    // The agent counted on from its stored session: its second turn played.
    let second = &said(&events)[1];
    assert!(
        second.starts_with("second turn saw") && second.contains("are you back?"),
        "{second}"
    );
    assert!(
        !second.contains("continues an earlier one"),
        "a loaded session needs no seed: {second}"
    );
}

#[tokio::test]
async fn without_load_a_cold_resume_seeds_a_new_session_with_the_transcript() {
    // A new agent session starts its turns over: every turn describes.
    let world = World::start(script(json!([[{"describe": "saw"}]]))).await;
    let child = world.child(spec("seeded", "the question")).await;
    child.result().await.unwrap();
    let id = child.child_id();
    drop(child);
    let world = world.restart().await;
    world.send(id, "follow up").await;
    until_events(&world, id, "the resumed turn", |events| {
        said(events).len() == 2
    })
    .await;
    let events = world.events(id);
    let sessions = agent_sessions(&events);
    assert_eq!(sessions.len(), 2, "a new agent session");
    assert_ne!(sessions[0], sessions[1]);
    let second = &said(&events)[1];
    assert!(second.contains("continues an earlier one"), "{second}");
    assert!(
        second.contains("user: the question") && second.contains("assistant: saw"),
        "{second}"
    );
    assert!(second.contains("follow up"), "{second}");
}

#[tokio::test]
async fn a_one_shot_run_returns_its_last_message_and_stop_reason() {
    let world = World::start(json!({"byLabel": {
        "once": {"turns": [[{"say": "thinking"}, {"say": "the answer"}]]},
        "no": {"turns": [[{"refuse": "not this"}]]},
    }}))
    .await;
    let run = world.child(common::once("once", "go")).await;
    let result = run.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    assert_eq!(result.output, vec![ContentBlock::text("the answer")]);
    run.dispose().await.unwrap();
    let run = world.child(common::once("no", "go")).await;
    assert_eq!(
        run.result().await.unwrap().stop_reason,
        SubagentStopReason::Refusal
    );
    run.dispose().await.unwrap();
    world.until_no_agent_process().await;
}

#[tokio::test]
async fn no_agent_process_outlives_dispose_or_shutdown() {
    let world = World::start(script(
        json!([[{"say": "up"}, {"usage": {"used": 1, "size": 10}}, {"sleepMs": 60000}]]),
    ))
    .await;
    let first = world.child(spec("a", "go")).await;
    let second = world.child(spec("b", "go")).await;
    for child in [&first, &second] {
        until_events(&world, child.child_id(), "the turn under way", |events| {
            said(events) == ["up"]
        })
        .await;
    }
    assert_eq!(world.agent_processes(), 2);
    first.dispose().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while world.agent_processes() != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "dispose left {} processes",
            world.agent_processes()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    world.runtime.close().await.unwrap();
    world.until_no_agent_process().await;
}

/// The provider conformance suite on `acp` (continuable) and `acp-once`
/// (one-shot), counting the test agent's processes.
struct AcpHarness {
    world: World,
    one_shot: bool,
}

impl subagent_runtime::conformance::ProviderHarness for AcpHarness {
    fn provider(&self) -> std::sync::Arc<dyn subagent_runtime::SubagentProvider> {
        if self.one_shot {
            std::sync::Arc::new(subagent_acp::AcpProvider::one_shot(
                "acp-once",
                self.world.command.clone(),
            ))
        } else {
            std::sync::Arc::new(subagent_acp::AcpProvider::continuable("acp"))
        }
    }
    fn host(&self) -> std::sync::Arc<dyn subagent_runtime::AgentHost> {
        std::sync::Arc::new(
            subagent_acp::AcpHost::new(std::sync::Arc::new(subagent_runtime::ScriptedHost::new(
                subagent_runtime::Script::reply("host"),
            )))
            .route("acp", self.world.command.clone()),
        )
    }
    fn quick_prompt(&self) -> &str {
        "answer"
    }
    fn slow_prompt(&self) -> &str {
        "take your time"
    }
    fn processes(&self) -> usize {
        self.world.agent_processes()
    }
    fn processes_per_slow_child(&self) -> usize {
        1
    }
}

fn conformance_script() -> serde_json::Value {
    json!({"byLabel": {
        "quick": {"turns": [[{"say": "done"}]]},
        "slow": {"turns": [[{"say": "working"}, {"sleepMs": 60000}]]},
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_passes_the_provider_conformance_suite() {
    let harness = AcpHarness {
        world: World::start(conformance_script()).await,
        one_shot: false,
    };
    subagent_runtime::conformance::run_all(&harness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_one_shot_passes_the_provider_conformance_suite() {
    let harness = AcpHarness {
        world: World::start(conformance_script()).await,
        one_shot: true,
    };
    subagent_runtime::conformance::run_all(&harness).await;
}

#[tokio::test]
async fn a_persona_and_an_output_schema_reach_the_agent_and_the_capture_is_validated() {
    let world = World::start(json!({"byLabel": {
        "typed": {"turns": [[{"describe": "given"}, {"structured": {"answer": 42}}]]},
        "untyped": {"turns": [[{"say": "no json here"}]]},
    }}))
    .await;
    let mut typed = spec("typed", "what is the answer?");
    typed.request.options.persona = Some("You are the oracle of {{place}}.".into());
    typed.request.options.output_schema = Some(json!({
        "type": "object", "required": ["answer"], "properties": {"answer": {"type": "integer"}}
    }));
    world
        .runtime
        .set_persona_variables([("place".to_owned(), "Delphi".to_owned())].into())
        .unwrap();
    let child = world.child(typed).await;
    let result = child.result().await.unwrap();
    assert_eq!(
        result.stop_reason,
        SubagentStopReason::Completed,
        "{result:?}"
    );
    assert_eq!(result.structured, Some(json!({"answer": 42})));
    let given = &said(&world.events(child.child_id()))[0];
    assert!(
        given.contains("You are the oracle of Delphi."),
        "the persona, rendered: {given}"
    );
    assert!(
        given.contains("JSON Schema") && given.contains("required"),
        "the schema's instruction: {given}"
    );
    assert!(given.contains("what is the answer?"), "{given}");
    child.dispose().await.unwrap();

    // A completed answer that is not the JSON the schema asks for settles error.
    let mut untyped = spec("untyped", "answer in JSON");
    untyped.request.options.output_schema = Some(json!({"type": "object"}));
    let child = world.child(untyped).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error, "{result:?}");
    child.dispose().await.unwrap();
}

#[tokio::test]
async fn a_steered_message_waits_for_the_next_turn() {
    let world = World::start(script(json!([
        [{"say": "working"}, {"usage": {"used": 1, "size": 10}}, {"sleepMs": 800}, {"say": "first done"}],
        [{"describe": "second saw"}]
    ])))
    .await;
    let child = world.child(spec("steered", "go")).await;
    until_events(
        &world,
        child.child_id(),
        "the first turn under way",
        |events| said(events) == ["working"],
    )
    .await;
    let request: subagent_core::PromptRequest = serde_json::from_value(json!({
        "address": {"childSessionId": child.child_id(), "parentSessionId": world.root.session(), "mode": "continuable"},
        "delivery": "steer",
        "requestId": "steer-1",
        "content": [{"type": "text", "text": "change course"}],
    }))
    .unwrap();
    world
        .runtime
        .prompt(request, CancellationToken::new())
        .await
        .unwrap();
    until_events(&world, child.child_id(), "the second turn", |events| {
        said(events).len() == 3
    })
    .await;
    let events = world.events(child.child_id());
    let texts = said(&events);
    assert_eq!(
        texts[1], "first done",
        "the running turn never saw the steer"
    );
    assert!(
        texts[2].starts_with("second saw") && texts[2].contains("change course"),
        "{texts:?}"
    );
    let claimed_in: Vec<u64> = events
        .iter()
        .filter_map(|event| match event {
            Event::MessagesClaimed { turn, .. } => Some(*turn),
            _ => None,
        })
        .collect();
    assert_eq!(
        claimed_in,
        [1, 2],
        "the steered message is claimed by turn 2, not mid-turn 1"
    );
    child.dispose().await.unwrap();
}

/// The README's ACP snippet, run: a host routes the `acp` provider to an
/// agent command, and both providers run a child of the root. Here the
/// command is the test agent; the README shows Claude Code's adapter.
#[tokio::test]
async fn the_readme_setup_runs_a_continuable_child_and_a_one_shot_run(
) -> Result<(), Box<dyn std::error::Error>> {
    use std::sync::Arc;
    use subagent_acp::{AcpCommand, AcpHost, AcpProvider};
    use subagent_core::{Delivery, SubagentActivationSpec};
    use subagent_runtime::{Script, ScriptedHost, SubagentRuntime};
    use subagent_store::{EventLog, MemoryLog};

    let dir = tempfile::tempdir().unwrap();
    let script_path = dir.path().join("script.json");
    let script = json!({"byLabel": {"research": {"turns": [[{"say": "summarized"}]]}}});
    std::fs::write(&script_path, script.to_string()).unwrap();
    let agent_line = format!("{} --script {}", common::AGENT, script_path.display());
    let my_host = ScriptedHost::new(Script::reply("the host's own agents"));
    let log: Arc<dyn EventLog> = Arc::new(MemoryLog::new());
    let token = CancellationToken::new();
    let key = "not-a-real-key".to_owned();
    // ANCHOR: acp
    let command = AcpCommand::parse(&agent_line)? // e.g. "npx @zed-industries/claude-agent-acp"
        .cwd(dir.path()) // the session's cwd; file requests stay inside it
        .env("ANTHROPIC_API_KEY", &key) // removed from every diagnostic
        .timeouts(AcpTimeouts {
            initialize: Duration::from_secs(30), // initialize answered, or the process is killed
            session: Duration::from_secs(30),    // session/new or session/load answered, likewise
            cancel_grace: Duration::from_secs(5), // `cancelled` answered after session/cancel, likewise
            idle: Duration::from_secs(600), // a turn whose agent sends nothing this long is cancelled
        });
    let host = AcpHost::new(Arc::new(my_host)).route("acp", command.clone());
    let (runtime, _) = SubagentRuntime::open(log, Arc::new(host)).await?;
    runtime
        .register_provider(Arc::new(AcpProvider::continuable("acp")))
        .await?; // continuable children
    runtime
        .register_provider(Arc::new(AcpProvider::one_shot("acp-once", command)))
        .await?; // one-shot runs
    let root = runtime.open_root("host").await?;
    let child = runtime
        .start_activation(
            &root,
            SubagentActivationSpec::with_text_prompt(
                "acp",
                "research",
                "Summarize DESIGN.md",
                Delivery::Caller,
            ),
            token.clone(),
        )
        .await?;
    // ANCHOR_END: acp
    let result = child.result().await?;
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    assert_eq!(result.output, vec![ContentBlock::text("summarized")]);
    child.dispose().await?;
    let once = runtime
        .start_activation(
            &root,
            SubagentActivationSpec::with_text_prompt(
                "acp-once",
                "research",
                "go",
                Delivery::Caller,
            ),
            token,
        )
        .await?;
    assert_eq!(
        once.result().await?.output,
        vec![ContentBlock::text("summarized")]
    );
    once.dispose().await?;
    runtime.close().await?;
    Ok(())
}
