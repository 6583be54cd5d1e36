//! The `streams` and `event_ids` tables as [`subagent_store::indexes`]
//! exposes them: every entry in key order, a page of 1024 at a time
//! (keyset pagination, so a listing of any size holds one page), an entry
//! that does not decode reported as [`StoreError::CorruptIndex`] without
//! ending the listing.

use std::collections::VecDeque;
use std::sync::Arc;

use subagent_core::{EventId, StreamId};
use subagent_store::{IdLocation, IndexEntry, LogIndex, StoreError};
use uuid::Uuid;

use crate::error::db_error;
use crate::log::{Inner, PgLog};

/// Entries read per page.
const PAGE: usize = 1024;

/// Where a listing stands: the last key it read.
#[derive(Clone, Debug)]
pub(crate) enum Key {
    Stream(String, i64),
    EventId(Uuid),
}

/// One row: its key (to page on) and its entry, or why it does not decode.
pub(crate) struct RawEntry {
    key: Key,
    entry: Result<IndexEntry, StoreError>,
}

fn corrupt(index: LogIndex, reason: String) -> StoreError {
    StoreError::CorruptIndex {
        index: index.name(),
        reason,
    }
}

fn number(index: LogIndex, value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| corrupt(index, format!("{what} {value} is negative")))
}

/// The location in columns `first..first + 3` (stream, position, version)
/// of an `event_ids` row for `event_id`.
///
/// # Errors
/// [`StoreError::CorruptIndex`] when a column does not decode.
pub(crate) fn id_location(
    row: &tokio_postgres::Row,
    first: usize,
    event_id: EventId,
) -> Result<IdLocation, StoreError> {
    let index = LogIndex::EventIds;
    let undecodable = |err: tokio_postgres::Error| {
        corrupt(
            index,
            format!("the location of event {event_id} does not decode: {err}"),
        )
    };
    let stream: &str = row.try_get(first).map_err(undecodable)?;
    let position: i64 = row.try_get(first + 1).map_err(undecodable)?;
    let version: i64 = row.try_get(first + 2).map_err(undecodable)?;
    let stream = stream.parse::<StreamId>().map_err(|err| {
        corrupt(
            index,
            format!("the stream of event {event_id} does not decode: {err}"),
        )
    })?;
    Ok(IdLocation {
        stream,
        position: number(index, position, "the position")?,
        version: number(index, version, "the version")?,
    })
}

fn stream_entry(stream: &str, version: i64, position: i64) -> Result<IndexEntry, StoreError> {
    let index = LogIndex::Streams;
    let parsed = stream
        .parse::<StreamId>()
        .map_err(|err| corrupt(index, format!("key {stream:?} does not decode: {err}")))?;
    Ok(IndexEntry::Stream {
        stream: parsed,
        version: number(index, version, "the version")?,
        position: number(index, position, "the position")?,
    })
}

fn stream_row(row: &tokio_postgres::Row) -> Result<RawEntry, StoreError> {
    let fail = |err: tokio_postgres::Error| db_error("listing the stream index", &err);
    let stream: String = row.try_get(0).map_err(fail)?;
    let version: i64 = row.try_get(1).map_err(fail)?;
    let position: i64 = row.try_get(2).map_err(fail)?;
    let entry = stream_entry(&stream, version, position);
    Ok(RawEntry {
        key: Key::Stream(stream, version),
        entry,
    })
}

fn id_row(row: &tokio_postgres::Row) -> Result<RawEntry, StoreError> {
    let fail = |err: tokio_postgres::Error| db_error("listing the event-id index", &err);
    let id: Uuid = row.try_get(0).map_err(fail)?;
    let event_id = EventId::from_uuid(id);
    let entry =
        id_location(row, 1, event_id).map(|location| IndexEntry::EventId { event_id, location });
    Ok(RawEntry {
        key: Key::EventId(id),
        entry,
    })
}

/// One page of `index` after `after` (from the start for `None`).
pub(crate) async fn page(
    inner: Arc<Inner>,
    index: LogIndex,
    after: Option<Key>,
    limit: usize,
) -> Result<Vec<RawEntry>, StoreError> {
    let doing = match index {
        LogIndex::Streams => "listing the stream index",
        LogIndex::EventIds => "listing the event-id index",
    };
    let client = inner.client(doing).await?;
    let fail = |err: tokio_postgres::Error| db_error(doing, &err);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = &inner.sql;
    let rows = match (index, &after) {
        (LogIndex::Streams, None) => client.query(sql.streams_first.as_str(), &[&limit]).await,
        (LogIndex::Streams, Some(Key::Stream(stream, version))) => {
            client
                .query(sql.streams_after.as_str(), &[stream, version, &limit])
                .await
        }
        (LogIndex::EventIds, None) => client.query(sql.ids_first.as_str(), &[&limit]).await,
        (LogIndex::EventIds, Some(Key::EventId(id))) => {
            client.query(sql.ids_after.as_str(), &[id, &limit]).await
        }
        (_, Some(key)) => {
            return Err(StoreError::Io(format!(
                "{doing}: a {key:?} key does not belong to this index"
            )))
        }
    }
    .map_err(fail)?;
    rows.iter()
        .map(|row| match index {
            LogIndex::Streams => stream_row(row),
            LogIndex::EventIds => id_row(row),
        })
        .collect()
}

/// The paged listing [`PgLog::index_entries`](subagent_store::EventLog::index_entries) returns.
pub(crate) struct Entries<'a> {
    log: &'a PgLog,
    index: LogIndex,
    after: Option<Key>,
    buffer: VecDeque<Result<IndexEntry, StoreError>>,
    finished: bool,
}

impl<'a> Entries<'a> {
    pub(crate) fn new(log: &'a PgLog, index: LogIndex) -> Entries<'a> {
        Entries {
            log,
            index,
            after: None,
            buffer: VecDeque::new(),
            finished: false,
        }
    }
}

impl Iterator for Entries<'_> {
    type Item = Result<IndexEntry, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buffer.is_empty() && !self.finished {
            match self.log.index_page(self.index, self.after.clone(), PAGE) {
                Ok(rows) => {
                    if rows.len() < PAGE {
                        self.finished = true;
                    }
                    for row in rows {
                        self.after = Some(row.key);
                        self.buffer.push_back(row.entry);
                    }
                }
                Err(err) => {
                    // A read failure ends the listing.
                    self.finished = true;
                    return Some(Err(err));
                }
            }
        }
        self.buffer.pop_front()
    }
}
