//! The `subagents` binary end to end: the demo, the replay commands, and the
//! clear, non-zero failures on bad input.

mod common;

use std::path::Path;
use std::process::Command;

use common::{demo, root_of, subagents, text};

#[test]
fn demo_records_a_delegation_that_replays_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let stdout = demo(&data);
    assert!(stdout.contains("THE EXTERNAL RUN SAYS HELLO"), "{stdout}");
    assert!(stdout.contains("research    completed"), "{stdout}");
    // research answered with what the grandchild it waited for said.
    assert!(
        stdout.contains("fact-check: Checked: positions are gap-free and start at 1."),
        "{stdout}"
    );
    assert!(
        stdout.contains("started by research's `subagent` call call-3 of turn 1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("refused tool calls (recorded): research [\"call-2\"]\n"),
        "{stdout}"
    );
    assert!(stdout.contains("research → root, message "), "{stdout}");
    let data = data.to_str().unwrap();

    let output = subagents(&["verify", data]);
    assert!(output.status.success(), "{:?}", text(&output));
    assert!(text(&output).0.contains("OK"));

    let root = root_of(&stdout);
    let (tree, _) = text(&subagents(&["tree", data, "--root", &root]));
    for line in [
        "├── research  [continuable · spawn · inactive · completed]",
        "│   └── fact-check  [continuable · spawn · inactive · completed]",
        "← call-3 of turn 1",
        "├── review  [continuable · fork · inactive · completed]",
        "├── shout  [one-shot external · process · disposed · completed]",
        "└── digger  [continuable · spawn · inactive · aborted]",
    ] {
        assert!(tree.contains(line), "{line} missing from\n{tree}");
    }

    let (children, _) = text(&subagents(&["children", data, &root, "--json"]));
    let listed: serde_json::Value = serde_json::from_str(&children).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(4));
    assert_eq!(listed[2]["external"], true);

    // A second run adds a second root to the same log.
    let second = demo(Path::new(data));
    assert_ne!(root_of(&second), root);
    let (all, _) = text(&subagents(&["replay", data, "--json"]));
    let state: serde_json::Value = serde_json::from_str(&all).unwrap();
    assert_eq!(state["roots"].as_array().map(Vec::len), Some(2));
}

/// The demo's ACP test agent command: the workspace's test agent binary
/// (built beside `subagents`) with the script `make demo` uses.
fn demo_acp_command() -> String {
    let agent =
        Path::new(env!("CARGO_BIN_EXE_subagents")).with_file_name("subagents-acp-test-agent");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/demo/acp-script.json");
    format!("{} --script {}", agent.display(), script.display())
}

#[test]
fn the_demo_runs_its_spawned_children_on_an_acp_agent_over_real_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let output = subagents(&["demo", "--data", data, "--acp", &demo_acp_command()]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("research    completed  The log is the source of truth"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "refused tool calls (recorded): research [\"call-2\"], fact-check [\"call-1-3\"]"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("interrupted: 2 queued notes preserved"),
        "{stdout}"
    );
    assert!(!stderr.contains("warning"), "{stderr}");
    let root = root_of(&stdout);
    let (tree, _) = text(&subagents(&["tree", data, "--root", &root]));
    for line in [
        "├── research  [continuable · spawn · inactive · completed]",
        "│   └── fact-check  [continuable · acp · inactive · completed]",
        "├── review  [continuable · fork · inactive · completed]",
        "└── digger  [continuable · acp · inactive · aborted]",
    ] {
        assert!(tree.contains(line), "{line} missing from\n{tree}");
    }
    // The agent's plan, context use and session are in the log, and it verifies.
    let (log, _) = text(&subagents(&["log", data, "--json"]));
    for kind in [
        "\"agent-session\"",
        "\"plan\"",
        "\"context-usage\"",
        "\"acp/execute\"",
    ] {
        assert!(log.contains(kind), "{kind} missing from the log");
    }
    let output = subagents(&["verify", data]);
    assert!(output.status.success(), "{:?}", text(&output));
    // No agent process outlives the demo.
    let left = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .is_ok_and(|line| String::from_utf8_lossy(&line).contains("acp-script.json"))
        })
        .count();
    assert_eq!(left, 0, "ACP agent processes outlived the demo");
}

