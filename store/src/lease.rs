//! Tree leases and fencing: which host may append for a root's tree, and
//! the token its appends carry so that a host that lost the tree writes
//! nothing more for it.
//!
//! A backend that several hosts share (PostgreSQL) keeps one lease per
//! root: its holder, a fencing token, and an expiry on the server's clock
//! (one clock for every host, so skew between hosts cannot make two of
//! them believe they hold a tree). Taking a lease that lapsed, or taking
//! one's own again, bumps the token; renewing keeps it. Every append that
//! presents a [`Fence`] is checked against the token inside its
//! transaction, and a stale one is [`StoreError::Fenced`] with nothing
//! written: a host paused past its lease (a GC stall, a partition) learns
//! it lost the tree on its next write, not by writing over the new holder.
//!
//! A single-writer backend (RocksDB's directory lock, an in-memory log)
//! has no other holder to fence out; it appends a fenced append as a plain
//! one ([`EventLog::append_fenced`](crate::EventLog::append_fenced)).

use std::time::Duration;

use subagent_core::SessionId;

use crate::StoreError;

/// The longest holder name, in bytes.
pub const MAX_HOLDER_BYTES: usize = 200;

/// The longest lease term: a lease that outlives a day is a lock nobody
/// can take over.
pub const MAX_LEASE_TERM: Duration = Duration::from_secs(24 * 60 * 60);

/// What an append for one tree presents: the root and the token of the
/// lease its writer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The root of the tree appended to.
    pub root: SessionId,
    /// The lease's fencing token when it was taken.
    pub token: u64,
}

/// A lease this holder took (or renewed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The root of the tree it covers.
    pub root: SessionId,
    /// Who holds it.
    pub holder: String,
    /// Its fencing token: greater than every earlier holder's.
    pub token: u64,
    /// How long it lasts from the moment it was taken or renewed.
    pub term: Duration,
}

impl Lease {
    /// The fence its appends present.
    #[must_use]
    pub fn fence(&self) -> Fence {
        Fence {
            root: self.root,
            token: self.token,
        }
    }
}

/// One stored lease, as a listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The root of the tree it covers.
    pub root: SessionId,
    /// Its holder.
    pub holder: String,
    /// Its current fencing token.
    pub token: u64,
    /// How long until it lapses on the server's clock; zero once it has.
    pub remaining: Duration,
}

/// The leases of a backend several hosts share: what a host of a shared
/// log takes, renews and releases its trees with. Blocking calls (a
/// runtime makes them off its async workers). A backend offers them
/// through [`EventLog::tree_leases`](crate::EventLog::tree_leases).
pub trait TreeLeases: Send + Sync {
    /// Takes the lease of `root`'s tree for `holder` for `term`: a free
    /// one, a lapsed one, or `holder`'s own. Every take bumps the token.
    ///
    /// # Errors
    /// [`StoreError::LeaseHeld`] while another holder's lease has not
    /// lapsed; [`StoreError::InvalidLease`]; a storage failure.
    fn acquire_lease(
        &self,
        root: SessionId,
        holder: &str,
        term: Duration,
    ) -> Result<Lease, StoreError>;

    /// Extends `lease` by its term from now, if its token is still the
    /// tree's.
    ///
    /// # Errors
    /// [`StoreError::Fenced`] when another holder took the tree;
    /// [`StoreError::InvalidLease`]; a storage failure.
    fn renew_lease(&self, lease: &Lease) -> Result<Lease, StoreError>;

    /// Lets `lease` lapse now.
    ///
    /// # Errors
    /// [`StoreError::Fenced`] when another holder took the tree already;
    /// [`StoreError::InvalidLease`]; a storage failure.
    fn release_lease(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Every tree's lease, by root, with the time left on the server's
    /// clock.
    ///
    /// # Errors
    /// A storage failure.
    fn list_leases(&self) -> Result<Vec<LeaseRecord>, StoreError>;

    /// The last committed position, read from the database now (not a
    /// cached head): every append that committed before the call is at or
    /// below it. After a take, everything the tree's previous holder
    /// committed is at or below it, so a taker that folded that far decides
    /// on the tree's whole history.
    ///
    /// # Errors
    /// A storage failure.
    fn committed_head(&self) -> Result<u64, StoreError>;
}

/// Refuses a holder name or term no lease may have.
///
/// # Errors
/// [`StoreError::InvalidLease`]: an empty holder, one over
/// [`MAX_HOLDER_BYTES`] or with a control character; a term under one
/// millisecond or over [`MAX_LEASE_TERM`].
pub fn check_lease_request(holder: &str, term: Duration) -> Result<(), StoreError> {
    let reason = if holder.is_empty() {
        Some("the holder is empty")
    } else if holder.len() > MAX_HOLDER_BYTES {
        Some("the holder is longer than 200 bytes")
    } else if holder.chars().any(char::is_control) {
        Some("the holder contains a control character")
    } else if term < Duration::from_millis(1) {
        Some("the term is shorter than a millisecond")
    } else if term > MAX_LEASE_TERM {
        Some("the term is longer than a day")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StoreError::InvalidLease { reason }),
        None => Ok(()),
    }
}

/// The term in whole milliseconds (at least 1), as the backends store it.
#[must_use]
pub fn term_millis(term: Duration) -> i64 {
    i64::try_from(term.as_millis()).unwrap_or(i64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_holders_and_terms_are_refused_with_their_reason() {
        let second = Duration::from_secs(1);
        assert!(check_lease_request("host-a", second).is_ok());
        assert!(check_lease_request(&"h".repeat(MAX_HOLDER_BYTES), MAX_LEASE_TERM).is_ok());
        for (holder, term, reason) in [
            ("", second, "the holder is empty"),
            ("a\nb", second, "the holder contains a control character"),
            (
                "host",
                Duration::ZERO,
                "the term is shorter than a millisecond",
            ),
            (
                "host",
                Duration::from_micros(999),
                "the term is shorter than a millisecond",
            ),
            (
                "host",
                MAX_LEASE_TERM + second,
                "the term is longer than a day",
            ),
        ] {
            match check_lease_request(holder, term) {
                Err(StoreError::InvalidLease { reason: got }) => assert_eq!(got, reason),
                other => panic!("{holder:?} {term:?}: {other:?}"),
            }
        }
        let long = "h".repeat(MAX_HOLDER_BYTES + 1);
        assert!(matches!(
            check_lease_request(&long, second),
            Err(StoreError::InvalidLease { .. })
        ));
    }

    #[test]
    fn a_single_writer_backend_appends_a_fenced_append_as_a_plain_one() {
        use crate::{EventLog, ExpectedVersion, MemoryLog, StreamAppend};
        let log = MemoryLog::new();
        let root = SessionId::new();
        let appended = log
            .append_fenced(
                vec![StreamAppend {
                    stream: subagent_core::StreamId::Session(root),
                    expected: ExpectedVersion::NoStream,
                    events: vec![subagent_core::NewEvent::new(
                        subagent_core::Event::TurnStarted { turn: 1, epoch: 1 },
                    )],
                }],
                Vec::new(),
                vec![Fence { root, token: 7 }],
            )
            .wait()
            .expect("no lease to check");
        assert_eq!(appended[0].last_position, 1);
        assert_eq!(log.head(), 1);
    }

    #[test]
    fn terms_are_whole_milliseconds_of_at_least_one() {
        assert_eq!(term_millis(Duration::from_millis(1500)), 1500);
        assert_eq!(term_millis(Duration::from_micros(10)), 1);
        assert_eq!(term_millis(Duration::MAX), i64::MAX);
    }
}
