//! `bench memory`: resident memory per inactive child.
//!
//! A runtime starts N continuable children with an instant scripted agent,
//! lets each settle and releases it, so every child is inactive (durable,
//! cold-resumable, no live agent). Resident memory is read from
//! `/proc/self/statm` before and after. Baseline: the child's own records in
//! the log (their encoded size), i.e. what the runtime keeps in memory per
//! child relative to what it keeps on disk.

use std::sync::Arc;

use std::io::Write;

use clap::Args;
use subagent_core::{Delivery, SubagentActivationSpec};
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::{Script, ScriptedHost, SubagentRuntime};
use subagent_store::{Durability, EventLog, EventLogExt, RocksLog, RocksOptions};
use tokio_util::sync::CancellationToken;

use super::args;
use super::stats::Summary;
use crate::BenchResult;

/// Arguments of `bench memory`.
#[derive(Args)]
pub struct MemoryArgs {
    /// Children per run, 1 to 1,000,000.
    #[arg(long, default_value_t = 20_000, value_parser = args::count(args::CHILDREN))]
    children: usize,
    /// Runs per figure (the median is reported), 1 to 1000.
    #[arg(long, default_value_t = 5, value_parser = args::count(args::RUNS))]
    runs: usize,
}

fn resident_bytes() -> Result<u64, Box<dyn std::error::Error>> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .ok_or("statm has no resident field")?
        .parse()?;
    Ok(pages * 4096)
}

async fn one_run(children: usize) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log = RocksLog::open(
        dir.path(),
        RocksOptions {
            durability: Durability::Buffered,
        },
    )?;
    let (runtime, _) = SubagentRuntime::open(
        Arc::new(log.clone()),
        Arc::new(ScriptedHost::new(Script::reply("done"))),
    )
    .await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    let root = runtime.open_root("bench").await?;
    let spec = || SubagentActivationSpec::with_text_prompt("spawn", "task", "go", Delivery::Caller);
    // Warm up allocator and caches with a first batch that is not measured.
    for _ in 0..500 {
        let activation = runtime
            .start_activation(&root, spec(), CancellationToken::new())
            .await?;
        activation.result().await?;
        activation.dispose().await?;
    }
    let head_before = log.head();
    let before = resident_bytes()?;
    for _ in 0..children {
        let activation = runtime
            .start_activation(&root, spec(), CancellationToken::new())
            .await?;
        activation.result().await?;
        activation.dispose().await?;
    }
    let after = resident_bytes()?;
    let mut record_bytes = 0usize;
    for record in log.read_all(head_before + 1) {
        record_bytes += subagent_store::record::encode(&record?)?.len();
    }
    Ok((
        after.saturating_sub(before) as f64 / children as f64,
        record_bytes as f64 / children as f64,
    ))
}

/// Runs `bench memory`.
///
/// # Errors
/// Storage or runtime failures.
pub(super) fn run(args: &MemoryArgs, out: &mut dyn Write) -> BenchResult {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (mut resident, mut on_disk) = (Vec::new(), Vec::new());
    let bar = super::progress::bar("memory", args.runs as u64, "runs");
    for _ in 0..args.runs {
        let (memory, records) = tokio.block_on(one_run(args.children))?;
        resident.push(memory);
        on_disk.push(records);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (resident, on_disk) = (Summary::of(&resident), Summary::of(&on_disk));
    writeln!(
        out,
        "memory per inactive child ({} children per run), bytes: median (min–max) of {} runs",
        args.children, args.runs
    )?;
    out.flush()?;
    writeln!(out, "  resident memory per child        {resident}")?;
    out.flush()?;
    writeln!(out, "  its encoded log records          {on_disk}")?;
    out.flush()?;
    writeln!(
        out,
        "  memory / records                 {:.2}",
        resident.median / on_disk.median
    )?;
    out.flush()?;
    Ok(())
}