#[test]
fn an_empty_acp_command_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = subagents(&["demo", "--data", data.to_str().unwrap(), "--acp", "  "]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).1.contains("the agent command is empty"),
        "{:?}",
        text(&output)
    );
    assert!(!data.exists(), "nothing was written");
}

#[test]
fn bad_input_fails_with_a_clear_message_and_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    let data = data.to_str().unwrap();
    let export = dir.path().join("export.jsonl");
    assert!(
        subagents(&["export", data, "--out", export.to_str().unwrap()])
            .status
            .success()
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["children", data, "00000000-0000-0000-0000-000000000000"],
            "unknown session",
        ),
        (vec!["children", data, "not-an-id"], "malformed session id"),
        (vec!["replay", data, "--at", "9999"], "past the head"),
        (vec!["diff", data, "--from", "9", "--to", "3"], "after --to"),
        (vec!["import", data, export.to_str().unwrap()], "not empty"),
        (vec!["tree", "/nonexistent/log"], "is not a subagents log"),
        (vec!["log", data, "--stream", "bogus"], "unknown stream"),
    ];
    for (args, message) in cases {
        let output = subagents(&args);
        let (_, stderr) = text(&output);
        assert!(!output.status.success(), "{args:?} should fail");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

#[test]
fn export_and_import_round_trip_through_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    let first = dir.path().join("first.jsonl");
    let second = dir.path().join("second.jsonl");
    let copy = dir.path().join("copy");
    assert!(subagents(&[
        "export",
        data.to_str().unwrap(),
        "--out",
        first.to_str().unwrap()
    ])
    .status
    .success());
    assert!(
        subagents(&["import", copy.to_str().unwrap(), first.to_str().unwrap()])
            .status
            .success()
    );
    assert!(subagents(&[
        "export",
        copy.to_str().unwrap(),
        "--out",
        second.to_str().unwrap()
    ])
    .status
    .success());
    assert_eq!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&second).unwrap()
    );
}

#[test]
fn a_log_held_by_another_process_is_reported_as_locked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    let holder =
        subagent_store::RocksLog::open(&data, subagent_store::RocksOptions::default()).unwrap();
    // Readers need no lock; a second writer is refused.
    let output = subagents(&["demo", "--data", data.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        text(&output).1.contains("locked by another process"),
        "{:?}",
        text(&output)
    );
    drop(holder);
    assert!(subagents(&["log", data.to_str().unwrap()]).status.success());
}

