//! Group commit: the one task of a log that writes appends.
//!
//! Appenders enqueue requests on a channel (so one caller's appends land in
//! the order it issued them). The writer takes everything queued (up to
//! [`MAX_GROUP_REQUESTS`]) and commits it in ONE transaction:
//! 1. lock the counter row (`SELECT head ... FOR UPDATE`), which makes a
//!    writer in any other process wait until this transaction ends, and
//!    sets `synchronous_commit` for the transaction from the durability;
//! 2. read, in two statements, the current version of every stream and the
//!    location of every event id the group names (after the lock, so they
//!    include everything committed before);
//! 3. share-lock the leases the group's fences name and read their
//!    tokens (a takeover's token bump then waits for this transaction);
//! 4. check each request's fences (a stale one is `Fenced`), then check it
//!    with the store's own
//!    [`check_transaction`](subagent_store::append_check::check_transaction)
//!    against those, layered with what the requests before it in the group
//!    will write, then number ([`place`]) and encode
//!    ([`encode_records`], the size limit) it. A request a check refuses
//!    writes nothing and gets its own error; the others go on. A full retry
//!    is answered with its original placement (`deduplicated`);
//! 5. insert every record, stream and id index entry and attachment, move
//!    the counter to the new head and `pg_notify` it, then `COMMIT`.
//!
//! Tickets complete only after `COMMIT` returns. A database failure fails
//! every request of the group that needed the write (none is acknowledged;
//! an unknown commit outcome is an error too), and the writer is then
//! fail-stop like the RocksDB writer: every later append through this
//! handle is refused with that error, so nothing decided on top of a lost
//! write can land after it. Reads go on (the pool reconnects); connect a
//! new [`crate::PgLog`] to append again, and retry with the same event ids.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use subagent_core::{Attachment, EventId, SessionId, StreamId};
use subagent_store::append_check::{
    check_transaction, encode_records, next_position, place, TransactionVerdict,
};
use subagent_store::{AppendOutcome, Durability, Fence, IdLocation, StoreError, StreamAppend};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn, Instrument};
use uuid::Uuid;

use crate::error::{db_error, pool_error, signed, unsigned};
use crate::head::advance;
use crate::log::Inner;

/// The most requests folded into one transaction.
pub(crate) const MAX_GROUP_REQUESTS: usize = 256;

/// The most record or attachment bytes sent in one statement (PostgreSQL
/// refuses a parameter over 1 GiB; a group can carry more).
const MAX_STATEMENT_BYTES: usize = 32 << 20;

type Reply = oneshot::Sender<Result<Vec<AppendOutcome>, StoreError>>;

/// One queued append.
pub(crate) struct AppendRequest {
    pub(crate) parts: Vec<StreamAppend>,
    /// Stored in the same transaction as `parts`' events, when those are written.
    pub(crate) attachments: Vec<Attachment>,
    /// The leases the writer holds for the trees `parts` touch, checked in
    /// the transaction; empty for a plain append.
    pub(crate) fences: Vec<Fence>,
    pub(crate) reply: Reply,
}

/// One request's work: its parts, attachments and fences.
type Work = (Vec<StreamAppend>, Vec<Attachment>, Vec<Fence>);

