//! How `serve` and `demo` run on their log: as the only writer of a RocksDB
//! directory, or as one host of several on a PostgreSQL log
//! (`SubagentRuntime::open_shared`), holding the trees it opens through
//! leases and taking over those of hosts that died.

use std::sync::Arc;
use std::time::Duration;

use subagent_core::SubagentError;
use subagent_runtime::{AgentHost, CapacityLimits, RecoveryReport, SharedHost, SubagentRuntime};
use subagent_store::EventLog;

use crate::target::LogTarget;

/// The host's arguments of `serve` and `demo`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct HostArgs {
    /// On a PostgreSQL store, the name this host's tree leases are held
    /// under: unique per host, and the same across its restarts, so a
    /// restarted host takes its trees back at once (default: the machine's
    /// host name).
    #[arg(long, value_name = "NAME", requires = "store")]
    host_name: Option<String>,
    /// On a PostgreSQL store, how long a tree lease lasts unrenewed, in
    /// milliseconds: how soon another host takes over the trees of one
    /// that died. Renewed every third of it.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 10_000,
        requires = "store",
        value_parser = clap::value_parser!(u64).range(1..=86_400_000)
    )]
    lease_term_ms: u64,
}

/// The host name to hold leases under when `--host-name` is not given.
fn machine_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "subagents-host".to_owned())
}

impl HostArgs {
    /// The shared host this runs as on `target`: `None` for a directory.
    pub(crate) fn shared(&self, target: &LogTarget) -> Option<SharedHost> {
        match target {
            LogTarget::Dir(_) => None,
            LogTarget::Postgres(..) => Some(SharedHost::new(
                self.host_name.clone().unwrap_or_else(machine_name),
                Duration::from_millis(self.lease_term_ms),
            )),
        }
    }

    /// Opens the runtime on `log` (the log of `target`): the only writer of
    /// a directory, or a shared host on PostgreSQL.
    ///
    /// # Errors
    /// As `SubagentRuntime::open` and `open_shared`.
    pub(crate) async fn open(
        &self,
        target: &LogTarget,
        log: Arc<dyn EventLog>,
        agents: Arc<dyn AgentHost>,
    ) -> Result<(SubagentRuntime, RecoveryReport), SubagentError> {
        match self.shared(target) {
            None => SubagentRuntime::open(log, agents).await,
            Some(shared) => {
                SubagentRuntime::open_shared(log, agents, CapacityLimits::default(), shared).await
            }
        }
    }
}
