//! The conformance suite every [`EventLog`] backend must pass.
//!
//! Each check is a public async function over a [`Harness`]; the
//! [`conformance_suite!`](crate::conformance_suite) macro turns them into one
//! `#[tokio::test]` each for a backend. A new backend (PostgreSQL, ...)
//! implements [`Harness`] and invokes the macro.
//!
//! One file per concern: `append` (single-stream appends), `atomic`
//! (multi-stream appends and the largest event), `reads` (reads,
//! subscriptions, reopening, corruption), `indexes` (the indexes against
//! the records), `attachments` (the blob store).

mod append;
mod atomic;
mod attachments;
mod indexes;
mod reads;

pub use append::*;
pub use atomic::*;
pub use attachments::*;
pub use indexes::*;
pub use reads::*;

use subagent_core::{Event, NewEvent, RecordedEvent, SessionId, StreamId};

use crate::error::StoreError;
use crate::indexes::IndexDamage;
use crate::log::{EventLog, EventLogExt, ExpectedVersion};

/// How the suite opens, reopens and damages a backend's storage.
pub trait Harness: Send + 'static {
    /// The backend.
    type Log: EventLog + Clone;
    /// Opens fresh, empty storage.
    fn open(&mut self) -> Self::Log;
    /// Closes `log` (the suite holds no other handle) and opens the same storage again.
    fn reopen(&mut self, log: Self::Log) -> Self::Log;
    /// Flips one bit of byte `byte` of the stored record at `position`.
    fn corrupt(&mut self, log: &Self::Log, position: u64, byte: usize);
    /// Damages one index entry; false when the backend cannot represent
    /// that damage (the suite only asks for damage every backend can hold:
    /// redirecting an entry, adding the next version, deleting the last).
    fn damage_index(&mut self, log: &Self::Log, damage: IndexDamage) -> bool;
}

/// A session stream and an event that belongs in it.
pub fn session_stream() -> StreamId {
    StreamId::Session(SessionId::new())
}

/// A session-stream event numbered `turn` (its payload identifies it in asserts).
pub fn turn(turn: u64) -> NewEvent {
    NewEvent::new(Event::TurnStarted { turn, epoch: 1 })
}

pub(super) fn turn_of(record: &RecordedEvent) -> u64 {
    match record.event {
        Event::TurnStarted { turn, .. } => turn,
        _ => u64::MAX,
    }
}

pub(super) fn everything<L: EventLog>(log: &L) -> Vec<RecordedEvent> {
    log.read_all(1)
        .collect::<Result<_, _>>()
        .expect("log reads back")
}

pub(super) async fn append<L: EventLog>(
    log: &L,
    stream: StreamId,
    expected: ExpectedVersion,
    events: Vec<NewEvent>,
) -> Result<crate::AppendOutcome, StoreError> {
    log.append(stream, expected, events).await
}

/// Generates one `#[tokio::test]` per conformance check for a backend.
/// `$make` is an expression producing a fresh [`Harness`].
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@tests $make;
            positions_and_versions_start_at_one_without_gaps,
            conflicting_expected_versions_are_refused_and_change_nothing,
            reappending_the_same_event_ids_is_idempotent,
            partial_repeated_or_cross_stream_ids_are_refused,
            empty_and_misplaced_appends_are_refused,
            concurrent_appenders_get_unique_gap_free_positions,
            racing_exact_version_appends_admit_exactly_one_winner,
            reads_start_anywhere_and_cross_pages,
            subscription_catches_up_then_goes_live,
            stream_subscription_sees_its_stream_alone_once_in_order,
            reopen_keeps_everything,
            checkpoints_read_back_what_was_last_written,
            a_flipped_byte_is_reported_as_corrupt,
            atomic_appends_write_every_part_or_none,
            atomic_retries_are_idempotent_and_malformed_ones_refused,
            index_entries_point_back_at_every_record,
            an_oversized_event_is_refused_and_changes_nothing,
            attachments_are_stored_with_their_events_or_not_at_all
        );
    };
    (@tests $make:expr; $($name:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                $crate::conformance::$name($make).await;
            }
        )+
    };
}
