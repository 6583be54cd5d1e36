//! The writer thread's wait for a whole group (`Sync` mode): when to wait
//! for the appenders it just answered before it takes the next group, and
//! when to stop. A pure plan: the thread ([`super::leader`]) does the
//! waiting.
//!
//! Appenders in `Sync` company each wait for their answer before they
//! append again. Once the thread answers a group, they come back one by
//! one, and a thread that took whatever was queued as soon as it looked
//! split them into two groups, each with its own fsync: 64 such appenders
//! settled into groups of 32 (BENCHMARKS.md, "The writer thread waits for
//! its group"). So before the next group the thread waits while:
//! - fewer requests are queued than were **in flight** at its last commit
//!   (that group and those queued behind it);
//! - one came in each [`GATHER_GAP`]: appenders coming back come
//!   microseconds apart, and a quiet gap means the rest are busy;
//! - at the pace they came so far, the rest would be queued before the
//!   deadline: the last commit's end plus its own duration (at most
//!   [`GATHER_LIMIT`]), so a group waits at most about one commit's
//!   time, and not at all after a lull.
//!
//! The pace is what tells appenders that come back together from a steady
//! stream. A runtime's 64 starters append one after another through the
//! engine's pipeline, each some microseconds apart: waiting for 64 of
//! them would leave the disk idle while they trickle in, where the group
//! behind a commit in progress gathers them for free (measured: 10–16%
//! fewer activations before the pace was looked at).
//!
//! PostgreSQL's `commit_delay` waits a fixed time, only while
//! `commit_siblings` transactions are open; this waits only while the
//! appenders it waits for are coming, and fast enough.

use std::time::{Duration, Instant};

/// The longest quiet time that still counts as appenders coming back.
pub(crate) const GATHER_GAP: Duration = Duration::from_micros(30);

/// The longest wait after a commit, however long the commit took.
pub(crate) const GATHER_LIMIT: Duration = Duration::from_millis(2);

/// What the thread knows of its last commit.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Gathering {
    last: Option<LastCommit>,
}

#[derive(Clone, Copy, Debug)]
struct LastCommit {
    /// Requests in that group and queued behind it when it was durable.
    in_flight: usize,
    /// When its answers went out.
    ended: Instant,
    /// How long it took.
    took: Duration,
}

/// A wait the thread makes before its next group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GatherPlan {
    /// Requests queued that end the wait: the last commit's in flight.
    pub(crate) target: usize,
    /// When the wait ends regardless.
    pub(crate) deadline: Instant,
    /// When it started, and how many were queued then: the pace.
    started: Instant,
    queued_at_start: usize,
}

impl Gathering {
    /// Records a commit of `group` requests that took `took`, with
    /// `queued_behind` more queued by the time it was durable, and whose
    /// answers went out at `ended`.
    pub(crate) fn committed(
        &mut self,
        group: usize,
        queued_behind: usize,
        took: Duration,
        ended: Instant,
    ) {
        self.last = Some(LastCommit {
            in_flight: group.saturating_add(queued_behind),
            ended,
            took,
        });
    }

    /// The wait to make at `now` with `queued` requests queued, at most
    /// `max_group` of which fit in a group: `None` when the last commit
    /// had no company, when enough are queued, or when the last commit
    /// ended too long ago.
    pub(crate) fn plan(&self, queued: usize, max_group: usize, now: Instant) -> Option<GatherPlan> {
        let last = self.last?;
        let target = last.in_flight.min(max_group);
        let deadline = last.ended + last.took.min(GATHER_LIMIT);
        (target > 1 && queued < target && now < deadline).then_some(GatherPlan {
            target,
            deadline,
            started: now,
            queued_at_start: queued,
        })
    }
}

impl GatherPlan {
    /// Whether to go on waiting at `now`, with `queued` requests queued and
    /// `arrived` saying whether any came in the last [`GATHER_GAP`]: while
    /// short of the target, and the rest would come, at the pace since the
    /// start, before the deadline.
    pub(crate) fn keep_waiting(&self, queued: usize, arrived: bool, now: Instant) -> bool {
        if !arrived || queued >= self.target || now >= self.deadline {
            return false;
        }
        let came = queued.saturating_sub(self.queued_at_start);
        let Ok(came) = u32::try_from(came) else {
            return true;
        };
        if came == 0 {
            return true;
        }
        let missing = u32::try_from(self.target - queued).unwrap_or(u32::MAX);
        let pace = now.saturating_duration_since(self.started) / came;
        pace.checked_mul(missing)
            .is_some_and(|rest| now + rest <= self.deadline)
    }

