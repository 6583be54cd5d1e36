//! Waiting for the runtime's background work (drivers, settlement, notices)
//! to show: one polling loop with one deadline, so a test that waits never
//! hangs and always says what it waited for.

use std::time::{Duration, Instant};

/// Polls `done` every 5 ms until it holds; panics naming `what` after 10 s.
pub(crate) async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
