//! [`ReplayError`]: failures of the replay tools, each a readable message
//! with a stable code ([`ReplayError::code`]).

use std::path::PathBuf;

use subagent_core::{ErrorCode, SessionId};
use subagent_projections::HistoryViolation;
use subagent_store::StoreError;
use thiserror::Error;

/// A failure of a replay operation.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// The log could not be read or written.
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
    /// Import needs a new or empty directory.
    #[error("{} exists and is not empty; import only into a new or empty directory", .0.display())]
    DirectoryNotEmpty(PathBuf),
    /// An import line is not a record, or records are out of order.
    #[error("import line {line}: {reason}")]
    BadImport {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// An import line is longer than the largest event; it was not read whole.
    #[error("import line {line} is longer than the {limit}-byte event limit")]
    LineTooLong {
        /// 1-based line number.
        line: usize,
        /// The limit ([`subagent_core::MAX_EVENT_BYTES`]).
        limit: usize,
    },
    /// The imported records are a history the state machine could not have
    /// produced.
    #[error("import line {line}: {violation}")]
    ImpossibleHistory {
        /// 1-based line number.
        line: usize,
        /// The broken rule.
        violation: HistoryViolation,
    },
    /// Reading the import or writing the export failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl ReplayError {
    /// Stable machine-readable code.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            ReplayError::Store(err) => err.code(),
            ReplayError::PositionPastHead { .. } => ErrorCode::ReplayPositionPastHead,
            ReplayError::UnknownSession(_) => ErrorCode::ReplayUnknownSession,
            ReplayError::NotEmpty(_) => ErrorCode::ReplayNotEmpty,
            ReplayError::DirectoryNotEmpty(_) => ErrorCode::ReplayDirectoryNotEmpty,
            ReplayError::BadImport { .. } => ErrorCode::ReplayBadImport,
            ReplayError::LineTooLong { .. } => ErrorCode::ReplayLineTooLong,
            ReplayError::ImpossibleHistory { violation, .. } => violation.code(),
            ReplayError::Io(_) => ErrorCode::ReplayIo,
        }
    }
}