    /// How long the next look waits: a gap, or what is left before the
    /// deadline.
    pub(crate) fn next_look(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now).min(GATHER_GAP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1024;

    fn after(group: usize, behind: usize, took_us: u64) -> (Gathering, Instant) {
        let ended = Instant::now();
        let mut gathering = Gathering::default();
        gathering.committed(group, behind, Duration::from_micros(took_us), ended);
        (gathering, ended)
    }

    #[test]
    fn no_wait_before_the_first_commit() {
        assert_eq!(Gathering::default().plan(0, MAX, Instant::now()), None);
    }

    #[test]
    fn waits_for_the_group_and_those_queued_behind_it() {
        let (gathering, ended) = after(32, 32, 400);
        let plan = gathering.plan(3, MAX, ended).expect("a wait");
        assert_eq!(plan.target, 64);
        assert_eq!(plan.deadline, ended + Duration::from_micros(400));
    }

    #[test]
    fn no_wait_without_company_or_once_enough_are_queued() {
        let (alone, ended) = after(1, 0, 400);
        assert_eq!(alone.plan(0, MAX, ended), None, "a group of one");
        let (pair, ended) = after(1, 1, 400);
        assert!(pair.plan(1, MAX, ended).is_some(), "one queued behind it");
        assert_eq!(pair.plan(2, MAX, ended), None, "both are back");
        let (big, ended) = after(2000, 0, 400);
        assert_eq!(big.plan(0, MAX, ended).map(|plan| plan.target), Some(MAX));
        assert_eq!(big.plan(MAX, MAX, ended), None, "a full group is queued");
    }

    #[test]
    fn no_wait_once_the_last_commit_is_as_old_as_it_was_long() {
        let (gathering, ended) = after(8, 0, 400);
        let late = ended + Duration::from_micros(400);
        assert!(gathering
            .plan(1, MAX, late - Duration::from_micros(1))
            .is_some());
        assert_eq!(gathering.plan(1, MAX, late), None);
    }

    #[test]
    fn a_slow_commit_waits_at_most_the_limit() {
        let (gathering, ended) = after(8, 0, 50_000);
        let plan = gathering.plan(1, MAX, ended).expect("a wait");
        assert_eq!(plan.deadline, ended + GATHER_LIMIT);
    }

    #[test]
    fn the_wait_ends_at_a_quiet_gap_the_target_or_the_deadline() {
        let (gathering, ended) = after(8, 0, 400);
        let plan = gathering.plan(1, MAX, ended).expect("a wait");
        let soon = ended + Duration::from_micros(100);
        assert!(plan.keep_waiting(7, true, soon));
        assert!(!plan.keep_waiting(7, false, soon), "a quiet gap");
        assert!(!plan.keep_waiting(8, true, soon), "the target");
        assert!(!plan.keep_waiting(7, true, plan.deadline), "the deadline");
    }

    #[test]
    fn the_wait_ends_when_the_rest_would_come_too_late_at_the_pace_so_far() {
        // 64 in flight, 4 queued at the start, 400 µs to the deadline.
        let (gathering, ended) = after(32, 32, 400);
        let plan = gathering.plan(4, MAX, ended).expect("a wait");
        let at = |micros| ended + Duration::from_micros(micros);
        // Came back 5 µs apart: 20 in 100 µs, the other 40 by 300 µs.
        assert!(plan.keep_waiting(24, true, at(100)));
        // A steady stream 20 µs apart: 5 in 100 µs, 55 more need 1.1 ms.
        assert!(!plan.keep_waiting(9, true, at(100)));
        // Nothing came since the start, yet something arrived (a leader
        // took the queue meanwhile): no pace to judge by, so it waits on.
        assert!(plan.keep_waiting(4, true, at(100)));
    }

    #[test]
    fn a_look_waits_a_gap_or_what_is_left() {
        let (gathering, ended) = after(8, 0, 400);
        let plan = gathering.plan(1, MAX, ended).expect("a wait");
        assert_eq!(plan.next_look(ended), GATHER_GAP);
        let near = plan.deadline - Duration::from_micros(10);
        assert_eq!(plan.next_look(near), Duration::from_micros(10));
        assert_eq!(plan.next_look(plan.deadline), Duration::ZERO);
    }
}