/// Runs until every sender is dropped and the queue is drained.
pub(crate) async fn run(inner: Arc<Inner>, mut requests: mpsc::UnboundedReceiver<AppendRequest>) {
    let mut failed: Option<StoreError> = None;
    let mut group = Vec::new();
    while requests.recv_many(&mut group, MAX_GROUP_REQUESTS).await > 0 {
        let batch = std::mem::take(&mut group);
        if let Some(failure) = &failed {
            for request in batch {
                let _ = request.reply.send(Err(failure.clone()));
            }
            continue;
        }
        let span = subagent_store::telemetry::group_commit(batch.len());
        if let Err(err) = commit_group(&inner, batch).instrument(span).await {
            warn!(error = %err, "group commit failed; nothing of it is acknowledged; refusing further appends through this handle");
            failed = Some(err);
        }
    }
    inner.writer_done.send_replace(true);
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// A request's verdict, held until the transaction ends.
struct Verdict {
    result: Result<Vec<AppendOutcome>, StoreError>,
    /// Whether the answer is only true once the transaction commits.
    needs_commit: bool,
}

/// What the database said, under the lock, about the group's streams and ids.
#[derive(Default)]
struct Durable {
    /// Stream (as stored text) → its version.
    versions: HashMap<String, u64>,
    /// Event id → where it is, or why its entry does not decode.
    ids: HashMap<EventId, Result<IdLocation, StoreError>>,
    /// Root → the token and holder of its lease, for the roots the group's
    /// fences name (share-locked until the transaction ends).
    leases: HashMap<SessionId, (u64, String)>,
}

/// What the group will write, layered over [`Durable`].
#[derive(Default)]
struct Overlay {
    versions: HashMap<StreamId, u64>,
    ids: HashMap<EventId, IdLocation>,
}

/// The rows the group will insert.
#[derive(Default)]
struct Staged {
    positions: Vec<i64>,
    records: Vec<Vec<u8>>,
    streams: Vec<String>,
    versions: Vec<i64>,
    ids: Vec<Uuid>,
    blobs: BTreeMap<[u8; 32], Vec<u8>>,
}

/// Commits one group and answers every request in it.
///
/// # Errors
/// The database failure that failed the group (every request that needed
/// the write was answered with it).
async fn commit_group(inner: &Inner, group: Vec<AppendRequest>) -> Result<(), StoreError> {
    let mut work = Vec::with_capacity(group.len());
    let mut replies = Vec::with_capacity(group.len());
    for request in group {
        work.push((request.parts, request.attachments, request.fences));
        replies.push(request.reply);
    }
    let mut verdicts = Vec::with_capacity(work.len());
    let committed = transact(inner, work, &mut verdicts).await;
    if let Ok(Some(head)) = &committed {
        advance(&inner.head, *head);
        debug!(requests = replies.len(), head, "group committed");
    }
    // A refusal checked after a request that needed the commit may rest on
    // that request's staged writes (a `NoStream` after another `NoStream`
    // to the same stream); when the commit fails, it is answered with the
    // commit's error too, never with a conflict against nothing.
    let first_staged = verdicts.iter().position(|verdict| verdict.needs_commit);
    let mut verdicts = verdicts.into_iter().enumerate();
    for reply in replies {
        let answer = match (verdicts.next(), &committed) {
            (Some((_, verdict)), Err(err)) if verdict.needs_commit => Err(err.clone()),
            // A fenced request rests on no staged write (its lease row is
            // share-locked, and nothing of it was staged): it keeps its
            // own answer, so a host always learns it lost the tree.
            (Some((index, verdict)), Err(err))
                if verdict.result.is_err()
                    && !matches!(verdict.result, Err(StoreError::Fenced { .. }))
                    && first_staged.is_some_and(|first| index > first) =>
            {
                Err(err.clone())
            }
            (Some((_, verdict)), _) => verdict.result,
            (None, Err(err)) => Err(err.clone()),
            // Every request has a verdict when the transaction succeeded.
            (None, Ok(_)) => Err(StoreError::Closed),
        };
        // An appender that stopped waiting is not an error of the log.
        let _ = reply.send(answer);
    }
    committed.map(|_| ())
}

/// Runs the group's transaction, pushing one verdict per request (in
/// order) as it checks them. `Ok(Some(head))` when it committed up to
/// `head`, `Ok(None)` when there was nothing to write.
async fn transact(
    inner: &Inner,
    work: Vec<Work>,
    verdicts: &mut Vec<Verdict>,
) -> Result<Option<u64>, StoreError> {
    let sql = &inner.sql;
    let mut client = inner
        .pool
        .get()
        .await
        .map_err(|err| pool_error("taking a connection to append", err))?;
    let fail = |doing: &'static str| move |err: tokio_postgres::Error| db_error(doing, &err);
    // READ COMMITTED whatever the server's default: after waiting for the
    // counter lock, every later statement sees what the previous holder
    // committed.
    let transaction = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
        .start()
        .await
        .map_err(fail("beginning an append"))?;
    let lock = transaction
        .prepare_cached(&sql.lock_head)
        .await
        .map_err(fail("preparing the counter lock"))?;
    let synchronous = match inner.durability {
        Durability::Buffered => "off",
        Durability::Sync | Durability::Volatile => "on",
    };
    let row = transaction
        .query_one(&lock, &[&synchronous])
        .await
        .map_err(fail("locking the counter"))?;
    let head: i64 = row.try_get(0).map_err(fail("reading the counter"))?;
    let head = unsigned(head, |value| StoreError::Damaged {
        path: format!("PostgreSQL schema {}", inner.schema),
        reason: format!("the counter row says {value}"),
    })?;

    let durable = prefetch(&transaction, inner, &work).await?;
    let mut next = next_position(head);
    let mut overlay = Overlay::default();
    let mut staged = Staged::default();
    let recorded_at = unix_millis();
    for (parts, attachments, fences) in work {
        // A fenced-out request is refused before anything of it is staged.
        let result = check_fences(&durable, &fences).and_then(|()| match next {
            Ok(ref mut position) => stage(
                &durable,
                &mut overlay,
                &mut staged,
                position,
                recorded_at,
                parts,
                attachments,
            ),
            Err(ref exhausted) => Err(exhausted.clone()),
        });
        let needs_commit = match &result {
            Ok(outcomes) => outcomes
                .iter()
                .any(|outcome| !outcome.deduplicated || outcome.last_position > head),
            Err(_) => false,
        };
        verdicts.push(Verdict {
            result,
            needs_commit,
        });
    }
    if staged.positions.is_empty() {
        // Nothing to write: release the lock at once.
        let _ = transaction.rollback().await;
        return Ok(None);
    }
    let new_head = head + staged.positions.len() as u64;
    write(&transaction, inner, &staged, new_head).await?;
    transaction
        .commit()
        .await
        .map_err(fail("committing an append (its outcome is unknown)"))?;
    Ok(Some(new_head))
}

/// Reads the versions of the group's streams, the locations of its ids and
/// the tokens of the leases its fences name.
async fn prefetch(
    transaction: &deadpool_postgres::Transaction<'_>,
    inner: &Inner,
    work: &[Work],
) -> Result<Durable, StoreError> {
    let sql = &inner.sql;
    let fail = |doing: &'static str| move |err: tokio_postgres::Error| db_error(doing, &err);
    let mut streams: Vec<String> = work
        .iter()
        .flat_map(|(parts, _, _)| parts.iter().map(|part| part.stream.to_string()))
        .collect();
    streams.sort_unstable();
    streams.dedup();
    let mut ids: Vec<Uuid> = work
        .iter()
        .flat_map(|(parts, _, _)| parts.iter().flat_map(|part| &part.events))
        .map(|new| *new.event_id.as_uuid())
        .collect();
    let mut roots: Vec<Uuid> = work
        .iter()
        .flat_map(|(_, _, fences)| fences.iter().map(|fence| *fence.root.as_uuid()))
        .collect();
    roots.sort_unstable();
    roots.dedup();
    ids.sort_unstable();
    ids.dedup();
    let versions_statement = transaction
        .prepare_cached(&sql.stream_versions)
        .await
        .map_err(fail("preparing the stream versions"))?;
    let locate_statement = transaction
        .prepare_cached(&sql.locate_many)
        .await
        .map_err(fail("preparing the event-id lookup"))?;
    let stream_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&streams];
    let id_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&ids];
    let (version_rows, id_rows) = futures::try_join!(
        transaction.query(&versions_statement, &stream_params),
        transaction.query(&locate_statement, &id_params),
    )
    .map_err(fail("reading stream versions and event ids"))?;
    let mut durable = Durable::default();
    if !roots.is_empty() {
        // After the counter lock, which already serializes the appenders
        // (their share locks would not conflict anyway); in root order.
        let fence_statement = transaction
            .prepare_cached(&sql.fence_tokens)
            .await
            .map_err(fail("preparing the fence check"))?;
        let fence_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&roots];
        for row in transaction
            .query(&fence_statement, &fence_params)
            .await
            .map_err(fail("locking the leases of the group's fences"))?
        {
            let root: Uuid = row.try_get(0).map_err(fail("reading a lease"))?;
            let token: i64 = row.try_get(1).map_err(fail("reading a lease"))?;
            let holder: String = row.try_get(2).map_err(fail("reading a lease"))?;
            let token = unsigned(token, |value| StoreError::Damaged {
                path: inner.place(),
                reason: format!("a lease's fencing token is {value}"),
            })?;
            durable
                .leases
                .insert(SessionId::from_uuid(root), (token, holder));
        }
    }
    for row in version_rows {
        let stream: String = row.try_get(0).map_err(fail("reading a stream version"))?;
        let version: i64 = row.try_get(1).map_err(fail("reading a stream version"))?;
        let version = unsigned(version, |value| StoreError::CorruptIndex {
            index: "streams",
            reason: format!("{stream} has version {value}"),
        })?;
        durable.versions.insert(stream, version);
    }
    for row in id_rows {
        let id: Uuid = row.try_get(0).map_err(fail("reading an event id"))?;
        let event_id = EventId::from_uuid(id);
        let location = crate::indexes::id_location(&row, 1, event_id);
        durable.ids.insert(event_id, location);
    }
    Ok(durable)
}

