//! [`RocksLog`]: the embedded RocksDB backend, the default.
//!
//! Layout of the column families: `keys`. Writes are group commits
//! (`writer`), made by the writer thread or by the task that awaits the
//! append (`leader`); reads run concurrently on the caller's thread. What
//! a directory must hold to be opened, and the process lock: `open`.

mod batch;
mod id_ceiling;
mod indexes;
mod keys;
mod leader;
mod log_files;
mod open;
mod salvage;
mod writer;
mod written;

pub use keys::FORMAT_VERSION;
pub use leader::CommitCounts;
pub use log_files::TornWrite;
pub use open::LOCK_FILE;
pub use salvage::{DamagedLog, SalvageRecovery};

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rocksdb::{ColumnFamily, DBRecoveryMode, ReadOptions, DB};
use subagent_core::{Attachment, AttachmentId, EventId, RecordedEvent, StreamId};
use tokio::sync::watch;
use tracing::warn;

use crate::append_check::IdLocation;
use crate::error::StoreError;
use crate::indexes::{IndexEntries, LogIndex};
use crate::log::{
    check_attachment, good_prefix, CheckpointBytes, Durability, EventLog, StreamAppend,
    TransactionTicket, READ_PAGE,
};
use crate::record;
use crate::subscription::{self, Subscription};
use id_ceiling::IdCeiling;
use leader::WriterSlot;
use open::DirectoryState;
use writer::{Transaction, Writer};
use written::WrittenMarks;

/// Options of a RocksDB log.
#[derive(Clone, Copy, Debug, Default)]
pub struct RocksOptions {
    /// When appends are acknowledged.
    pub durability: Durability,
}

struct Shared {
    db: Arc<DB>,
    /// The writer, shared with its thread; `None` for a read-only handle.
    /// Its own handle on the database is dropped with it, before `_lock`.
    slot: Option<Arc<WriterSlot>>,
    /// The exclusive directory lock of a read-write handle; declared after
    /// `db` and `slot` so it is released only once the database is closed.
    _lock: Option<File>,
    /// Opened with [`RocksLog::open_read_only`]: no writer, no lock.
    read_only: bool,
    path: PathBuf,
    durability: Durability,
    head: Arc<watch::Sender<u64>>,
    /// Which streams the writer wrote since opening, for stream
    /// subscriptions ([`written`]).
    written: Arc<WrittenMarks>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The incomplete write the open dropped, if any.
    torn_write: Option<TornWrite>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the queue stops the writer after it commits what is queued;
        // joining makes "the last handle is dropped" mean "the directory is free".
        if let Some(slot) = &self.slot {
            slot.close();
        }
        if let Some(handle) = self.writer.lock().ok().and_then(|mut writer| writer.take()) {
            let _ = handle.join();
        }
        // A leader may still be writing: wait for it, then let the writer's
        // handle on the database go, so the lock below goes last.
        if let Some(slot) = &self.slot {
            slot.release();
        }
    }
}

/// A RocksDB-backed event log. Clones share one database; the directory is
/// released when the last clone (including live subscriptions) is dropped.
///
/// # Example
///
/// One process holds a directory at a time; appends are durable
/// (`Durability::Sync`, one fsync per group commit) when acknowledged:
///
/// ```
/// use subagent_core::{Event, NewEvent, SessionId, StreamId};
/// use subagent_store::{Durability, EventLog, ExpectedVersion, RocksLog, RocksOptions, StoreError};
///
/// let dir = tempfile::tempdir()?;
/// let log = RocksLog::open(dir.path(), RocksOptions::default())?;
/// assert_eq!(log.durability(), Durability::Sync);
/// let stream = StreamId::Session(SessionId::new());
/// let event = NewEvent::new(Event::TurnStarted { turn: 1, epoch: 1 });
/// log.append(stream, ExpectedVersion::NoStream, vec![event]).wait()?;
///
/// // A second handle on a held directory is refused, not shared.
/// let held = RocksLog::open(dir.path(), RocksOptions::default());
/// assert!(matches!(held, Err(StoreError::Locked { .. })));
///
/// drop(log); // releases the directory
/// let reopened = RocksLog::open(dir.path(), RocksOptions::default())?;
/// assert_eq!(reopened.head(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RocksLog {
    shared: Arc<Shared>,
}

