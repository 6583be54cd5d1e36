//! The writer of a [`super::RocksLog`]: group commit, on its own thread or,
//! when that thread is idle, in the appender's.
//!
//! Appenders queue requests. The writer takes the first one,
//! then everything else already queued (up to [`MAX_GROUP_REQUESTS`]), checks
//! each against the stream versions as they will be after the requests before
//! it, writes all accepted events, their stream and id index entries and the
//! new head in ONE `WriteBatch` with ONE WAL sync, and only then answers the
//! appenders. Under load, many appends share one fsync; alone, an append
//! pays exactly one.
//!
//! In `Buffered` mode an append that finds the writer free leads the commit
//! itself, in the appender's own thread ([`WriterSlot::append`]): it takes
//! everything queued before it and commits that and its own transaction as
//! one group, without the two thread handoffs (to the writer and back)
//! that cost a lone appender most of its time; appends that find the
//! writer busy queue behind it, and the next leader (or the thread) commits
//! them together. Order is kept because only a holder of the writer's lock
//! takes requests off the queue, oldest first, and a leader's own
//! transaction goes last. `Sync` mode never leads inline: an fsync in the
//! caller would block an async worker (and a runtime's pipeline, which
//! appends under its lock) for a disk flush.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};

use rocksdb::{WriteBatch, WriteOptions, DB};
use subagent_core::{Attachment, EventId, StreamId};
use tokio::sync::{oneshot, watch};
use tracing::{debug, warn};

use super::keys::{self, CF_BLOBS, CF_EVENT_IDS, CF_LOG, CF_META, CF_STREAMS};
use super::{family, map_rocks_error, read_stream_version};
use crate::append_check::{
    check_transaction, encode_records, next_position as position_after, place, IdLocation,
    TransactionVerdict,
};
use crate::error::StoreError;
use crate::log::{AppendOutcome, Durability, StreamAppend, TransactionTicket};
use crate::memory::unix_millis;

/// The most requests folded into one group commit.
pub(crate) const MAX_GROUP_REQUESTS: usize = 1024;

type TransactionResult = Result<Vec<AppendOutcome>, StoreError>;

/// One atomic append: its parts, and the attachments stored in the same
/// batch as its events when those are written.
pub(crate) struct Transaction {
    pub(crate) parts: Vec<StreamAppend>,
    pub(crate) attachments: Vec<Attachment>,
}

/// A queued transaction, and where its answer goes.
struct AppendRequest {
    transaction: Transaction,
    reply: Reply,
}

/// The writer, its queue, and who may commit: whoever holds `writer`.
pub(crate) struct WriterSlot {
    writer: Mutex<Writer>,
    /// Requests waiting for a commit, in the order they were appended.
    /// Only a holder of `writer` takes them out, so nothing can be
    /// committed ahead of a request queued before it.
    queue: Mutex<Queue>,
    /// Wakes the writer thread when a request is queued or the log closes.
    queued: Condvar,
    /// Whether an appender may lead a commit in its own thread
    /// (`Buffered`).
    inline: bool,
    /// Whether the last commit was of one request: the log is quiet, and
    /// an appender leads its own commit. Under load (groups of several)
    /// appends queue to the thread instead, which batches more of them
    /// while the appenders' threads keep preparing the next ones. A hint
    /// only: either path keeps the order.
    quiet: AtomicBool,
}

struct Queue {
    requests: VecDeque<AppendRequest>,
    closed: bool,
}

impl WriterSlot {
    pub(crate) fn new(writer: Writer, durability: Durability) -> Self {
        WriterSlot {
            writer: Mutex::new(writer),
            queue: Mutex::new(Queue {
                requests: VecDeque::new(),
                closed: false,
            }),
            queued: Condvar::new(),
            inline: durability == Durability::Buffered,
            quiet: AtomicBool::new(true),
        }
    }

    /// Appends `transaction`. In `Buffered` mode, when the writer is free,
    /// the caller leads: it commits everything queued before it and its
    /// own transaction last, in one group, in its own thread, and gets a
    /// ticket that is already complete. Otherwise the transaction is
    /// queued for the writer thread (or for the next leader).
    pub(crate) fn append(&self, transaction: Transaction) -> TransactionTicket {
        if self.inline && self.quiet.load(Ordering::Relaxed) {
            let writer = match self.writer.try_lock() {
                Ok(writer) => Some(writer),
                Err(TryLockError::WouldBlock) => None,
                Err(TryLockError::Poisoned(poisoned)) => Some(fail_stopped(poisoned)),
            };
            if let Some(writer) = writer {
                return TransactionTicket::ready(self.lead(writer, transaction));
            }
        }
        let (reply, ticket) = TransactionTicket::channel();
        {
            let mut queue = lock_queue(&self.queue);
            if queue.closed {
                return TransactionTicket::ready(Err(StoreError::Closed));
            }
            queue
                .requests
                .push_back(AppendRequest { transaction, reply });
        }
        self.queued.notify_one();
        ticket
    }

