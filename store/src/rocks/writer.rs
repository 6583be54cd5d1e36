//! The writer of a [`super::RocksLog`]: one group commit.
//!
//! [`Writer::commit_group`] checks each transaction of a group against the
//! stream versions as they will be after the transactions before it,
//! writes all accepted events, their stream and id index entries and the
//! new head in ONE `WriteBatch` with ONE WAL sync (in `Sync` mode), and
//! only then returns their answers. Who calls it, and when, is `leader`'s.
//! The batch is written as bytes (`batch`), into a buffer kept from group
//! to group.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use foldhash::HashMap;
use rocksdb::{WriteOptions, DB};
use subagent_core::{Attachment, EventId, RecordedEvent, StreamId};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::batch::{BatchBytes, FamilyTag};
use super::id_ceiling::IdCeiling;
use super::keys::{self, CF_BLOBS, CF_EVENT_IDS, CF_LOG, CF_META, CF_STREAMS};
use super::written::WrittenMarks;
use super::{family, map_rocks_error, read_stream_version, stream_started};
use crate::append_check::{
    check_transaction, next_position as position_after, place, EncodedRecords, IdLocation,
    TransactionVerdict,
};
use crate::error::StoreError;
use crate::log::{AppendOutcome, Durability, ExpectedVersion, StreamAppend};
use crate::memory::unix_millis;

pub(crate) type TransactionResult = Result<Vec<AppendOutcome>, StoreError>;

/// One atomic append: its parts, and the attachments stored in the same
/// batch as its events when those are written.
pub(crate) struct Transaction {
    pub(crate) parts: Vec<StreamAppend>,
    pub(crate) attachments: Vec<Attachment>,
}

pub(crate) struct Writer {
    /// Set by the first failed write: from then on every append is refused,
    /// so nothing decided on top of a lost write can land after it
    /// (fail-stop; reopen the log to recover).
    pub(crate) failed: Option<StoreError>,
    db: Arc<DB>,
    /// The log directory, for error messages.
    path: PathBuf,
    head: u64,
    /// Each stream's version, once an append has looked it up or written
    /// it. (foldhash: the writer hashes ids several times an event, and
    /// SipHash was a tenth of its commit; BENCHMARKS.md, "Hashing ids".)
    versions: HashMap<StreamId, u64>,
    write_options: WriteOptions,
    head_watch: Arc<watch::Sender<u64>>,
    /// Marked with each stream a group wrote, before its head is published.
    written: Arc<WrittenMarks>,
    /// The greatest indexed event id: an id above it is not looked up.
    id_ceiling: IdCeiling,
    /// Event-id index reads made to check appends (`CommitCounts`).
    id_lookups: Arc<AtomicU64>,
    /// Buffers each group commit reuses.
    scratch: Scratch,
    /// What starts a put into each family, learned once.
    tags: FamilyTags,
}

/// The [`FamilyTag`] of each column family the writer puts into.
struct FamilyTags {
    log: FamilyTag,
    streams: FamilyTag,
    ids: FamilyTag,
    meta: FamilyTag,
    blobs: FamilyTag,
}

impl FamilyTags {
    fn of(db: &DB) -> Result<FamilyTags, StoreError> {
        let tag = |name| FamilyTag::of(family(db, name)?, name);
        Ok(FamilyTags {
            log: tag(CF_LOG)?,
            streams: tag(CF_STREAMS)?,
            ids: tag(CF_EVENT_IDS)?,
            meta: tag(CF_META)?,
            blobs: tag(CF_BLOBS)?,
        })
    }
}

