//! `bench acp`: turns over the Agent Client Protocol against the same
//! turns in process. One continuable child answers `--turns` messages one
//! after another; a turn's latency is from the parent's `send_message` to
//! the child's `TurnEnded` being durable. The ACP child is the workspace's
//! test agent over real stdio (`subagents-acp-test-agent`, found beside
//! this binary); the baseline is the runtime's scripted agent playing the
//! same one-step turn, under the same log and durability.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use subagent_acp::{AcpCommand, AcpHost, AcpProvider};
use subagent_core::{ContentBlock, Delivery, Event, StreamId, SubagentActivationSpec};
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::{AgentHost, Script, ScriptedHost, SubagentRuntime};
use subagent_store::{Durability, EventLog, RocksLog, RocksOptions, SubscriptionItem};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

use super::args;
use super::stats::{percentile_ms, Summary};
use crate::BenchResult;

/// Arguments of `bench acp`.
#[derive(Args)]
pub struct AcpArgs {
    /// Runs per figure (the median is reported), 1 to 1000.
    #[arg(long, default_value_t = 3, value_parser = args::count(args::RUNS))]
    runs: usize,
    /// Turns per run, 1 to 1,000,000.
    #[arg(long, default_value_t = 200, value_parser = args::count(args::ROUND_TRIPS))]
    turns: usize,
}

/// Where the turns run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Agent {
    /// The test agent over real stdio.
    Acp,
    /// The scripted agent in process.
    InProcess,
}

/// The test agent beside this binary.
fn test_agent() -> Result<std::path::PathBuf, Box<dyn std::error::Error>> {
    let agent = std::env::current_exe()?.with_file_name("subagents-acp-test-agent");
    if agent.exists() {
        Ok(agent)
    } else {
        Err(format!(
            "{} is missing: build the workspace's binaries (cargo build --release --workspace --bins)",
            agent.display()
        )
        .into())
    }
}

/// One run: `turns` turns of one child; the rate and every latency.
async fn run_once(
    durability: Durability,
    agent: Agent,
    turns: usize,
) -> Result<(f64, Vec<Duration>), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log: Arc<dyn EventLog> = Arc::new(RocksLog::open(
        dir.path().join("log"),
        RocksOptions { durability },
    )?);
    let scripted: Arc<dyn AgentHost> = Arc::new(ScriptedHost::new(Script::reply("pong")));
    let (host, provider): (Arc<dyn AgentHost>, &str) = match agent {
        Agent::InProcess => (scripted, "spawn"),
        Agent::Acp => {
            let script = dir.path().join("script.json");
            std::fs::write(&script, r#"{"default": {"turns": [[{"say": "pong"}]]}}"#)?;
            let program = test_agent()?;
            let command = AcpCommand::new(
                &program.display().to_string(),
                &["--script", &script.display().to_string()],
            )
            .cwd(dir.path());
            (
                Arc::new(AcpHost::new(scripted).route("acp", command)),
                "acp",
            )
        }
    };
    let (runtime, _) = SubagentRuntime::open(Arc::clone(&log), host).await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    runtime
        .register_provider(Arc::new(AcpProvider::continuable("acp")))
        .await?;
    let root = runtime.open_root("bench").await?;
    let spec =
        SubagentActivationSpec::with_text_prompt(provider, "echo", "ready", Delivery::Caller);
    let child = runtime
        .start_activation(&root, spec, CancellationToken::new())
        .await?;
    child.result().await?;
    let stream = StreamId::Session(child.child_id());
    let mut turn_ends = log.subscribe(log.head() + 1);
    let mut latencies = Vec::with_capacity(turns);
    let started = Instant::now();
    for _ in 0..turns {
        let began = Instant::now();
        runtime
            .send_message(
                &root,
                child.child_id(),
                vec![ContentBlock::text("ping")],
                CancellationToken::new(),
            )
            .await?;
        loop {
            match turn_ends.next().await {
                Some(Ok(SubscriptionItem::Event(record)))
                    if record.stream == stream
                        && matches!(record.event, Event::TurnEnded { .. }) =>
                {
                    break
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => return Err(err.into()),
                None => return Err("the log's subscription ended".into()),
            }
        }
        latencies.push(began.elapsed());
    }
    let rate = turns as f64 / started.elapsed().as_secs_f64();
    child.dispose().await?;
    runtime.close().await?;
    Ok((rate, latencies))
}

/// Runs `bench acp`.
///
/// # Errors
/// A missing test agent, storage, runtime or protocol failures.
pub(super) fn run(args: &AcpArgs, out: &mut dyn Write) -> BenchResult {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    writeln!(
        out,
        "turns/s of one continuable child, over ACP (the test agent, real stdio) vs in process (the scripted agent): median (min–max) of {} runs, {} turns each; latency from send_message to the durable TurnEnded",
        args.runs, args.turns
    )?;
    writeln!(
        out,
        "{:<9}  {:>22} {:>7} {:>7}  {:>22} {:>7} {:>7}  {:>8}",
        "mode",
        "ACP turns/s",
        "p50 ms",
        "p99 ms",
        "in-process turns/s",
        "p50 ms",
        "p99 ms",
        "ACP/in"
    )?;
    out.flush()?;
    for durability in [Durability::Sync, Durability::Buffered] {
        eprintln!("… measuring turns, {durability:?}");
        let (mut acp, mut inproc) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
        for _ in 0..args.runs {
            let (rate, mut latencies) =
                tokio.block_on(run_once(durability, Agent::Acp, args.turns))?;
            acp.0.push(rate);
            acp.1.append(&mut latencies);
            let (rate, mut latencies) =
                tokio.block_on(run_once(durability, Agent::InProcess, args.turns))?;
            inproc.0.push(rate);
            inproc.1.append(&mut latencies);
        }
        acp.1.sort();
        inproc.1.sort();
        let (acp_rate, inproc_rate) = (Summary::of(&acp.0), Summary::of(&inproc.0));
        writeln!(
            out,
            "{:<9}  {:>22} {:>7.2} {:>7.2}  {:>22} {:>7.2} {:>7.2}  {:>8.2}",
            format!("{durability:?}"),
            acp_rate.to_string(),
            percentile_ms(&acp.1, 0.5),
            percentile_ms(&acp.1, 0.99),
            inproc_rate.to_string(),
            percentile_ms(&inproc.1, 0.5),
            percentile_ms(&inproc.1, 0.99),
            acp_rate.median / inproc_rate.median
        )?;
        out.flush()?;
    }
    Ok(())
}
