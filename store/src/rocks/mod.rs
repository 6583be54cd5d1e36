//! [`RocksLog`]: the embedded RocksDB backend, the default.
//!
//! Layout of the column families: [`keys`]. Writes go through one writer
//! thread that group-commits ([`writer`]); reads run concurrently on the
//! caller's thread. Opening a directory another process holds fails with
//! [`StoreError::Locked`].

mod indexes;
mod keys;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rocksdb::{
    BlockBasedOptions, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Options, DB,
};
use subagent_core::{EventId, RecordedEvent, StreamId};
use tokio::sync::watch;

use crate::admission::IdLocation;
use crate::error::StoreError;
use crate::indexes::{IndexEntries, LogIndex};
use crate::log::{good_prefix, Durability, EventLog, StreamAppend, TransactionTicket};
use crate::record;
use crate::subscription::{self, Subscription};
use writer::{AppendRequest, Writer};

/// Options of a RocksDB log.
#[derive(Clone, Copy, Debug, Default)]
pub struct RocksOptions {
    /// When appends are acknowledged.
    pub durability: Durability,
}

struct Shared {
    db: Arc<DB>,
    path: PathBuf,
    durability: Durability,
    head: Arc<watch::Sender<u64>>,
    requests: Mutex<Option<mpsc::Sender<AppendRequest>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the channel stops the writer after it commits what is queued;
        // joining makes "the last handle is dropped" mean "the directory is free".
        if let Ok(mut requests) = self.requests.lock() {
            requests.take();
        }
        if let Some(handle) = self.writer.lock().ok().and_then(|mut writer| writer.take()) {
            let _ = handle.join();
        }
    }
}

/// A RocksDB-backed event log. Clones share one database; the directory is
/// released when the last clone (including live subscriptions) is dropped.
#[derive(Clone)]
pub struct RocksLog {
    shared: Arc<Shared>,
}

fn family<'a>(db: &'a DB, name: &str) -> Result<&'a ColumnFamily, StoreError> {
    db.cf_handle(name)
        .ok_or_else(|| StoreError::Io(format!("column family {name} is missing")))
}

fn map_rocks_error(err: rocksdb::Error, position: u64) -> StoreError {
    match err.kind() {
        rocksdb::ErrorKind::Corruption => StoreError::Corrupt {
            position,
            reason: err.into_string(),
        },
        _ => StoreError::Io(err.into_string()),
    }
}

fn read_stream_version(db: &DB, stream: &StreamId) -> Result<u64, StoreError> {
    let mut iter = db.raw_iterator_cf(family(db, keys::CF_STREAMS)?);
    iter.seek_for_prev(keys::stream_key(stream, u64::MAX));
    let prefix = keys::stream_prefix(stream);
    let version = match iter.key() {
        Some(key) if key.starts_with(&prefix) => keys::decode_u64(&key[prefix.len()..]),
        _ => Some(0),
    };
    iter.status().map_err(|err| map_rocks_error(err, 0))?;
    version.ok_or_else(|| StoreError::Corrupt {
        position: 0,
        reason: format!("stream index key of {stream} does not decode"),
    })
}