#[test]
fn a_demo_killed_mid_run_is_recovered_explicitly_and_verifies() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_subagents"))
        .args([
            "demo",
            "--data",
            data.to_str().unwrap(),
            "--hold-ms",
            "30000",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    // Kill it while the research child is mid-turn and the others are live.
    while let Some(Ok(line)) = lines.next() {
        if line.starts_with("[3/7]") {
            break;
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    child.kill().unwrap();
    child.wait().unwrap();

    let rerun = demo(&data);
    assert!(rerun.contains("recovered the previous run"), "{rerun}");
    let output = subagents(&["verify", data.to_str().unwrap()]);
    assert!(output.status.success(), "{:?}", text(&output));
    let (log, _) = text(&subagents(&["log", data.to_str().unwrap(), "--json"]));
    assert!(
        log.contains("\"host-restart\""),
        "an explicit HostRestart abandonment is recorded"
    );
    assert!(log.contains("HostRecovered"));
}

/// The demo ends by printing the commands that inspect what it wrote. Run
/// exactly as printed, from where the demo ran, with the binary's folder on
/// the PATH (where `make install` puts it), each succeeds and prints
/// something; a data directory whose name a shell would split is quoted.
#[test]
fn the_demos_closing_hints_run_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo data");
    let stdout = demo(&data);
    for hint in common::run_closing_hints(&stdout) {
        assert!(hint.contains("'"), "the spaced directory is quoted: {hint}");
    }
    let path = common::path_with_binary();
    // The demo says when `subagents` is not on the PATH, and only then.
    let note = "`subagents` is not on your PATH: `make install` puts it in ~/.cargo/bin";
    for (path, noted) in [("/usr/bin:/bin".to_owned(), true), (path, false)] {
        let output = Command::new(env!("CARGO_BIN_EXE_subagents"))
            .args(["demo", "--data", dir.path().join("again").to_str().unwrap()])
            .env("PATH", &path)
            .output()
            .unwrap();
        let (out, err) = text(&output);
        assert!(output.status.success(), "{err}");
        assert_eq!(out.contains(note), noted, "PATH={path}:\n{out}");
    }
}

#[test]
fn version_names_the_storage_formats_and_completions_cover_every_shell() {
    let (version, _) = text(&subagents(&["--version"]));
    let lines: Vec<&str> = version.lines().collect();
    assert!(lines[0].starts_with("subagents 0."), "{version}");
    assert!(
        lines[1].starts_with("log directory format 1 (RocksDB), record format 1"),
        "{version}"
    );
    assert!(
        lines[2].starts_with(&format!(
            "event schema {}",
            subagent_core::CURRENT_SCHEMA_VERSION
        )),
        "{version}"
    );
    assert_eq!(
        lines[3],
        format!(
            "checkpoint format {} (another is discarded and the log refolded)",
            subagent_projections::checkpoint::CHECKPOINT_VERSION
        ),
        "{version}"
    );
    for (shell, marker) in [
        ("bash", "_subagents()"),
        ("zsh", "#compdef subagents"),
        ("fish", "complete -c subagents"),
    ] {
        let output = subagents(&["completions", shell]);
        assert!(output.status.success());
        let (script, _) = text(&output);
        assert!(script.contains(marker), "{shell}: {script}");
        for command in ["demo", "serve", "verify", "completions", "manpage"] {
            assert!(
                script.contains(command),
                "{shell} does not complete {command}"
            );
        }
    }
    let (page, _) = text(&subagents(&["manpage"]));
    assert!(page.contains(".TH subagents 1"), "{page}");
    assert!(page.contains("STORAGE FORMATS"), "{page}");
    let refused = subagents(&["completions", "powershell"]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn verify_notes_a_checkpoint_of_another_format_and_fails_a_damaged_one() {
    use subagent_store::EventLog;

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    let write = |bytes: &[u8]| {
        let log =
            subagent_store::RocksLog::open(&data, subagent_store::RocksOptions::default()).unwrap();
        log.write_checkpoint(subagent_replay::CHECKPOINT_NAME, bytes)
            .unwrap();
    };
    // A JSON checkpoint of format 2, as the builds before format 3 wrote:
    // an upgrade, not damage.
    write(br#"{"checkpointVersion":2,"position":1,"state":{}}"#);
    let output = subagents(&["verify", data.to_str().unwrap()]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}{err}");
    assert!(
        out.contains("note: the checkpoint is of format 2, which this build does not read, so it was not compared"),
        "{out}"
    );
    assert!(out.contains("checkpoint: of format 2, not read"), "{out}");

    // A checkpoint of this format whose bytes changed fails.
    let log =
        subagent_store::RocksLog::open(&data, subagent_store::RocksOptions::default()).unwrap();
    let state = subagent_replay::state_at(&log, None).unwrap();
    drop(log);
    let mut damaged = subagent_projections::checkpoint::encode(&state);
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    write(&damaged);
    let output = subagents(&["verify", data.to_str().unwrap()]);
    let (out, _) = text(&output);
    assert!(!output.status.success(), "{out}");
    assert!(
        out.contains("checkpoint unusable: checkpoint fails its checksum"),
        "{out}"
    );
}