    /// Commits what is queued, then `own`, as one group under `writer`;
    /// answers the queued requests and returns `own`'s result.
    fn lead(&self, mut writer: MutexGuard<'_, Writer>, own: Transaction) -> TransactionResult {
        let (mut transactions, replies) = self.take_queued();
        transactions.push(own);
        self.quiet.store(transactions.len() == 1, Ordering::Relaxed);
        let mut results = writer.commit_group(transactions);
        drop(writer);
        let own = results.pop().unwrap_or(Err(StoreError::Closed));
        answer(replies, results);
        own
    }

    /// Takes up to [`MAX_GROUP_REQUESTS`] queued requests, oldest first.
    /// Called only with `writer` held.
    fn take_queued(&self) -> (Vec<Transaction>, Vec<Reply>) {
        let mut queue = lock_queue(&self.queue);
        let take = queue.requests.len().min(MAX_GROUP_REQUESTS);
        queue
            .requests
            .drain(..take)
            .map(|request| (request.transaction, request.reply))
            .unzip()
    }

    /// The writer thread: commits whatever is queued, group by group,
    /// until the log is closed and the queue is empty.
    pub(crate) fn run(&self) {
        loop {
            {
                let mut queue = lock_queue(&self.queue);
                while queue.requests.is_empty() && !queue.closed {
                    queue = self
                        .queued
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if queue.requests.is_empty() {
                    return;
                }
            }
            let mut writer = self.writer.lock().unwrap_or_else(fail_stopped);
            // A leader may have taken them meanwhile.
            let (transactions, replies) = self.take_queued();
            if transactions.is_empty() {
                continue;
            }
            self.quiet.store(transactions.len() == 1, Ordering::Relaxed);
            let results = writer.commit_group(transactions);
            drop(writer);
            answer(replies, results);
        }
    }

    /// Refuses later appends and lets the thread end once the queue is
    /// committed.
    pub(crate) fn close(&self) {
        lock_queue(&self.queue).closed = true;
        self.queued.notify_all();
    }
}

type Reply = oneshot::Sender<TransactionResult>;

fn answer(replies: Vec<Reply>, results: Vec<TransactionResult>) {
    for (reply, result) in replies.into_iter().zip(results) {
        // An appender that stopped waiting is not an error of the log.
        let _ = reply.send(result);
    }
}

/// The queue holds plain data that is never left half-changed, so a panic
/// elsewhere while it was locked leaves it usable.
fn lock_queue(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The writer after a panic mid-commit: its state may be half-updated, so
/// it refuses every later append (fail-stop, as after a failed write).
fn fail_stopped(poisoned: PoisonError<MutexGuard<'_, Writer>>) -> MutexGuard<'_, Writer> {
    let mut writer = poisoned.into_inner();
    writer.failed.get_or_insert_with(|| {
        StoreError::Io("the log's writer panicked; reopen the log".to_owned())
    });
    writer
}

pub(crate) struct Writer {
    /// Set by the first failed write: from then on every append is refused,
    /// so nothing decided on top of a lost write can land after it
    /// (fail-stop; reopen the log to recover).
    failed: Option<StoreError>,
    db: Arc<DB>,
    /// The log directory, for error messages.
    path: PathBuf,
    head: u64,
    versions: HashMap<StreamId, u64>,
    write_options: WriteOptions,
    head_watch: Arc<watch::Sender<u64>>,
}

/// A result held until the group's batch is written.
struct PendingResult {
    result: TransactionResult,
    /// Whether the answer is only true once the batch is durable.
    needs_write: bool,
}

/// What one group will change, layered over the durable state.
#[derive(Default)]
struct GroupOverlay {
    versions: HashMap<StreamId, u64>,
    ids: HashMap<EventId, IdLocation>,
}

impl Writer {
    pub(crate) fn new(
        db: Arc<DB>,
        path: PathBuf,
        head: u64,
        durability: Durability,
        head_watch: Arc<watch::Sender<u64>>,
    ) -> Self {
        let mut write_options = WriteOptions::default();
        write_options.set_sync(durability == Durability::Sync);
        Writer {
            failed: None,
            db,
            path,
            head,
            versions: HashMap::new(),
            write_options,
            head_watch,
        }
    }

    fn version_of(&mut self, overlay: &GroupOverlay, stream: &StreamId) -> Result<u64, StoreError> {
        if let Some(version) = overlay.versions.get(stream) {
            return Ok(*version);
        }
        if let Some(version) = self.versions.get(stream) {
            return Ok(*version);
        }
        let version = read_stream_version(&self.db, &self.path, stream)?;
        self.versions.insert(*stream, version);
        Ok(version)
    }

    fn locate(
        &self,
        overlay: &GroupOverlay,
        id: &EventId,
    ) -> Result<Option<IdLocation>, StoreError> {
        if let Some(location) = overlay.ids.get(id) {
            return Ok(Some(*location));
        }
        let family = family(&self.db, CF_EVENT_IDS)?;
        match self
            .db
            .get_pinned_cf(family, keys::event_id_key(id))
            .map_err(|err| map_rocks_error(err, 0, &self.path))?
        {
            None => Ok(None),
            Some(bytes) => {
                keys::decode_location(&bytes)
                    .map(Some)
                    .ok_or_else(|| StoreError::Damaged {
                        path: self.path.display().to_string(),
                        reason: format!("event id index entry for {id} does not decode"),
                    })
            }
        }
    }

    /// Commits `group` in one batch; one result per transaction, in order.
    fn commit_group(&mut self, group: Vec<Transaction>) -> Vec<TransactionResult> {
        let _span = crate::telemetry::group_commit(group.len()).entered();
        if let Some(failure) = &self.failed {
            return group.iter().map(|_| Err(failure.clone())).collect();
        }
        let mut next_position = match position_after(self.head) {
            Ok(next) => next,
            Err(exhausted) => return group.iter().map(|_| Err(exhausted.clone())).collect(),
        };
        let mut batch = WriteBatch::default();
        let mut overlay = GroupOverlay::default();
        let mut pending = Vec::with_capacity(group.len());
        let recorded_at = unix_millis();
        for Transaction { parts, attachments } in group {
            let result = self.stage(
                &mut batch,
                &mut overlay,
                &mut next_position,
                recorded_at,
                parts,
                attachments,
            );
            let needs_write = match &result {
                Ok(outcomes) => outcomes
                    .iter()
                    .any(|outcome| !outcome.deduplicated || outcome.last_position > self.head),
                Err(_) => false,
            };
            pending.push(PendingResult {
                result,
                needs_write,
            });
        }
        let new_head = next_position - 1;
        let written = if new_head > self.head {
            self.write(batch, new_head)
        } else {
            Ok(())
        };
        match written {
            Ok(()) => {
                self.versions.extend(overlay.versions);
                if new_head > self.head {
                    self.head = new_head;
                    self.head_watch.send_replace(new_head);
                }
                debug!(
                    requests = pending.len(),
                    head = self.head,
                    "group committed"
                );
            }
            Err(ref err) => {
                warn!(error = %err, "group commit failed; nothing of it is durable; refusing further appends");
                self.failed = Some(err.clone());
            }
        }
        pending
            .into_iter()
            .map(|pending| match (&written, pending.needs_write) {
                (Err(err), true) => Err(err.clone()),
                _ => pending.result,
            })
            .collect()
    }

    fn write(&self, mut batch: WriteBatch, new_head: u64) -> Result<(), StoreError> {
        batch.put_cf(
            family(&self.db, CF_META)?,
            keys::META_HEAD,
            new_head.to_be_bytes(),
        );
        self.db
            .write_opt(batch, &self.write_options)
            .map_err(|err| map_rocks_error(err, new_head, &self.path))
    }

    /// Admits one atomic request and stages all of its writes into `batch`,
    /// or none of them: on error nothing is staged and `next_position` is
    /// unchanged.
    fn stage(
        &mut self,
        batch: &mut WriteBatch,
        overlay: &mut GroupOverlay,
        next_position: &mut u64,
        recorded_at: u64,
        parts: Vec<StreamAppend>,
        attachments: Vec<Attachment>,
    ) -> Result<Vec<AppendOutcome>, StoreError> {
        let mut versions = HashMap::with_capacity(parts.len());
        for part in &parts {
            versions.insert(part.stream, self.version_of(overlay, &part.stream)?);
        }
        let verdict = check_transaction(
            &parts,
            |stream| Ok(versions.get(stream).copied().unwrap_or(0)),
            |id| self.locate(overlay, id),
        )?;
        let currents = match verdict {
            TransactionVerdict::AlreadyAppended(outcomes) => return Ok(outcomes),
            TransactionVerdict::Write { currents } => currents,
        };
        let (log, streams, ids, blobs) = (
            family(&self.db, CF_LOG)?,
            family(&self.db, CF_STREAMS)?,
            family(&self.db, CF_EVENT_IDS)?,
            family(&self.db, CF_BLOBS)?,
        );
        let (records, outcomes) = place(parts, &currents, *next_position, recorded_at)?;
        let encoded = encode_records(&records)?;
        let after = match records.last() {
            Some(last) => position_after(last.position)?,
            None => *next_position,
        };
        for (record, bytes) in records.iter().zip(encoded) {
            let location = IdLocation {
                stream: record.stream,
                position: record.position,
                version: record.version,
            };
            batch.put_cf(log, keys::position_key(record.position), bytes);
            batch.put_cf(
                streams,
                keys::stream_key(&record.stream, record.version),
                record.position.to_be_bytes(),
            );
            batch.put_cf(
                ids,
                keys::event_id_key(&record.event_id),
                keys::encode_location(&location),
            );
            overlay.ids.insert(record.event_id, location);
            overlay.versions.insert(record.stream, record.version);
        }
        for attachment in &attachments {
            batch.put_cf(blobs, attachment.id().digest(), attachment.bytes());
        }
        *next_position = after;
        Ok(outcomes)
    }
}