fn family<'a>(db: &'a DB, name: &str) -> Result<&'a ColumnFamily, StoreError> {
    db.cf_handle(name)
        .ok_or_else(|| StoreError::Io(format!("column family {name} is missing")))
}

/// A RocksDB failure as a [`StoreError`]. Corruption met while reading the
/// record at `position` is [`StoreError::Corrupt`] at that position;
/// corruption anywhere else (`position` 0: an index, the WAL, a MANIFEST, a
/// table file) is [`StoreError::Damaged`] naming the directory. RocksDB's
/// text names the file and carries the OS error, and is kept whole.
fn map_rocks_error(err: rocksdb::Error, position: u64, path: &Path) -> StoreError {
    match err.kind() {
        rocksdb::ErrorKind::Corruption if position > 0 => StoreError::Corrupt {
            position,
            reason: err.into_string(),
        },
        rocksdb::ErrorKind::Corruption => StoreError::Damaged {
            path: path.display().to_string(),
            reason: err.into_string(),
        },
        _ => StoreError::Io(format!("{}: {}", path.display(), err.into_string())),
    }
}

/// Whether `stream` has any event: its version 1 is indexed (versions are
/// gap-free from 1). A point lookup: a search of the memtable, and each
/// table file's bloom filter answers for a stream that has none without
/// reading a block, where [`read_stream_version`] seeks.
fn stream_started(db: &DB, path: &Path, stream: &StreamId) -> Result<bool, StoreError> {
    db.get_pinned_cf(family(db, keys::CF_STREAMS)?, keys::stream_key(stream, 1))
        .map(|found| found.is_some())
        .map_err(|err| map_rocks_error(err, 0, path))
}

fn read_stream_version(db: &DB, path: &Path, stream: &StreamId) -> Result<u64, StoreError> {
    let mut iter = db.raw_iterator_cf(family(db, keys::CF_STREAMS)?);
    iter.seek_for_prev(keys::stream_key(stream, u64::MAX));
    let prefix = keys::stream_prefix(stream);
    let version = match iter.key() {
        Some(key) if key.starts_with(&prefix) => keys::decode_u64(&key[prefix.len()..]),
        _ => Some(0),
    };
    iter.status().map_err(|err| map_rocks_error(err, 0, path))?;
    version.ok_or_else(|| StoreError::Damaged {
        path: path.display().to_string(),
        reason: format!("stream index key of {stream} does not decode"),
    })
}

