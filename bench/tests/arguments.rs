//! Bad arguments through the real `subagents-bench` binary: every number
//! outside its range is clap's usage error (exit 2), refused before anything
//! is measured.

use std::process::Command;

#[test]
fn bench_numbers_outside_their_range_are_refused_before_measuring() {
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["append", "--scale", "inf"],
            "inf is not a finite number in 0.01..=100",
        ),
        (
            vec!["append", "--scale", "-inf"],
            "-inf is not a finite number in 0.01..=100",
        ),
        (
            vec!["append", "--scale", "NaN"],
            "NaN is not a finite number in 0.01..=100",
        ),
        (
            vec!["append", "--scale", "-1"],
            "-1 is not a finite number in 0.01..=100",
        ),
        (
            vec!["append", "--scale", "0"],
            "0 is not a finite number in 0.01..=100",
        ),
        (
            vec!["append", "--scale", "1e300"],
            "1e300 is not a finite number in 0.01..=100",
        ),
        (
            vec!["append", "--scale", "lots"],
            "\"lots\" is not a number",
        ),
        (
            vec!["activations", "--scale", "inf"],
            "inf is not a finite number",
        ),
        (vec!["append", "--runs", "0"], "0 is not in 1..=1000"),
        (
            vec!["append", "--store", "mysql://h/db"],
            "rocksdb, postgres or a postgres:// URL",
        ),
        (vec!["activations", "--runs", "0"], "0 is not in 1..=1000"),
        (vec!["messages", "--runs", "0"], "0 is not in 1..=1000"),
        (vec!["memory", "--runs", "0"], "0 is not in 1..=1000"),
        (vec!["replay", "--runs", "0"], "0 is not in 1..=1000"),
        (vec!["list", "--runs", "0"], "0 is not in 1..=1000"),
        (vec!["startup", "--runs", "0"], "0 is not in 1..=1000"),
        (vec!["append", "--runs", "1001"], "1001 is not in 1..=1000"),
        (vec!["list", "--sessions", "0"], "0 is not in 1..=10000000"),
        (
            vec!["list", "--sessions", "18446744073709551615"],
            "18446744073709551615 is not in 1..=10000000",
        ),
        (vec!["memory", "--children", "0"], "0 is not in 1..=1000000"),
        (
            vec!["messages", "--round-trips", "0"],
            "0 is not in 1..=1000000",
        ),
        (
            vec!["replay", "--events", "999"],
            "999 is not in 1000..=100000000",
        ),
        (
            vec!["startup", "--events", "0"],
            "0 is not in 1000..=100000000",
        ),
        (vec!["console", "--runs", "0"], "0 is not in 1..=1000"),
        (
            vec!["console", "--sessions", "9"],
            "9 is not in 10..=100000",
        ),
        (
            vec!["console", "--sessions", "100001"],
            "100001 is not in 10..=100000",
        ),
        (vec!["console", "--starts", "0"], "0 is not in 1..=100"),
        (vec!["console", "--starts", "101"], "101 is not in 1..=100"),
        (
            vec!["console", "--interval-ms", "9"],
            "9 is not in 10..=10000",
        ),
        (vec!["gateway", "--prompts", "0"], "0 is not in 1..=1000000"),
        (vec!["acp", "--runs", "0"], "0 is not in 1..=1000"),
        (vec!["acp", "--turns", "0"], "0 is not in 1..=1000000"),
        (
            vec!["activations", "--tracing-layer", "fast"],
            "[possible values: subagents, activating, defaults, registry]",
        ),
        (
            vec!["activations", "--tracing-sides", "neither"],
            "[possible values: both, off, on]",
        ),
        (
            vec!["append", "--only-mode", "volatile"],
            "[possible values: sync, buffered]",
        ),
        (
            vec!["append", "--only-appenders", "2"],
            "1 or 64: the table's rows",
        ),
        (
            vec!["append", "--only-batch", "0"],
            "1 or 64: the table's rows",
        ),
    ];
    for (part_args, message) in cases {
        let args = part_args;
        let output = Command::new(env!("CARGO_BIN_EXE_subagents-bench"))
            .args(&args)
            .output()
            .expect("run subagents-bench");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: invalid value"),
            "{args:?}: {stderr}"
        );
        assert_eq!(stdout, "", "{args:?} measured nothing");
    }
}

/// Runs `subagents-bench` with `args`, which it must refuse (exit 1) with
/// `message` before measuring anything.
fn refused_before_measuring(args: &[&str], message: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_subagents-bench"))
        .args(args)
        .output()
        .expect("run subagents-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(stderr.contains(message), "{args:?}: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "",
        "{args:?} measured nothing"
    );
}

