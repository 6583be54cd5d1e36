//! Helpers shared by the command-line tests: running the real binary, and
//! building logs for it (the demo, or a history from the projections' test
//! builders appended to a RocksDB log through the store).

#![allow(dead_code)] // Each test binary uses its own subset.

pub(crate) mod serve;

use std::path::Path;
use std::process::{Command, Output};

use subagent_core::{NewEvent, SessionId, SessionMode};
use subagent_projections::testing::HistoryBuilder;
use subagent_store::{Durability, EventLog, ExpectedVersion, RocksLog, RocksOptions};

/// The `subagents` binary under test.
pub(crate) fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_subagents"))
}

/// Runs `subagents args...` to completion.
pub(crate) fn subagents(args: &[&str]) -> Output {
    binary().args(args).output().expect("run subagents")
}

/// Stdout and stderr as text.
pub(crate) fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs the demo into `dir`; returns its stdout.
pub(crate) fn demo(dir: &Path) -> String {
    let output = subagents(&["demo", "--data", dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "demo failed: {stderr}");
    stdout
}

/// `PATH` with the folder of the binary under test first, as `make
/// install` would put `subagents` on it.
pub(crate) fn path_with_binary() -> String {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_subagents"))
        .parent()
        .expect("the binary's folder");
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Runs each of the demo's five closing hints exactly as printed (through
/// `sh -c`, with the binary on the PATH), asserting that each succeeds and
/// prints something; returns them.
pub(crate) fn run_closing_hints(stdout: &str) -> Vec<String> {
    let hints: Vec<String> = stdout
        .lines()
        .skip_while(|line| *line != "Inspect it with:")
        .skip(1)
        .map(str::trim)
        .filter(|line| line.starts_with("subagents "))
        .map(str::to_owned)
        .collect();
    assert_eq!(hints.len(), 5, "{stdout}");
    let path = path_with_binary();
    for hint in &hints {
        let output = Command::new("sh")
            .args(["-c", hint])
            .env("PATH", &path)
            .output()
            .expect("run sh");
        let (out, err) = text(&output);
        assert!(output.status.success(), "`{hint}` failed: {err}");
        assert!(!out.trim().is_empty(), "`{hint}` printed nothing");
    }
    hints
}

/// The root session id the demo printed.
pub(crate) fn root_of(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("[1/7] root session "))
        .expect("root line");
    line.trim_start_matches("[1/7] root session ").to_owned()
}

/// Appends `history`'s events to a new log in `dir`, in order, one append
/// per run of consecutive events of a stream (so positions and stream
/// versions are the history's), then closes the log.
pub(crate) fn write_history(dir: &Path, history: &HistoryBuilder) {
    let log = RocksLog::open(
        dir,
        RocksOptions {
            durability: Durability::Buffered,
        },
    )
    .unwrap();
    let mut tickets = Vec::new();
    for run in history.records.chunk_by(|a, b| a.stream == b.stream) {
        let events = run.iter().map(|r| NewEvent::new(r.event.clone())).collect();
        tickets.push(log.append(run[0].stream, ExpectedVersion::Any, events));
    }
    for ticket in tickets {
        ticket.wait().unwrap();
    }
    assert_eq!(log.head(), history.records.len() as u64);
}

/// A log in `dir` holding one root and a chain `depth` sessions deep below
/// it, labelled `c1`, `c2`, ...; returns the root.
pub(crate) fn chain_log(dir: &Path, depth: u64) -> SessionId {
    let mut history = HistoryBuilder::new();
    let root = history.chain(depth);
    write_history(dir, &history);
    root
}

/// A log in `dir` holding one root with `children` direct children: a tree
/// that draws about 130 bytes a child.
pub(crate) fn wide_log(dir: &Path, children: u64) -> SessionId {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    for index in 0..children {
        history.child(root, 1, &format!("w{index}"), SessionMode::OneShot, true);
    }
    write_history(dir, &history);
    root
}
