//! # subagent-projections
//!
//! Pure folds over recorded events: the session corpus, parent catalogs, the
//! descendant tree, activation and activity state, external runs, inboxes and
//! the provider registry, all in [`Projections`], plus their versioned
//! [`checkpoint`] encoding, the sizes of its maps saved beside it
//! ([`map_sizes`]) and when the next is due ([`CheckpointCadence`]), the
//! delegation state machine ([`decide`])
//! that reads them, and the [`admissible`] check of a recorded history
//! against the state machine's rules, and the [`view`]s people read. No IO: the replay crate and the runtime feed events in,
//! append decisions and store checkpoints.

pub mod activation;
pub mod admissible;
pub mod catalog;
pub mod checkpoint;
mod checkpoint_cadence;
mod checkpoint_writer;
/// Fuzz target bodies (feature `testing`); see `fuzz/`.
#[cfg(feature = "testing")]
pub mod fuzzing;
pub mod inbox;
mod lineage;
pub mod machine;
pub mod map_sizes;
pub mod ownership;
pub mod sessions;
pub mod state;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod view;

pub use activation::{
    ActivationPhase, ActivationState, Activity, LiveActivation, RunPhase, RunState,
};
pub use admissible::{admit, admit_end, Expectation, HistoryCheck, HistoryViolation};
pub use checkpoint_cadence::CheckpointCadence;
pub use inbox::{prompt_digest, Inbox, PromptRecord};
pub use machine::{
    decide, decide_as, settlement_notice_id, tree_fences, Command, Decision, StartChild, TurnOutput,
};
pub use map_sizes::{MapSizes, MAP_SIZES_NAME};
pub use ownership::{home_stream, TreeClaim, TreeOwner};
pub use sessions::SessionRecord;
pub use state::{Projections, ProviderRecord};
pub use view::{SessionState, SessionStatus, TreeNode, TreeView};

/// The map type of [`Projections`]' and [`Inbox`]'s fields: `std`'s
/// `HashMap` with `foldhash`'s randomly seeded hasher, named here so a
/// caller need not depend on `foldhash` to name it.
pub type IdMap<K, V> = foldhash::HashMap<K, V>;
