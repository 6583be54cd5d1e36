//! The append table through the real `subagents-bench` binary: its
//! `ev/commit` column is the engine's events per group commit, which the
//! rows with one appender fix exactly (every commit holds that appender's
//! one append), whoever commits it.

use std::process::Command;

/// The rows of one small `append` table: `(mode, batch, ev/commit)`.
fn rows_with_one_appender() -> Vec<(String, u32, String)> {
    let output = Command::new(env!("CARGO_BIN_EXE_subagents-bench"))
        .args([
            "append",
            "--runs",
            "1",
            "--scale",
            "0.01",
            "--only-appenders",
            "1",
            "--no-sqlite",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = stdout.lines().skip(1);
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header[..6],
        [
            "mode",
            "appenders",
            "batch",
            "events",
            "engine",
            "ev/commit"
        ],
        "{stdout}"
    );
    lines
        .map(|line| {
            // The engine's figure is "median (min–max)": two words.
            let words: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(words[1], "1", "{line}");
            (
                words[0].to_owned(),
                words[2].parse().unwrap(),
                words[6].to_owned(),
            )
        })
        .collect()
}

#[test]
fn one_appender_commits_each_append_alone_so_ev_per_commit_is_its_batch() {
    let rows = rows_with_one_appender();
    let expected = [
        ("Sync", 1, "1.0"),
        ("Sync", 64, "64.0"),
        ("Buffered", 1, "1.0"),
        ("Buffered", 64, "64.0"),
    ];
    assert_eq!(
        rows,
        expected
            .iter()
            .map(|(mode, batch, per_commit)| ((*mode).to_owned(), *batch, (*per_commit).to_owned()))
            .collect::<Vec<_>>()
    );
}