/// Refuses a request whose fences are not the current tokens of their
/// trees' leases. A tree without a lease refuses every fence (reported as
/// token 0): no token was ever handed out for it, and a share lock cannot
/// hold off a first take that is still uncommitted.
fn check_fences(durable: &Durable, fences: &[Fence]) -> Result<(), StoreError> {
    for fence in fences {
        let lease = durable.leases.get(&fence.root);
        if lease.is_none_or(|(token, _)| *token != fence.token) {
            let (current, holder) =
                lease.map_or((0, ""), |(token, holder)| (*token, holder.as_str()));
            return Err(StoreError::Fenced {
                root: fence.root,
                presented: fence.token,
                current,
                holder: holder.to_owned(),
            });
        }
    }
    Ok(())
}

/// Checks one request against the durable state and the group so far, and
/// stages all of its rows, or none of them: on error nothing is staged and
/// `position` (the next free position) is unchanged.
fn stage(
    durable: &Durable,
    overlay: &mut Overlay,
    staged: &mut Staged,
    position: &mut u64,
    recorded_at: u64,
    parts: Vec<StreamAppend>,
    attachments: Vec<Attachment>,
) -> Result<Vec<AppendOutcome>, StoreError> {
    let verdict = check_transaction(
        &parts,
        |stream| {
            Ok(match overlay.versions.get(stream) {
                Some(version) => *version,
                None => durable
                    .versions
                    .get(&stream.to_string())
                    .copied()
                    .unwrap_or(0),
            })
        },
        |id| match overlay.ids.get(id) {
            Some(location) => Ok(Some(*location)),
            None => durable.ids.get(id).cloned().transpose(),
        },
    )?;
    let currents = match verdict {
        TransactionVerdict::AlreadyAppended(outcomes) => return Ok(outcomes),
        TransactionVerdict::Write { currents } => currents,
    };
    let (records, outcomes) = place(parts, &currents, *position, recorded_at)?;
    let encoded = encode_records(&records)?;
    let after = match records.last() {
        Some(last) => next_position(last.position)?,
        None => *position,
    };
    // Every conversion before anything is staged.
    let mut rows = Vec::with_capacity(records.len());
    for record in &records {
        rows.push((
            signed("position", record.position)?,
            signed("stream version", record.version)?,
        ));
    }
    for ((record, bytes), (position, version)) in records.iter().zip(encoded).zip(rows) {
        staged.positions.push(position);
        staged.records.push(bytes);
        staged.streams.push(record.stream.to_string());
        staged.versions.push(version);
        staged.ids.push(*record.event_id.as_uuid());
        overlay.ids.insert(
            record.event_id,
            IdLocation {
                stream: record.stream,
                position: record.position,
                version: record.version,
            },
        );
        overlay.versions.insert(record.stream, record.version);
    }
    for attachment in attachments {
        staged
            .blobs
            .insert(*attachment.id().digest(), attachment.into_bytes());
    }
    *position = after;
    Ok(outcomes)
}