#[test]
fn a_shared_host_needs_a_postgres_store_and_is_refused_before_measuring() {
    refused_before_measuring(
        &["activations", "--shared"],
        "--shared needs --store postgres",
    );
}

#[test]
fn append_filters_that_match_no_row_are_refused_before_measuring() {
    refused_before_measuring(
        &["append", "--only-appenders", "64", "--only-batch", "64"],
        "no row of the table matches the --only-* filters",
    );
}

/// `--only-*` runs the rows it names and no other: one row here, with
/// every figure measured.
#[test]
fn append_filters_run_only_the_rows_they_name() {
    let output = Command::new(env!("CARGO_BIN_EXE_subagents-bench"))
        .args([
            "append",
            "--only-mode",
            "buffered",
            "--only-batch",
            "1",
            "--only-appenders",
            "1",
            "--runs",
            "1",
            "--scale",
            "0.01",
            "--no-sqlite",
        ])
        .output()
        .expect("run subagents-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rows = table_rows(&stdout);
    assert_eq!(rows.len(), 1, "{stdout}");
    // Mode, appenders, batch, events, then the engine's and raw's
    // "median (min–max)" and their ratio.
    assert_eq!(rows[0][..3], ["Buffered", "1", "1"], "{stdout}");
    for rate in [rows[0][4], rows[0][6]] {
        assert!(rate.parse::<f64>().is_ok_and(|rate| rate > 0.0), "{stdout}");
    }
}

#[test]
fn the_tracing_table_alone_runs_on_rocksdb_and_is_refused_elsewhere_before_measuring() {
    refused_before_measuring(
        &["activations", "--tracing-only", "--store", "postgres"],
        "--tracing-only runs on RocksDB",
    );
}

/// The tracing table alone, one side: each row has that side's rate and
/// CPU, "-" for the other side and the ratios (and the run's own check,
/// that its events carry a trace context exactly when tracing is on,
/// passed).
#[test]
fn the_tracing_table_runs_one_side_alone() {
    for side in ["on", "off"] {
        let stdout = tracing_table(&["--tracing-sides", side]);
        assert!(!stdout.contains("one-shot activations"), "{stdout}");
        let rows = table_rows(&stdout);
        assert_eq!(rows.len(), 2, "{stdout}");
        for row in rows {
            // After mode, starters and count: a side that ran is two words,
            // "median (min–max)"; one that did not, and each ratio, is "-".
            // Rates, then CPU.
            let cells = &row[3..];
            assert_eq!(cells.len(), 8, "{row:?}");
            let (rate, cpu) = if side == "on" {
                assert_eq!(
                    [cells[0], cells[3], cells[4], cells[7]],
                    ["-"; 4],
                    "{row:?}"
                );
                (cells[1], cells[5])
            } else {
                assert_eq!(
                    [cells[2], cells[3], cells[6], cells[7]],
                    ["-"; 4],
                    "{row:?}"
                );
                (cells[0], cells[4])
            };
            assert!(rate.parse::<f64>().is_ok_and(|rate| rate > 0.0), "{row:?}");
            assert!(cpu.parse::<f64>().is_ok_and(|cpu| cpu >= 0.0), "{row:?}");
        }
    }
}

/// The tracing table with no OpenTelemetry layer (`--tracing-layer
/// registry`): both sides run, and the run's own checks pass (spans were
/// built in the registry exactly when tracing was on, and no event kept a
/// trace context on either side); the header says what "on" was.
#[test]
fn the_tracing_table_with_the_registry_alone_builds_spans_only_when_on() {
    let stdout = tracing_table(&["--tracing-layer", "registry"]);
    assert!(
        stdout.contains("spans built in tracing-subscriber's registry, no OpenTelemetry layer"),
        "{stdout}"
    );
    let rows = table_rows(&stdout);
    assert_eq!(rows.len(), 2, "{stdout}");
    for row in rows {
        // Mode, starters, count; each side's rate as "median (min–max)",
        // their ratio; each side's CPU likewise, their ratio.
        assert_eq!(row.len(), 13, "{row:?}");
        for at in [3, 5, 7] {
            assert!(
                row[at].parse::<f64>().is_ok_and(|rate| rate > 0.0),
                "{row:?}"
            );
        }
        // CPU time counts in 10 ms ticks, so a side this short may show
        // none, and their ratio then none either.
        for at in [8, 10] {
            assert!(
                row[at].parse::<f64>().is_ok_and(|cpu| cpu >= 0.0),
                "{row:?}"
            );
        }
        assert!(row[12].parse::<f64>().is_ok(), "{row:?}");
    }
}

/// Each OpenTelemetry layer the table measures runs, its header says which,
/// and the run's own check passed: the events keep a trace context exactly
/// when tracing was on.
#[test]
fn the_tracing_table_names_each_opentelemetry_layer_it_measures() {
    for (layer, header) in [
        (
            None,
            "the project's layer (subagent_runtime::otel), no exporter",
        ),
        (
            Some("activating"),
            "the project's layer with context activation, no exporter",
        ),
        (Some("defaults"), "the layer's defaults, no exporter"),
    ] {
        let args: Vec<&str> = layer.map_or_else(Vec::new, |layer| vec!["--tracing-layer", layer]);
        let stdout = tracing_table(&args);
        assert!(stdout.contains(header), "{layer:?}: {stdout}");
        assert_eq!(table_rows(&stdout).len(), 2, "{stdout}");
    }
}

/// The tracing table alone at the smallest scale, with `args`: what it
/// printed, once the run (and its own checks) succeeded.
fn tracing_table(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_subagents-bench"))
        .args([
            "activations",
            "--tracing-only",
            "--runs",
            "1",
            "--scale",
            "0.01",
        ])
        .args(args)
        .output()
        .expect("run subagents-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{args:?}: {stderr}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The rows of a table `subagents-bench` printed (those of a mode), each
/// split into its words.
fn table_rows(stdout: &str) -> Vec<Vec<&str>> {
    stdout
        .lines()
        .filter(|line| line.starts_with("Sync") || line.starts_with("Buffered"))
        .map(|line| line.split_whitespace().collect())
        .collect()
}

/// Runs a part on a small log and asserts that each of `rows` has a
/// positive median: the figures of fresh processes, which fail the part
/// if a child fails.
fn assert_rows_measured(args: &[&str], rows: &[&str]) {
    let output = Command::new(env!("CARGO_BIN_EXE_subagents-bench"))
        .args(args)
        .output()
        .expect("run subagents-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{args:?}: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    for row in rows {
        let line = stdout
            .lines()
            .find(|line| line.contains(row))
            .unwrap_or_else(|| panic!("no {row:?} in {stdout}"));
        let median = line[line.find(row).unwrap() + row.len()..]
            .split_whitespace()
            .next()
            .and_then(|median| median.parse::<f64>().ok());
        assert!(median.is_some_and(|figure| figure > 0.0), "{line}");
    }
}

/// `startup` times the open in fresh processes too (`open-once`, hidden),
/// each of which used the checkpoint, or the part fails.
#[test]
fn startup_times_the_open_in_fresh_processes() {
    assert_rows_measured(
        &["startup", "--events", "1000", "--runs", "2"],
        &[
            "in a fresh process: checkpoint + tail",
            "before it, opening the RocksDB log",
        ],
    );
}

/// `replay` times the fold in fresh processes too (`fold-once`, hidden),
/// from the log with its maps' sizes saved and without them, each of
/// which must print its rate, or the part fails (as it does when the
/// runtime-like close saved no sizes).
#[test]
fn replay_times_the_fold_in_fresh_processes() {
    assert_rows_measured(
        &["replay", "--events", "1000", "--runs", "2"],
        &[
            "the same, in a fresh process",
            "the same, no map sizes saved",
        ],
    );
}

/// Runs the hidden part `part` on a log with no events, which it refuses
/// with `empty_refusal`, and on a file that is not a log: both exit 1 with
/// nothing printed on stdout.
fn assert_refuses_an_empty_log_and_a_file(part: &str, empty_refusal: &str) {
    let empty = tempfile::tempdir().unwrap();
    let log = empty.path().join("log");
    drop(subagent_store::RocksLog::open(&log, subagent_store::RocksOptions::default()).unwrap());
    refused_before_measuring(&[part, "--data", log.to_str().unwrap()], empty_refusal);
    let file = empty.path().join("a-file");
    std::fs::write(&file, b"not a log").unwrap();
    refused_before_measuring(
        &[part, "--data", file.to_str().unwrap()],
        "is not a subagents log: it is not a directory",
    );
}

/// `fold-once` gives a rate only for a log with events: an empty log, or
/// a file that is not a log, is refused.
#[test]
fn fold_once_refuses_a_log_without_events() {
    assert_refuses_an_empty_log_and_a_file("fold-once", "the log holds no events");
    // It opens read-only, as `subagents replay` does: a directory with no
    // log in it is refused, not made into one.
    let empty = tempfile::tempdir().unwrap();
    refused_before_measuring(
        &["fold-once", "--data", empty.path().to_str().unwrap()],
        "there is no log there",
    );
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

/// `open-once` times only an open from a checkpoint: a log without one, or
/// a file that is not a log, is refused.
#[test]
fn open_once_refuses_a_log_without_a_checkpoint() {
    assert_refuses_an_empty_log_and_a_file("open-once", "the log holds no checkpoint");
}
