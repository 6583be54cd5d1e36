//! The `streams` and `event_ids` column families as [`crate::indexes`]
//! exposes them: every entry decoded (or reported as undecodable), point
//! lookups, and the [`RocksLog::damage_index`] test hook.

use rocksdb::{IteratorMode, DB};
use subagent_core::{EventId, StreamId};

use super::keys::{self, CF_EVENT_IDS, CF_STREAMS};
use super::{family, map_rocks_error, RocksLog};
use crate::append_check::IdLocation;
use crate::error::StoreError;
use crate::indexes::{IndexDamage, IndexEntries, IndexEntry, LogIndex};

fn corrupt(index: LogIndex, reason: String) -> StoreError {
    StoreError::CorruptIndex {
        index: index.name(),
        reason,
    }
}

fn decode_entry(index: LogIndex, key: &[u8], value: &[u8]) -> Result<IndexEntry, StoreError> {
    match index {
        LogIndex::Streams => {
            let (stream, version) = keys::decode_stream_key(key).ok_or_else(|| {
                corrupt(
                    index,
                    format!("key {:?} does not decode", String::from_utf8_lossy(key)),
                )
            })?;
            let position = keys::decode_u64(value).ok_or_else(|| {
                corrupt(
                    index,
                    format!("the position of version {version} of {stream} does not decode"),
                )
            })?;
            Ok(IndexEntry::Stream {
                stream,
                version,
                position,
            })
        }
        LogIndex::EventIds => {
            let event_id = keys::decode_event_id_key(key).ok_or_else(|| {
                corrupt(
                    index,
                    format!("a key of {} bytes is not an event id", key.len()),
                )
            })?;
            let location = keys::decode_location(value).ok_or_else(|| {
                corrupt(
                    index,
                    format!("the location of event {event_id} does not decode"),
                )
            })?;
            Ok(IndexEntry::EventId { event_id, location })
        }
    }
}

fn family_name(index: LogIndex) -> &'static str {
    match index {
        LogIndex::Streams => CF_STREAMS,
        LogIndex::EventIds => CF_EVENT_IDS,
    }
}

/// Every entry of `index` in key order.
pub(super) fn entries(db: &DB, index: LogIndex) -> IndexEntries<'_> {
    let family = match family(db, family_name(index)) {
        Ok(family) => family,
        Err(err) => return Box::new(std::iter::once(Err(err))),
    };
    let mut failed = false;
    Box::new(
        db.iterator_cf(family, IteratorMode::Start)
            .map_while(move |item| {
                if failed {
                    return None;
                }
                Some(match item {
                    Ok((key, value)) => decode_entry(index, &key, &value),
                    Err(err) => {
                        failed = true;
                        Err(map_rocks_error(err, 0, db.path()))
                    }
                })
            }),
    )
}

/// The event-id index entry of `event_id`.
pub(super) fn locate_event(db: &DB, event_id: &EventId) -> Result<Option<IdLocation>, StoreError> {
    let value = db
        .get_pinned_cf(family(db, CF_EVENT_IDS)?, keys::event_id_key(event_id))
        .map_err(|err| map_rocks_error(err, 0, db.path()))?;
    value
        .map(|bytes| {
            keys::decode_location(&bytes).ok_or_else(|| {
                corrupt(
                    LogIndex::EventIds,
                    format!("the location of event {event_id} does not decode"),
                )
            })
        })
        .transpose()
}

/// The stream index entry of `version` of `stream`.
pub(super) fn indexed_position(
    db: &DB,
    stream: &StreamId,
    version: u64,
) -> Result<Option<u64>, StoreError> {
    let value = db
        .get_pinned_cf(family(db, CF_STREAMS)?, keys::stream_key(stream, version))
        .map_err(|err| map_rocks_error(err, 0, db.path()))?;
    value
        .map(|bytes| {
            keys::decode_u64(&bytes).ok_or_else(|| {
                corrupt(
                    LogIndex::Streams,
                    format!("the position of version {version} of {stream} does not decode"),
                )
            })
        })
        .transpose()
}

impl RocksLog {
    /// Test and tooling hook: damages one index entry, as a stray write or a
    /// failing disk would. Bypasses the writer (whose cached stream versions
    /// and id ceiling it does not update: an id planted above the ceiling is
    /// not seen by later appends); use only on a quiescent log.
    ///
    /// # Errors
    /// IO failure.
    pub fn damage_index(&self, damage: IndexDamage) -> Result<(), StoreError> {
        let db = &self.shared.db;
        let io = |err| map_rocks_error(err, 0, db.path());
        match damage {
            IndexDamage::Stream {
                stream,
                version,
                position,
            } => {
                let (family, key) = (family(db, CF_STREAMS)?, keys::stream_key(&stream, version));
                match position {
                    Some(position) => db.put_cf(family, key, position.to_be_bytes()),
                    None => db.delete_cf(family, key),
                }
                .map_err(io)
            }
            IndexDamage::EventId { event_id, location } => {
                let (family, key) = (family(db, CF_EVENT_IDS)?, keys::event_id_key(&event_id));
                match location {
                    Some(location) => db.put_cf(family, key, keys::encode_location(&location)),
                    None => db.delete_cf(family, key),
                }
                .map_err(io)
            }
        }
    }
}
