//! The sizes of a state's maps, stored beside its checkpoint, so that a
//! fold from position 1 reserves each map up front (for the counts at the
//! last checkpoint) instead of growing it from empty.
//!
//! A map that grows as entries come in is rehashed at every doubling: a
//! table twice as large is allocated, in memory the process has never
//! touched, and every entry is moved into it. On a fold of a large log the
//! kernel's zeroing of those fresh pages was about a quarter of a slow
//! fold's time (27% of its samples), and on the virtual machine measured it came and went from run to
//! run (BENCHMARKS.md, "The fold's maps sized from the last checkpoint").
//! The sizes of the last checkpoint's maps let a later fold (`replay`,
//! `verify`, a refold on open) reserve them up front.
//!
//! They are a hint. They are stored under their own name
//! ([`MAP_SIZES_NAME`]), written after the checkpoint they describe, and
//! read without it: 64 bytes, where the checkpoint is tens of megabytes.
//! A read that fails, and bytes that do not decode, are no hint
//! ([`MapSizes::from_stored`]). A frame claiming more entries in a map than
//! its position (every entry of every map is made by at least one event)
//! does not decode. A decoded hint is trusted only to size maps, scaled
//! down for a fold that stops before the hint's position, and never beyond
//! one entry per event folded; a reservation that fails leaves the map to
//! grow as it would have.
//!
//! The frame, integers little-endian:
//!
//! | bytes | holds |
//! |---|---|
//! | 0..8 | the magic `SAGSIZE\0` |
//! | 8..16 | the position of the state they were counted at |
//! | 16..64 | the entries of sessions, catalogs, owners, activations, runs and inboxes, a `u64` each |

use crate::state::Projections;
use crate::IdMap;

/// The name the sizes are stored under, beside
/// [`CHECKPOINT_NAME`](crate::checkpoint::CHECKPOINT_NAME).
pub const MAP_SIZES_NAME: &str = "projections-sizes";

/// The first eight bytes of the frame.
const MAGIC: [u8; 8] = *b"SAGSIZE\0";

/// The frame's whole length.
pub const ENCODED_LEN: usize = 64;

/// How many entries each map keyed by session id held in a state at
/// `position`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapSizes {
    /// The position of the state they were counted at.
    pub position: u64,
    /// Entries of [`Projections::sessions`].
    pub sessions: u64,
    /// Entries of [`Projections::catalogs`].
    pub catalogs: u64,
    /// Entries of [`Projections::owners`].
    pub owners: u64,
    /// Entries of [`Projections::activations`].
    pub activations: u64,
    /// Entries of [`Projections::runs`].
    pub runs: u64,
    /// Entries of [`Projections::inboxes`].
    pub inboxes: u64,
}

impl MapSizes {
    /// `count` entries in every map of a state at `position`: a hint as
    /// large as a frame at `position` may claim when `count` is `position`.
    #[must_use]
    pub fn every_map(position: u64, count: u64) -> MapSizes {
        MapSizes {
            position,
            sessions: count,
            catalogs: count,
            owners: count,
            activations: count,
            runs: count,
            inboxes: count,
        }
    }

    /// The sizes of `state`'s maps.
    #[must_use]
    pub fn of(state: &Projections) -> MapSizes {
        let entries = |len: usize| u64::try_from(len).unwrap_or(u64::MAX);
        MapSizes {
            position: state.position,
            sessions: entries(state.sessions.len()),
            catalogs: entries(state.catalogs.len()),
            owners: entries(state.owners.len()),
            activations: entries(state.activations.len()),
            runs: entries(state.runs.len()),
            inboxes: entries(state.inboxes.len()),
        }
    }

    /// The entries of all the maps together (saturating): the measure of a
    /// state's size the checkpoint cadence uses. It counts the maps'
    /// entries, not what is nested in them (a catalog's children, which are
    /// sessions too; an inbox's messages) nor their bytes (a session's
    /// result); in the states measured, sessions and their entries make
    /// most of a checkpoint.
    #[must_use]
    pub fn entries(&self) -> u64 {
        self.counts()
            .into_iter()
            .fold(0, |total, count| total.saturating_add(count))
    }

    fn counts(&self) -> [u64; 6] {
        [
            self.sessions,
            self.catalogs,
            self.owners,
            self.activations,
            self.runs,
            self.inboxes,
        ]
    }