/// What a group commit needs for its own working and reuses from group to
/// group, so that committing one small event allocates next to nothing
/// of the writer's own (BENCHMARKS.md, "The writer's buffers reused").
/// Empty between commits, and no larger than a small group needs.
#[derive(Default)]
struct Scratch {
    overlay: GroupOverlay,
    /// The answers held until the batch is written.
    pending: Vec<PendingResult>,
    /// Each part's stream version before the request being staged.
    part_versions: Vec<(StreamId, u64)>,
    /// The records of the request being staged, encoded.
    encoded: EncodedRecords,
    /// The group's batch.
    batch: BatchBytes,
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
    /// # Errors
    /// A column family missing, or RocksDB writing batches in a form the
    /// `batch` module does not ([`FamilyTag::of`]).
    pub(crate) fn new(
        db: Arc<DB>,
        path: PathBuf,
        head: u64,
        durability: Durability,
        head_watch: Arc<watch::Sender<u64>>,
        written: Arc<WrittenMarks>,
        id_ceiling: IdCeiling,
    ) -> Result<Self, StoreError> {
        let mut write_options = WriteOptions::default();
        write_options.set_sync(durability == Durability::Sync);
        let tags = FamilyTags::of(&db)?;
        Ok(Writer {
            failed: None,
            db,
            path,
            head,
            versions: HashMap::default(),
            write_options,
            head_watch,
            written,
            id_ceiling,
            id_lookups: Arc::new(AtomicU64::new(0)),
            scratch: Scratch::default(),
            tags,
        })
    }

