//! [`MemoryLog`]: the in-memory backend, for tests and for hosts that want
//! the runtime without persistence. It stores the same encoded records as the
//! RocksDB backend and decodes them on read, so it exercises the same codec
//! and reports corruption the same way.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use subagent_core::{Attachment, AttachmentId, EventId, RecordedEvent, StreamId};
use tokio::sync::watch;

use crate::append_check::{
    check_transaction, encode_records, next_position, place, IdLocation, TransactionVerdict,
};
use crate::error::StoreError;
use crate::indexes::{IndexDamage, IndexEntries, IndexEntry, LogIndex};
use crate::log::{
    good_prefix, AppendOutcome, CheckpointBytes, Durability, EventLog, StreamAppend,
    TransactionTicket,
};
use crate::record;
use crate::subscription::{self, Subscription};

#[derive(Default)]
struct State {
    /// Encoded records; index `i` holds position `i + 1`.
    records: Vec<Vec<u8>>,
    /// Positions of each stream's events, in version order.
    streams: HashMap<StreamId, Vec<u64>>,
    ids: HashMap<EventId, IdLocation>,
    checkpoints: HashMap<String, Vec<u8>>,
    attachments: BTreeMap<AttachmentId, Vec<u8>>,
}

struct Shared {
    state: Mutex<State>,
    head: watch::Sender<u64>,
}

/// An in-memory event log. Clones share one log.
#[derive(Clone)]
pub struct MemoryLog {
    shared: Arc<Shared>,
}

