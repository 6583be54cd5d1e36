//! The log's tables, their migrations and the SQL that uses them.
//!
//! Every table lives in the configured schema (validated by
//! [`crate::validate_schema_name`], and spliced in double-quoted):
//! - `subagents_schema`: one row, the schema version the tables are at;
//! - `counter`: one row, `head`, the last position. Every append
//!   transaction locks it (`SELECT ... FOR UPDATE`) before anything else,
//!   takes its positions from it and writes it back, so appenders in every
//!   process are serialized in commit order and a rollback leaves it as it
//!   was;
//! - `events`: position → the encoded record (`subagent_core::record`
//!   bytes, CRC32C included);
//! - `streams`: the stream index, (stream, version) → position; a stream's
//!   version is its last entry (as in the RocksDB backend's `streams`
//!   family);
//! - `event_ids`: the event-id index, id → stream, position, version;
//! - `blobs`: attachments by SHA-256 digest;
//! - `checkpoints`: projection checkpoints by name;
//! - `leases` (migration 2): a root's tree, its holder, its fencing token
//!   and when it lapses, on the server's clock ([`subagent_store::lease`]).
//!
//! The two indexes are tables of their own, not columns of `events`, so
//! they can disagree with the records exactly as the RocksDB families can
//! (the conformance suite damages them and `verify` must see it).
//!
//! Migrations are an ordered list; connecting applies the missing ones in
//! one transaction under a transaction-scoped advisory lock, so two
//! processes connecting at once cannot race, and a stored version newer
//! than [`SCHEMA_VERSION`] is refused before anything is written.

use subagent_store::StoreError;

use crate::error::{db_error, unsigned};

/// The schema version this build creates and reads.
pub const SCHEMA_VERSION: u64 = 2;

/// The migrations, in order: `MIGRATIONS[i]` takes the tables from version
/// `i` to `i + 1`. `{s}` is the schema.
const MIGRATIONS: &[&str] = &[
    // 1: the log.
    r#"
    CREATE TABLE {s}.counter (
        id smallint PRIMARY KEY CHECK (id = 1),
        head bigint NOT NULL CHECK (head >= 0)
    );
    INSERT INTO {s}.counter (id, head) VALUES (1, 0);
    CREATE TABLE {s}.events (
        position bigint PRIMARY KEY CHECK (position > 0),
        record bytea NOT NULL
    );
    CREATE TABLE {s}.streams (
        stream text COLLATE "C" NOT NULL,
        version bigint NOT NULL,
        position bigint NOT NULL,
        PRIMARY KEY (stream, version)
    );
    CREATE TABLE {s}.event_ids (
        event_id uuid PRIMARY KEY,
        stream text COLLATE "C" NOT NULL,
        position bigint NOT NULL,
        version bigint NOT NULL
    );
    CREATE TABLE {s}.blobs (
        digest bytea PRIMARY KEY,
        bytes bytea NOT NULL
    );
    CREATE TABLE {s}.checkpoints (
        name text PRIMARY KEY,
        bytes bytea NOT NULL
    );
    "#,
    // 2: tree leases and their fencing tokens.
    r#"
    CREATE TABLE {s}.leases (
        root uuid PRIMARY KEY,
        holder text NOT NULL CHECK (holder <> ''),
        token bigint NOT NULL CHECK (token > 0),
        expires_at timestamptz NOT NULL
    );
    "#,
];

/// A stable 64-bit key for the advisory lock of `schema`'s migrations
/// (FNV-1a, so every build and process computes the same one).
fn migration_lock_key(schema: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in "subagents-pg-migrate:".bytes().chain(schema.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// The stored schema version, if the version table exists.
async fn stored_version<C: tokio_postgres::GenericClient + Sync>(
    client: &C,
    schema: &str,
    lock: bool,
) -> Result<Option<u64>, StoreError> {
    let exists = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = 'subagents_schema')",
            &[&schema],
        )
        .await
        .map_err(|err| db_error("looking for the schema version", &err))?;
    let exists: bool = exists
        .try_get(0)
        .map_err(|err| db_error("looking for the schema version", &err))?;
    if !exists {
        return Ok(None);
    }
    let sql = format!(
        "SELECT version FROM {}.subagents_schema WHERE id = 1{}",
        crate::options::quoted(schema),
        if lock { " FOR UPDATE" } else { "" }
    );
    let row = client
        .query_opt(sql.as_str(), &[])
        .await
        .map_err(|err| db_error("reading the schema version", &err))?;
    let Some(row) = row else {
        return Ok(Some(0));
    };
    let version: i64 = row
        .try_get(0)
        .map_err(|err| db_error("reading the schema version", &err))?;
    unsigned(version, |value| StoreError::Damaged {
        path: format!("PostgreSQL schema {schema}"),
        reason: format!("the schema version is {value}"),
    })
    .map(Some)
}

