//! The log's two indexes as a backend exposes them for verification: every
//! stored entry ([`IndexEntry`], listed by [`EventLog::index_entries`]) and
//! point lookups ([`EventLog::locate_event`], [`EventLog::indexed_position`]).
//! The replay crate's `verify` checks them against the records without
//! knowing how a backend stores them. [`IndexDamage`] describes a damaged
//! entry for the backends' test hooks.
//!
//! [`EventLog::index_entries`]: crate::EventLog::index_entries
//! [`EventLog::locate_event`]: crate::EventLog::locate_event
//! [`EventLog::indexed_position`]: crate::EventLog::indexed_position

use subagent_core::{EventId, StreamId};

use crate::append_check::IdLocation;
use crate::error::StoreError;

/// One of the log's indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogIndex {
    /// Stream name and version → position.
    Streams,
    /// Event id → position, version and stream.
    EventIds,
}

impl LogIndex {
    /// Its name, as errors and reports print it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            LogIndex::Streams => "streams",
            LogIndex::EventIds => "event_ids",
        }
    }
}

/// One stored index entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexEntry {
    /// The stream index says version `version` of `stream` is at `position`.
    Stream {
        /// The stream.
        stream: StreamId,
        /// The version.
        version: u64,
        /// The position it names.
        position: u64,
    },
    /// The event-id index says `event_id` is at `location`.
    EventId {
        /// The event id.
        event_id: EventId,
        /// Where it names.
        location: IdLocation,
    },
}

/// Every entry of one index. An entry that does not decode is an
/// `Err(StoreError::CorruptIndex)` item, and the iteration goes on after it;
/// a read failure is an error item that ends it.
pub type IndexEntries<'a> = Box<dyn Iterator<Item = Result<IndexEntry, StoreError>> + 'a>;

/// A damaged index entry, for the backends' test and tooling hooks
/// (`RocksLog::damage_index`, `MemoryLog::damage_index`): what a failing disk
/// or a stray write could leave behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexDamage {
    /// Sets (`Some`) or deletes (`None`) the stream-index entry of `version`
    /// of `stream`.
    Stream {
        /// The stream.
        stream: StreamId,
        /// The version.
        version: u64,
        /// The position it will name, or `None` to delete it.
        position: Option<u64>,
    },
    /// Sets (`Some`) or deletes (`None`) the event-id index entry of `event_id`.
    EventId {
        /// The event id.
        event_id: EventId,
        /// The location it will name, or `None` to delete it.
        location: Option<IdLocation>,
    },
}
