//! The progress bars of `verify`, `replay`, `export` and `import` through
//! the real binary: nothing at all on a piped stderr; a bar on a terminal
//! (a pseudo-terminal from util-linux `script`, stderr on it, stdout
//! redirected to a file); the same stdout either way. `export` writing its
//! records to the terminal itself draws no bar over them.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{demo, subagents, text};

/// `text` quoted for `sh`.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// What a command run on a terminal left behind.
struct OnTerminal {
    /// Its stdout, when redirected to a file (else empty: it went to the
    /// terminal).
    stdout: String,
    /// Everything written to the terminal, without `script`'s own header
    /// and footer lines.
    screen: String,
    /// Whether it exited 0.
    success: bool,
}

/// Runs `subagents args...` under `script -q -e` with stderr on a fresh
/// pseudo-terminal, and stdout too unless `stdout_to_file`.
fn on_terminal(scratch: &Path, args: &[&str], stdout_to_file: bool) -> OnTerminal {
    let stdout_file = scratch.join("stdout of the command");
    let typescript = scratch.join("what the terminal showed");
    let command = std::iter::once(env!("CARGO_BIN_EXE_subagents"))
        .chain(args.iter().copied())
        .map(quoted)
        .collect::<Vec<_>>()
        .join(" ");
    let command = if stdout_to_file {
        format!("{command} 1>{}", quoted(path(&stdout_file)))
    } else {
        command
    };
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
    let bytes = std::fs::read(&typescript).expect("script wrote its typescript");
    let recorded = String::from_utf8_lossy(&bytes);
    let recorded: &str = &recorded;
    // `script` opens with `Script started on ... [COMMAND="..."]` (which
    // names the arguments) and ends with `Script done on ...`.
    let screen = match recorded.split_once('\n') {
        Some((first, rest)) if first.starts_with("Script started") => rest,
        _ => recorded,
    };
    let screen = screen
        .rsplit_once("Script done on")
        .map_or(screen, |(before, _)| before)
        .to_owned();
    let stdout = if stdout_to_file {
        std::fs::read_to_string(&stdout_file).expect("the redirected stdout")
    } else {
        String::new()
    };
    let _ = std::fs::remove_file(&stdout_file);
    let _ = std::fs::remove_file(&typescript);
    OnTerminal {
        stdout,
        screen,
        success: output.status.success(),
    }
}

/// A demo log in a directory whose path has a space and a quote; returns
/// the scratch directory, the log and its head.
fn demo_log() -> (tempfile::TempDir, std::path::PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("the demo's log");
    demo(&data);
    let output = subagents(&["verify", path(&data)]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let head = stdout
        .strip_prefix("verified ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|events| events.parse().ok())
        .unwrap_or_else(|| panic!("no event count in {stdout:?}"));
    (dir, data, head)
}

/// How indicatif writes a byte count (`HumanBytes`: binary prefixes, two
/// decimals).
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

#[test]
fn piped_the_long_commands_write_no_progress_at_all() {
    let (dir, data, head) = demo_log();
    let data = path(&data);
    let export = dir.path().join("the export.jsonl");
    let copy = dir.path().join("the copy");
    let exported = format!("exported {head} events\n");
    for (args, expected_stderr) in [
        (vec!["verify", data], ""),
        (vec!["replay", data], ""),
        (vec!["replay", data, "--json", "--at", "3"], ""),
        (vec!["export", data], exported.as_str()),
        (
            vec!["export", data, "--out", path(&export)],
            exported.as_str(),
        ),
        (vec!["import", path(&copy), path(&export)], ""),
    ] {
        let output = subagents(&args);
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{args:?}: {stderr}");
        // Exactly what the command says, so no '\r', no escape sequence,
        // no bar and no "events" progress line.
        assert_eq!(stderr, expected_stderr, "{args:?}");
        if args[0] != "export" || args.len() == 2 {
            assert!(!stdout.is_empty(), "{args:?} printed nothing");
        }
    }
    let (stdout, _) = text(&subagents(&["verify", data]));
    assert!(
        stdout.starts_with(&format!(
            "verified {head} events (head {head}); checkpoint: "
        )),
        "{stdout}"
    );
}

#[test]
fn on_a_terminal_each_long_command_draws_its_bar_on_stderr_and_stdout_is_unchanged() {
    let (dir, data, head) = demo_log();
    let scratch = dir.path();
    let data = path(&data);
    let export = scratch.join("the export.jsonl");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["verify", data], "verify ["),
        (vec!["replay", data], "replay ["),
        (vec!["replay", data, "--json", "--at", "3"], "replay ["),
        (vec!["export", data], "export ["),
        (vec!["export", data, "--out", path(&export)], "export ["),
    ];
    for (args, bar) in cases {
        let piped = subagents(&args);
        let (piped_stdout, piped_stderr) = text(&piped);
        assert!(piped.status.success(), "{args:?}: {piped_stderr}");
        let shown = on_terminal(scratch, &args, true);
        assert!(shown.success, "{args:?}: {}", shown.screen);
        assert_eq!(shown.stdout, piped_stdout, "{args:?}: stdout changed");
        assert!(
            shown.screen.contains(bar),
            "{args:?}: no bar in {:?}",
            shown.screen
        );
        // Drawn as soon as the pass starts: at 0 of the head (or --at).
        let total = if args.contains(&"--at") { 3 } else { head };
        let total = format!("] 0/{total} events");
        assert!(
            shown.screen.contains(&total),
            "{args:?}: no {total:?} in {:?}",
            shown.screen
        );
    }

    // Import: the bar counts the file's bytes.
    let length = std::fs::metadata(&export).unwrap().len();
    let copy = scratch.join("the copy");
    let args = ["import", path(&copy), path(&export)];
    let piped = subagents(&args);
    let (piped_stdout, piped_stderr) = text(&piped);
    assert!(piped.status.success(), "{piped_stderr}");
    assert_eq!(piped_stderr, "");
    std::fs::remove_dir_all(&copy).unwrap();
    let shown = on_terminal(scratch, &args, true);
    assert!(shown.success, "{}", shown.screen);
    assert_eq!(
        shown.stdout, piped_stdout,
        "the same line, the same log path"
    );
    assert!(shown.screen.contains("import ["), "{:?}", shown.screen);
    let total = format!("] 0 B/{}", human_bytes(length));
    assert!(
        shown.screen.contains(&total),
        "no {total:?} in {:?}",
        shown.screen
    );
    assert!(copy.exists(), "the import on a terminal made its log");
}

#[test]
fn export_to_the_terminal_itself_draws_no_bar_over_its_records() {
    let (dir, data, head) = demo_log();
    let shown = on_terminal(dir.path(), &["export", path(&data)], false);
    assert!(shown.success, "{}", shown.screen);
    assert!(
        shown.screen.contains("\"position\":1,"),
        "{:?}",
        shown.screen
    );
    assert!(
        shown.screen.contains(&format!("exported {head} events")),
        "{:?}",
        shown.screen
    );
    assert!(!shown.screen.contains("export ["), "{:?}", shown.screen);
    // With stdout elsewhere, the same terminal does show it.
    let redirected = on_terminal(dir.path(), &["export", path(&data)], true);
    assert!(
        redirected.screen.contains("export ["),
        "{:?}",
        redirected.screen
    );
}
