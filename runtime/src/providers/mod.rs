//! The shipped providers: [`spawn`](SpawnProvider) (a fresh continuable
//! child), [`fork`](ForkProvider) (a continuable child seeded with the
//! parent's completed-turn prefix), [`process`](ProcessProvider) (an
//! external one-shot execution of a configured command) and
//! [`instant`](InstantProvider) (an external run that completes at once).

mod instant;
mod local;
mod process;

pub use instant::InstantProvider;
pub use local::{ForkProvider, SpawnProvider};
pub use process::ProcessProvider;