impl RocksLog {
    /// Opens the log in `path` for reading and appending, creating it when
    /// the directory is absent or empty. The directory stays locked until the
    /// last clone of the handle is dropped.
    ///
    /// # Errors
    /// Each leaves the directory's data as it was:
    /// [`StoreError::Locked`] if another handle (in any process) has it open;
    /// [`StoreError::Damaged`] for RocksDB files without `CURRENT`, a damaged
    /// write-ahead log, MANIFEST or table file, or a head marker that
    /// disagrees with the records; [`StoreError::NotALog`] for a non-empty
    /// directory of other things; [`StoreError::UnsupportedFormat`] for a log
    /// of another on-disk format; [`StoreError::Io`] otherwise.
    pub fn open(path: impl AsRef<Path>, options: RocksOptions) -> Result<RocksLog, StoreError> {
        let path = path.as_ref().to_path_buf();
        // Judge the directory before creating anything in it, then again
        // under the lock, so two openers cannot both take it for empty.
        open::classify(&path)?;
        let lock = open::lock(&path)?;
        let create = open::classify(&path)? != DirectoryState::Log;
        // A new log has no ids; an existing one's greatest is read before
        // the read-write open, like the head, so a damaged index block
        // refuses the open before it changed anything.
        let mut id_ceiling = IdCeiling::default();
        let mut recovery = DBRecoveryMode::AbsoluteConsistency;
        let mut torn_write = None;
        if !create {
            (recovery, torn_write) = Self::check_log_files(&path)?;
            // A read-write open recovers the WAL into new files and rewrites
            // the MANIFEST before any check of ours can run. Check read-only
            // first, so a refused open leaves every file as it was.
            let probe = DB::open_cf_descriptors_read_only(
                &open::db_options_recovering(false, recovery),
                &path,
                open::families(),
                false,
            )
            .map_err(|err| map_rocks_error(err, 0, &path))?;
            Self::check_format_and_head(&probe, &path, false)?;
            id_ceiling = IdCeiling::read(&probe, &path)?;
        }
        let db = DB::open_cf_descriptors(
            &open::db_options_recovering(create, recovery),
            &path,
            open::families(),
        )
        .map_err(|err| map_rocks_error(err, 0, &path))?;
        let head = Self::check_format_and_head(&db, &path, true)?;
        let db = Arc::new(db);
        let head_watch = Arc::new(watch::channel(head).0);
        let written = Arc::new(WrittenMarks::new(head));
        let writer = Writer::new(
            Arc::clone(&db),
            path.clone(),
            head,
            options.durability,
            Arc::clone(&head_watch),
            Arc::clone(&written),
            id_ceiling,
        )?;
        let slot = WriterSlot::new(writer, options.durability);
        let thread_slot = Arc::clone(&slot);
        let handle = std::thread::Builder::new()
            .name("subagents-log-writer".into())
            .spawn(move || thread_slot.run())
            .map_err(|err| StoreError::Io(format!("starting the writer thread: {err}")))?;
        Ok(RocksLog {
            shared: Arc::new(Shared {
                db,
                _lock: Some(lock),
                read_only: false,
                path,
                durability: options.durability,
                head: head_watch,
                written,
                slot: Some(slot),
                writer: Mutex::new(Some(handle)),
                torn_write,
            }),
        })
    }

