//! The handled stdout of every command, through the real binary: a reader
//! that closes the pipe ends the command quietly (exit 0, nothing on
//! stderr); a full disk is one `error:` line and exit 1; small JSON outputs
//! arrive complete.

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::{binary, demo, root_of, subagents, text, wide_log};

/// Every command that writes to stdout, on the demo log in `data`.
fn commands<'a>(data: &'a str, root: &'a str) -> Vec<Vec<&'a str>> {
    vec![
        vec!["tree", data],
        vec!["tree", data, "--json"],
        vec!["children", data, root],
        vec!["children", data, root, "--json"],
        vec!["replay", data],
        vec!["replay", data, "--json"],
        vec!["diff", data, "--from", "1"],
        vec!["diff", data, "--from", "1", "--json"],
        vec!["verify", data],
        vec!["log", data],
        vec!["log", data, "--json"],
        vec!["export", data],
        vec!["completions", "bash"],
        vec!["completions", "zsh"],
        vec!["completions", "fish"],
        vec!["manpage"],
    ]
}

#[test]
fn every_command_ends_quietly_when_the_reader_closed_the_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let root = root_of(&demo(&data));
    let fresh = dir.path().join("fresh");
    let mut all = commands(data.to_str().unwrap(), &root);
    all.push(vec!["demo", "--data", fresh.to_str().unwrap()]);
    for args in all {
        let mut child = binary()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the only read end before the command (which first opens the
        // log) writes anything: its first write meets EPIPE.
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn a_big_tree_read_one_line_then_closed_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("wide");
    // About 260 KB of tree: far more than a pipe holds, so the command is
    // still writing when the reader leaves.
    wide_log(&data, 2000);
    let mut child = binary()
        .args(["tree", data.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("root  [inactive]  "), "{first}");
    let output = child.wait_with_output().unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "");
}

#[test]
fn every_command_writing_to_a_full_disk_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let root = root_of(&demo(&data));
    let fresh = dir.path().join("fresh");
    let mut all = commands(data.to_str().unwrap(), &root);
    all.push(vec!["demo", "--data", fresh.to_str().unwrap()]);
    for args in all {
        let full = File::options().write(true).open("/dev/full").unwrap();
        let output = binary()
            .args(&args)
            .stdout(Stdio::from(full))
            .output()
            .unwrap();
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(
            stderr, "error: writing to stdout: No space left on device (os error 28)\n",
            "{args:?}"
        );
    }
}

#[test]
fn small_json_outputs_arrive_complete_and_parse() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let root = root_of(&demo(&data));
    let data = data.to_str().unwrap();
    for args in [
        vec!["tree", data, "--json", "--root", &root],
        vec!["tree", data, "--json", "--at", "1"],
        vec!["replay", data, "--json", "--at", "1"],
        vec!["children", data, &root, "--json"],
        vec!["diff", data, "--from", "1", "--to", "2", "--json"],
    ] {
        let output = subagents(&args);
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{args:?}: {stderr}");
        assert!(stdout.len() < 8192, "{args:?} is meant to be small");
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(&stdout);
        assert!(parsed.is_ok(), "{args:?}: {stdout:?}");
    }
    // The tree of the root, complete: the root and its four children.
    let (stdout, _) = text(&subagents(&["tree", data, "--json", "--root", &root]));
    let trees: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(trees[0]["root"], root.as_str());
    assert_eq!(trees[0]["descendants"].as_array().map(Vec::len), Some(5));
}