fn refuse_newer(found: u64) -> Result<(), StoreError> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::UnsupportedFormat {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Brings `schema` to [`SCHEMA_VERSION`], creating it when absent.
///
/// A schema already at the version is only read (no lock, no DDL, so a
/// role without `CREATE` can use it). Otherwise one transaction takes the
/// advisory lock, reads the version again and applies the missing
/// migrations and the new version, or nothing.
///
/// # Errors
/// [`StoreError::UnsupportedFormat`] for a stored version newer than this
/// build (nothing written); [`StoreError::Unavailable`] or
/// [`StoreError::Io`] when the database fails.
pub(crate) async fn migrate(
    client: &mut deadpool_postgres::Client,
    schema: &str,
    must_exist: bool,
) -> Result<(), StoreError> {
    let plain: &tokio_postgres::Client = client;
    match stored_version(plain, schema, false).await? {
        Some(found) => {
            refuse_newer(found)?;
            if found == SCHEMA_VERSION {
                return Ok(());
            }
        }
        None if must_exist => {
            return Err(StoreError::NotALog {
                path: format!("PostgreSQL schema {schema}"),
                reason: "it holds no subagents log".to_owned(),
            })
        }
        None => {}
    }
    let fail = |err: tokio_postgres::Error| db_error("migrating the schema", &err);
    let transaction = client.transaction().await.map_err(fail)?;
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&migration_lock_key(schema)],
        )
        .await
        .map_err(fail)?;
    let plain: &tokio_postgres::Transaction<'_> = &transaction;
    let found = match stored_version(plain, schema, true).await? {
        Some(found) => found,
        None => {
            transaction
                .batch_execute(&format!(
                    "CREATE SCHEMA IF NOT EXISTS {q};
                     CREATE TABLE {q}.subagents_schema (
                         id smallint PRIMARY KEY CHECK (id = 1),
                         version bigint NOT NULL CHECK (version >= 0)
                     );
                     INSERT INTO {q}.subagents_schema (id, version) VALUES (1, 0);",
                    q = crate::options::quoted(schema)
                ))
                .await
                .map_err(fail)?;
            0
        }
    };
    // Dropping the transaction rolls it back: a refused open writes nothing.
    refuse_newer(found)?;
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let from = usize::try_from(found).unwrap_or(usize::MAX);
    for (index, step) in MIGRATIONS.iter().enumerate().skip(from) {
        transaction
            .batch_execute(&step.replace("{s}", &crate::options::quoted(schema)))
            .await
            .map_err(|err| db_error(&format!("applying schema migration {}", index + 1), &err))?;
    }
    transaction
        .execute(
            format!(
                "UPDATE {}.subagents_schema SET version = $1 WHERE id = 1",
                crate::options::quoted(schema)
            )
            .as_str(),
            &[&crate::error::signed("schema version", SCHEMA_VERSION)?],
        )
        .await
        .map_err(fail)?;
    transaction.commit().await.map_err(fail)?;
    tracing::info!(
        schema,
        from = found,
        to = SCHEMA_VERSION,
        "migrated the log's schema"
    );
    Ok(())
}

/// A lease's milliseconds left on the server's clock, zero once lapsed.
const LEFT_MS: &str =
    "GREATEST(0, CEIL(EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000))::bigint";