    /// Opens an existing log for reading only: no lock, no writer, and
    /// nothing in the directory is created, changed or deleted, so it works on
    /// a read-only mount and beside a live writer (it sees the log as of the
    /// open). Appends and checkpoint writes fail with
    /// [`StoreError::ReadOnly`]. The write-ahead log is recovered in memory
    /// under the same rule as [`RocksLog::open`]: absolute consistency, but
    /// for an incomplete write at the end of the newest log, which is not
    /// read (beside a live writer, one it is still writing).
    ///
    /// # Errors
    /// As [`RocksLog::open`], except `Locked`; an absent or empty directory
    /// is [`StoreError::NotALog`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<RocksLog, StoreError> {
        let path = path.as_ref().to_path_buf();
        if open::classify(&path)? != DirectoryState::Log {
            return Err(StoreError::NotALog {
                path: path.display().to_string(),
                reason: "there is no log there".into(),
            });
        }
        let (recovery, torn_write) = Self::check_log_files(&path)?;
        let db = DB::open_cf_descriptors_read_only(
            &open::db_options_recovering(false, recovery),
            &path,
            open::families(),
            false,
        )
        .map_err(|err| map_rocks_error(err, 0, &path))?;
        let head = Self::check_format_and_head(&db, &path, false)?;
        Ok(RocksLog::read_only_over(db, path, head, torn_write))
    }

    /// Checks RocksDB's log files before RocksDB reads them
    /// (`log_files`), and returns the WAL recovery mode to open with:
    /// absolute consistency, or, when the newest write-ahead log that holds
    /// anything ends in an incomplete write (torn by a crash, never
    /// acknowledged), tolerance of that one incomplete record, which
    /// RocksDB then drops. Says so in the log.
    fn check_log_files(path: &Path) -> Result<(DBRecoveryMode, Option<TornWrite>), StoreError> {
        let tail = log_files::check(path)?;
        let recovery = tail.recovery_mode();
        let torn_write = match tail {
            log_files::WalTail::Torn(torn) => {
                warn!("{torn}");
                Some(torn)
            }
            log_files::WalTail::Whole => None,
        };
        Ok((recovery, torn_write))
    }

    /// The incomplete write at the end of the newest write-ahead log that
    /// this open dropped, if any, for a host or a command to report: a
    /// write a crash tore, never acknowledged (or, for a read-only open
    /// beside a live writer, one still being written).
    #[must_use]
    pub fn torn_write(&self) -> Option<&TornWrite> {
        self.shared.torn_write.as_ref()
    }

    /// A read-only handle over an opened `db` whose head is `head`: no
    /// lock, no writer; `torn_write` is what its open dropped.
    pub(super) fn read_only_over(
        db: DB,
        path: PathBuf,
        head: u64,
        torn_write: Option<TornWrite>,
    ) -> RocksLog {
        RocksLog {
            shared: Arc::new(Shared {
                db: Arc::new(db),
                _lock: None,
                read_only: true,
                path,
                durability: Durability::Sync,
                head: Arc::new(watch::channel(head).0),
                written: Arc::new(WrittenMarks::new(head)),
                slot: None,
                writer: Mutex::new(None),
                torn_write,
            }),
        }
    }

    /// Checks the format marker (writing it into a new, writable log) and
    /// that the head marker names the last record; returns the head.
    fn check_format_and_head(db: &DB, path: &Path, writable: bool) -> Result<u64, StoreError> {
        let meta = family(db, keys::CF_META)?;
        let io = |err| map_rocks_error(err, 0, path);
        let damaged = |reason: String| StoreError::Damaged {
            path: path.display().to_string(),
            reason,
        };
        match db.get_cf(meta, keys::META_FORMAT).map_err(io)? {
            None if writable => db
                .put_cf(meta, keys::META_FORMAT, keys::FORMAT_VERSION.to_be_bytes())
                .map_err(io)?,
            // A log created and killed before its first write has no marker
            // and no records; anything else without a marker is damage,
            // caught by the head check below.
            None => {}
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
            Some(bytes) => keys::decode_u64(&bytes)
                .ok_or_else(|| damaged("the head marker does not decode".into()))?,
        };
        let mut last = db.raw_iterator_cf(family(db, keys::CF_LOG)?);
        last.seek_to_last();
        let last_position = match last.key() {
            Some(key) => keys::decode_u64(key).unwrap_or(u64::MAX),
            None => 0,
        };
        last.status().map_err(io)?;
        if last_position != head {
            return Err(damaged(format!(
                "the head marker says {head} but the last record is at {last_position}"
            )));
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
        self.refuse_if_read_only()?;
        let db = &self.shared.db;
        let path = &self.shared.path;
        let log = family(db, keys::CF_LOG)?;
        let key = keys::position_key(position);
        let mut bytes = db
            .get_cf(log, key)
            .map_err(|err| map_rocks_error(err, position, path))?
            .ok_or_else(|| StoreError::Corrupt {
                position,
                reason: "no such record".into(),
            })?;
        let at = byte % bytes.len().max(1);
        bytes[at] ^= 0x10;
        db.put_cf(log, key, bytes)
            .map_err(|err| map_rocks_error(err, position, path))
    }

    /// How many group commits this log made since it was opened, by who
    /// made them, and how many event ids their checks looked up in the
    /// index (all zero for a read-only handle).
    #[must_use]
    pub fn commit_counts(&self) -> CommitCounts {
        self.shared
            .slot
            .as_ref()
            .map(|slot| slot.counts())
            .unwrap_or_default()
    }

    /// Whether this handle was opened with [`RocksLog::open_read_only`].
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    fn refuse_if_read_only(&self) -> Result<(), StoreError> {
        if self.shared.read_only {
            Err(StoreError::ReadOnly {
                path: self.shared.path.display().to_string(),
            })
        } else {
            Ok(())
        }
    }
}

impl EventLog for RocksLog {
    fn append_with_attachments(
        &self,
        parts: Vec<StreamAppend>,
        attachments: Vec<Attachment>,
    ) -> TransactionTicket {
        if let Err(err) = self.refuse_if_read_only() {
            return TransactionTicket::ready(Err(err));
        }
        match &self.shared.slot {
            Some(slot) => slot.append(Transaction { parts, attachments }),
            None => TransactionTicket::ready(Err(StoreError::Closed)),
        }
    }