impl Default for MemoryLog {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLog {
    /// An empty log.
    #[must_use]
    pub fn new() -> Self {
        MemoryLog {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                head: watch::channel(0).0,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave `State` half-updated:
        // every mutation below is computed first and applied without panicking.
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Test hook: flips one bit of the stored record at `position`, as a
    /// failing disk would. Returns false if there is no such record.
    pub fn corrupt_record(&self, position: u64, byte: usize) -> bool {
        let mut state = self.state();
        let Some(bytes) = position
            .checked_sub(1)
            .and_then(|index| state.records.get_mut(usize::try_from(index).ok()?))
        else {
            return false;
        };
        let at = byte % bytes.len();
        bytes[at] ^= 0x10;
        true
    }

    /// Test hook: damages one index entry, as a stray write would. This
    /// backend keeps a stream's index as a list, so only damage that leaves
    /// no hole is possible: setting an existing version or the next one, or
    /// deleting the last. Returns false for any other.
    pub fn damage_index(&self, damage: IndexDamage) -> bool {
        let mut state = self.state();
        match damage {
            IndexDamage::Stream {
                stream,
                version,
                position,
            } => {
                let positions = state.streams.entry(stream).or_default();
                let Ok(index) = usize::try_from(version.saturating_sub(1)) else {
                    return false;
                };
                match position {
                    _ if version == 0 => false,
                    Some(position) if index < positions.len() => {
                        positions[index] = position;
                        true
                    }
                    Some(position) if index == positions.len() => {
                        positions.push(position);
                        true
                    }
                    None if index + 1 == positions.len() => {
                        positions.pop();
                        true
                    }
                    _ => false,
                }
            }
            IndexDamage::EventId { event_id, location } => {
                match location {
                    Some(location) => state.ids.insert(event_id, location),
                    None => state.ids.remove(&event_id),
                };
                true
            }
        }
    }

    /// Test hook: flips one bit of the stored attachment `id`, as a failing
    /// disk would. Returns false if there is no such attachment or it is empty.
    pub fn corrupt_attachment(&self, id: &AttachmentId) -> bool {
        let mut state = self.state();
        match state.attachments.get_mut(id) {
            Some(bytes) if !bytes.is_empty() => {
                bytes[0] ^= 0x10;
                true
            }
            _ => false,
        }
    }

    fn write(
        &self,
        parts: Vec<StreamAppend>,
        attachments: Vec<Attachment>,
    ) -> Result<Vec<AppendOutcome>, StoreError> {
        let mut state = self.state();
        let verdict = check_transaction(
            &parts,
            |stream| {
                Ok(state
                    .streams
                    .get(stream)
                    .map_or(0, |positions| positions.len() as u64))
            },
            |id| Ok(state.ids.get(id).copied()),
        )?;
        let currents = match verdict {
            TransactionVerdict::AlreadyAppended(outcomes) => return Ok(outcomes),
            TransactionVerdict::Write { currents } => currents,
        };
        let first_position = next_position(state.records.len() as u64)?;
        let (records, outcomes) = place(parts, &currents, first_position, unix_millis())?;
        let encoded = encode_records(&records)?;
        for (record, bytes) in records.iter().zip(encoded) {
            state.records.push(bytes);
            state
                .streams
                .entry(record.stream)
                .or_default()
                .push(record.position);
            state.ids.insert(
                record.event_id,
                IdLocation {
                    stream: record.stream,
                    position: record.position,
                    version: record.version,
                },
            );
        }
        for attachment in attachments {
            state
                .attachments
                .insert(attachment.id(), attachment.into_bytes());
        }
        crate::subscription::publish_head(&self.shared.head, state.records.len() as u64);
        Ok(outcomes)
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

impl EventLog for MemoryLog {
    fn append_with_attachments(
        &self,
        parts: Vec<StreamAppend>,
        attachments: Vec<Attachment>,
    ) -> TransactionTicket {
        TransactionTicket::ready(self.write(parts, attachments))
    }

    fn attachment(&self, id: &AttachmentId) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(bytes) = self.state().attachments.get(id).cloned() else {
            return Ok(None);
        };
        crate::log::check_attachment(id, bytes, "memory").map(Some)
    }

    fn attachment_ids(&self) -> Result<Vec<AttachmentId>, StoreError> {
        Ok(self.state().attachments.keys().copied().collect())
    }

    fn read_all_page(
        &self,
        from_position: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let state = self.state();
        let start = from_position.max(1);
        let skip = usize::try_from(start - 1).unwrap_or(usize::MAX);
        good_prefix(
            state
                .records
                .iter()
                .skip(skip)
                .take(limit)
                .zip(start..)
                .map(|(bytes, position)| record::decode(position, bytes)),
        )
    }

    fn read_stream_page(
        &self,
        stream: &StreamId,
        from_version: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let state = self.state();
        let Some(positions) = state.streams.get(stream) else {
            return Ok(Vec::new());
        };
        let skip = usize::try_from(from_version.max(1) - 1).unwrap_or(usize::MAX);
        good_prefix(positions.iter().skip(skip).take(limit).map(|&position| {
            let bytes = usize::try_from(position - 1)
                .ok()
                .and_then(|index| state.records.get(index))
                .ok_or_else(|| StoreError::Corrupt {
                    position,
                    reason: "stream index names a missing record".into(),
                })?;
            record::decode(position, bytes)
        }))
    }

    fn stream_version(&self, stream: &StreamId) -> Result<u64, StoreError> {
        Ok(self
            .state()
            .streams
            .get(stream)
            .map_or(0, |positions| positions.len() as u64))
    }

    fn head(&self) -> u64 {
        *self.shared.head.borrow()
    }

    fn watch_head(&self) -> watch::Receiver<u64> {
        self.shared.head.subscribe()
    }

    fn subscribe(&self, from_position: u64) -> Subscription {
        subscription::follow(self.clone(), self.shared.head.subscribe(), from_position)
    }

    fn subscribe_stream(&self, stream: StreamId, from_version: u64) -> Subscription {
        subscription::follow_stream(
            self.clone(),
            self.shared.head.subscribe(),
            stream,
            from_version,
        )
    }

    fn durability(&self) -> Durability {
        Durability::Volatile
    }

    fn read_checkpoint(&self, name: &str) -> Result<Option<CheckpointBytes<'_>>, StoreError> {
        Ok(self
            .state()
            .checkpoints
            .get(name)
            .cloned()
            .map(CheckpointBytes::from))
    }

    fn write_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.state()
            .checkpoints
            .insert(name.to_owned(), bytes.to_vec());
        Ok(())
    }

    fn index_entries(&self, index: LogIndex) -> IndexEntries<'_> {
        // A snapshot, sorted like the RocksDB backend's key order.
        let state = self.state();
        let entries: Vec<IndexEntry> = match index {
            LogIndex::Streams => {
                let mut streams: Vec<_> = state.streams.iter().collect();
                streams.sort_by_key(|(stream, _)| stream.to_string());
                streams
                    .into_iter()
                    .flat_map(|(stream, positions)| {
                        positions
                            .iter()
                            .zip(1..)
                            .map(|(&position, version)| IndexEntry::Stream {
                                stream: *stream,
                                version,
                                position,
                            })
                    })
                    .collect()
            }
            LogIndex::EventIds => {
                let mut ids: Vec<_> = state.ids.iter().collect();
                ids.sort_by_key(|(event_id, _)| **event_id);
                ids.into_iter()
                    .map(|(event_id, location)| IndexEntry::EventId {
                        event_id: *event_id,
                        location: *location,
                    })
                    .collect()
            }
        };
        Box::new(entries.into_iter().map(Ok))
    }

    fn locate_event(&self, event_id: &EventId) -> Result<Option<IdLocation>, StoreError> {
        Ok(self.state().ids.get(event_id).copied())
    }

    fn indexed_position(&self, stream: &StreamId, version: u64) -> Result<Option<u64>, StoreError> {
        let state = self.state();
        Ok(version
            .checked_sub(1)
            .and_then(|index| usize::try_from(index).ok())
            .and_then(|index| state.streams.get(stream)?.get(index).copied()))
    }
}
