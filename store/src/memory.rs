//! [`MemoryLog`]: the in-memory backend, for tests and for hosts that want
//! the runtime without persistence. It stores the same encoded records as the
//! RocksDB backend and decodes them on read, so it exercises the same codec
//! and reports corruption the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use subagent_core::{EventId, NewEvent, RecordedEvent, StreamId};
use tokio::sync::watch;

use crate::admission::{admit, IdLocation, Verdict};
use crate::error::StoreError;
use crate::log::{good_prefix, AppendOutcome, AppendTicket, Durability, EventLog, ExpectedVersion};
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

    fn write(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: Vec<NewEvent>,
    ) -> Result<AppendOutcome, StoreError> {
        let mut state = self.state();
        let current = state
            .streams
            .get(&stream)
            .map_or(0, |positions| positions.len() as u64);
        let verdict = admit(&stream, expected, &events, current, |id| {
            Ok(state.ids.get(id).copied())
        })?;
        let current = match verdict {
            Verdict::AlreadyAppended(outcome) => return Ok(outcome),
            Verdict::Write { current } => current,
        };
        let recorded_at = unix_millis();
        let first_position = state.records.len() as u64 + 1;
        let mut encoded = Vec::with_capacity(events.len());
        for (offset, new) in events.into_iter().enumerate() {
            let record = new.into_record(
                first_position + offset as u64,
                stream,
                current + 1 + offset as u64,
                recorded_at,
            );
            encoded.push((
                record.position,
                record.version,
                record.event_id,
                record::encode(&record)?,
            ));
        }
        let count = encoded.len() as u64;
        for (position, version, event_id, bytes) in encoded {
            state.records.push(bytes);
            state.streams.entry(stream).or_default().push(position);
            state.ids.insert(
                event_id,
                IdLocation {
                    stream,
                    position,
                    version,
                },
            );
        }
        let last_position = first_position + count - 1;
        self.shared.head.send_replace(last_position);
        Ok(AppendOutcome {
            first_position,
            last_position,
            stream_version: current + count,
            deduplicated: false,
        })
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
    fn append(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: Vec<NewEvent>,
    ) -> AppendTicket {
        AppendTicket::ready(self.write(stream, expected, events))
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