    fn read_all_page(
        &self,
        from_position: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let db = &self.shared.db;
        let from = from_position.max(1);
        // A whole page (`read_all`'s, a scan's, a subscription's) passes
        // its blocks once, in order: they are not kept in the block cache,
        // where they would only evict the blocks of index lookups. A read
        // of a few records (a point read by position) may come back to
        // its block, which is cached as before.
        let mut options = ReadOptions::default();
        options.fill_cache(limit < READ_PAGE);
        let mut iter = db.raw_iterator_cf_opt(family(db, keys::CF_LOG)?, options);
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
            .map_err(|err| map_rocks_error(err, expected, &self.shared.path))?;
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
            positions.push(keys::decode_u64(value).ok_or_else(|| StoreError::Damaged {
                path: self.shared.path.display().to_string(),
                reason: format!("stream index entry of {stream} does not decode"),
            })?);
            iter.next();
        }
        iter.status()
            .map_err(|err| map_rocks_error(err, 0, &self.shared.path))?;
        let log = family(db, keys::CF_LOG)?;
        let keys: Vec<[u8; 8]> = positions.iter().map(|p| keys::position_key(*p)).collect();
        let values = db.batched_multi_get_cf(log, &keys, false);
        good_prefix(positions.iter().zip(values).map(|(&position, value)| {
            match value.map_err(|err| map_rocks_error(err, position, &self.shared.path))? {
                Some(bytes) => record::decode(position, &bytes),
                None => Err(StoreError::Corrupt {
                    position,
                    reason: "stream index names a missing record".into(),
                }),
            }
        }))
    }

    fn stream_version(&self, stream: &StreamId) -> Result<u64, StoreError> {
        read_stream_version(&self.shared.db, &self.shared.path, stream)
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

    fn may_have_written_after(&self, stream: &StreamId, position: u64) -> bool {
        self.shared.written.may_have_written_after(stream, position)
    }

    fn durability(&self) -> Durability {
        self.shared.durability
    }

    fn attachment(&self, id: &AttachmentId) -> Result<Option<Vec<u8>>, StoreError> {
        let db = &self.shared.db;
        let path = &self.shared.path;
        let Some(bytes) = db
            .get_cf(family(db, keys::CF_BLOBS)?, id.digest())
            .map_err(|err| map_rocks_error(err, 0, path))?
        else {
            return Ok(None);
        };
        check_attachment(id, bytes, &path.display().to_string()).map(Some)
    }

    fn attachment_ids(&self) -> Result<Vec<AttachmentId>, StoreError> {
        let db = &self.shared.db;
        let path = &self.shared.path;
        let mut ids = Vec::new();
        for entry in db.iterator_cf(family(db, keys::CF_BLOBS)?, rocksdb::IteratorMode::Start) {
            let (key, _) = entry.map_err(|err| map_rocks_error(err, 0, path))?;
            let digest = <[u8; 32]>::try_from(&key[..]).map_err(|_| StoreError::Damaged {
                path: path.display().to_string(),
                reason: format!("a blob key of {} bytes is not a SHA-256 digest", key.len()),
            })?;
            ids.push(AttachmentId::from_digest(digest));
        }
        Ok(ids)
    }

    fn read_checkpoint(&self, name: &str) -> Result<Option<CheckpointBytes<'_>>, StoreError> {
        let db = &self.shared.db;
        // Pinned, not copied out: a checkpoint is tens of megabytes
        // (BENCHMARKS.md, "Startup").
        let pinned = db
            .get_pinned_cf(family(db, keys::CF_META)?, keys::checkpoint_key(name))
            .map_err(|err| map_rocks_error(err, 0, &self.shared.path))?;
        Ok(pinned.map(CheckpointBytes::held))
    }

    fn write_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.refuse_if_read_only()?;
        let db = &self.shared.db;
        let mut options = rocksdb::WriteOptions::default();
        options.set_sync(self.shared.durability == Durability::Sync);
        db.put_cf_opt(
            family(db, keys::CF_META)?,
            keys::checkpoint_key(name),
            bytes,
            &options,
        )
        .map_err(|err| map_rocks_error(err, 0, &self.shared.path))
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
