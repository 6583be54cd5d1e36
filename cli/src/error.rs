//! [`CliError`]: the command line's own failures (its arguments, its files,
//! its stdout, the demo's waits), each one readable line naming its cause.

use std::path::PathBuf;

use thiserror::Error;

/// A failure found by the command line itself rather than a library below.
#[derive(Debug, Error)]
pub(crate) enum CliError {
    /// A file named on the command line could not be opened or created.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `diff --from` names a later position than `--to` (or the head).
    #[error("--from {from} is after {to_name} {to}")]
    FromAfterTo {
        /// The earlier position asked for.
        from: u64,
        /// `--to` or `the head`.
        to_name: &'static str,
        /// Its value.
        to: u64,
    },
    /// `log --from` starts beyond the end of the log or stream.
    #[error("--from {from} is past the end of {what} (last {last})")]
    FromPastEnd {
        /// Asked for.
        from: u64,
        /// `the log` or the stream.
        what: String,
        /// The last position or version.
        last: u64,
    },
    /// `log --stream` names a stream with no events.
    #[error("stream {0} is not in the log")]
    NoSuchStream(subagent_core::StreamId),
    /// The log is damaged; `salvage` is the way forward.
    #[error("{source}; `subagents salvage {} NEW_DIR` copies its intact prefix into a new log", dir.display())]
    Damaged {
        /// The damaged log.
        dir: PathBuf,
        /// The store's account of the damage.
        source: subagent_store::StoreError,
    },
    /// `serve` would listen beyond loopback without `--allow-remote`.
    #[error("{}: refusing to listen beyond loopback without --allow-remote", .0)]
    NotLoopback(std::net::SocketAddr),
    /// `verify` found differences (printed above).
    #[error("verification failed")]
    VerificationFailed,
    /// Writing the command's output failed (other than a closed pipe).
    #[error("writing to stdout: {0}")]
    Stdout(String),
    /// The demo's runtime failed while the demo waited for a step.
    #[error("while waiting for {what}: {cause}")]
    DemoStepFailed {
        /// The step.
        what: &'static str,
        /// The underlying failure, as the runtime reported it.
        cause: String,
    },
    /// The demo failed after the runtime reported a failure the error itself
    /// does not name (e.g. an aggregate of failed disposals).
    #[error("{error}; first failure reported: {cause}")]
    DemoFailed {
        /// The error the demo ended with.
        error: String,
        /// The first failure the runtime or the store reported.
        cause: String,
    },
    /// The runtime reported a failure while the demo was in a call that had
    /// not returned.
    #[error("stopped: the runtime reported a failure: {cause}")]
    DemoStopped {
        /// The first failure the runtime or the store reported.
        cause: String,
    },
    /// `serve`'s log failed and could not be reopened within the recovery
    /// policy's time.
    #[error("the store did not come back: {cause}")]
    StoreGone {
        /// Why the last reopen failed.
        cause: String,
    },
    /// A shutdown signal ended the command; its agents were ended with it.
    #[error("stopped by {}: every agent process was ended; the log keeps what was recorded, and the next open recovers the rest", signal.name())]
    Stopped {
        /// The signal.
        signal: crate::signals::Signal,
    },
    /// A demo step did not happen in time, and nothing reported a failure.
    #[error("timed out after {seconds} s waiting for {what} (no failure was reported)")]
    DemoTimeout {
        /// The step.
        what: &'static str,
        /// How long the demo waited.
        seconds: u64,
    },
}
