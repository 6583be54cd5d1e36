//! [`Checkpointed`]: projections opened from the newest checkpoint plus the
//! log's tail, kept current by applying new events, and saved every N events
//! and on close. A checkpoint that does not decode, has an unknown version or
//! claims a position past the head is discarded and the state rebuilt from
//! the log; it is never trusted.

use subagent_core::RecordedEvent;
use subagent_projections::{checkpoint, Projections};
use subagent_store::log::READ_PAGE;
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
    every: u64,
    since_save: u64,
}

impl<L: EventLog> Checkpointed<L> {
    /// Opens the projections of `log`: newest valid checkpoint, then the tail.
    /// `every` is the checkpoint interval in events (0: only on close).
    ///
    /// # Errors
    /// A read failure of the log (a bad checkpoint is not an error).
    pub fn open(log: L, every: u64) -> Result<(Self, OpenReport), ReplayError> {
        let mut report = OpenReport::default();
        let head = log.head();
        let state = match checkpoint::usable(log.read_checkpoint(CHECKPOINT_NAME)?.as_deref(), head)
        {
            Ok(stored) => {
                report.checkpoint_position = stored.as_ref().map(|state| state.position);
                stored.unwrap_or_default()
            }
            Err(reason) => {
                report.discarded = Some(reason);
                Projections::new()
            }
        };
        let mut opened = Checkpointed {
            log,
            state,
            every,
            since_save: 0,
        };
        report.tail_events = opened.catch_up()?;
        Ok((opened, report))
    }

    /// Folds every event past the current position; returns how many.
    ///
    /// # Errors
    /// A read failure.
    pub fn catch_up(&mut self) -> Result<u64, ReplayError> {
        let mut count = 0;
        loop {
            // Nothing follows u64::MAX (a checkpoint can claim it only if the
            // head does too, and no log grows that far).
            let Some(next) = self.state.position.checked_add(1) else {
                return Ok(count);
            };
            let page = self.log.read_all_page(next, READ_PAGE)?;
            if page.is_empty() {
                return Ok(count);
            }
            for record in &page {
                self.apply(record)?;
                count += 1;
            }
        }
    }

    /// Applies one event (in position order) and saves a checkpoint when due.
    ///
    /// # Errors
    /// A checkpoint write failure.
    pub fn apply(&mut self, record: &RecordedEvent) -> Result<(), ReplayError> {
        let before = self.state.position;
        self.state.apply(record);
        if self.state.position > before {
            self.since_save += 1;
            if self.every > 0 && self.since_save >= self.every {
                self.save()?;
            }
        }
        Ok(())
    }

    /// Saves a checkpoint of the current state.
    ///
    /// # Errors
    /// A write failure.
    pub fn save(&mut self) -> Result<(), ReplayError> {
        self.log
            .write_checkpoint(CHECKPOINT_NAME, &checkpoint::encode(&self.state))?;
        self.since_save = 0;
        Ok(())
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
