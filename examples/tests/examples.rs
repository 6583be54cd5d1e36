//! Runs every example and compares what it prints with
//! `expected/NAME.txt`, so an example that breaks, or changes what it
//! shows, fails `make test`.
//!
//! `cargo test` builds the examples before it runs any test; a test run
//! that did not build them (`cargo test --test examples` alone) finds the
//! binary missing or older than its source and says so instead of running
//! a stale one. `SUBAGENTS_BLESS=1` rewrites the expected files from the
//! current output.

use std::path::{Path, PathBuf};
use std::process::Command;

const EXAMPLES: [&str; 7] = [
    "log",
    "embed",
    "delegate",
    "custom_provider",
    "messages",
    "observe",
    "replay",
];

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `<target>/<profile>/examples/NAME`, beside this test's `deps` folder.
fn binary(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    let profile = test
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from <profile>/deps");
    profile.join("examples").join(name)
}

fn run(name: &str) -> String {
    let binary = binary(name);
    let source = crate_dir().join(format!("{name}.rs"));
    let built = std::fs::metadata(&binary).and_then(|meta| meta.modified());
    let written = std::fs::metadata(&source)
        .and_then(|meta| meta.modified())
        .expect("the example's source");
    match built {
        Ok(built) if built >= written => {}
        _ => panic!(
            "{} is missing or older than {}: build the examples first (`cargo test --workspace` does, or `cargo build --workspace --examples`)",
            binary.display(),
            source.display()
        ),
    }
    let output = Command::new(&binary)
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", binary.display()));
    let stdout = String::from_utf8(output.stdout).expect("UTF-8 output");
    assert!(
        output.status.success(),
        "example {name} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn check(name: &str) {
    let printed = run(name);
    let expected_path = crate_dir().join("expected").join(format!("{name}.txt"));
    if std::env::var_os("SUBAGENTS_BLESS").is_some() {
        std::fs::write(&expected_path, &printed).expect("writing the expected output");
        return;
    }
    let expected = std::fs::read_to_string(&expected_path)
        .unwrap_or_else(|error| panic!("{}: {error}", expected_path.display()));
    assert_eq!(
        printed,
        expected,
        "example {name} printed something other than {}",
        expected_path.display()
    );
}

#[test]
fn log_appends_retries_conflicts_reads_and_subscribes() {
    check("log");
}

#[test]
fn embed_runs_a_host_agent_child_to_its_result() {
    check("embed");
}

#[test]
fn delegate_has_a_host_agent_start_and_wait_for_a_child_through_the_tools() {
    check("delegate");
}

#[test]
fn custom_provider_runs_and_refuses_an_undeclared_option() {
    check("custom_provider");
}

#[test]
fn messages_steers_interrupts_and_cold_resumes() {
    check("messages");
}

#[test]
fn observe_sees_notices_the_inbox_and_the_log() {
    check("observe");
}

#[test]
fn replay_looks_back_diffs_and_verifies() {
    check("replay");
}

#[test]
fn every_example_is_checked() {
    let mut on_disk: Vec<String> = std::fs::read_dir(crate_dir())
        .expect("the crate folder")
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(".rs").map(str::to_owned))
        .collect();
    on_disk.sort();
    let mut checked: Vec<String> = EXAMPLES.iter().map(|name| (*name).to_owned()).collect();
    checked.sort();
    assert_eq!(on_disk, checked, "an example file without a check here");
}
