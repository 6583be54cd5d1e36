//! [`StoreError`]: every way an append or a read can fail, each with a stable
//! code. A rejected append never changes the log.

use subagent_core::{ErrorCode, EventId, SessionId, StreamId};
use thiserror::Error;

use crate::log::ExpectedVersion;

/// A failure of the event log.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum StoreError {
    /// The stream's version is not the expected one.
    #[error("version conflict on {stream}: expected {expected}, actual {actual}")]
    Conflict {
        /// The stream appended to.
        stream: StreamId,
        /// What the caller expected.
        expected: ExpectedVersion,
        /// The stream's current version.
        actual: u64,
    },
    /// A record failed its checksum or did not decode.
    #[error("corrupt record at position {position}: {reason}")]
    Corrupt {
        /// The position of the bad record.
        position: u64,
        /// What was wrong.
        reason: String,
    },
    /// A record was written by a newer build with a schema this one cannot read.
    #[error("record at position {position} has unsupported schema: {reason}")]
    UnsupportedSchema {
        /// The record's position.
        position: u64,
        /// Detail.
        reason: String,
    },
    /// Another process (or handle) holds the log directory.
    #[error("the log at {path} is locked by another process")]
    Locked {
        /// The directory.
        path: String,
    },
    /// The log is of a format this build does not know: a RocksDB
    /// directory's format, or a PostgreSQL schema's version, newer than it.
    #[error("unsupported log format {found} (this build writes {supported})")]
    UnsupportedFormat {
        /// Found format.
        found: u64,
        /// Supported format.
        supported: u64,
    },
    /// An append carried no events.
    #[error("an append must carry at least one event")]
    EmptyAppend,
    /// Two parts of one atomic append name the same stream.
    #[error("an atomic append names {stream} twice")]
    RepeatedStream {
        /// The stream.
        stream: StreamId,
    },
    /// An event was appended to a stream of the wrong kind.
    #[error("{event_type} does not belong in {stream}")]
    MisplacedEvent {
        /// The stream.
        stream: StreamId,
        /// The event's type name.
        event_type: &'static str,
    },
    /// An event id is reused in a way that is not an idempotent retry: twice
    /// in one batch, in another stream, or in a batch that is only partly
    /// already appended.
    #[error("event id {event_id} conflicts with an earlier append: {reason}")]
    DuplicateEventId {
        /// The reused id.
        event_id: EventId,
        /// How it was reused.
        reason: &'static str,
    },
    /// The log's files are damaged beyond one record: a write-ahead log,
    /// MANIFEST or table file that fails its checksum, an index entry that
    /// does not decode, a head marker that disagrees with the records, or
    /// RocksDB files without `CURRENT`. Nothing was changed.
    #[error("the log at {path} is damaged: {reason}")]
    Damaged {
        /// The log directory.
        path: String,
        /// What is damaged, naming the file where RocksDB knows it.
        reason: String,
    },
    /// The path holds no log, and is not one that may become a log.
    #[error("{path} is not a subagents log: {reason}")]
    NotALog {
        /// The path.
        path: String,
        /// What is there instead.
        reason: String,
    },
    /// A write through a handle opened read-only.
    #[error("the log at {path} is open read-only")]
    ReadOnly {
        /// The log directory.
        path: String,
    },
    /// An event's encoded record is larger than [`subagent_core::MAX_EVENT_BYTES`].
    #[error("{event_type} of {bytes} bytes is larger than the {limit}-byte event limit")]
    EventTooLarge {
        /// The event's type name.
        event_type: &'static str,
        /// Its encoded record body's size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A position or stream version would pass `u64::MAX`: the numbers read
    /// from storage are damaged (no log grows that far).
    #[error("{what} {value} cannot be incremented: the stored numbering is damaged")]
    NumberingExhausted {
        /// What would overflow (`position`, `stream version`).
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// An index entry does not decode.
    #[error("{index} index entry does not decode: {reason}")]
    CorruptIndex {
        /// The index (`streams`, `event_ids`).
        index: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// A storage IO failure, naming the file and the OS error.
    #[error("storage failure: {0}")]
    Io(String),
    /// The log was closed (its writer has stopped).
    #[error("the log is closed")]
    Closed,
    /// An append presented the fence of a lease another holder has since
    /// taken (or one that never existed): its writer lost the tree.
    /// Nothing of the append was written.
    #[error("an append for tree {root} presented fencing token {presented}, but the tree's lease is at {current} (held by {holder:?}): this writer lost the tree")]
    Fenced {
        /// The tree's root.
        root: SessionId,
        /// The token the append presented.
        presented: u64,
        /// The lease's current token (0: no lease).
        current: u64,
        /// The lease's current holder (empty: no lease).
        holder: String,
    },
    /// Another holder's lease on the tree has not lapsed.
    #[error("tree {root} is leased to {holder:?} for {remaining:?} more")]
    LeaseHeld {
        /// The tree's root.
        root: SessionId,
        /// The holder.
        holder: String,
        /// How long until it lapses, on the server's clock.
        remaining: std::time::Duration,
    },
    /// A lease request no lease may have (see
    /// [`check_lease_request`](crate::lease::check_lease_request)).
    #[error("invalid lease request: {reason}")]
    InvalidLease {
        /// What is wrong.
        reason: &'static str,
    },
    /// The database server of a networked backend (PostgreSQL) could not
    /// be reached, or the connection to it was lost. Nothing of an append
    /// that fails this way is acknowledged; whether it was committed is
    /// unknown, so retry it with the same event ids (idempotent). The
    /// backend reconnects on the next use.
    #[error("the log's database is unavailable: {reason}")]
    Unavailable {
        /// What failed (the operation and the driver's error).
        reason: String,
    },
}

impl StoreError {
    /// Stable machine-readable code.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::Conflict { .. } => ErrorCode::StoreConflict,
            StoreError::Corrupt { .. } => ErrorCode::StoreCorrupt,
            StoreError::UnsupportedSchema { .. } => ErrorCode::StoreUnsupportedSchema,
            StoreError::Locked { .. } => ErrorCode::StoreLocked,
            StoreError::UnsupportedFormat { .. } => ErrorCode::StoreUnsupportedFormat,
            StoreError::EmptyAppend => ErrorCode::StoreEmptyAppend,
            StoreError::RepeatedStream { .. } => ErrorCode::StoreRepeatedStream,
            StoreError::MisplacedEvent { .. } => ErrorCode::StoreMisplacedEvent,
            StoreError::DuplicateEventId { .. } => ErrorCode::StoreDuplicateEventId,
            StoreError::Damaged { .. } => ErrorCode::StoreDamaged,
            StoreError::NotALog { .. } => ErrorCode::StoreNotALog,
            StoreError::ReadOnly { .. } => ErrorCode::StoreReadOnly,
            StoreError::EventTooLarge { .. } => ErrorCode::StoreEventTooLarge,
            StoreError::NumberingExhausted { .. } => ErrorCode::StoreNumberingExhausted,
            StoreError::CorruptIndex { .. } => ErrorCode::StoreCorruptIndex,
            StoreError::Io(_) => ErrorCode::StoreIo,
            StoreError::Closed => ErrorCode::StoreClosed,
            StoreError::Unavailable { .. } => ErrorCode::StoreUnavailable,
            StoreError::Fenced { .. } => ErrorCode::StoreFenced,
            StoreError::LeaseHeld { .. } => ErrorCode::StoreLeaseHeld,
            StoreError::InvalidLease { .. } => ErrorCode::StoreInvalidLease,
        }
    }
}
