//! The provider conformance suite (`subagent_runtime::conformance`) against
//! the shipped providers: `spawn` and `fork` on a scripted host, and
//! `process` on a real shell command whose slow run is a grandchild (so
//! the suite sees whether the whole process group ends).

use std::sync::Arc;

use subagent_runtime::conformance::{live_processes_named, run_all, ProviderHarness};
use subagent_runtime::providers::{ForkProvider, ProcessProvider, SpawnProvider};
use subagent_runtime::scripted::Step;
use subagent_runtime::{AgentHost, Script, ScriptedHost, SubagentProvider};

/// A scripted host: `quick` replies, `slow` sleeps a minute.
fn host() -> Arc<dyn AgentHost> {
    Arc::new(
        ScriptedHost::new(Script::reply("done"))
            .with(
                "slow",
                Script {
                    turns: vec![vec![Step::Say("working".into()), Step::SleepMs(60_000)]],
                },
            )
            .with_tool("read_file", "contents"),
    )
}

struct Local(fn() -> Arc<dyn SubagentProvider>);

impl ProviderHarness for Local {
    fn provider(&self) -> Arc<dyn SubagentProvider> {
        (self.0)()
    }
    fn host(&self) -> Arc<dyn AgentHost> {
        host()
    }
    fn quick_prompt(&self) -> &str {
        "answer"
    }
    fn slow_prompt(&self) -> &str {
        "take your time"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_passes_the_provider_conformance_suite() {
    run_all(&Local(|| Arc::new(SpawnProvider))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_passes_the_provider_conformance_suite() {
    run_all(&Local(|| Arc::new(ForkProvider))).await;
}

/// `process` on `bash -c SCRIPT MARKER`: a quick prompt is echoed; a slow
/// one starts `sleep` as a grandchild (named MARKER, so it can be counted)
/// and waits for it.
struct Process {
    marker: String,
}

impl ProviderHarness for Process {
    fn provider(&self) -> Arc<dyn SubagentProvider> {
        Arc::new(ProcessProvider::new(
            "process",
            "bash",
            &[
                "-c",
                r#"p=$(cat); case "$p" in slow*) (exec -a "$0" sleep 60) & wait;; esac; echo "$p""#,
                &self.marker,
            ],
        ))
    }
    fn host(&self) -> Arc<dyn AgentHost> {
        host()
    }
    fn quick_prompt(&self) -> &str {
        "quick answer"
    }
    fn slow_prompt(&self) -> &str {
        "slow work"
    }
    fn processes(&self) -> usize {
        live_processes_named(&self.marker)
    }
    /// bash, and the `sleep` it started (a grandchild of the run).
    fn processes_per_slow_child(&self) -> usize {
        2
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_passes_the_provider_conformance_suite() {
    let harness = Process {
        marker: format!("subagents-conformance-{}", uuid_like()),
    };
    run_all(&harness).await;
}

/// A name unique to this run.
fn uuid_like() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos())
    )
}
