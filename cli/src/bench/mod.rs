//! `subagents bench`: figures measured side by side with baselines that do
//! the same work in the same run. Never asserted anywhere; read and recorded
//! in BENCHMARKS.md.

mod append;
mod stats;

use clap::Subcommand;

use crate::CliResult;

/// The parts of the benchmark.
#[derive(Subcommand)]
pub enum BenchPart {
    /// Durable append throughput: engine vs raw RocksDB WriteBatch vs SQLite.
    Append(append::AppendArgs),
}

/// Runs one part.
///
/// # Errors
/// Storage failures while measuring.
pub fn run(part: BenchPart) -> CliResult {
    match part {
        BenchPart::Append(args) => append::run(&args),
    }
}
