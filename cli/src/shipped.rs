//! The providers `demo` and `serve` register: `spawn` and `fork` (local
//! continuable children) and `process`, an external one-shot run of
//! `sh -c 'tr a-z A-Z'`.

use std::sync::Arc;

use subagent_core::SubagentError;
use subagent_runtime::providers::{ForkProvider, ProcessProvider, SpawnProvider};
use subagent_runtime::SubagentRuntime;

/// Registers the shipped providers on `runtime`.
///
/// # Errors
/// The registry's refusals (a name already taken) and storage failures.
pub(crate) async fn register_providers(runtime: &SubagentRuntime) -> Result<(), SubagentError> {
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    runtime.register_provider(Arc::new(ForkProvider)).await?;
    runtime
        .register_provider(Arc::new(ProcessProvider::new(
            "process",
            "sh",
            &["-c", "tr a-z A-Z"],
        )))
        .await?;
    Ok(())
}
