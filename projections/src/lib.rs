//! # subagent-projections
//!
//! Pure folds over recorded events: the session corpus, parent catalogs, the
//! descendant tree, activation and activity state, external runs, inboxes and
//! the provider registry, all in [`Projections`], plus their versioned
//! [`checkpoint`] encoding. No IO: the replay crate and the runtime feed
//! events in and store checkpoints.

pub mod activation;
pub mod catalog;
pub mod checkpoint;
pub mod inbox;
pub mod sessions;
pub mod state;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use activation::{
    ActivationPhase, ActivationState, Activity, LiveActivation, RunPhase, RunState,
};
pub use inbox::Inbox;
pub use sessions::SessionRecord;
pub use state::{Projections, ProviderRecord};
