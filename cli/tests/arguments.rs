//! Bad arguments through the real binary: each is refused with a clear
//! message and a non-zero exit, before any work is done. Out-of-range
//! numbers are clap's usage errors (exit 2); inputs that only the log can
//! judge (a position past the head, an unknown session or stream, a file
//! that cannot be opened) are one `error:` line and exit 1.

mod common;

use common::{demo, root_of, subagents, text};

#[test]
fn a_demo_hold_beyond_an_hour_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = subagents(&[
        "demo",
        "--data",
        data.to_str().unwrap(),
        "--hold-ms",
        "18446744073709551615",
    ]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not in 0..=3600000"), "{stderr}");
    assert!(!data.exists(), "nothing was run");
}

#[test]
fn a_persona_variable_without_a_name_or_value_is_refused_before_serving() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for bad in ["project", "=subagents"] {
        let output = subagents(&[
            "serve",
            "--data",
            data.to_str().unwrap(),
            "--persona-var",
            bad,
        ]);
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("is not NAME=VALUE"), "{stderr}");
        assert!(!data.exists(), "nothing was opened");
    }
}

#[test]
fn positions_sessions_streams_and_files_are_checked_against_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let root = root_of(&demo(&data));
    let data = data.to_str().unwrap();
    let unknown = "00000000-0000-0000-0000-000000000000";
    let unknown_stream = format!("session-{unknown}");
    let root_stream = format!("session-{root}");
    let missing_out = dir.path().join("no-such-dir").join("out.jsonl");
    let missing_in = dir.path().join("no-such-export.jsonl");
    let fresh = dir.path().join("fresh");
    let folder = dir.path().to_str().unwrap();
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["tree", data, "--at", "9999"],
            "position 9999 is past the head".into(),
        ),
        (
            vec!["children", data, &root, "--at", "9999"],
            "position 9999 is past the head".into(),
        ),
        (
            vec!["tree", data, "--root", unknown],
            format!("unknown session {unknown}"),
        ),
        (
            vec!["tree", data, "--root", "not-an-id"],
            "malformed session id".into(),
        ),
        // The root did not exist yet at position 0.
        (
            vec!["tree", data, "--root", &root, "--at", "0"],
            format!("unknown session {root}"),
        ),
        (
            vec!["diff", data, "--from", "9999"],
            "position 9999 is past the head".into(),
        ),
        (
            vec!["diff", data, "--from", "1", "--to", "9999"],
            "position 9999 is past the head".into(),
        ),
        (
            vec!["diff", data, "--from", "5", "--to", "3"],
            "--from 5 is after --to 3".into(),
        ),
        (
            vec!["log", data, "--from", "9999"],
            "--from 9999 is past the end of the log".into(),
        ),
        (
            vec!["log", data, "--stream", &unknown_stream],
            format!("stream {unknown_stream} is not in the log"),
        ),
        (
            vec!["log", data, "--stream", &root_stream, "--from", "9999"],
            format!("--from 9999 is past the end of {root_stream}"),
        ),
        (
            vec!["export", data, "--out", missing_out.to_str().unwrap()],
            format!("{}: No such file or directory", missing_out.display()),
        ),
        (
            vec![
                "import",
                fresh.to_str().unwrap(),
                missing_in.to_str().unwrap(),
            ],
            format!("{}: No such file or directory", missing_in.display()),
        ),
        (
            vec!["import", fresh.to_str().unwrap(), folder],
            "Is a directory".to_owned(),
        ),
        (
            vec!["verify", "/nonexistent/log"],
            "/nonexistent/log is not a subagents log".into(),
        ),
        (
            vec!["log", "/nonexistent/log"],
            "/nonexistent/log is not a subagents log".into(),
        ),
    ];
    for (args, message) in cases {
        let output = subagents(&args);
        let (stdout, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(stderr.contains(&message), "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
    }
    // Zero is not a position of `log --from` (positions start at 1).
    let output = subagents(&["log", data, "--from", "0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).1.contains("0 is not in 1.."),
        "{:?}",
        text(&output)
    );
    // Right after the end is an empty, successful read.
    let head = text(&subagents(&["log", data])).0.lines().count();
    let next = (head + 1).to_string();
    let output = subagents(&["log", data, "--from", &next]);
    assert!(output.status.success(), "{:?}", text(&output));
    assert_eq!(text(&output).0, "");
}
