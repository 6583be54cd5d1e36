//! [`IndexAudit`]: `verify`'s check of the log's indexes against its records,
//! through the backend-neutral index API of [`EventLog`].
//!
//! While `verify` folds the records, each one must have its stream-index
//! entry and its event-id entry, both pointing back at it, and each stream's
//! versions must run 1, 2, 3, ... in position order. Afterwards every stored
//! entry is listed: a stream entry whose version no record of its stream has,
//! or an event-id entry beyond the records' own (found by counting, then
//! named by reading the record it points at), points at nothing or
//! elsewhere. A record's own entries were already checked by key, so the
//! listing needs no memory per record.

use std::collections::HashMap;

use subagent_core::{RecordedEvent, StreamId};
use subagent_store::{EventLog, IdLocation, IndexEntry, LogIndex, StoreError};

use crate::error::ReplayError;

/// The most problems listed; the rest are counted.
const MAX_LISTED: usize = 20;

/// Index problems found so far.
#[derive(Default)]
pub(crate) struct IndexAudit {
    /// The last version seen per stream.
    versions: HashMap<StreamId, u64>,
    records: u64,
    /// Records with no event-id entry at all.
    missing_ids: u64,
    problems: Vec<String>,
    unlisted: u64,
}

impl IndexAudit {
    fn problem(&mut self, text: String) {
        if self.problems.len() < MAX_LISTED {
            self.problems.push(text);
        } else {
            self.unlisted += 1;
        }
    }

    /// Checks the entries of one record (the next in position order).
    ///
    /// # Errors
    /// A read failure of the log other than a damaged index entry.
    pub(crate) fn record<L: EventLog + ?Sized>(
        &mut self,
        log: &L,
        record: &RecordedEvent,
    ) -> Result<(), ReplayError> {
        self.records += 1;
        let (position, stream, version) = (record.position, record.stream, record.version);
        let last = self.versions.insert(stream, version).unwrap_or(0);
        if last.checked_add(1) != Some(version) {
            self.problem(format!(
                "record at position {position} is version {version} of {stream}, after version {last}"
            ));
        }
        match tolerate(log.indexed_position(&stream, version))? {
            Ok(Some(indexed)) if indexed == position => {}
            Ok(Some(indexed)) => self.problem(format!(
                "streams index: version {version} of {stream} points at position {indexed}, not at its record at {position}"
            )),
            Ok(None) => self.problem(format!(
                "streams index: no entry for version {version} of {stream} (the record at position {position})"
            )),
            Err(damaged) => self.problem(format!("streams index: {damaged}")),
        }
        let expected = IdLocation {
            stream,
            position,
            version,
        };
        match tolerate(log.locate_event(&record.event_id))? {
            Ok(Some(location)) if location == expected => {}
            Ok(Some(location)) => self.problem(format!(
                "event_ids index: event {} points at position {} ({} version {}), not at its record at {position}",
                record.event_id, location.position, location.stream, location.version
            )),
            Ok(None) => {
                self.missing_ids += 1;
                self.problem(format!(
                    "event_ids index: no entry for event {} (the record at position {position})",
                    record.event_id
                ));
            }
            Err(damaged) => self.problem(format!("event_ids index: {damaged}")),
        }
        Ok(())
    }

    /// Lists every stored entry for the ones that name no record, and
    /// returns every problem found.
    ///
    /// # Errors
    /// A read failure of the log other than a damaged index entry.
    pub(crate) fn finish<L: EventLog + ?Sized>(
        mut self,
        log: &L,
    ) -> Result<Vec<String>, ReplayError> {
        for entry in log.index_entries(LogIndex::Streams) {
            match tolerate(entry)? {
                Ok(IndexEntry::Stream {
                    stream,
                    version,
                    position,
                }) => {
                    let count = self.versions.get(&stream).copied().unwrap_or(0);
                    if version == 0 || version > count {
                        self.problem(format!(
                            "streams index: version {version} of {stream} points at position {position}, but the stream has {count} record(s)"
                        ));
                    }
                }
                Ok(other) => self.problem(format!("streams index holds {other:?}")),
                Err(damaged) => self.problem(damaged.to_string()),
            }
        }
        // Every record's own id is a key of the index, except the missing
        // ones; any entry beyond those names no record.
        let mut stored = 0u64;
        for entry in log.index_entries(LogIndex::EventIds) {
            match tolerate(entry)? {
                Ok(_) => stored += 1,
                Err(damaged) => self.problem(damaged.to_string()),
            }
        }
        if stored > self.records - self.missing_ids {
            self.name_stray_ids(log)?;
        }
        if self.unlisted > 0 {
            let unlisted = self.unlisted;
            self.problems
                .push(format!("... and {unlisted} more index problem(s)"));
        }
        Ok(self.problems)
    }

    /// Names the event-id entries whose record does not carry their id.
    fn name_stray_ids<L: EventLog + ?Sized>(&mut self, log: &L) -> Result<(), ReplayError> {
        for entry in log.index_entries(LogIndex::EventIds) {
            let Ok(IndexEntry::EventId { event_id, location }) = tolerate(entry)? else {
                continue;
            };
            let named = match log.read_all_page(location.position, 1) {
                Ok(page) => page.first().map(|record| record.event_id),
                Err(StoreError::Corrupt { .. }) => None,
                Err(err) => return Err(err.into()),
            };
            if named != Some(event_id) {
                self.problem(format!(
                    "event_ids index: event {event_id} points at position {}, which holds no such event",
                    location.position
                ));
            }
        }
        Ok(())
    }
}

/// Separates a damaged index entry (a finding) from a failure to read.
fn tolerate<T>(result: Result<T, StoreError>) -> Result<Result<T, StoreError>, ReplayError> {
    match result {
        Err(StoreError::CorruptIndex { .. }) => Ok(result),
        Err(err) => Err(err.into()),
        Ok(value) => Ok(Ok(value)),
    }
}
