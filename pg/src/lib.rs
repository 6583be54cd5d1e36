//! # subagent-pg
//!
//! [`PgLog`]: the [`EventLog`](subagent_store::EventLog) on PostgreSQL, for
//! several host processes sharing one history. It passes the store's
//! conformance suite, like the RocksDB and memory backends.
//!
//! What it guarantees, beyond the suite:
//! - positions are gap-free and in commit order with concurrent writers in
//!   several processes: they come from one counter row locked
//!   (`SELECT ... FOR UPDATE`) by the appending transaction, so a second
//!   appender waits until the first commits or rolls back, and a rollback
//!   leaves the counter as it was (no sequence, which would leave holes and
//!   let a late commit land behind a reader);
//! - nothing is acknowledged that is not committed: a ticket completes only
//!   after `COMMIT` returns, and an append whose commit outcome is unknown
//!   is an error (retry it with the same event ids; that is idempotent);
//! - records are stored as the exact bytes the RocksDB backend stores
//!   (`subagent_core::record`, with its CRC32C), so corruption is detected
//!   the same way and an export is byte-identical;
//! - the schema is created and migrated by the code ([`SCHEMA_VERSION`]),
//!   and a schema newer than the code is refused;
//! - a lost connection is [`StoreError::Unavailable`](subagent_store::StoreError::Unavailable);
//!   the pool reconnects on the next use;
//! - each tree can be leased to one host at a time
//!   ([`PgLog::acquire_lease`], on the server's clock), and an append that
//!   presents a stale lease's fence
//!   ([`EventLog::append_fenced`](subagent_store::EventLog::append_fenced))
//!   is [`StoreError::Fenced`](subagent_store::StoreError::Fenced), with
//!   nothing written.
//!
//! Modules: [`PgOptions`] (`options`), whole-schema moves for an
//! all-or-nothing import ([`rename_schema`], `admin`), the schema and its migrations
//! (`schema`), the synchronous bridge over the log's own tokio runtime
//! (`bridge`), group commit and the fence check (`writer`), tree leases
//! (`leases`), the head watch with LISTEN/NOTIFY
//! and polling (`head`), reads and test hooks (`log`), the index listing
//! (`indexes`), driver errors as store errors (`error`), and behind the
//! `testing` feature a real PostgreSQL server for tests (`testing::TestServer`).

mod admin;
mod bridge;
mod error;
mod head;
mod indexes;
mod leases;
mod log;
mod options;
mod schema;
mod writer;

#[cfg(feature = "testing")]
pub mod testing;

pub use admin::{drop_schema, rename_schema};
pub use log::PgLog;
pub use options::{
    is_postgres_url, validate_schema_name, PgOptions, DEFAULT_SCHEMA, MAX_SCHEMA_NAME,
};
pub use schema::SCHEMA_VERSION;
/// The driver, re-exported so callers build a [`PgOptions::config`] of the
/// same version.
pub use tokio_postgres;
