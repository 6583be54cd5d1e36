//! [`PgLog`]: connecting (pool, schema migration, the background tasks),
//! the [`EventLog`] implementation's reads, and the test hooks that damage
//! stored rows as a failing disk or a stray write would.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use subagent_core::{Attachment, AttachmentId, EventId, RecordedEvent, StreamId};
use subagent_store::indexes::IndexDamage;
use subagent_store::log::{check_attachment, good_prefix};
use subagent_store::subscription::{self, Subscription};
use subagent_store::{
    record, CheckpointBytes, Durability, EventLog, Fence, IdLocation, IndexEntries, LogIndex,
    StoreError, StreamAppend, TransactionTicket,
};
use tokio::sync::{mpsc, watch, Notify};
use tokio_postgres::NoTls;

use crate::bridge::{wait, OwnedRuntime};
use crate::error::{db_error, pool_error, signed, unsigned};
use crate::options::{validate_schema_name, PgOptions};
use crate::schema::{self, Sql};
use crate::writer::{self, AppendRequest};

/// How long closing the last handle lets the writer finish what is queued.
const CLOSE_DRAIN: Duration = Duration::from_secs(10);

/// What the background tasks and the reads share.
pub(crate) struct Inner {
    pub(crate) pool: Pool,
    /// The listener's connection settings (its connection is not pooled).
    pub(crate) config: tokio_postgres::Config,
    pub(crate) sql: Sql,
    pub(crate) schema: String,
    pub(crate) durability: Durability,
    pub(crate) poll_interval: Duration,
    /// The durable head, moved forward only ([`crate::head::advance`]).
    pub(crate) head: watch::Sender<u64>,
    /// Set once the writer has answered everything queued and stopped.
    pub(crate) writer_done: watch::Sender<bool>,
}

impl Inner {
    /// A pooled connection for `doing`.
    pub(crate) async fn client(
        &self,
        doing: &str,
    ) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(|err| pool_error(doing, err))
    }

    /// Where the log lives, for error messages.
    pub(crate) fn place(&self) -> String {
        format!("PostgreSQL schema {}", self.schema)
    }
}

struct Shared {
    inner: Arc<Inner>,
    /// Taken by `drop`, which closes the queue.
    requests: Option<mpsc::UnboundedSender<AppendRequest>>,
    writer: Option<tokio::task::JoinHandle<()>>,
    /// Declared last; taken by `drop`.
    runtime: Option<OwnedRuntime>,
    handle: tokio::runtime::Handle,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the queue lets the writer commit what is queued and end.
        drop(self.requests.take());
        let (Some(runtime), writer) = (self.runtime.take(), self.writer.take()) else {
            return;
        };
        // The caller may be inside an async context, where neither waiting
        // nor dropping a runtime is allowed: a thread of its own waits for
        // the writer (bounded), then shuts the runtime down in the
        // background. If the thread cannot start, the closure is dropped
        // and `OwnedRuntime` shuts down in the background at once.
        let close = move || {
            if let Some(writer) = writer {
                runtime.finish(writer, CLOSE_DRAIN);
            }
            drop(runtime);
        };
        let _ = std::thread::Builder::new()
            .name("subagents-pg-close".into())
            .spawn(close);
    }
}

/// An event log in PostgreSQL. Clones share one connection pool, one
/// writer and one runtime; the last clone dropped (subscriptions hold one)
/// lets the writer commit what is queued, then closes the connections.
///
/// Several `PgLog`s, in one process or many, may share one schema:
/// positions stay gap-free and in commit order across all of them.
#[derive(Clone)]
pub struct PgLog {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PgLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLog")
            .field("schema", &self.shared.inner.schema)
            .field("head", &*self.shared.inner.head.borrow())
            .finish_non_exhaustive()
    }
}

