//! [`FillingLog`]: a memory log whose disk fills up on demand, or right
//! after a chosen event is appended, for tests of how the layers above
//! report a storage failure and recover from a host that died at a chosen
//! moment (feature `testing`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use subagent_core::{Attachment, AttachmentId, Event, EventId, RecordedEvent, StreamId};

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
    /// Fills the disk once an append holding an event it accepts succeeds.
    fills_after: Arc<Mutex<Option<EventFilter>>>,
}

/// Which appended event fills the disk ([`FillingLog::fill_after`]).
type EventFilter = Box<dyn Fn(&Event) -> bool + Send + Sync>;

/// The error every append fails with once the disk is full.
pub const DISK_FULL: &str = "IO error: No space left on device: While appending to file";

impl FillingLog {
    /// An empty log with room to spare.
    #[must_use]
    pub fn new() -> FillingLog {
        FillingLog {
            inner: MemoryLog::new(),
            full: Arc::new(AtomicBool::new(false)),
            fills_after: Arc::new(Mutex::new(None)),
        }
    }

    /// The disk fills right after the first append holding an event
    /// `filter` accepts: that append succeeds, every later one fails. A
    /// runtime over the log then stops as a host that died at that moment
    /// would, and a runtime opened over [`FillingLog::set_full`]`(false)`
    /// recovers what it left.
    pub fn fill_after(&self, filter: impl Fn(&Event) -> bool + Send + Sync + 'static) {
        *self
            .fills_after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Box::new(filter));
    }

    /// From now on every append and checkpoint write fails with
    /// [`DISK_FULL`] (or succeeds again, with `false`).
    pub fn set_full(&self, full: bool) {
        self.full.store(full, Ordering::SeqCst);
    }

    /// Whether every append now fails.
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::SeqCst)
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
        let mut fills_after = self
            .fills_after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let fills = fills_after.as_ref().is_some_and(|filter| {
            parts
                .iter()
                .flat_map(|part| &part.events)
                .any(|new| filter(&new.event))
        });
        let ticket = self.inner.append_with_attachments(parts, attachments);
        if fills {
            *fills_after = None;
            self.full.store(true, Ordering::SeqCst);
        }
        ticket
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
