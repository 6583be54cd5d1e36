//! The greatest key of the `event_ids` index, kept by the writer so that
//! checking a fresh event id costs a comparison instead of a RocksDB read
//! (BENCHMARKS.md, "Fresh ids are not looked up").
//!
//! The index's keys are the ids' 16 bytes, ordered byte-wise, and new ids
//! are time-ordered (UUID v7, monotonic within a process): nearly every
//! appended id sorts above every id already indexed. An id above the
//! greatest key cannot be in the index, so the writer answers "absent"
//! without looking. An id at or below it (a retry, an imported id, an id
//! minted after the clock stepped back across a restart) is looked up as
//! before. The ceiling never comes down: one indexed id above the clock
//! (an id from a host whose clock ran fast, or any id that is not a UUID
//! v7, which sorts above v7 ids nearly always) has every later id looked
//! up, correct and as slow as before, until the clock passes it, or for
//! good (`CommitCounts::id_lookups` shows it).
//!
//! The ceiling is read from the index when the log opens and raised by
//! every committed group, before any later group is checked. It holds only
//! while every index entry is written by the writer: a test hook that plants
//! entries behind its back (`RocksLog::damage_index`) may plant one above
//! it, which the writer will not see.

use std::path::Path;

use rocksdb::DB;
use subagent_core::EventId;

use super::keys::{self, CF_EVENT_IDS};
use super::{family, map_rocks_error};
use crate::error::StoreError;

/// The greatest indexed event id, as its key; `None` while the index is
/// empty.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IdCeiling(Option<[u8; 16]>);

impl IdCeiling {
    /// The ceiling of the index as stored: its last key. A last key that is
    /// not an event id (a damaged index, which `verify` reports) gives the
    /// highest ceiling, under which every id is looked up, as before.
    ///
    /// # Errors
    /// IO failure, such as a damaged block.
    pub(crate) fn read(db: &DB, path: &Path) -> Result<IdCeiling, StoreError> {
        let mut last = db.raw_iterator_cf(family(db, CF_EVENT_IDS)?);
        last.seek_to_last();
        let key = last
            .key()
            .map(|key| <[u8; 16]>::try_from(key).unwrap_or([0xff; 16]));
        last.status().map_err(|err| map_rocks_error(err, 0, path))?;
        Ok(IdCeiling(key))
    }

    /// Whether `id` sorts above every indexed id, so it is not in the index.
    pub(crate) fn is_above(&self, id: &EventId) -> bool {
        self.0
            .is_none_or(|ceiling| keys::event_id_key(id) > ceiling)
    }

    /// Counts `id` as indexed: called with every id a commit wrote.
    pub(crate) fn raise(&mut self, id: &EventId) {
        if self.is_above(id) {
            self.0 = Some(keys::event_id_key(id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn id(first: u8, last: u8) -> EventId {
        let mut bytes = [0u8; 16];
        bytes[0] = first;
        bytes[15] = last;
        EventId::from_uuid(Uuid::from_bytes(bytes))
    }

    #[test]
    fn an_empty_index_has_every_id_above_it() {
        let ceiling = IdCeiling::default();
        assert!(ceiling.is_above(&id(0, 0)));
        assert!(ceiling.is_above(&EventId::new()));
    }

    #[test]
    fn only_ids_above_the_greatest_one_raised_are_above() {
        let mut ceiling = IdCeiling::default();
        ceiling.raise(&id(5, 0));
        ceiling.raise(&id(3, 9));
        assert!(!ceiling.is_above(&id(5, 0)), "the greatest itself");
        assert!(!ceiling.is_above(&id(3, 9)));
        assert!(!ceiling.is_above(&id(4, 255)), "below it, never indexed");
        assert!(ceiling.is_above(&id(5, 1)), "the last byte counts");
        assert!(ceiling.is_above(&id(6, 0)));
        // A lower id raised later does not lower it.
        assert_eq!(ceiling, IdCeiling(Some(keys::event_id_key(&id(5, 0)))));
    }

    #[test]
    fn new_ids_sort_above_the_ones_before_them() {
        let mut ceiling = IdCeiling::default();
        for _ in 0..1000 {
            let fresh = EventId::new();
            assert!(ceiling.is_above(&fresh));
            ceiling.raise(&fresh);
        }
    }

    #[test]
    fn the_ceiling_read_back_is_the_last_key_and_garbage_is_the_highest() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        let db = DB::open_cf(&options, dir.path(), [CF_EVENT_IDS]).unwrap();
        assert_eq!(IdCeiling::read(&db, dir.path()), Ok(IdCeiling(None)));
        let ids = family(&db, CF_EVENT_IDS).unwrap();
        for key in [id(2, 0), id(9, 1), id(7, 0)] {
            db.put_cf(ids, keys::event_id_key(&key), b"").unwrap();
        }
        assert_eq!(
            IdCeiling::read(&db, dir.path()),
            Ok(IdCeiling(Some(keys::event_id_key(&id(9, 1)))))
        );
        db.put_cf(ids, [0xff; 3], b"").unwrap();
        let ceiling = IdCeiling::read(&db, dir.path()).unwrap();
        assert!(!ceiling.is_above(&id(0xff, 0xff)), "every id is looked up");
    }
}