    /// The frame of these sizes.
    #[must_use]
    pub fn encode(&self) -> [u8; ENCODED_LEN] {
        let mut frame = [0; ENCODED_LEN];
        frame[..8].copy_from_slice(&MAGIC);
        frame[8..16].copy_from_slice(&self.position.to_le_bytes());
        for (slot, count) in frame[16..].chunks_exact_mut(8).zip(self.counts()) {
            slot.copy_from_slice(&count.to_le_bytes());
        }
        frame
    }

    /// The sizes `stored` holds: what a read of [`MAP_SIZES_NAME`] gave.
    /// A read that failed, nothing stored and bytes that do not decode are
    /// all `None`, no hint, never an error: a fold without one only grows
    /// its maps.
    #[must_use]
    pub fn from_stored<B, E>(stored: Result<Option<B>, E>) -> Option<MapSizes>
    where
        B: std::ops::Deref<Target = [u8]>,
    {
        stored
            .ok()
            .flatten()
            .and_then(|bytes| MapSizes::decode(&bytes))
    }

    /// The sizes `bytes` hold, or `None` when they are not a frame of
    /// [`ENCODED_LEN`] bytes beginning with the magic, or claim more
    /// entries in a map than the frame's position (then the hint is
    /// ignored, never an error).
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<MapSizes> {
        let frame: &[u8; ENCODED_LEN] = bytes.try_into().ok()?;
        if frame[..8] != MAGIC {
            return None;
        }
        let word = |at: usize| {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(&frame[at..at + 8]);
            u64::from_le_bytes(bytes)
        };
        let sizes = MapSizes {
            position: word(8),
            sessions: word(16),
            catalogs: word(24),
            owners: word(32),
            activations: word(40),
            runs: word(48),
            inboxes: word(56),
        };
        sizes
            .counts()
            .iter()
            .all(|count| *count <= sizes.position)
            .then_some(sizes)
    }

    /// How many entries to reserve for a map that held `count` at the
    /// hint's position, in a fold from position 1 to `at`: `count`, scaled
    /// by `at / position` when the fold stops before the hint's position,
    /// and at most `at` (each entry is made by at least one event).
    fn reserved_for(&self, count: u64, at: u64) -> usize {
        let scaled = if at < self.position {
            // Below `count` because `at / position` < 1, so it fits.
            u64::try_from(u128::from(count) * u128::from(at) / u128::from(self.position))
                .unwrap_or(count)
        } else {
            count
        };
        usize::try_from(scaled.min(at)).unwrap_or(usize::MAX)
    }
}

/// Asks for room for `entries` more in `map`; a reservation that fails is
/// not an error (the map grows instead).
fn reserve<V>(map: &mut IdMap<subagent_core::SessionId, V>, entries: usize) {
    let _ = map.try_reserve(entries);
}

