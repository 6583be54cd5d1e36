//! Unit tests of `demo`, beside it so the module stays short.

use super::*;
use subagent_store::{RocksLog, RocksOptions};

fn empty_log() -> (tempfile::TempDir, RocksLog) {
    let dir = tempfile::tempdir().unwrap();
    let log = RocksLog::open(dir.path(), RocksOptions::default()).unwrap();
    (dir, log)
}

#[test]
fn a_wait_ends_with_the_reported_failure_rather_than_a_timeout() {
    let (_dir, log) = empty_log();
    let failures = FailureWatch::default();
    failures.report(
        "group commit failed (error: While appending to file: d/000004.log: File too large)".into(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // An hour's timeout and a step that never happens: only the failure
    // can end this wait.
    let err = runtime
        .block_on(wait_for(
            &log,
            &failures,
            "review",
            Duration::from_secs(3600),
            |_| false,
        ))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "while waiting for review: group commit failed (error: While appending to file: d/000004.log: File too large)"
    );
}

#[test]
fn a_wait_ends_when_a_failure_is_reported_during_it() {
    let (_dir, log) = empty_log();
    let failures = FailureWatch::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reporter = failures.clone();
    let err = runtime
        .block_on(async {
            tokio::spawn(async move { reporter.report("disk full at d/000004.log".into()) });
            wait_for(&log, &failures, "review", Duration::from_secs(3600), |_| {
                false
            })
            .await
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "while waiting for review: disk full at d/000004.log"
    );
}

#[test]
fn a_demo_stuck_after_a_reported_failure_ends_with_it() {
    let failures = FailureWatch::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reporter = failures.clone();
    let mut shutdown = {
        let _entered = runtime.enter();
        crate::signals::Shutdown::install().unwrap()
    };
    // A runtime call that never returns, and a failure reported meanwhile.
    let stuck = std::future::pending::<Result<(), Box<dyn std::error::Error>>>();
    let err = runtime
        .block_on(async {
            tokio::spawn(async move { reporter.report("disk full at d/000004.log".into()) });
            until_failure(&failures, &mut shutdown, stuck).await
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "stopped: the runtime reported a failure: disk full at d/000004.log"
    );
    // A demo that ends first keeps its own outcome.
    let done = runtime.block_on(until_failure(
        &FailureWatch::default(),
        &mut shutdown,
        async { Ok(7) },
    ));
    assert_eq!(done.unwrap(), 7);
}

#[test]
fn a_wait_with_no_failure_reported_times_out_saying_so() {
    let (_dir, log) = empty_log();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = runtime
        .block_on(wait_for(
            &log,
            &FailureWatch::default(),
            "review",
            Duration::ZERO,
            |_| false,
        ))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "timed out after 0 s waiting for review (no failure was reported)"
    );
}

#[test]
fn an_error_that_does_not_carry_the_reported_failure_is_given_it() {
    let failures = FailureWatch::default();
    let bare: Box<dyn std::error::Error> = "3 branches failed".into();
    assert_eq!(
        with_reported_cause(bare, &failures).to_string(),
        "3 branches failed"
    );
    failures.report("disk full at d/000004.log".into());
    let bare: Box<dyn std::error::Error> = "3 branches failed".into();
    assert_eq!(
        with_reported_cause(bare, &failures).to_string(),
        "3 branches failed; first failure reported: disk full at d/000004.log"
    );
    let carrying: Box<dyn std::error::Error> = "storage: disk full at d/000004.log".into();
    assert_eq!(
        with_reported_cause(carrying, &failures).to_string(),
        "storage: disk full at d/000004.log"
    );
}

#[test]
fn a_shell_word_is_plain_when_it_can_be_and_quoted_when_it_must() {
    assert_eq!(super::shell_word("./subagents-data"), "./subagents-data");
    assert_eq!(super::shell_word("/tmp/a b"), "'/tmp/a b'");
    assert_eq!(super::shell_word("it's"), r"'it'\''s'");
    assert_eq!(super::shell_word("$HOME"), "'$HOME'");
    assert_eq!(super::shell_word(""), "''");
}
