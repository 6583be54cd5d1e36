//! [`MemoryLog`]: the in-memory backend, for tests and for hosts that want
//! the runtime without persistence. It stores the same encoded records as the
//! RocksDB backend and decodes them on read, so it exercises the same codec
//! and reports corruption the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use subagent_core::{EventId, RecordedEvent, StreamId};
use tokio::sync::watch;

use crate::admission::{admit_transaction, place, IdLocation, TransactionVerdict};
use crate::error::StoreError;
use crate::log::{
    good_prefix, AppendOutcome, Durability, EventLog, StreamAppend, TransactionTicket,
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

    fn write(&self, parts: Vec<StreamAppend>) -> Result<Vec<AppendOutcome>, StoreError> {
        let mut state = self.state();
        let verdict = admit_transaction(
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
        let first_position = state.records.len() as u64 + 1;
        let (records, outcomes) = place(parts, &currents, first_position, unix_millis());
        let encoded = records
            .iter()
            .map(|record| record::encode(record).map(|bytes| (record, bytes)))
            .collect::<Result<Vec<_>, _>>()?;
        for (record, bytes) in encoded {
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
        self.shared.head.send_replace(state.records.len() as u64);
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
    fn append_atomic(&self, parts: Vec<StreamAppend>) -> TransactionTicket {
        TransactionTicket::ready(self.write(parts))
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
        subscription::spawn(self.clone(), self.shared.head.subscribe(), from_position)
    }

    fn durability(&self) -> Durability {
        Durability::Volatile
    }

    fn read_checkpoint(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.state().checkpoints.get(name).cloned())
    }

    fn write_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.state()
            .checkpoints
            .insert(name.to_owned(), bytes.to_vec());
        Ok(())
    }
}
