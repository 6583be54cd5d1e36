//! [`ReplayError`]: failures of the replay tools, each a readable message.

use subagent_core::SessionId;
use subagent_store::StoreError;
use thiserror::Error;

/// A failure of a replay operation.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// The log could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A position beyond the end of the log was requested.
    #[error("position {at} is past the head of the log ({head})")]
    PositionPastHead {
        /// Requested.
        at: u64,
        /// The head.
        head: u64,
    },
    /// A session id that the log does not know.
    #[error("unknown session {0}")]
    UnknownSession(SessionId),
    /// Import needs an empty log.
    #[error("the target log is not empty (head {0}); import only into an empty log")]
    NotEmpty(u64),
    /// An import line is not a record, or records are out of order.
    #[error("import line {line}: {reason}")]
    BadImport {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// Writing the export failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}