/// Every statement a log runs, with its schema spliced in once.
#[derive(Debug)]
pub(crate) struct Sql {
    /// The notification channel of this schema's head (`<schema>_head`).
    pub(crate) channel: String,
    /// `LISTEN` on [`Sql::channel`].
    pub(crate) listen: String,
    pub(crate) read_head: String,
    /// Takes the counter lock and sets `synchronous_commit` for the
    /// transaction ($1: `on` or `off`).
    pub(crate) lock_head: String,
    /// Writes the new head ($1) and notifies it on the channel ($2).
    pub(crate) write_head: String,
    pub(crate) stream_versions: String,
    pub(crate) locate_many: String,
    pub(crate) insert_events: String,
    pub(crate) insert_streams: String,
    pub(crate) insert_ids: String,
    pub(crate) upsert_blobs: String,
    pub(crate) read_all: String,
    pub(crate) read_stream: String,
    pub(crate) stream_version: String,
    pub(crate) read_blob: String,
    pub(crate) blob_ids: String,
    pub(crate) read_checkpoint: String,
    pub(crate) write_checkpoint: String,
    pub(crate) locate_event: String,
    pub(crate) indexed_position: String,
    pub(crate) streams_first: String,
    pub(crate) streams_after: String,
    pub(crate) ids_first: String,
    pub(crate) ids_after: String,
    pub(crate) read_record: String,
    pub(crate) write_record: String,
    pub(crate) set_stream_entry: String,
    pub(crate) delete_stream_entry: String,
    pub(crate) set_id_entry: String,
    pub(crate) delete_id_entry: String,
    pub(crate) write_blob: String,
    /// Takes a lease ($1 root, $2 holder, $3 term in ms) that is free,
    /// lapsed or the holder's own, bumping its token; no row when another
    /// holder's has not lapsed. The term runs from when the row is written
    /// (after any wait for an append holding it), not from when the
    /// statement started.
    pub(crate) take_lease: String,
    /// Extends a lease ($1 root, $2 token, $3 term in ms) whose token is
    /// still current; no row otherwise.
    pub(crate) renew_lease: String,
    /// Lets a lease ($1 root, $2 token) lapse now; no row when stale.
    pub(crate) release_lease: String,
    /// A lease's holder, token and milliseconds left ($1 root).
    pub(crate) read_lease: String,
    /// Every lease, by root.
    pub(crate) list_leases: String,
    /// The tokens of the leases an append presents fences for ($1 roots),
    /// share-locked until the append's transaction ends: a takeover's
    /// token bump waits for an append that already passed its check.
    pub(crate) fence_tokens: String,
}