impl PgLog {
    /// Connects to the server of `options`, creates or migrates the schema
    /// ([`crate::SCHEMA_VERSION`]) and starts the writer, the head follower
    /// and the notification listener on a runtime of the log's own. May be
    /// called from inside or outside a tokio runtime.
    ///
    /// # Errors
    /// [`StoreError::NotALog`] for an invalid schema name;
    /// [`StoreError::Io`] for [`Durability::Volatile`] (PostgreSQL cannot
    /// forget) or a refused statement; [`StoreError::UnsupportedFormat`]
    /// when the stored schema is newer than this build (nothing is
    /// written); [`StoreError::Unavailable`] when the server cannot be
    /// reached.
    pub fn connect(options: PgOptions) -> Result<PgLog, StoreError> {
        validate_schema_name(&options.schema)?;
        if options.durability == Durability::Volatile {
            return Err(StoreError::Io(
                "a PostgreSQL log cannot be volatile: use Sync or Buffered".into(),
            ));
        }
        let runtime = OwnedRuntime::new()?;
        let handle = runtime.handle().clone();
        let mut config = options.config.clone();
        config.connect_timeout(options.connect_timeout);
        if config.get_application_name().is_none() {
            config.application_name("subagents");
        }
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|err| StoreError::Io(format!("building the connection pool: {err}")))?;
        let sql = Sql::new(&options.schema);
        let head = wait(&handle, {
            let (pool, name, read_head, must_exist) = (
                pool.clone(),
                options.schema.clone(),
                sql.read_head.clone(),
                options.must_exist,
            );
            async move {
                let mut client = pool
                    .get()
                    .await
                    .map_err(|err| pool_error("connecting", err))?;
                schema::migrate(&mut client, &name, must_exist).await?;
                crate::head::read_head(&client, &read_head, &name).await
            }
        })?;
        let inner = Arc::new(Inner {
            pool,
            config,
            sql,
            schema: options.schema.clone(),
            durability: options.durability,
            poll_interval: options.poll_interval.max(Duration::from_millis(1)),
            head: watch::channel(head).0,
            writer_done: watch::channel(false).0,
        });
        let (sender, receiver) = mpsc::unbounded_channel();
        let writer = handle.spawn(writer::run(Arc::clone(&inner), receiver));
        let wake = Arc::new(Notify::new());
        drop(handle.spawn(crate::head::follow(Arc::clone(&inner), Arc::clone(&wake))));
        drop(handle.spawn(crate::head::listen(Arc::clone(&inner), wake)));
        Ok(PgLog {
            shared: Arc::new(Shared {
                inner,
                requests: Some(sender),
                writer: Some(writer),
                runtime: Some(runtime),
                handle,
            }),
        })
    }

    /// Becomes `true` once this log's writer has answered every queued
    /// append and stopped, which happens after the last clone is dropped
    /// (or the sender closes when the log's tasks are gone). A host that
    /// reconnects in place of a dropped handle waits for it, so nothing the
    /// old handle queued can commit after the new one has started deciding
    /// (the model-based test's crash does).
    #[must_use]
    pub fn writer_done(&self) -> watch::Receiver<bool> {
        self.shared.inner.writer_done.subscribe()
    }

    /// The schema holding this log's tables.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.shared.inner.schema
    }

    /// Runs `work` with the shared state on the log's runtime and waits.
    pub(crate) fn run<T, F, Fut>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        wait(&self.shared.handle, work(Arc::clone(&self.shared.inner)))
    }

    /// Test and tooling hook: flips one bit (`0x10`) of byte `byte` (modulo
    /// the record's length) of the stored record at `position`, as a
    /// failing disk would. Flipping the same byte again restores it.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when there is no such record; a database
    /// failure.
    pub fn corrupt_record(&self, position: u64, byte: usize) -> Result<(), StoreError> {
        let key = signed("position", position)?;
        self.run(move |inner| async move {
            let client = inner.client("corrupting a record").await?;
            let fail = |err: tokio_postgres::Error| db_error("corrupting a record", &err);
            let row = client
                .query_opt(inner.sql.read_record.as_str(), &[&key])
                .await
                .map_err(fail)?
                .ok_or_else(|| StoreError::Corrupt {
                    position,
                    reason: "no such record".into(),
                })?;
            let mut bytes: Vec<u8> = row.try_get(0).map_err(fail)?;
            if bytes.is_empty() {
                return Ok(());
            }
            let at = byte % bytes.len();
            bytes[at] ^= 0x10;
            client
                .execute(inner.sql.write_record.as_str(), &[&key, &bytes])
                .await
                .map_err(fail)?;
            Ok(())
        })
    }

    /// Test and tooling hook: flips one bit of the first byte of the stored
    /// attachment `id`. Returns false when there is no such attachment or it
    /// is empty.
    ///
    /// # Errors
    /// A database failure.
    pub fn corrupt_attachment(&self, id: &AttachmentId) -> Result<bool, StoreError> {
        let digest = id.digest().to_vec();
        self.run(move |inner| async move {
            let client = inner.client("corrupting an attachment").await?;
            let fail = |err: tokio_postgres::Error| db_error("corrupting an attachment", &err);
            let Some(row) = client
                .query_opt(inner.sql.read_blob.as_str(), &[&digest])
                .await
                .map_err(fail)?
            else {
                return Ok(false);
            };
            let mut bytes: Vec<u8> = row.try_get(0).map_err(fail)?;
            let Some(first) = bytes.first_mut() else {
                return Ok(false);
            };
            *first ^= 0x10;
            client
                .execute(inner.sql.write_blob.as_str(), &[&digest, &bytes])
                .await
                .map_err(fail)?;
            Ok(true)
        })
    }

    /// Test and tooling hook: damages one index entry, as a stray write
    /// would (sets it, or deletes it for `None`). Every damage is
    /// representable: the indexes are tables of their own.
    ///
    /// # Errors
    /// [`StoreError::NumberingExhausted`] for a number past `i64::MAX`; a
    /// database failure.
    pub fn damage_index(&self, damage: IndexDamage) -> Result<(), StoreError> {
        self.run(move |inner| async move {
            let client = inner.client("damaging an index").await?;
            let fail = |err: tokio_postgres::Error| db_error("damaging an index", &err);
            let sql = &inner.sql;
            let done = match damage {
                IndexDamage::Stream {
                    stream,
                    version,
                    position,
                } => {
                    let (stream, version) =
                        (stream.to_string(), signed("stream version", version)?);
                    match position {
                        Some(position) => {
                            let position = signed("position", position)?;
                            client
                                .execute(
                                    sql.set_stream_entry.as_str(),
                                    &[&stream, &version, &position],
                                )
                                .await
                        }
                        None => {
                            client
                                .execute(sql.delete_stream_entry.as_str(), &[&stream, &version])
                                .await
                        }
                    }
                }
                IndexDamage::EventId { event_id, location } => {
                    let id = *event_id.as_uuid();
                    match location {
                        Some(location) => {
                            let (stream, position, version) = (
                                location.stream.to_string(),
                                signed("position", location.position)?,
                                signed("stream version", location.version)?,
                            );
                            client
                                .execute(
                                    sql.set_id_entry.as_str(),
                                    &[&id, &stream, &position, &version],
                                )
                                .await
                        }
                        None => client.execute(sql.delete_id_entry.as_str(), &[&id]).await,
                    }
                }
            };
            done.map_err(fail)?;
            Ok(())
        })
    }
}

