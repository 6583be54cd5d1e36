//! [`Checkpointed`]: projections opened from the newest checkpoint plus the
//! log's tail, kept current by applying new events, and saved on close and
//! periodically: once the events since the last save number at least the
//! given minimum and at least the entries the last one held
//! ([`CheckpointCadence`]), so each event pays a bounded share of the saves
//! however large the state grows. A checkpoint that does not decode, has
//! an unknown version or claims a position past the head is discarded and
//! the state rebuilt from the log; it is never trusted. Beside each
//! checkpoint the sizes of its maps are saved, and an open that refolds,
//! `state_at` and `verify` start from them ([`presized_state`]).

use std::ops::ControlFlow;

use subagent_core::RecordedEvent;
use subagent_projections::{checkpoint, CheckpointCadence, MapSizes, Projections, MAP_SIZES_NAME};
use subagent_store::EventLog;

use crate::error::ReplayError;

pub use subagent_projections::checkpoint::CHECKPOINT_NAME;

/// How opening went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// The position of the checkpoint that was loaded.
    pub checkpoint_position: Option<u64>,
    /// Why a stored checkpoint was discarded.
    pub discarded: Option<String>,
    /// Events folded after the checkpoint.
    pub tail_events: u64,
}

/// Projections backed by a log and its checkpoint.
pub struct Checkpointed<L> {
    log: L,
    state: Projections,
    cadence: CheckpointCadence,
}

impl<L: EventLog> Checkpointed<L> {
    /// Opens the projections of `log`: newest valid checkpoint, then the tail.
    /// `every` is the fewest events between two periodic saves (0: only on
    /// close); a state with more entries than that waits for as many
    /// events as it has entries ([`CheckpointCadence`]).
    ///
    /// # Errors
    /// A read failure of the log (a bad checkpoint is not an error).
    pub fn open(log: L, every: u64) -> Result<(Self, OpenReport), ReplayError> {
        let mut report = OpenReport::default();
        let head = log.head();
        let state = match checkpoint::usable(log.read_checkpoint(CHECKPOINT_NAME)?.as_deref(), head)
        {
            Ok(Some(stored)) => {
                report.checkpoint_position = Some(stored.position);
                stored
            }
            Ok(None) => presized_state(&log, head),
            Err(reason) => {
                report.discarded = Some(reason.to_string());
                presized_state(&log, head)
            }
        };
        let cadence = CheckpointCadence::new(every, &state);
        let mut opened = Checkpointed {
            log,
            state,
            cadence,
        };
        report.tail_events = opened.catch_up()?;
        Ok((opened, report))
    }

    /// Folds every event past the current position; returns how many.
    ///
    /// # Errors
    /// A read failure.
    pub fn catch_up(&mut self) -> Result<u64, ReplayError> {
        // Nothing follows u64::MAX (a checkpoint can claim it only if the
        // head does too, and no log grows that far).
        let Some(next) = self.state.position.checked_add(1) else {
            return Ok(0);
        };
        let mut count = 0;
        let Checkpointed {
            log,
            state,
            cadence,
        } = self;
        subagent_store::read_ahead::scan(&*log, next, |record| {
            fold_one(&*log, state, cadence, record)?;
            count += 1;
            Ok::<_, ReplayError>(ControlFlow::Continue(()))
        })?;
        Ok(count)
    }

    /// Applies one event (in position order) and saves a checkpoint when due.
    ///
    /// # Errors
    /// A checkpoint write failure.
    pub fn apply(&mut self, record: &RecordedEvent) -> Result<(), ReplayError> {
        fold_one(&self.log, &mut self.state, &mut self.cadence, record)
    }

    /// Saves a checkpoint of the current state, then the sizes of its maps
    /// under [`MAP_SIZES_NAME`].
    ///
    /// # Errors
    /// A write failure of either: the checkpoint may be saved when only
    /// the sizes' write failed.
    pub fn save(&mut self) -> Result<(), ReplayError> {
        save(&self.log, &self.state, &mut self.cadence)
    }

    /// Saves a final checkpoint and returns the log.
    ///
    /// # Errors
    /// A write failure.
    pub fn close(mut self) -> Result<L, ReplayError> {
        self.save()?;
        Ok(self.log)
    }

    /// The current projections.
    pub fn state(&self) -> &Projections {
        &self.state
    }

    /// The log.
    pub fn log(&self) -> &L {
        &self.log
    }
}

/// [`Checkpointed::apply`] on its parts, so a fold can borrow them apart
/// from the log it reads.
fn fold_one<L: EventLog + ?Sized>(
    log: &L,
    state: &mut Projections,
    cadence: &mut CheckpointCadence,
    record: &RecordedEvent,
) -> Result<(), ReplayError> {
    let before = state.position;
    state.apply(record);
    if state.position > before {
        cadence.count(1);
        if cadence.due() {
            save(log, state, cadence)?;
        }
    }
    Ok(())
}

/// [`Checkpointed::save`] on its parts.
fn save<L: EventLog + ?Sized>(
    log: &L,
    state: &Projections,
    cadence: &mut CheckpointCadence,
) -> Result<(), ReplayError> {
    log.write_checkpoint(CHECKPOINT_NAME, &checkpoint::encode(state))?;
    log.write_checkpoint(MAP_SIZES_NAME, &MapSizes::of(state).encode())?;
    cadence.restart(state);
    Ok(())
}

/// The empty state for a fold from position 1 to `at`, its maps sized as
/// the sizes saved beside the last checkpoint suggest
/// ([`Projections::presized`]); without them (none saved, a read that
/// failed, bytes that do not decode), an empty state. Never an error: the
/// sizes are only a hint.
pub(crate) fn presized_state<L: EventLog + ?Sized>(log: &L, at: u64) -> Projections {
    Projections::presized(
        MapSizes::from_stored(log.read_checkpoint(MAP_SIZES_NAME)),
        at,
    )
}
