//! Which streams the writer wrote since the log was opened, kept coarsely
//! for stream subscriptions: a fixed table holding, for each slot, the
//! highest head at which a stream hashing to it was written. A stream
//! subscription woken by a head change asks it whether its stream can have
//! grown, and skips its read of the stream index when it cannot
//! (BENCHMARKS.md, "A claim's contents kept, and an inbox that did not
//! grow is not read").
//!
//! The answer errs one way only: streams that share a slot, and records
//! past the head the subscriber saw, make it say "maybe", which costs the
//! read it would have made anyway; it says "no" only when no record of the
//! stream was written after the position asked about.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use foldhash::fast::FixedState;
use subagent_core::StreamId;

/// Slots in the table: 32 KiB of counters, so hosts with up to a few
/// hundred streams growing at once rarely share one.
const SLOTS: usize = 4096;

/// A fixed seed: the table lives only in memory, and a fixed one makes
/// which streams share a slot the same in every run.
const SEED: u64 = 0x5aba_6e17_5eed_0001;

/// The highest head at which a stream of each slot was written.
pub(crate) struct WrittenMarks {
    /// The head when the log was opened: nothing below it was marked.
    opened_at: u64,
    slots: Box<[AtomicU64]>,
}

impl WrittenMarks {
    /// An empty table for a log opened at `head`.
    pub(crate) fn new(head: u64) -> WrittenMarks {
        WrittenMarks {
            opened_at: head,
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(&self, stream: &StreamId) -> &AtomicU64 {
        let hash = FixedState::with_seed(SEED).hash_one(stream);
        // SLOTS is a power of two: the low bits pick the slot.
        &self.slots[(hash as usize) & (SLOTS - 1)]
    }

    /// Notes that `stream` was written in a group whose last position is
    /// `head`. Called before `head` is published, so whoever sees the new
    /// head sees the mark.
    pub(crate) fn mark(&self, stream: &StreamId, head: u64) {
        self.slot(stream).fetch_max(head, Ordering::Release);
    }

    /// Whether `stream` can have a record at a position after `after`:
    /// `false` only when `after` is at or past the opening head and no
    /// stream of its slot was written after it.
    pub(crate) fn may_have_written_after(&self, stream: &StreamId, after: u64) -> bool {
        after < self.opened_at || self.slot(stream).load(Ordering::Acquire) > after
    }
}

#[cfg(test)]
mod tests {
    use subagent_core::SessionId;

    use super::*;

    #[test]
    fn before_the_opening_head_every_stream_may_have_grown() {
        let marks = WrittenMarks::new(10);
        let stream = StreamId::Session(SessionId::new());
        assert!(marks.may_have_written_after(&stream, 0));
        assert!(marks.may_have_written_after(&stream, 9));
        assert!(!marks.may_have_written_after(&stream, 10));
    }

    #[test]
    fn a_marked_stream_has_grown_after_every_earlier_position_only() {
        let marks = WrittenMarks::new(0);
        let stream = StreamId::Session(SessionId::new());
        marks.mark(&stream, 7);
        assert!(marks.may_have_written_after(&stream, 6));
        assert!(!marks.may_have_written_after(&stream, 7));
        // A later group's mark raises it; an older one never lowers it.
        marks.mark(&stream, 12);
        marks.mark(&stream, 9);
        assert!(marks.may_have_written_after(&stream, 11));
        assert!(!marks.may_have_written_after(&stream, 12));
    }

    #[test]
    fn only_streams_sharing_a_slot_answer_for_each_other() {
        let marks = WrittenMarks::new(0);
        let written = StreamId::Session(SessionId::new());
        marks.mark(&written, 5);
        let others: Vec<StreamId> = (0..64)
            .map(|_| StreamId::Session(SessionId::new()))
            .chain([StreamId::Runtime])
            .collect();
        for other in &others {
            let shares = std::ptr::eq(marks.slot(other), marks.slot(&written));
            assert_eq!(marks.may_have_written_after(other, 4), shares, "{other}");
        }
        // 65 streams over 4096 slots: nearly all are apart.
        let apart = others
            .iter()
            .filter(|other| !marks.may_have_written_after(other, 4))
            .count();
        assert!(apart >= 60, "only {apart} of 65 streams had a slot apart");
    }
}
