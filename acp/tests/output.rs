//! What an agent says over ACP, all of it or a typed error: a flood of
//! chunks is recorded whole and the turn `completed`; a line that is not
//! JSON, or over 16 MiB, settles the turn `error` with `acp/protocol`; a
//! message past the content limit settles `acp/output-too-large`; a silent
//! agent settles `acp/idle-timeout`; a `session/load` replaying more
//! history than the client's channel holds still answers. Each over real
//! stdio with the test agent.

mod common;

use std::time::Duration;

use common::{said, script, spec, until_events, World};
use serde_json::json;
use subagent_acp::{AcpTimeouts, INBOUND_CAPACITY};
use subagent_core::{Event, SubagentStopReason, MAX_CONTENT_BYTES};

/// How many turns `events` ended.
fn turns_ended(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|event| matches!(event, Event::TurnEnded { .. }))
        .count()
}

/// Short limits for the tests of a silent agent.
fn idle_after(idle: Duration) -> common::Setup {
    common::Setup {
        timeouts: AcpTimeouts {
            initialize: Duration::from_secs(10),
            session: Duration::from_secs(10),
            cancel_grace: Duration::from_millis(500),
            idle,
        },
        ..common::Setup::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_one_character_chunks_is_recorded_whole_and_the_turn_completed() {
    // `make soak` floods ten times as much.
    let count: usize = std::env::var("SUBAGENTS_FLOOD_CHUNKS")
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(100_000);
    assert!(
        count > 20 * INBOUND_CAPACITY,
        "the flood outruns the channel"
    );
    let again = count / 5;
    let world = World::start(script(json!([
        [{"flood": {"count": count, "text": "x"}}, {"say": "and done"}],
        [{"flood": {"count": again, "text": "y"}}]
    ])))
    .await;
    let child = world.child(spec("flood", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    assert_eq!(
        said(&world.events(child.child_id())),
        ["x".repeat(count), "and done".to_owned()],
        "every chunk is in the recorded message, and the next message after it"
    );
    world.send(child.child_id(), "again").await;
    until_events(&world, child.child_id(), "the second turn", |events| {
        turns_ended(events) == 2
    })
    .await;
    let events = world.events(child.child_id());
    assert_eq!(said(&events).last(), Some(&"y".repeat(again)));
    assert!(
        events.iter().any(|event| matches!(
            event,
            Event::TurnEnded {
                stop_reason: SubagentStopReason::Completed,
                ..
            }
        )),
        "{events:?}"
    );
    child.dispose().await.unwrap();
    world.until_no_agent_process().await;
}

#[tokio::test]
async fn a_line_that_is_not_json_settles_the_turn_error_with_acp_protocol() {
    let world = World::start(script(json!([[
        {"say": "before"},
        {"rawLine": "this is no JSON: sk-abcdefghijklmnop"},
        {"say": "after"}
    ]])))
    .await;
    let child = world.child(spec("garbled", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    let diagnostic = result.diagnostic.unwrap().to_string();
    assert!(
        diagnostic.starts_with("acp/protocol: the agent sent a line that is not JSON"),
        "{diagnostic}"
    );
    assert!(diagnostic.contains("during session/prompt"), "{diagnostic}");
    assert!(
        !diagnostic.contains("this is no JSON"),
        "the line is never quoted: {diagnostic}"
    );
    assert_eq!(said(&world.events(child.child_id())), ["before"]);
    world.until_no_agent_process().await;
    // The host goes on: the next turn starts a new process (whose session
    // plays the same first turn, and ends the same way).
    a_new_process_runs_the_next_turn(&world, child.child_id()).await;
    child.dispose().await.unwrap();
    world.until_no_agent_process().await;
}

/// Prompts `child` again and waits for that turn to end on a new agent
/// session (so a new process: the test agent's sessions live in one).
async fn a_new_process_runs_the_next_turn(world: &World, child: subagent_core::SessionId) {
    world.send(child, "again").await;
    until_events(world, child, "a second turn", |events| {
        turns_ended(events) == 2
    })
    .await;
    let sessions = world
        .events(child)
        .iter()
        .filter(|event| {
            matches!(
                event,
                Event::AgentReported {
                    report: subagent_core::AgentReport::AgentSession { .. },
                    ..
                }
            )
        })
        .count();
    assert_eq!(sessions, 2, "the second turn ran on a new agent session");
}

#[tokio::test]
async fn a_line_over_16_mib_settles_acp_protocol_with_the_stderr_tail() {
    // Not an agent: a line to stderr, 17 MB without a newline on stdout,
    // then silence (a `sleep` named after the world, so it is counted).
    let world = World::with_command(
        "bash",
        &[
            "-c",
            "echo 'agent: starting up' >&2; head -c 17000000 /dev/zero | tr '\\0' a; exec -a \"$0\" sleep 30",
        ],
    )
    .await;
    let child = world.child(spec("long", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    let diagnostic = result.diagnostic.unwrap().to_string();
    assert!(
        diagnostic.starts_with(
            "acp/protocol: the agent sent a line over 16777216 bytes (line exceeds 16 MiB)"
        ),
        "{diagnostic}"
    );
    assert!(diagnostic.contains("during initialize"), "{diagnostic}");
    assert!(
        diagnostic.ends_with("; stderr: agent: starting up"),
        "{diagnostic}"
    );
    child.dispose().await.unwrap();
    world.until_no_agent_process().await;
}

#[tokio::test]
async fn a_long_line_from_the_test_agent_mid_turn_is_the_same_fault() {
    let world = World::start(script(json!([[{"say": "soon"}, {"longLine": 17_000_000}]]))).await;
    let child = world.child(spec("long", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    let diagnostic = result.diagnostic.unwrap().to_string();
    assert!(
        diagnostic.starts_with("acp/protocol: the agent sent a line over 16777216 bytes"),
        "{diagnostic}"
    );
    assert!(diagnostic.contains("during session/prompt"), "{diagnostic}");
    assert_eq!(said(&world.events(child.child_id())), ["soon"]);
    child.dispose().await.unwrap();
    world.until_no_agent_process().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_past_the_content_limit_settles_output_too_large_and_records_none_of_it() {
    let chunk = "z".repeat(1000);
    let count = MAX_CONTENT_BYTES / chunk.len() + 50;
    let world = World::start(script(json!([[
        {"say": "kept"},
        {"flood": {"count": count, "text": chunk}}
    ]])))
    .await;
    let child = world.child(spec("verbose", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    let diagnostic = result.diagnostic.unwrap().to_string();
    assert!(
        diagnostic.starts_with(&format!(
            "acp/output-too-large: the ACP agent's message grew past the {MAX_CONTENT_BYTES}-byte limit"
        )),
        "{diagnostic}"
    );
    assert_eq!(
        said(&world.events(child.child_id())),
        ["kept"],
        "what came before is recorded, the oversized message is not"
    );
    world.until_no_agent_process().await;
    a_new_process_runs_the_next_turn(&world, child.child_id()).await;
    child.dispose().await.unwrap();
    world.until_no_agent_process().await;
}

#[tokio::test]
async fn a_silent_agent_that_ignores_the_cancel_is_killed_after_the_idle_limit() {
    let world = World::with(
        script(json!([[{"say": "stuck"}, "hang"]])),
        idle_after(Duration::from_millis(1500)),
    )
    .await;
    let child = world.child(spec("hung", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    let diagnostic = result.diagnostic.unwrap().to_string();
    assert!(
        diagnostic.starts_with("acp/idle-timeout: the ACP agent sent nothing for 1.5s during a turn; it was cancelled and, not answering, killed"),
        "{diagnostic}"
    );
    assert_eq!(said(&world.events(child.child_id())), ["stuck"]);
    world.until_no_agent_process().await;
    child.dispose().await.unwrap();
}

#[tokio::test]
async fn a_silent_agent_that_answers_the_cancel_keeps_its_process() {
    let world = World::with(
        script(json!([
            [{"say": "thinking"}, {"sleepMs": 60000}],
            [{"say": "awake"}]
        ])),
        idle_after(Duration::from_millis(1500)),
    )
    .await;
    let child = world.child(spec("slow", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    let diagnostic = result.diagnostic.unwrap().to_string();
    assert_eq!(
        diagnostic,
        "acp/idle-timeout: the ACP agent sent nothing for 1.5s during a turn; it was cancelled"
    );
    assert_eq!(world.agent_processes(), 1, "it answered, so it lives on");
    world.send(child.child_id(), "again").await;
    until_events(&world, child.child_id(), "the next turn", |events| {
        said(events).last().map(String::as_str) == Some("awake")
    })
    .await;
    assert_eq!(world.agent_processes(), 1, "on the same process");
    child.dispose().await.unwrap();
    world.until_no_agent_process().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_load_replaying_more_than_the_channel_holds_still_answers() {
    let world = World::start(json!({
        "loadSession": true,
        "default": {"turns": [[{"say": "first"}], [{"say": "resumed"}]]}
    }))
    .await;
    let child = world.child(spec("keeper", "hello")).await;
    child.result().await.unwrap();
    let id = child.child_id();
    drop(child);
    let world = world.restart().await;
    world.until_no_agent_process().await;
    // The agent's stored session grows a history longer than the channel.
    let sessions = world.dir.path().join("sessions");
    let file = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "json"))
        .expect("the agent persisted its session");
    let mut stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let history: Vec<serde_json::Value> = (0..INBOUND_CAPACITY * 2)
        .map(|n| json!({"role": if n % 2 == 0 { "user" } else { "assistant" }, "text": format!("entry {n}")}))
        .collect();
    stored["transcript"] = json!(history);
    std::fs::write(&file, serde_json::to_vec(&stored).unwrap()).unwrap();

    world.send(id, "are you back?").await;
    until_events(&world, id, "the resumed turn", |events| {
        said(events).last().map(String::as_str) == Some("resumed")
    })
    .await;
    let ended_in_error = world.events(id).iter().any(|event| {
        matches!(
            event,
            Event::TurnEnded {
                stop_reason: SubagentStopReason::Error,
                ..
            }
        )
    });
    assert!(!ended_in_error, "the load answered within its limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_new_answered_after_more_updates_than_the_channel_holds_still_answers() {
    let world = World::start(json!({
        "updatesBeforeSession": INBOUND_CAPACITY * 2,
        "default": {"turns": [[{"say": "answered"}]]}
    }))
    .await;
    let child = world.child(spec("chatty", "go")).await;
    let result = child.result().await.unwrap();
    assert_eq!(
        result.stop_reason,
        SubagentStopReason::Completed,
        "{result:?}"
    );
    // What came before the session belongs to no turn.
    assert_eq!(said(&world.events(child.child_id())), ["answered"]);
    child.dispose().await.unwrap();
    world.until_no_agent_process().await;
}