impl Sql {
    /// The statements of a log in `schema` (already validated).
    pub(crate) fn new(schema: &str) -> Sql {
        let s = &crate::options::quoted(schema);
        Sql {
            channel: format!("{schema}_head"),
            listen: format!(
                "LISTEN {}",
                crate::options::quoted(&format!("{schema}_head"))
            ),
            read_head: format!("SELECT head FROM {s}.counter WHERE id = 1"),
            lock_head: format!(
                "SELECT head, set_config('synchronous_commit', $1, true) \
                 FROM {s}.counter WHERE id = 1 FOR UPDATE"
            ),
            write_head: format!(
                "WITH moved AS (UPDATE {s}.counter SET head = $1 WHERE id = 1 RETURNING head) \
                 SELECT pg_notify($2, head::text) FROM moved"
            ),
            // One backward index probe per stream (a grouped MAX would read
            // every version of each stream: quadratic in a stream's length).
            stream_versions: format!(
                "SELECT named.stream, last.version FROM UNNEST($1::text[]) AS named(stream) \
                 CROSS JOIN LATERAL (SELECT version FROM {s}.streams i \
                 WHERE i.stream = named.stream ORDER BY i.version DESC LIMIT 1) AS last"
            ),
            locate_many: format!(
                "SELECT event_id, stream, position, version FROM {s}.event_ids \
                 WHERE event_id = ANY($1::uuid[])"
            ),
            insert_events: format!(
                "INSERT INTO {s}.events (position, record) \
                 SELECT * FROM UNNEST($1::bigint[], $2::bytea[])"
            ),
            insert_streams: format!(
                "INSERT INTO {s}.streams (stream, version, position) \
                 SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[])"
            ),
            insert_ids: format!(
                "INSERT INTO {s}.event_ids (event_id, stream, position, version) \
                 SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::bigint[], $4::bigint[])"
            ),
            upsert_blobs: format!(
                "INSERT INTO {s}.blobs AS stored (digest, bytes) \
                 SELECT * FROM UNNEST($1::bytea[], $2::bytea[]) \
                 ON CONFLICT (digest) DO UPDATE SET bytes = EXCLUDED.bytes \
                 WHERE stored.bytes IS DISTINCT FROM EXCLUDED.bytes"
            ),
            read_all: format!(
                "SELECT position, record FROM {s}.events \
                 WHERE position >= $1 ORDER BY position LIMIT $2"
            ),
            read_stream: format!(
                "SELECT i.position, e.record FROM {s}.streams i \
                 LEFT JOIN {s}.events e ON e.position = i.position \
                 WHERE i.stream = $1 AND i.version >= $2 ORDER BY i.version LIMIT $3"
            ),
            stream_version: format!(
                "SELECT COALESCE(MAX(version), 0)::bigint FROM {s}.streams WHERE stream = $1"
            ),
            read_blob: format!("SELECT bytes FROM {s}.blobs WHERE digest = $1"),
            blob_ids: format!("SELECT digest FROM {s}.blobs ORDER BY digest"),
            read_checkpoint: format!("SELECT bytes FROM {s}.checkpoints WHERE name = $1"),
            write_checkpoint: format!(
                "INSERT INTO {s}.checkpoints (name, bytes) VALUES ($1, $2) \
                 ON CONFLICT (name) DO UPDATE SET bytes = EXCLUDED.bytes"
            ),
            locate_event: format!(
                "SELECT stream, position, version FROM {s}.event_ids WHERE event_id = $1"
            ),
            indexed_position: format!(
                "SELECT position FROM {s}.streams WHERE stream = $1 AND version = $2"
            ),
            streams_first: format!(
                "SELECT stream, version, position FROM {s}.streams \
                 ORDER BY stream, version LIMIT $1"
            ),
            streams_after: format!(
                "SELECT stream, version, position FROM {s}.streams \
                 WHERE (stream, version) > ($1::text, $2::bigint) \
                 ORDER BY stream, version LIMIT $3"
            ),
            ids_first: format!(
                "SELECT event_id, stream, position, version FROM {s}.event_ids \
                 ORDER BY event_id LIMIT $1"
            ),
            ids_after: format!(
                "SELECT event_id, stream, position, version FROM {s}.event_ids \
                 WHERE event_id > $1 ORDER BY event_id LIMIT $2"
            ),
            read_record: format!("SELECT record FROM {s}.events WHERE position = $1"),
            write_record: format!("UPDATE {s}.events SET record = $2 WHERE position = $1"),
            set_stream_entry: format!(
                "INSERT INTO {s}.streams (stream, version, position) VALUES ($1, $2, $3) \
                 ON CONFLICT (stream, version) DO UPDATE SET position = EXCLUDED.position"
            ),
            delete_stream_entry: format!(
                "DELETE FROM {s}.streams WHERE stream = $1 AND version = $2"
            ),
            set_id_entry: format!(
                "INSERT INTO {s}.event_ids (event_id, stream, position, version) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO UPDATE \
                 SET stream = EXCLUDED.stream, position = EXCLUDED.position, \
                 version = EXCLUDED.version"
            ),
            delete_id_entry: format!("DELETE FROM {s}.event_ids WHERE event_id = $1"),
            write_blob: format!("UPDATE {s}.blobs SET bytes = $2 WHERE digest = $1"),
            take_lease: format!(
                "INSERT INTO {s}.leases AS held (root, holder, token, expires_at) \
                 VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * interval '1 millisecond') \
                 ON CONFLICT (root) DO UPDATE SET holder = EXCLUDED.holder, \
                 token = held.token + 1, \
                 expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' \
                 WHERE held.expires_at <= clock_timestamp() OR held.holder = EXCLUDED.holder \
                 RETURNING token"
            ),
            renew_lease: format!(
                "UPDATE {s}.leases SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' \
                 WHERE root = $1 AND token = $2 RETURNING token"
            ),
            release_lease: format!(
                "UPDATE {s}.leases SET expires_at = clock_timestamp() \
                 WHERE root = $1 AND token = $2 RETURNING token"
            ),
            read_lease: format!(
                "SELECT holder, token, {LEFT_MS} FROM {s}.leases WHERE root = $1"
            ),
            list_leases: format!(
                "SELECT root, holder, token, {LEFT_MS} FROM {s}.leases ORDER BY root"
            ),
            fence_tokens: format!(
                "SELECT root, token, holder FROM {s}.leases \
                 WHERE root = ANY($1::uuid[]) ORDER BY root FOR SHARE"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_key_is_stable_and_per_schema() {
        assert_eq!(
            migration_lock_key("subagents"),
            migration_lock_key("subagents")
        );
        assert_ne!(migration_lock_key("a"), migration_lock_key("b"));
        assert_eq!(MIGRATIONS.len() as u64, SCHEMA_VERSION);
    }
}