    /// The count of event-id index reads, shared with whoever reports it.
    pub(crate) fn id_lookups(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.id_lookups)
    }

    /// The version of `stream` before this request: from the group's
    /// overlay, the cache, or the index. A part that expects no stream (a
    /// new session's first append) is checked by a point lookup of version
    /// 1 ([`stream_started`]), cheaper than a seek; only a stream that has
    /// events is sought to its last version.
    fn version_of(
        &mut self,
        overlay: &GroupOverlay,
        stream: &StreamId,
        expected: ExpectedVersion,
    ) -> Result<u64, StoreError> {
        if let Some(version) = overlay.versions.get(stream) {
            return Ok(*version);
        }
        if let Some(version) = self.versions.get(stream) {
            return Ok(*version);
        }
        let version = if expected == ExpectedVersion::NoStream
            && !stream_started(&self.db, &self.path, stream)?
        {
            0
        } else {
            read_stream_version(&self.db, &self.path, stream)?
        };
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
        if self.id_ceiling.is_above(id) {
            return Ok(None);
        }
        self.id_lookups.fetch_add(1, Ordering::Relaxed);
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
    pub(crate) fn commit_group(&mut self, group: Vec<Transaction>) -> Vec<TransactionResult> {
        let _span = crate::telemetry::group_commit(group.len()).entered();
        if let Some(failure) = &self.failed {
            return group.iter().map(|_| Err(failure.clone())).collect();
        }
        let mut next_position = match position_after(self.head) {
            Ok(next) => next,
            Err(exhausted) => return group.iter().map(|_| Err(exhausted.clone())).collect(),
        };
        // Taken for the commit and put back, emptied, at its end.
        let mut scratch = std::mem::take(&mut self.scratch);
        let recorded_at = unix_millis();
        for Transaction { parts, attachments } in group {
            let result = self.stage(
                &mut scratch,
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
            scratch.pending.push(PendingResult {
                result,
                needs_write,
            });
        }
        let new_head = next_position - 1;
        let written = if new_head > self.head {
            self.write(&mut scratch.batch, new_head)
        } else {
            Ok(())
        };
        let overlay = &mut scratch.overlay;
        match written {
            Ok(()) => {
                for (stream, version) in overlay.versions.drain() {
                    self.written.mark(&stream, new_head);
                    self.versions.insert(stream, version);
                }
                for id in overlay.ids.keys() {
                    self.id_ceiling.raise(id);
                }
                if new_head > self.head {
                    self.head = new_head;
                    crate::subscription::publish_head(&self.head_watch, new_head);
                }
                debug!(
                    requests = scratch.pending.len(),
                    head = self.head,
                    "group committed"
                );
            }
            Err(ref err) => {
                warn!(error = %err, "group commit failed; nothing of it is durable; refusing further appends");
                self.failed = Some(err.clone());
            }
        }
        overlay.versions.clear();
        overlay.ids.clear();
        scratch.encoded.clear();
        scratch.batch.clear();
        let results = scratch
            .pending
            .drain(..)
            .map(|pending| match (&written, pending.needs_write) {
                (Err(err), true) => Err(err.clone()),
                _ => pending.result,
            })
            .collect();
        self.scratch = scratch;
        results
    }

    fn write(&self, batch: &mut BatchBytes, new_head: u64) -> Result<(), StoreError> {
        batch.put(&self.tags.meta, keys::META_HEAD, &new_head.to_be_bytes())?;
        self.db
            .write_opt(batch.build(), &self.write_options)
            .map_err(|err| map_rocks_error(err, new_head, &self.path))
    }

    /// Admits one atomic request and stages all of its writes into the
    /// group's batch, or none of them: on error nothing is staged and
    /// `next_position` is unchanged.
    fn stage(
        &mut self,
        scratch: &mut Scratch,
        next_position: &mut u64,
        recorded_at: u64,
        parts: Vec<StreamAppend>,
        attachments: Vec<Attachment>,
    ) -> Result<Vec<AppendOutcome>, StoreError> {
        scratch.part_versions.clear();
        for part in &parts {
            let version = self.version_of(&scratch.overlay, &part.stream, part.expected)?;
            scratch.part_versions.push((part.stream, version));
        }
        let (overlay, part_versions) = (&mut scratch.overlay, &scratch.part_versions);
        let verdict = check_transaction(
            &parts,
            |stream| {
                Ok(part_versions
                    .iter()
                    .find(|(part, _)| part == stream)
                    .map_or(0, |(_, version)| *version))
            },
            |id| self.locate(overlay, id),
        )?;
        let currents = match verdict {
            TransactionVerdict::AlreadyAppended(outcomes) => return Ok(outcomes),
            TransactionVerdict::Write { currents } => currents,
        };
        let (records, outcomes) = place(parts, &currents, *next_position, recorded_at)?;
        scratch.encoded.encode(&records)?;
        let after = match records.last() {
            Some(last) => position_after(last.position)?,
            None => *next_position,
        };
        let mark = scratch.batch.mark();
        if let Err(err) = self.put_all(&mut scratch.batch, &records, &scratch.encoded, &attachments)
        {
            scratch.batch.roll_back(mark);
            return Err(err);
        }
        for record in &records {
            overlay.ids.insert(record.event_id, location_of(record));
            overlay.versions.insert(record.stream, record.version);
        }
        *next_position = after;
        Ok(outcomes)
    }

    /// Puts `records` (encoded as `encoded`), their index entries and
    /// `attachments` into `batch`; on error, some may have been put.
    fn put_all(
        &self,
        batch: &mut BatchBytes,
        records: &[RecordedEvent],
        encoded: &EncodedRecords,
        attachments: &[Attachment],
    ) -> Result<(), StoreError> {
        let tags = &self.tags;
        for (record, bytes) in records.iter().zip(encoded.iter()) {
            batch.put(&tags.log, &keys::position_key(record.position), bytes)?;
            batch.put(
                &tags.streams,
                &keys::stream_key(&record.stream, record.version),
                &record.position.to_be_bytes(),
            )?;
            batch.put(
                &tags.ids,
                &keys::event_id_key(&record.event_id),
                &keys::encode_location(&location_of(record)),
            )?;
        }
        for attachment in attachments {
            batch.put(&tags.blobs, attachment.id().digest(), attachment.bytes())?;
        }
        Ok(())
    }
}

/// Where `record` is, as its event id's index entry says.
fn location_of(record: &RecordedEvent) -> IdLocation {
    IdLocation {
        stream: record.stream,
        position: record.position,
        version: record.version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use subagent_core::{Event, NewEvent, SessionId};

    /// With no receiver, a commit stores its head without waking anyone;
    /// one subscribed then reads that head and waits for the next, and a
    /// commit with a receiver wakes it.
    #[test]
    fn the_head_is_stored_for_later_receivers_and_wakes_present_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, _db) = open(dir.path());
        let stream = StreamId::Session(SessionId::new());
        let results = writer.commit_group(vec![one(stream, ExpectedVersion::NoStream, turn(1))]);
        assert!(results[0].is_ok());
        let mut receiver = writer.head_watch.subscribe();
        assert_eq!(*receiver.borrow_and_update(), 1);
        assert!(!receiver.has_changed().unwrap());

        let results = writer.commit_group(vec![one(stream, ExpectedVersion::Exact(1), turn(2))]);
        assert!(results[0].is_ok());
        assert!(
            receiver.has_changed().unwrap(),
            "a present receiver is woken"
        );
        assert_eq!(*receiver.borrow_and_update(), 2);
    }

    fn open(dir: &std::path::Path) -> (Writer, Arc<DB>) {
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        let db = Arc::new(DB::open_cf(&options, dir, keys::ALL_FAMILIES).unwrap());
        let writer = Writer::new(
            Arc::clone(&db),
            dir.to_path_buf(),
            0,
            Durability::Buffered,
            Arc::new(watch::channel(0).0),
            Arc::new(WrittenMarks::new(0)),
            IdCeiling::default(),
        )
        .unwrap();
        (writer, db)
    }

    fn one(stream: StreamId, expected: ExpectedVersion, event: Event) -> Transaction {
        Transaction {
            parts: vec![StreamAppend {
                stream,
                expected,
                events: vec![NewEvent::new(event)],
            }],
            attachments: Vec::new(),
        }
    }

    fn turn(turn: u64) -> Event {
        Event::TurnStarted { turn, epoch: 1 }
    }

    fn assert_emptied(writer: &Writer) {
        let scratch = &writer.scratch;
        assert!(scratch.overlay.versions.is_empty() && scratch.overlay.ids.is_empty());
        assert!(scratch.pending.is_empty());
        assert_eq!(scratch.encoded.iter().count(), 0);
        assert!(scratch.batch.is_empty(), "the batch is emptied");
        assert!(
            scratch.batch.capacity() <= super::super::batch::RETAINED_BYTES,
            "a large batch is let go"
        );
        assert!(
            scratch.encoded.capacity() <= crate::append_check::RETAINED_ENCODED_BYTES,
            "a large buffer is let go"
        );
    }

    /// The buffers one group leaves behind are emptied, so nothing of it
    /// is taken for the next group's state: a refused request, a large
    /// record and a failed group in between change nothing of what lands.
    #[test]
    fn each_group_starts_from_emptied_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, db) = open(dir.path());
        let (first, second) = (
            StreamId::Session(SessionId::new()),
            StreamId::Session(SessionId::new()),
        );
        let large = Event::ProviderRemoved {
            name: "n".repeat(300 * 1024),
        };
        let results = writer.commit_group(vec![
            one(StreamId::Runtime, ExpectedVersion::NoStream, large),
            one(first, ExpectedVersion::NoStream, turn(1)),
        ]);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert_emptied(&writer);

        let results = writer.commit_group(vec![
            one(first, ExpectedVersion::NoStream, turn(2)),
            one(second, ExpectedVersion::NoStream, turn(1)),
            one(first, ExpectedVersion::Exact(1), turn(2)),
        ]);
        assert!(matches!(
            results[0],
            Err(StoreError::Conflict { actual: 1, .. })
        ));
        assert_eq!(results[1].as_ref().unwrap()[0].first_position, 3);
        assert_eq!(results[2].as_ref().unwrap()[0].stream_version, 2);
        assert_emptied(&writer);

        // A group of refusals only writes nothing and keeps nothing.
        let results = writer.commit_group(vec![one(first, ExpectedVersion::NoStream, turn(3))]);
        assert!(results[0].is_err());
        assert_emptied(&writer);
        assert_eq!(writer.head, 4);

        // Every stored record decodes, at its position, and its indexes
        // point back at it.
        let log = family(&db, CF_LOG).unwrap();
        let mut stored = Vec::new();
        for position in 1..=4 {
            let bytes = db
                .get_cf(log, keys::position_key(position))
                .unwrap()
                .unwrap();
            let record = crate::record::decode(position, &bytes).unwrap();
            assert_eq!(crate::record::encode(&record).unwrap(), bytes);
            let location = db
                .get_cf(
                    family(&db, CF_EVENT_IDS).unwrap(),
                    keys::event_id_key(&record.event_id),
                )
                .unwrap()
                .and_then(|value| keys::decode_location(&value))
                .unwrap();
            assert_eq!(
                (location.stream, location.position, location.version),
                (record.stream, position, record.version)
            );
            let indexed = db
                .get_cf(
                    family(&db, CF_STREAMS).unwrap(),
                    keys::stream_key(&record.stream, record.version),
                )
                .unwrap();
            assert_eq!(indexed.as_deref(), Some(&position.to_be_bytes()[..]));
            stored.push((record.stream, record.version, record.event));
        }
        assert_eq!(
            stored[1..],
            [
                (first, 1, turn(1)),
                (second, 1, turn(1)),
                (first, 2, turn(2)),
            ]
        );
        assert!(
            matches!(stored[0].2, Event::ProviderRemoved { ref name } if name.len() == 300 * 1024)
        );
    }
}