impl Projections {
    /// The empty state (before position 1), with each map keyed by session
    /// id allocated for a fold from position 1 to `at`, as `sizes` (another
    /// state's, read from [`MAP_SIZES_NAME`]) suggest; without them, the
    /// same as [`Projections::new`]. The result folds exactly as
    /// [`Projections::new`] does: only the maps' capacity differs.
    #[must_use]
    pub fn presized(sizes: Option<MapSizes>, at: u64) -> Projections {
        let mut state = Projections::new();
        if let Some(sizes) = sizes {
            reserve(&mut state.sessions, sizes.reserved_for(sizes.sessions, at));
            reserve(&mut state.catalogs, sizes.reserved_for(sizes.catalogs, at));
            reserve(&mut state.owners, sizes.reserved_for(sizes.owners, at));
            reserve(
                &mut state.activations,
                sizes.reserved_for(sizes.activations, at),
            );
            reserve(&mut state.runs, sizes.reserved_for(sizes.runs, at));
            reserve(&mut state.inboxes, sizes.reserved_for(sizes.inboxes, at));
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::HistoryBuilder;

    fn capacities(state: &Projections) -> [usize; 6] {
        [
            state.sessions.capacity(),
            state.catalogs.capacity(),
            state.owners.capacity(),
            state.activations.capacity(),
            state.runs.capacity(),
            state.inboxes.capacity(),
        ]
    }

    #[test]
    fn sizes_are_counted_from_a_state_and_read_back_from_their_frame() {
        let mut history = HistoryBuilder::new();
        let root = history.root("root");
        history.children_with_one_activation(root, 1);
        let state = Projections::fold(&history.records);
        let counted = MapSizes::of(&state);
        assert_eq!(counted.position, state.position);
        assert_eq!(counted.sessions, 2);
        assert_eq!(counted.catalogs, state.catalogs.len() as u64);
        assert_eq!(counted.activations, state.activations.len() as u64);
        assert_eq!(counted.inboxes, state.inboxes.len() as u64);
        assert!(counted.activations > 0 && counted.inboxes > 0);

        let distinct = MapSizes {
            position: u64::MAX,
            sessions: 1,
            catalogs: 2,
            owners: 3,
            activations: 4,
            runs: 5,
            inboxes: u64::MAX,
        };
        let frame = distinct.encode();
        assert_eq!(&frame[..8], b"SAGSIZE\0");
        assert_eq!(MapSizes::decode(&frame), Some(distinct));
    }

    #[test]
    fn bytes_that_are_not_a_frame_are_no_hint() {
        let frame = MapSizes::every_map(10, 3).encode();
        assert_eq!(MapSizes::decode(&frame[..ENCODED_LEN - 1]), None);
        let mut longer = frame.to_vec();
        longer.push(0);
        assert_eq!(MapSizes::decode(&longer), None);
        let mut other_magic = frame;
        other_magic[0] = b'X';
        assert_eq!(MapSizes::decode(&other_magic), None);
        assert_eq!(MapSizes::decode(b""), None);
        // More entries than events (a flipped bit, say) is no frame.
        let mut more_than_events = MapSizes::every_map(10, 10);
        assert!(MapSizes::decode(&more_than_events.encode()).is_some());
        more_than_events.runs = 11;
        assert_eq!(MapSizes::decode(&more_than_events.encode()), None);
        // A failed read, and nothing stored, are no hint either.
        let failed: Result<Option<&[u8]>, ()> = Err(());
        assert_eq!(MapSizes::from_stored(failed), None);
        assert_eq!(MapSizes::from_stored(Ok::<Option<&[u8]>, ()>(None)), None);
        assert_eq!(
            MapSizes::from_stored(Ok::<_, ()>(Some(&frame[..]))),
            Some(MapSizes::every_map(10, 3))
        );
        // A checkpoint stored under the hint's name is not taken for one.
        assert_eq!(
            MapSizes::decode(&crate::checkpoint::encode(&Projections::new())),
            None
        );
    }

    #[test]
    fn maps_are_reserved_for_the_hint_scaled_to_the_fold_and_at_most_one_entry_an_event() {
        assert_eq!(capacities(&Projections::presized(None, 1_000)), [0; 6]);

        // The fold reaches the hint's position, or passes it: as counted.
        for at in [1_000, 5_000] {
            for capacity in capacities(&Projections::presized(
                Some(MapSizes::every_map(1_000, 300)),
                at,
            )) {
                assert!(
                    (300..1_000).contains(&capacity),
                    "{capacity} for a fold to {at}"
                );
            }
        }
        // A fold to a tenth of the hint's position: a tenth of each count.
        for capacity in capacities(&Projections::presized(
            Some(MapSizes::every_map(1_000, 300)),
            100,
        )) {
            assert!((30..100).contains(&capacity), "{capacity}");
        }
        // Never more than the fold's events could fill.
        for capacity in capacities(&Projections::presized(
            Some(MapSizes::every_map(1_000, 1_000_000)),
            2_000,
        )) {
            assert!((2_000..8_000).contains(&capacity), "{capacity}");
        }
    }

    #[test]
    fn a_hint_no_memory_can_hold_is_only_asked_for() {
        let state = Projections::presized(Some(MapSizes::every_map(1, u64::MAX)), u64::MAX);
        assert_eq!(capacities(&state), [0; 6]);
        let state = Projections::presized(Some(MapSizes::every_map(u64::MAX, u64::MAX)), 3);
        assert!(capacities(&state).iter().all(|capacity| *capacity < 64));
    }

    #[test]
    fn a_presized_state_folds_as_an_empty_one_does() {
        let mut history = HistoryBuilder::new();
        let root = history.root("root");
        history.children_with_one_activation(root, 5);
        let records = &history.records;
        let plain = Projections::fold(records);
        let mut presized = Projections::presized(Some(MapSizes::every_map(10_000, 10_000)), 10_000);
        for record in records {
            presized.apply(record);
        }
        assert_eq!(presized, plain);
        assert!(presized.sessions.capacity() >= 10_000);
    }
}
