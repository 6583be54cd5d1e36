//! The shipped providers: [`spawn`](SpawnProvider) (a fresh continuable
//! child), [`fork`](ForkProvider) (a continuable child seeded with the
//! parent's completed-turn prefix) and [`process`](ProcessProvider) (an
//! external one-shot execution of a configured command).

mod local;
mod process;

pub use local::{ForkProvider, SpawnProvider};
pub use process::ProcessProvider;
