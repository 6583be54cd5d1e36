//! `subagents bench`: figures measured side by side with baselines that do
//! the same work in the same run. Never asserted anywhere; read and recorded
//! in BENCHMARKS.md.

mod activations;
mod append;
mod list;
mod memory;
mod messages;
mod replay;
mod stats;
mod workload;

use clap::Subcommand;

use crate::CliResult;

/// The parts of the benchmark.
#[derive(Subcommand)]
pub enum BenchPart {
    /// Durable append throughput: engine vs raw RocksDB WriteBatch vs SQLite.
    Append(append::AppendArgs),
    /// One-shot activations per second with p50/p99 latency vs the append floor.
    Activations(activations::ActivationArgs),
    /// Parent → child → parent message round trips with an echo agent.
    Messages(messages::MessageArgs),
    /// Resident memory per inactive child vs its encoded log records.
    Memory(memory::MemoryArgs),
    /// Replay: events/s folded into every projection vs raw iterate-and-decode.
    Replay(replay::ReplayArgs),
    /// Listing: list_descendants on a large tree, list_children vs log length.
    List(list::ListArgs),
    /// Startup: open from checkpoint + tail vs a full refold.
    Startup(replay::ReplayArgs),
}

/// Runs one part.
///
/// # Errors
/// Storage failures while measuring.
pub fn run(part: BenchPart) -> CliResult {
    match part {
        BenchPart::Append(args) => append::run(&args),
        BenchPart::Activations(args) => activations::run(&args),
        BenchPart::Messages(args) => messages::run(&args),
        BenchPart::Memory(args) => memory::run(&args),
        BenchPart::Replay(args) => replay::replay(&args),
        BenchPart::List(args) => list::run(&args),
        BenchPart::Startup(args) => replay::startup(&args),
    }
}
