//! The append table through the real `subagents-bench` binary: its
//! `ev/commit` column is the engine's events per group commit. The rows
//! with one appender fix it exactly (every commit holds that appender's
//! one append, whoever commits it); with 64 appenders of one event, each
//! waiting for its answer before it appends again, a commit holds 1 to 64.

use std::process::Command;

/// One row of the table: its mode, appenders, events per append, and
/// `ev/commit` as printed.
#[derive(Debug, PartialEq)]
struct Row {
    mode: String,
    appenders: u32,
    batch: u32,
    events_per_commit: String,
}

/// The rows of a small `append` table with `appenders` appenders.
fn rows_with(appenders: &str) -> Vec<Row> {
    let output = Command::new(env!("CARGO_BIN_EXE_subagents-bench"))
        .args([
            "append",
            "--runs",
            "1",
            "--scale",
            "0.01",
            "--only-appenders",
            appenders,
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
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header.get(..6),
        Some(
            &[
                "mode",
                "appenders",
                "batch",
                "events",
                "engine",
                "ev/commit"
            ][..]
        ),
        "{stdout}"
    );
    lines
        .map(|line| {
            // The engine's figure is "median (min–max)": two words.
            let words: Vec<&str> = line.split_whitespace().collect();
            assert!(words.len() > 6, "{line}");
            Row {
                mode: words[0].to_owned(),
                appenders: words[1].parse().unwrap(),
                batch: words[2].parse().unwrap(),
                events_per_commit: words[6].to_owned(),
            }
        })
        .collect()
}

#[test]
fn one_appender_commits_each_append_alone_so_ev_per_commit_is_its_batch() {
    let row = |mode: &str, batch, per_commit: &str| Row {
        mode: mode.to_owned(),
        appenders: 1,
        batch,
        events_per_commit: per_commit.to_owned(),
    };
    assert_eq!(
        rows_with("1"),
        [
            row("Sync", 1, "1.0"),
            row("Sync", 64, "64.0"),
            row("Buffered", 1, "1.0"),
            row("Buffered", 64, "64.0"),
        ]
    );
}

#[test]
fn sixty_four_appenders_of_one_event_commit_one_to_sixty_four_events_a_commit() {
    let rows = rows_with("64");
    let modes: Vec<&str> = rows.iter().map(|row| row.mode.as_str()).collect();
    assert_eq!(modes, ["Sync", "Buffered"]);
    for row in &rows {
        assert_eq!((row.appenders, row.batch), (64, 1), "{row:?}");
        let per_commit: f64 = row.events_per_commit.parse().unwrap();
        assert!((1.0..=64.0).contains(&per_commit), "{row:?}");
    }
}
