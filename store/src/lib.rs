//! # subagent-store
//!
//! The durable event log: the [`EventLog`] trait, the embedded RocksDB
//! backend ([`RocksLog`], the default), the in-memory backend
//! ([`MemoryLog`]), catch-up-then-live [`Subscription`]s, and the
//! `conformance` suite every backend must pass (feature `conformance`).
//!
//! What it guarantees (each checked by the conformance suite):
//! - an append is atomic and acknowledged only once durable;
//! - positions and stream versions start at 1 and have no gaps;
//! - a retried append of the same event ids is idempotent;
//! - a record that fails its CRC32C is a typed [`StoreError::Corrupt`], never a
//!   panic and never a silently skipped event;
//! - an event larger than [`subagent_core::MAX_EVENT_BYTES`] is refused
//!   ([`StoreError::EventTooLarge`]) and changes nothing;
//! - the indexes can be listed and looked up ([`indexes`]), so a verifier can
//!   check them against the records.
//!
//! A backend several hosts share also keeps tree leases ([`lease`]): an
//! append that presents a stale [`Fence`] is refused, writing nothing.
//!
//! Whole-log folds read with [`read_ahead::scan`]: the same records in the
//! same order as [`EventLogExt::read_all`], decoded on reader threads ahead
//! of the fold.

pub mod append_check;
pub mod error;
pub mod indexes;
pub mod lease;
pub mod log;
pub mod memory;
pub mod read_ahead;
pub mod record;
pub mod rocks;
pub mod subscription;
pub mod telemetry;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod filling;

pub use append_check::IdLocation;
pub use error::StoreError;
pub use indexes::{IndexDamage, IndexEntries, IndexEntry, LogIndex};
pub use lease::{Fence, Lease, LeaseRecord, TreeLeases};
pub use log::{
    AppendOutcome, AppendTicket, CheckpointBytes, Durability, EventLog, EventLogExt,
    ExpectedVersion, RecordIter, StreamAppend, TransactionTicket,
};
pub use memory::MemoryLog;
pub use rocks::{CommitCounts, RocksLog, RocksOptions, TornWrite};
pub use subscription::{Subscription, SubscriptionItem};