impl RocksLog {
    /// Opens (creating if needed) the log in `path`.
    ///
    /// # Errors
    /// [`StoreError::Locked`] if another process or handle has it open,
    /// [`StoreError::UnsupportedFormat`] for a directory of another format,
    /// [`StoreError::Corrupt`] if the head marker disagrees with the records,
    /// [`StoreError::Io`] otherwise.
    pub fn open(path: impl AsRef<Path>, options: RocksOptions) -> Result<RocksLog, StoreError> {
        let path = path.as_ref().to_path_buf();
        let mut db_options = Options::default();
        db_options.create_if_missing(true);
        db_options.create_missing_column_families(true);
        db_options.set_compression_type(DBCompressionType::Lz4);
        let families = keys::ALL_FAMILIES.map(|name| {
            let mut family_options = Options::default();
            family_options.set_compression_type(DBCompressionType::Lz4);
            let mut table = BlockBasedOptions::default();
            table.set_bloom_filter(10.0, false);
            family_options.set_block_based_table_factory(&table);
            ColumnFamilyDescriptor::new(name, family_options)
        });
        let db = DB::open_cf_descriptors(&db_options, &path, families).map_err(|err| {
            let text = err.clone().into_string();
            if text.contains("lock") || text.contains("LOCK") {
                StoreError::Locked {
                    path: path.display().to_string(),
                }
            } else {
                map_rocks_error(err, 0)
            }
        })?;
        let head = Self::check_format_and_head(&db)?;
        let db = Arc::new(db);
        let head_watch = Arc::new(watch::channel(head).0);
        let (sender, receiver) = mpsc::channel();
        let writer = Writer::new(
            Arc::clone(&db),
            head,
            options.durability,
            Arc::clone(&head_watch),
        );
        let handle = std::thread::Builder::new()
            .name("subagents-log-writer".into())
            .spawn(move || writer.run(&receiver))
            .map_err(|err| StoreError::Io(format!("starting the writer thread: {err}")))?;
        Ok(RocksLog {
            shared: Arc::new(Shared {
                db,
                path,
                durability: options.durability,
                head: head_watch,
                requests: Mutex::new(Some(sender)),
                writer: Mutex::new(Some(handle)),
            }),
        })
    }

    fn check_format_and_head(db: &DB) -> Result<u64, StoreError> {
        let meta = family(db, keys::CF_META)?;
        let io = |err| map_rocks_error(err, 0);
        match db.get_cf(meta, keys::META_FORMAT).map_err(io)? {
            None => db
                .put_cf(meta, keys::META_FORMAT, keys::FORMAT_VERSION.to_be_bytes())
                .map_err(io)?,
            Some(bytes) => {
                let found = keys::decode_u64(&bytes).unwrap_or(u64::MAX);
                if found != keys::FORMAT_VERSION {
                    return Err(StoreError::UnsupportedFormat {
                        found,
                        supported: keys::FORMAT_VERSION,
                    });
                }
            }
        }
        let head = match db.get_cf(meta, keys::META_HEAD).map_err(io)? {
            None => 0,
            Some(bytes) => keys::decode_u64(&bytes).ok_or_else(|| StoreError::Corrupt {
                position: 0,
                reason: "head marker does not decode".into(),
            })?,
        };
        let mut last = db.raw_iterator_cf(family(db, keys::CF_LOG)?);
        last.seek_to_last();
        let last_position = match last.key() {
            Some(key) => keys::decode_u64(key).unwrap_or(u64::MAX),
            None => 0,
        };
        last.status().map_err(io)?;
        if last_position != head {
            return Err(StoreError::Corrupt {
                position: last_position,
                reason: format!(
                    "head marker says {head} but the last record is at {last_position}"
                ),
            });
        }
        Ok(head)
    }

    /// The directory of this log.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Test and tooling hook: overwrites the stored bytes of the record at
    /// `position` by flipping one bit of byte `byte`, as a failing disk would.
    /// Bypasses the writer; use only on a quiescent log.
    ///
    /// # Errors
    /// IO failure, or [`StoreError::Corrupt`] if there is no such record.
    pub fn corrupt_record(&self, position: u64, byte: usize) -> Result<(), StoreError> {
        let db = &self.shared.db;
        let log = family(db, keys::CF_LOG)?;
        let key = keys::position_key(position);
        let mut bytes = db
            .get_cf(log, key)
            .map_err(|err| map_rocks_error(err, position))?
            .ok_or_else(|| StoreError::Corrupt {
                position,
                reason: "no such record".into(),
            })?;
        let at = byte % bytes.len().max(1);
        bytes[at] ^= 0x10;
        db.put_cf(log, key, bytes)
            .map_err(|err| map_rocks_error(err, position))
    }
}

impl EventLog for RocksLog {
    fn append_atomic(&self, parts: Vec<StreamAppend>) -> TransactionTicket {
        let (reply, ticket) = TransactionTicket::channel();
        let request = AppendRequest { parts, reply };
        let sent = match self.shared.requests.lock() {
            Ok(requests) => requests.as_ref().map(|sender| sender.send(request).is_ok()),
            Err(_) => None,
        };
        match sent {
            Some(true) => ticket,
            _ => TransactionTicket::ready(Err(StoreError::Closed)),
        }
    }