/// A page of `(position, record bytes)` rows as records: positions must
/// run on from `from` without a gap, and the page ends before the first
/// bad record (the shared page rule).
fn decode_page(from: u64, rows: &[tokio_postgres::Row]) -> Result<Vec<RecordedEvent>, StoreError> {
    let mut expected = from;
    let mut decoded = Vec::with_capacity(rows.len());
    for row in rows {
        let record = match (row.try_get::<_, i64>(0), row.try_get::<_, &[u8]>(1)) {
            (Ok(position), Ok(bytes)) if u64::try_from(position) == Ok(expected) => {
                record::decode(expected, bytes)
            }
            (Ok(position), Ok(_)) => Err(StoreError::Corrupt {
                position: expected,
                reason: format!("gap in the log: next record is at {position}"),
            }),
            (Err(err), _) | (_, Err(err)) => Err(StoreError::Corrupt {
                position: expected,
                reason: format!("the stored row does not decode: {err}"),
            }),
        };
        let failed = record.is_err();
        decoded.push(record);
        match expected.checked_add(1) {
            Some(after) if !failed => expected = after,
            _ => break,
        }
    }
    good_prefix(decoded)
}

fn limit_of(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

impl EventLog for PgLog {
    fn tree_leases(&self) -> Option<&dyn subagent_store::TreeLeases> {
        Some(self)
    }

    fn append_with_attachments(
        &self,
        parts: Vec<StreamAppend>,
        attachments: Vec<Attachment>,
    ) -> TransactionTicket {
        self.append_fenced(parts, attachments, Vec::new())
    }

    /// Checks every fence against its tree's lease inside the append's
    /// transaction (`crate::leases`).
    fn append_fenced(
        &self,
        parts: Vec<StreamAppend>,
        attachments: Vec<Attachment>,
        fences: Vec<Fence>,
    ) -> TransactionTicket {
        let (reply, ticket) = TransactionTicket::channel();
        let request = AppendRequest {
            parts,
            attachments,
            fences,
            reply,
        };
        match &self.shared.requests {
            Some(requests) if requests.send(request).is_ok() => ticket,
            _ => TransactionTicket::ready(Err(StoreError::Closed)),
        }
    }

    fn attachment(&self, id: &AttachmentId) -> Result<Option<Vec<u8>>, StoreError> {
        let id = *id;
        self.run(move |inner| async move {
            let client = inner.client("reading an attachment").await?;
            let fail = |err: tokio_postgres::Error| db_error("reading an attachment", &err);
            let statement = client
                .prepare_cached(&inner.sql.read_blob)
                .await
                .map_err(fail)?;
            let digest: &[u8] = id.digest();
            let Some(row) = client
                .query_opt(&statement, &[&digest])
                .await
                .map_err(fail)?
            else {
                return Ok(None);
            };
            let bytes: Vec<u8> = row.try_get(0).map_err(fail)?;
            check_attachment(&id, bytes, &inner.place()).map(Some)
        })
    }

    fn attachment_ids(&self) -> Result<Vec<AttachmentId>, StoreError> {
        self.run(|inner| async move {
            let client = inner.client("listing attachments").await?;
            let fail = |err: tokio_postgres::Error| db_error("listing attachments", &err);
            let rows = client
                .query(inner.sql.blob_ids.as_str(), &[])
                .await
                .map_err(fail)?;
            rows.iter()
                .map(|row| {
                    let digest: &[u8] = row.try_get(0).map_err(fail)?;
                    let digest = <[u8; 32]>::try_from(digest).map_err(|_| StoreError::Damaged {
                        path: inner.place(),
                        reason: format!(
                            "a blob key of {} bytes is not a SHA-256 digest",
                            digest.len()
                        ),
                    })?;
                    Ok(AttachmentId::from_digest(digest))
                })
                .collect()
        })
    }

    fn read_all_page(
        &self,
        from_position: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let from = from_position.max(1);
        // No record is numbered past i64::MAX.
        let (Ok(key), true) = (i64::try_from(from), limit > 0) else {
            return Ok(Vec::new());
        };
        self.run(move |inner| async move {
            let client = inner.client("reading the log").await?;
            let fail = |err: tokio_postgres::Error| db_error("reading the log", &err);
            let statement = client
                .prepare_cached(&inner.sql.read_all)
                .await
                .map_err(fail)?;
            let rows = client
                .query(&statement, &[&key, &limit_of(limit)])
                .await
                .map_err(fail)?;
            decode_page(from, &rows)
        })
    }

    fn read_stream_page(
        &self,
        stream: &StreamId,
        from_version: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let (Ok(from), true) = (i64::try_from(from_version.max(1)), limit > 0) else {
            return Ok(Vec::new());
        };
        let name = stream.to_string();
        self.run(move |inner| async move {
            let client = inner.client("reading a stream").await?;
            let fail = |err: tokio_postgres::Error| db_error("reading a stream", &err);
            let statement = client
                .prepare_cached(&inner.sql.read_stream)
                .await
                .map_err(fail)?;
            let rows = client
                .query(&statement, &[&name, &from, &limit_of(limit)])
                .await
                .map_err(fail)?;
            good_prefix(rows.iter().map(|row| {
                let position: i64 = row.try_get(0).map_err(fail)?;
                let position = unsigned(position, |value| StoreError::CorruptIndex {
                    index: "streams",
                    reason: format!("an entry of {name} names position {value}"),
                })?;
                match row.try_get::<_, Option<&[u8]>>(1).map_err(fail)? {
                    Some(bytes) => record::decode(position, bytes),
                    None => Err(StoreError::Corrupt {
                        position,
                        reason: "stream index names a missing record".into(),
                    }),
                }
            }))
        })
    }

    fn stream_version(&self, stream: &StreamId) -> Result<u64, StoreError> {
        let name = stream.to_string();
        self.run(move |inner| async move {
            let client = inner.client("reading a stream version").await?;
            let fail = |err: tokio_postgres::Error| db_error("reading a stream version", &err);
            let statement = client
                .prepare_cached(&inner.sql.stream_version)
                .await
                .map_err(fail)?;
            let row = client.query_one(&statement, &[&name]).await.map_err(fail)?;
            let version: i64 = row.try_get(0).map_err(fail)?;
            unsigned(version, |value| StoreError::CorruptIndex {
                index: "streams",
                reason: format!("{name} has version {value}"),
            })
        })
    }

    fn head(&self) -> u64 {
        *self.shared.inner.head.borrow()
    }

    fn watch_head(&self) -> watch::Receiver<u64> {
        self.shared.inner.head.subscribe()
    }

    fn subscribe(&self, from_position: u64) -> Subscription {
        subscription::follow(self.clone(), self.watch_head(), from_position)
    }

    fn subscribe_stream(&self, stream: StreamId, from_version: u64) -> Subscription {
        subscription::follow_stream(self.clone(), self.watch_head(), stream, from_version)
    }

    fn durability(&self) -> Durability {
        self.shared.inner.durability
    }

    fn read_checkpoint(&self, name: &str) -> Result<Option<CheckpointBytes<'_>>, StoreError> {
        let name = name.to_owned();
        self.run(move |inner| async move {
            let client = inner.client("reading a checkpoint").await?;
            let fail = |err: tokio_postgres::Error| db_error("reading a checkpoint", &err);
            let row = client
                .query_opt(inner.sql.read_checkpoint.as_str(), &[&name])
                .await
                .map_err(fail)?;
            row.map(|row| row.try_get::<_, Vec<u8>>(0).map_err(fail))
                .transpose()
                .map(|bytes| bytes.map(CheckpointBytes::from))
        })
    }

    fn write_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let (name, bytes) = (name.to_owned(), bytes.to_vec());
        self.run(move |inner| async move {
            let client = inner.client("writing a checkpoint").await?;
            let fail = |err: tokio_postgres::Error| db_error("writing a checkpoint", &err);
            client
                .execute(inner.sql.write_checkpoint.as_str(), &[&name, &bytes])
                .await
                .map_err(fail)?;
            Ok(())
        })
    }

    fn index_entries(&self, index: LogIndex) -> IndexEntries<'_> {
        Box::new(crate::indexes::Entries::new(self, index))
    }

    fn locate_event(&self, event_id: &EventId) -> Result<Option<IdLocation>, StoreError> {
        let event_id = *event_id;
        self.run(move |inner| async move {
            let client = inner.client("looking up an event id").await?;
            let fail = |err: tokio_postgres::Error| db_error("looking up an event id", &err);
            let row = client
                .query_opt(inner.sql.locate_event.as_str(), &[event_id.as_uuid()])
                .await
                .map_err(fail)?;
            row.map(|row| crate::indexes::id_location(&row, 0, event_id))
                .transpose()
        })
    }

    fn indexed_position(&self, stream: &StreamId, version: u64) -> Result<Option<u64>, StoreError> {
        let Ok(version) = i64::try_from(version) else {
            return Ok(None);
        };
        let name = stream.to_string();
        self.run(move |inner| async move {
            let client = inner.client("looking up a stream version").await?;
            let fail = |err: tokio_postgres::Error| db_error("looking up a stream version", &err);
            let row = client
                .query_opt(inner.sql.indexed_position.as_str(), &[&name, &version])
                .await
                .map_err(fail)?;
            row.map(|row| {
                let position: i64 = row.try_get(0).map_err(fail)?;
                unsigned(position, |value| StoreError::CorruptIndex {
                    index: "streams",
                    reason: format!("version {version} of {name} names position {value}"),
                })
            })
            .transpose()
        })
    }
}

impl PgLog {
    /// Runs a page query of the index listing (for [`crate::indexes`]).
    pub(crate) fn index_page(
        &self,
        index: LogIndex,
        after: Option<crate::indexes::Key>,
        limit: usize,
    ) -> Result<Vec<crate::indexes::RawEntry>, StoreError> {
        self.run(move |inner| crate::indexes::page(inner, index, after, limit))
    }
}
