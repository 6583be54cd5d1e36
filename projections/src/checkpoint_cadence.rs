//! When the next periodic projections checkpoint is due: the one rule,
//! and the count it keeps, for the runtime's engine and for
//! `subagent_replay::Checkpointed`.
//!
//! A checkpoint encodes and writes the whole state (the runtime first
//! copies it under its pipeline's lock), so its cost grows with the state,
//! not with the events since the last one. Saved every fixed number of
//! events, that cost per event grew without bound: a host whose log had 1M
//! events (about 70,000 sessions, a 42 MB checkpoint) would copy, encode
//! and write 42 MB every 10,000 events, more than ten times the bytes of
//! the events themselves. So the next checkpoint is due once the events
//! since the last number at least the entries the last one held (and at
//! least the configured minimum). Each event then pays a bounded share of
//! the checkpoints, and a crash refolds at most about as many events as
//! the checkpoint has entries, which costs about what decoding it does.
//! (BENCHMARKS.md, "Checkpoints as often as the state is large".)

use crate::{MapSizes, Projections};

/// The count since the last checkpoint, and the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointCadence {
    /// The fewest events between two periodic checkpoints; 0: none.
    minimum: u64,
    /// Entries of the state the last checkpoint (or the opening) held.
    entries_at_last: u64,
    /// Events folded in since then.
    since_last: u64,
}

impl CheckpointCadence {
    /// A cadence of at least `minimum` events (0: no periodic checkpoint),
    /// counting from `state` (the one opened).
    #[must_use]
    pub fn new(minimum: u64, state: &Projections) -> CheckpointCadence {
        CheckpointCadence {
            minimum,
            entries_at_last: MapSizes::of(state).entries(),
            since_last: 0,
        }
    }

    /// `events` more were folded in.
    pub fn count(&mut self, events: u64) {
        self.since_last = self.since_last.saturating_add(events);
    }

    /// Whether a periodic checkpoint is due: at least the minimum, and at
    /// least the last one's entries, events since it.
    #[must_use]
    pub fn due(&self) -> bool {
        self.minimum > 0 && self.since_last >= self.minimum.max(self.entries_at_last)
    }

    /// A checkpoint of `state` is being taken now: the count starts again,
    /// and the next is due after at least as many events as `state` has
    /// entries ([`MapSizes::entries`]).
    pub fn restart(&mut self, state: &Projections) {
        self.entries_at_last = MapSizes::of(state).entries();
        self.since_last = 0;
    }
}

#[cfg(test)]
mod tests {
    use subagent_core::SessionMode;

    use super::*;
    use crate::testing::HistoryBuilder;

    /// A state of `children` children below one root.
    fn state_with(children: usize) -> Projections {
        let mut history = HistoryBuilder::new();
        let root = history.root("root");
        for n in 0..children {
            history.child(root, 1, &format!("child {n}"), SessionMode::OneShot, false);
        }
        let mut state = Projections::new();
        for record in &history.records {
            state.apply(record);
        }
        state
    }

    /// `cadence` is not due until exactly `events` more are counted.
    fn assert_due_after(cadence: &mut CheckpointCadence, events: u64) {
        cadence.count(events - 1);
        assert!(!cadence.due(), "due before {events} events");
        cadence.count(1);
        assert!(cadence.due(), "not due after {events} events");
    }

    #[test]
    fn due_after_the_minimum_while_the_state_is_small() {
        let mut cadence = CheckpointCadence::new(10, &Projections::new());
        assert_due_after(&mut cadence, 10);
    }

    #[test]
    fn due_after_as_many_events_as_the_last_checkpoint_had_entries() {
        let large = state_with(20);
        let entries = MapSizes::of(&large).entries();
        assert!(entries > 20, "{entries}");
        let mut cadence = CheckpointCadence::new(10, &Projections::new());
        assert_due_after(&mut cadence, 10);
        cadence.restart(&large);
        assert!(!cadence.due(), "the count starts again");
        assert_due_after(&mut cadence, entries);
        // A small state: the minimum again.
        cadence.restart(&state_with(1));
        assert_due_after(&mut cadence, 10);
    }

    #[test]
    fn an_opened_state_counts_as_the_last_checkpoint() {
        let large = state_with(20);
        let mut cadence = CheckpointCadence::new(10, &large);
        assert_due_after(&mut cadence, MapSizes::of(&large).entries());
    }

    #[test]
    fn a_minimum_of_zero_is_never_due() {
        let mut cadence = CheckpointCadence::new(0, &Projections::new());
        cadence.count(u64::MAX);
        cadence.count(1);
        assert!(!cadence.due());
    }
}
