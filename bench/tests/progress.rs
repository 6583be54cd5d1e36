//! The benchmark's progress through the real `subagents-bench` binary:
//! nothing on a piped stderr (the table alone on stdout), bars for building
//! the log and for the runs on a terminal (a pseudo-terminal from
//! util-linux `script`, stdout redirected to a file).

use std::path::Path;
use std::process::{Command, Stdio};

/// A small `bench replay`: a log of about 1,000 events, two runs.
const ARGS: [&str; 5] = ["replay", "--events", "1000", "--runs", "2"];

/// `text` quoted for `sh`.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[test]
fn piped_a_bench_writes_its_table_and_no_progress() {
    let output = Command::new(env!("CARGO_BIN_EXE_subagents-bench"))
        .args(ARGS)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stderr, "", "no '\\r', no bar, no run counter");
    assert!(stdout.starts_with("replay of "), "{stdout}");
    assert!(stdout.contains("fold / raw"), "{stdout}");
}

#[test]
fn on_a_terminal_a_bench_draws_its_bars_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let stdout_file = dir.path().join("the table");
    let typescript = dir.path().join("what the terminal showed");
    let command = std::iter::once(env!("CARGO_BIN_EXE_subagents-bench"))
        .chain(ARGS)
        .map(quoted)
        .collect::<Vec<_>>()
        .join(" ");
    let command = format!("{command} 1>{}", quoted(path(&stdout_file)));
    let output = Command::new("script")
        .args(["-q", "-e", "-c", &command])
        .arg(&typescript)
        // A bar needs a terminal type that is not `dumb`; `script` runs
        // the command with $SHELL.
        .env("TERM", "xterm")
        .env("SHELL", "/bin/sh")
        .stdin(Stdio::null())
        .output()
        .expect("run `script` (util-linux)");
    let screen = String::from_utf8_lossy(&std::fs::read(&typescript).unwrap()).into_owned();
    assert!(output.status.success(), "{screen}");
    // Each bar is drawn as soon as it starts, at 0.
    assert!(screen.contains("building log ["), "{screen:?}");
    assert!(screen.contains("] 0/1000 events"), "{screen:?}");
    assert!(screen.contains("replay ["), "{screen:?}");
    assert!(screen.contains("] 0/2 runs"), "{screen:?}");
    let table = std::fs::read_to_string(&stdout_file).unwrap();
    assert!(table.starts_with("replay of "), "{table}");
    assert!(!table.contains('\r'), "the bars stay off stdout: {table:?}");
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}
