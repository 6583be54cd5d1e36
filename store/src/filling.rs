//! [`FillingLog`]: a memory log whose disk fills up on demand, for tests
//! of how the layers above report a storage failure (feature `testing`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use subagent_core::{Attachment, AttachmentId, EventId, RecordedEvent, StreamId};

use crate::append_check::IdLocation;
use crate::indexes::{IndexEntries, LogIndex};
use crate::log::{CheckpointBytes, Durability, EventLog, StreamAppend, TransactionTicket};
use crate::memory::MemoryLog;
use crate::subscription::Subscription;
use crate::StoreError;

/// A memory log whose disk fills up on demand: every append then fails with
/// the IO error RocksDB would report.
#[derive(Clone)]
pub struct FillingLog {
    inner: MemoryLog,
    full: Arc<AtomicBool>,
}

/// The error every append fails with once the disk is full.
pub const DISK_FULL: &str = "IO error: No space left on device: While appending to file";

impl FillingLog {
    /// An empty log with room to spare.
    #[must_use]
    pub fn new() -> FillingLog {
        FillingLog {
            inner: MemoryLog::new(),
            full: Arc::new(AtomicBool::new(false)),
        }
    }

    /// From now on every append and checkpoint write fails with
    /// [`DISK_FULL`] (or succeeds again, with `false`).
    pub fn set_full(&self, full: bool) {
        self.full.store(full, Ordering::SeqCst);
    }
}

impl Default for FillingLog {
    fn default() -> FillingLog {
        FillingLog::new()
    }
}

impl EventLog for FillingLog {
    fn append_with_attachments(
        &self,
        parts: Vec<StreamAppend>,
        attachments: Vec<Attachment>,
    ) -> TransactionTicket {
        if self.full.load(Ordering::SeqCst) {
            return TransactionTicket::ready(Err(StoreError::Io(DISK_FULL.into())));
        }
        self.inner.append_with_attachments(parts, attachments)
    }
    fn attachment(&self, id: &AttachmentId) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.attachment(id)
    }
    fn attachment_ids(&self) -> Result<Vec<AttachmentId>, StoreError> {
        self.inner.attachment_ids()
    }
    fn read_all_page(&self, from: u64, limit: usize) -> Result<Vec<RecordedEvent>, StoreError> {
        self.inner.read_all_page(from, limit)
    }
    fn read_stream_page(
        &self,
        stream: &StreamId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        self.inner.read_stream_page(stream, from, limit)
    }
    fn stream_version(&self, stream: &StreamId) -> Result<u64, StoreError> {
        self.inner.stream_version(stream)
    }
    fn head(&self) -> u64 {
        self.inner.head()
    }
    fn watch_head(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.watch_head()
    }
    fn subscribe(&self, from: u64) -> Subscription {
        self.inner.subscribe(from)
    }
    fn subscribe_stream(&self, stream: StreamId, from: u64) -> Subscription {
        self.inner.subscribe_stream(stream, from)
    }
    fn durability(&self) -> Durability {
        self.inner.durability()
    }
    fn read_checkpoint(&self, name: &str) -> Result<Option<CheckpointBytes<'_>>, StoreError> {
        self.inner.read_checkpoint(name)
    }
    fn write_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        if self.full.load(Ordering::SeqCst) {
            return Err(StoreError::Io(DISK_FULL.into()));
        }
        self.inner.write_checkpoint(name, bytes)
    }
    fn index_entries(&self, index: LogIndex) -> IndexEntries<'_> {
        self.inner.index_entries(index)
    }
    fn locate_event(&self, event_id: &EventId) -> Result<Option<IdLocation>, StoreError> {
        self.inner.locate_event(event_id)
    }
    fn indexed_position(&self, stream: &StreamId, version: u64) -> Result<Option<u64>, StoreError> {
        self.inner.indexed_position(stream, version)
    }
}
