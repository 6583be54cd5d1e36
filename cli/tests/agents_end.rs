//! No agent outlives the command that started it, and what an agent does
//! wrong ends that child, not the demo:
//! - SIGTERM and SIGINT to `demo` end every ACP agent's process, and the
//!   demo exits as a shell reports the signal (143, 130);
//! - `kill -9` of `demo` ends them too (their parent-death signal);
//! - an agent reading a file outside its workspace is refused, recorded,
//!   and the demo completes;
//! - an agent writing a line that is not JSON settles its child `error`
//!   with `acp/protocol`, and the demo completes;
//! - a hung agent settles `acp/idle-timeout` after `--acp-idle`.

#![cfg(target_os = "linux")]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::text;
use serde_json::json;

/// The test agent, built beside `subagents`.
fn agent() -> std::path::PathBuf {
    Path::new(env!("CARGO_BIN_EXE_subagents")).with_file_name("subagents-acp-test-agent")
}

/// A directory holding `script` (the test agent's JSON) and room for the
/// demo's log: the directory's path marks the agent's processes.
fn setup(script: &serde_json::Value) -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let acp = format!("{} --script {}", agent().display(), script_path.display());
    let data = dir.path().join("data").to_str().unwrap().to_owned();
    (dir, acp, data)
}

/// Live agent processes whose command line names `dir`.
fn agents_in(dir: &Path) -> usize {
    subagent_runtime::conformance::live_processes_named(dir.to_str().unwrap())
}

/// Starts `subagents demo` on the ACP agent `acp`.
fn start_demo(data: &str, acp: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_subagents"))
        .args(["demo", "--data", data, "--acp", acp])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits up to `limit` for `check`.
fn until(what: &str, limit: Duration, check: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `subagents demo` on the ACP agent `acp` with `extra` arguments to
/// its end, checks it succeeded, and returns what it printed and the log
/// as `log --json` prints it; no agent process of `dir` is left.
fn completed_demo(dir: &Path, data: &str, acp: &str, extra: &[&str]) -> (String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_subagents"))
        .args(["demo", "--data", data, "--acp", acp])
        .args(extra)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let (log, _) = text(
        &Command::new(env!("CARGO_BIN_EXE_subagents"))
            .args(["log", data, "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(agents_in(dir), 0, "an agent outlived the demo");
    (stdout, log)
}

/// A demo whose fact-check grandchild (the ACP agent research delegates
/// to) works for ten minutes.
fn busy_script() -> serde_json::Value {
    json!({
        "default": {"turns": [[{"say": "done"}]]},
        "byLabel": {"fact-check": {"turns": [[{"say": "working"}, {"sleepMs": 600_000}]]}}
    })
}

/// Sends `signal` to the demo once its fact-check agent runs, and checks that
/// it exits with `status` and leaves no agent process.
fn signal_ends_every_agent(signal: &str, status: Option<i32>) {
    let (dir, acp, data) = setup(&busy_script());
    let mut demo = start_demo(&data, &acp);
    until("the agents to start", Duration::from_secs(60), || {
        // The demo itself names the directory too: it and one agent.
        agents_in(dir.path()) >= 2
    });
    let killed = Command::new("kill")
        .args([signal, &demo.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = demo.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "the demo did not end on {signal}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = demo.wait_with_output().unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(exit.code(), status, "{signal}: {stderr}");
    if status.is_some() {
        let name = signal.trim_start_matches('-');
        assert!(
            stderr.contains(&format!(
                "error: stopped by SIG{name}: every agent process was ended"
            )),
            "{stderr}"
        );
    }
    until("no agent process", Duration::from_secs(10), || {
        agents_in(dir.path()) == 0
    });
}

#[test]
fn sigterm_ends_the_demo_and_every_agent() {
    signal_ends_every_agent("-TERM", Some(143));
}

#[test]
fn sigint_ends_the_demo_and_every_agent() {
    signal_ends_every_agent("-INT", Some(130));
}

#[test]
fn kill_9_of_the_demo_leaves_no_agent_behind() {
    signal_ends_every_agent("-KILL", None);
}

#[test]
fn an_agent_refused_a_file_outside_its_workspace_does_not_end_the_demo() {
    let (dir, acp, data) = setup(&json!({
        "default": {"turns": [[{"say": "done"}]]},
        "byLabel": {"fact-check": {"turns": [[{"readFile": {"path": "/etc/shadow"}}, {"say": "carried on"}]]}}
    }));
    let (stdout, log) = completed_demo(dir.path(), &data, &acp, &[]);
    assert!(
        stdout.contains("fact-check  completed  carried on"),
        "{stdout}"
    );
    assert!(
        log.contains("could not read /etc/shadow"),
        "the refusal is recorded"
    );
}

#[test]
fn an_agent_writing_a_line_that_is_not_json_settles_its_child_error_and_the_demo_completes() {
    let (dir, acp, data) = setup(&json!({
        "default": {"turns": [[{"say": "done"}]]},
        "byLabel": {"fact-check": {"turns": [[{"say": "checking"}, {"rawLine": "<html>oops</html>"}]]}}
    }));
    let (stdout, log) = completed_demo(dir.path(), &data, &acp, &[]);
    assert!(stdout.contains("fact-check  error      "), "{stdout}");
    assert!(
        log.contains("acp/protocol: the agent sent a line that is not JSON"),
        "{log}"
    );
}

#[test]
fn a_hung_agent_settles_idle_timeout_after_the_demo_s_idle_limit() {
    let (dir, acp, data) = setup(&json!({
        "default": {"turns": [[{"say": "done"}]]},
        "byLabel": {"fact-check": {"turns": [[{"say": "thinking"}, "hang"]]}}
    }));
    let started = Instant::now();
    let (stdout, log) = completed_demo(dir.path(), &data, &acp, &["--acp-idle", "1"]);
    assert!(stdout.contains("fact-check  error      "), "{stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the demo did not wait out the hang"
    );
    assert!(log.contains("acp/idle-timeout"), "{log}");
}