/// Chunks of `0..sizes.len()` whose sizes add up to at most
/// [`MAX_STATEMENT_BYTES`] (at least one item each).
fn chunks(sizes: impl Iterator<Item = usize>) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let (mut start, mut bytes, mut end) = (0usize, 0usize, 0usize);
    for (index, size) in sizes.enumerate() {
        if index > start && bytes + size > MAX_STATEMENT_BYTES {
            ranges.push(start..index);
            start = index;
            bytes = 0;
        }
        bytes += size;
        end = index + 1;
    }
    if end > start {
        ranges.push(start..end);
    }
    ranges
}

/// A statement's share of the group's attachments: digests and bytes.
type BlobSlices<'a> = (&'a [&'a [u8]], &'a [&'a [u8]]);

/// Inserts the staged rows and moves the counter to `new_head`, notifying
/// it. The statements are prepared first (cached per connection, so a
/// round trip only on a connection's first append), then sent together:
/// the driver pipelines them, and the server runs them in order inside the
/// transaction, so the whole write is one round trip. The first failure
/// fails the write (and the transaction).
async fn write(
    transaction: &deadpool_postgres::Transaction<'_>,
    inner: &Inner,
    staged: &Staged,
    new_head: u64,
) -> Result<(), StoreError> {
    use futures::future::{try_join_all, BoxFuture, FutureExt as _};
    type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
    let sql = &inner.sql;
    let fail = |doing: &'static str| move |err: tokio_postgres::Error| db_error(doing, &err);
    let (insert_events, insert_streams, insert_ids, write_head) = futures::try_join!(
        transaction.prepare_cached(&sql.insert_events),
        transaction.prepare_cached(&sql.insert_streams),
        transaction.prepare_cached(&sql.insert_ids),
        transaction.prepare_cached(&sql.write_head),
    )
    .map_err(fail("preparing the append's statements"))?;
    let upsert_blobs = if staged.blobs.is_empty() {
        None
    } else {
        Some(
            transaction
                .prepare_cached(&sql.upsert_blobs)
                .await
                .map_err(fail("preparing the attachment insert"))?,
        )
    };
    let head = signed("position", new_head)?;
    let digests: Vec<&[u8]> = staged.blobs.keys().map(|digest| &digest[..]).collect();
    let blobs: Vec<&[u8]> = staged.blobs.values().map(Vec::as_slice).collect();
    let event_ranges = chunks(staged.records.iter().map(Vec::len));
    let blob_ranges = chunks(blobs.iter().map(|blob| blob.len()));
    // The parameter slices must outlive the pipelined futures.
    let event_params: Vec<(&[i64], &[Vec<u8>])> = event_ranges
        .iter()
        .map(|range| {
            (
                &staged.positions[range.clone()],
                &staged.records[range.clone()],
            )
        })
        .collect();
    let blob_params: Vec<BlobSlices<'_>> = blob_ranges
        .iter()
        .map(|range| (&digests[range.clone()], &blobs[range.clone()]))
        .collect();
    let mut sent: Vec<BoxFuture<'_, Result<(), StoreError>>> = Vec::new();
    for (positions, records) in &event_params {
        let params: [Param<'_>; 2] = [positions, records];
        let statement = &insert_events;
        sent.push(
            async move {
                transaction
                    .execute(statement, &params)
                    .await
                    .map(drop)
                    .map_err(fail("inserting records"))
            }
            .boxed(),
        );
    }
    sent.push(
        async {
            let params: [Param<'_>; 3] = [&staged.streams, &staged.versions, &staged.positions];
            transaction
                .execute(&insert_streams, &params)
                .await
                .map(drop)
                .map_err(fail("inserting stream index entries"))
        }
        .boxed(),
    );
    sent.push(
        async {
            let params: [Param<'_>; 4] = [
                &staged.ids,
                &staged.streams,
                &staged.positions,
                &staged.versions,
            ];
            transaction
                .execute(&insert_ids, &params)
                .await
                .map(drop)
                .map_err(fail("inserting event-id index entries"))
        }
        .boxed(),
    );
    if let Some(upsert_blobs) = &upsert_blobs {
        for (digests, bytes) in &blob_params {
            let params: [Param<'_>; 2] = [digests, bytes];
            sent.push(
                async move {
                    transaction
                        .execute(upsert_blobs, &params)
                        .await
                        .map(drop)
                        .map_err(fail("storing attachments"))
                }
                .boxed(),
            );
        }
    }
    let schema = &inner.schema;
    sent.push(
        async move {
            let params: [Param<'_>; 2] = [&head, &sql.channel];
            let moved = transaction
                .query(&write_head, &params)
                .await
                .map_err(fail("moving the counter"))?;
            if moved.len() == 1 {
                Ok(())
            } else {
                Err(StoreError::Damaged {
                    path: format!("PostgreSQL schema {schema}"),
                    reason: "the counter row is missing".into(),
                })
            }
        }
        .boxed(),
    );
    try_join_all(sent).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_chunked_by_bytes_with_at_least_one_row_each() {
        assert!(chunks(std::iter::empty()).is_empty());
        assert_eq!(chunks([1, 2, 3].into_iter()), vec![0..3]);
        let big = MAX_STATEMENT_BYTES;
        assert_eq!(
            chunks([big + 1, 1, big, 1].into_iter()),
            vec![0..1, 1..2, 2..3, 3..4]
        );
        assert_eq!(chunks([big / 2, big / 2, 1].into_iter()), vec![0..2, 2..3]);
    }
}
