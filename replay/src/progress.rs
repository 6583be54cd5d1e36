//! [`Progress`]: how far a long pass over the log has got, told to whoever
//! shows it (the command line draws a bar on a terminal). The passes that
//! take it are [`verify_with_progress`](crate::verify_with_progress),
//! [`state_at_with_progress`](crate::state_at_with_progress) and
//! [`export_with_progress`](crate::export_with_progress); their plain
//! versions pass `&()`, which ignores it and compiles to nothing.
//!
//! Import reports nothing here: its input is a reader, so a caller measures
//! it by counting the bytes it reads.

/// Told how far a pass over the log's records has got.
///
/// Called on the pass's own thread, once per record: an implementation
/// should be cheap (count, and redraw only now and then).
pub trait Progress {
    /// The pass will go through `total` records (called once, before the
    /// first record): the head when the pass starts, or the position it
    /// stops at. A log that grows meanwhile may take the count past it.
    fn set_total(&self, total: u64) {
        let _ = total;
    }

    /// The pass has gone through `done` records: 1, 2, 3, ... (called after
    /// each record).
    fn reached(&self, done: u64);
}

/// No progress wanted.
impl Progress for () {
    #[inline]
    fn reached(&self, _done: u64) {}
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use subagent_core::{Event, NewEvent, SessionId, StreamId};
    use subagent_store::{EventLog, ExpectedVersion, MemoryLog};

    use super::Progress;

    /// Everything a pass told it.
    #[derive(Default)]
    struct Recorded {
        totals: RefCell<Vec<u64>>,
        reached: RefCell<Vec<u64>>,
    }

    impl Progress for Recorded {
        fn set_total(&self, total: u64) {
            self.totals.borrow_mut().push(total);
        }

        fn reached(&self, done: u64) {
            self.reached.borrow_mut().push(done);
        }
    }

    /// A log of `roots` roots, one event each.
    fn log_of(roots: u64) -> MemoryLog {
        let log = MemoryLog::new();
        for _ in 0..roots {
            let root = SessionId::new();
            log.append(
                StreamId::Session(root),
                ExpectedVersion::NoStream,
                vec![NewEvent::new(Event::root_created(root, "host"))],
            )
            .wait()
            .unwrap();
        }
        log
    }

    #[test]
    fn each_pass_announces_its_total_then_counts_every_record() {
        let log = log_of(5);
        let all: Vec<u64> = (1..=5).collect();

        let verified = Recorded::default();
        let report = crate::verify_with_progress(&log, &verified).unwrap();
        assert_eq!(report.events, 5);
        assert_eq!(*verified.totals.borrow(), [5]);
        assert_eq!(*verified.reached.borrow(), all);

        let exported = Recorded::default();
        let mut lines = Vec::new();
        assert_eq!(
            crate::export_with_progress(&log, &mut lines, &exported).unwrap(),
            5
        );
        assert_eq!(*exported.totals.borrow(), [5]);
        assert_eq!(*exported.reached.borrow(), all);
        let mut plain = Vec::new();
        crate::export(&log, &mut plain).unwrap();
        assert_eq!(lines, plain, "progress changes nothing in the export");

        let replayed = Recorded::default();
        let state = crate::state_at_with_progress(&log, Some(3), &replayed).unwrap();
        assert_eq!(state.position, 3);
        assert_eq!(*replayed.totals.borrow(), [3]);
        assert_eq!(*replayed.reached.borrow(), [1, 2, 3]);
        assert_eq!(state, crate::state_at(&log, Some(3)).unwrap());
    }

    #[test]
    fn a_position_past_the_head_is_refused_before_any_progress() {
        let log = log_of(2);
        let replayed = Recorded::default();
        assert!(crate::state_at_with_progress(&log, Some(3), &replayed).is_err());
        assert!(replayed.totals.borrow().is_empty());
        assert!(replayed.reached.borrow().is_empty());
    }
}
