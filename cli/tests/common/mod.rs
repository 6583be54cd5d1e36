//! Helpers shared by the command-line tests: running the real binary, and
//! building logs for it (the demo, or a history from the projections' test
//! builders written as an export and imported).

#![allow(dead_code)] // Each test binary uses its own subset.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

use subagent_core::{SessionId, SessionMode};
use subagent_projections::testing::HistoryBuilder;

/// The `subagents` binary under test.
pub fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_subagents"))
}

/// Runs `subagents args...` to completion.
pub fn subagents(args: &[&str]) -> Output {
    binary().args(args).output().expect("run subagents")
}

/// Stdout and stderr as text.
pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs the demo into `dir`; returns its stdout.
pub fn demo(dir: &Path) -> String {
    let output = subagents(&["demo", "--data", dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "demo failed: {stderr}");
    stdout
}

/// The root session id the demo printed.
pub fn root_of(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("[1/7] root session "))
        .expect("root line");
    line.trim_start_matches("[1/7] root session ").to_owned()
}

/// Writes `history` as an export next to `dir` and imports it into `dir`.
pub fn import_history(dir: &Path, history: &HistoryBuilder) {
    let export = dir.with_extension("jsonl");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&export).unwrap());
    for record in &history.records {
        serde_json::to_writer(&mut file, record).unwrap();
        writeln!(file).unwrap();
    }
    file.flush().unwrap();
    drop(file);
    let output = subagents(&["import", dir.to_str().unwrap(), export.to_str().unwrap()]);
    assert!(output.status.success(), "import: {:?}", text(&output));
}

/// A log in `dir` holding one root and a chain `depth` sessions deep below
/// it, labelled `c1`, `c2`, ...; returns the root.
pub fn chain_log(dir: &Path, depth: u64) -> SessionId {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    let mut parent = root;
    for level in 1..=depth {
        parent = history.child(
            parent,
            level,
            &format!("c{level}"),
            SessionMode::Continuable,
            false,
        );
    }
    import_history(dir, &history);
    root
}

/// A log in `dir` holding one root with `children` direct children: a tree
/// that draws about 130 bytes a child.
pub fn wide_log(dir: &Path, children: u64) -> SessionId {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    for index in 0..children {
        history.child(root, 1, &format!("w{index}"), SessionMode::OneShot, true);
    }
    import_history(dir, &history);
    root
}
