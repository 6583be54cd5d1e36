//! The `custom_provider` example's provider passes the provider
//! conformance suite, as any host-written provider should. The README's
//! conformance snippet is an excerpt of this file.

#[allow(dead_code)] // its `main` is the example's, not this test's
#[path = "../custom_provider.rs"]
mod example;

use example::ReverseProvider;

// ANCHOR: conformance
use std::sync::Arc;

use subagent_runtime::conformance::{run_all, ProviderHarness};
use subagent_runtime::{AgentHost, Script, ScriptedHost, SubagentProvider};

struct Reverse;

impl ProviderHarness for Reverse {
    fn provider(&self) -> Arc<dyn SubagentProvider> {
        Arc::new(ReverseProvider)
    }
    /// Builds continuable children's agents; an external provider has none.
    fn host(&self) -> Arc<dyn AgentHost> {
        Arc::new(ScriptedHost::new(Script::reply("unused")))
    }
    /// Settles `completed` promptly.
    fn quick_prompt(&self) -> &str {
        "stressed"
    }
    /// Works until it is stopped.
    fn slow_prompt(&self) -> &str {
        "take your time"
    }
    // `processes` counts what the children run (`live_processes_named`):
    // 0 here, since the jobs are tasks, not processes.
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reverse_provider_conforms() {
    run_all(&Reverse).await;
}
// ANCHOR_END: conformance