    fn read_all_page(
        &self,
        from_position: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let db = &self.shared.db;
        let from = from_position.max(1);
        let mut iter = db.raw_iterator_cf(family(db, keys::CF_LOG)?);
        iter.seek(keys::position_key(from));
        let mut page = Vec::with_capacity(limit.min(4096));
        let mut expected = from;
        while page.len() < limit {
            let (Some(key), Some(value)) = (iter.key(), iter.value()) else {
                break;
            };
            let decoded = match keys::decode_u64(key) {
                Some(position) if position == expected => record::decode(position, value),
                Some(position) => Err(StoreError::Corrupt {
                    position: expected,
                    reason: format!("gap in the log: next record is at {position}"),
                }),
                None => Err(StoreError::Corrupt {
                    position: expected,
                    reason: "log key does not decode".into(),
                }),
            };
            match decoded {
                Ok(record) => page.push(record),
                Err(err) if page.is_empty() => return Err(err),
                Err(_) => return Ok(page),
            }
            let Some(after) = expected.checked_add(1) else {
                // Nothing follows u64::MAX (only a damaged log gets there).
                return Ok(page);
            };
            expected = after;
            iter.next();
        }
        iter.status()
            .map_err(|err| map_rocks_error(err, expected))?;
        Ok(page)
    }

    fn read_stream_page(
        &self,
        stream: &StreamId,
        from_version: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let db = &self.shared.db;
        let prefix = keys::stream_prefix(stream);
        let mut iter = db.raw_iterator_cf(family(db, keys::CF_STREAMS)?);
        iter.seek(keys::stream_key(stream, from_version.max(1)));
        let mut positions = Vec::new();
        while positions.len() < limit {
            let (Some(key), Some(value)) = (iter.key(), iter.value()) else {
                break;
            };
            if !key.starts_with(&prefix) {
                break;
            }
            positions.push(keys::decode_u64(value).ok_or_else(|| StoreError::Corrupt {
                position: 0,
                reason: format!("stream index entry of {stream} does not decode"),
            })?);
            iter.next();
        }
        iter.status().map_err(|err| map_rocks_error(err, 0))?;
        let log = family(db, keys::CF_LOG)?;
        let keys: Vec<[u8; 8]> = positions.iter().map(|p| keys::position_key(*p)).collect();
        let values = db.batched_multi_get_cf(log, &keys, false);
        good_prefix(positions.iter().zip(values).map(|(&position, value)| {
            match value.map_err(|err| map_rocks_error(err, position))? {
                Some(bytes) => record::decode(position, &bytes),
                None => Err(StoreError::Corrupt {
                    position,
                    reason: "stream index names a missing record".into(),
                }),
            }
        }))
    }

    fn stream_version(&self, stream: &StreamId) -> Result<u64, StoreError> {
        read_stream_version(&self.shared.db, stream)
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
        self.shared.durability
    }

    fn read_checkpoint(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let db = &self.shared.db;
        db.get_cf(family(db, keys::CF_META)?, keys::checkpoint_key(name))
            .map_err(|err| map_rocks_error(err, 0))
    }

    fn write_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let db = &self.shared.db;
        let mut options = rocksdb::WriteOptions::default();
        options.set_sync(self.shared.durability == Durability::Sync);
        db.put_cf_opt(
            family(db, keys::CF_META)?,
            keys::checkpoint_key(name),
            bytes,
            &options,
        )
        .map_err(|err| map_rocks_error(err, 0))
    }

    fn index_entries(&self, index: LogIndex) -> IndexEntries<'_> {
        indexes::entries(&self.shared.db, index)
    }

    fn locate_event(&self, event_id: &EventId) -> Result<Option<IdLocation>, StoreError> {
        indexes::locate_event(&self.shared.db, event_id)
    }

    fn indexed_position(&self, stream: &StreamId, version: u64) -> Result<Option<u64>, StoreError> {
        indexes::indexed_position(&self.shared.db, stream, version)
    }
}
