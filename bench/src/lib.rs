//! # subagent-bench
//!
//! `subagents-bench`: figures measured side by side with baselines that do
//! the same work in the same run. Never asserted anywhere; read and recorded
//! in BENCHMARKS.md. Every numeric argument is range-checked by clap (see
//! `args`); the tables are written to the command's handled stdout, one
//! flushed row at a time.

mod acp;
mod activations;
mod append;
mod append_pg;
mod args;
mod console;
mod delegation;
mod gateway;
mod list;
mod memory;
mod messages;
mod progress;
mod replay;
mod served;
mod sse;
mod stats;
mod tracing_overhead;
mod workload;

pub use acp::AcpArgs;
pub use activations::ActivationArgs;
pub use append::AppendArgs;
pub use console::ConsoleArgs;
pub use delegation::DelegationArgs;
pub use gateway::GatewayArgs;
pub use list::ListArgs;
pub use memory::MemoryArgs;
pub use messages::MessageArgs;
pub use replay::ReplayArgs;

use std::io::Write;

use clap::Subcommand;

/// Boxed error for a part's result; every failure ends as one readable line.
pub type BenchResult = Result<(), Box<dyn std::error::Error>>;

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
    /// The gateway: prompt round trips over HTTP vs in process, SSE fan-out
    /// vs direct log subscriptions.
    Gateway(gateway::GatewayArgs),
    /// The console in headless Chromium: first render of a large tree vs
    /// fetching it in Rust, append-to-page latency vs the SSE stream.
    Console(console::ConsoleArgs),
    /// Turns over the Agent Client Protocol (the test agent over real
    /// stdio) vs the same turns in process.
    Acp(acp::AcpArgs),
    /// Children started through an agent's `subagent` tool vs `start_activation`.
    Delegation(delegation::DelegationArgs),
    /// Opens a log from its checkpoint plus tail and prints the
    /// milliseconds: the fresh process `startup` times (hidden).
    #[command(hide = true)]
    OpenOnce(replay::OnceArgs),
    /// Folds a whole log into every projection and prints the events per
    /// second: the fresh process `replay` times (hidden).
    #[command(hide = true)]
    FoldOnce(replay::OnceArgs),
}

/// Runs one part, writing its table to `out`.
///
/// # Errors
/// Storage failures while measuring, write failures.
pub fn run(part: BenchPart, out: &mut dyn Write) -> BenchResult {
    match part {
        BenchPart::Append(args) => append::run(&args, out),
        BenchPart::Activations(args) => activations::run(&args, out),
        BenchPart::Messages(args) => messages::run(&args, out),
        BenchPart::Memory(args) => memory::run(&args, out),
        BenchPart::Replay(args) => replay::replay(&args, out),
        BenchPart::List(args) => list::run(&args, out),
        BenchPart::Startup(args) => replay::startup(&args, out),
        BenchPart::Gateway(args) => gateway::run(&args, out),
        BenchPart::Console(args) => console::run(&args, out),
        BenchPart::Acp(args) => acp::run(&args, out),
        BenchPart::Delegation(args) => delegation::run(&args, out),
        BenchPart::OpenOnce(args) => replay::open_once(&args, out),
        BenchPart::FoldOnce(args) => replay::fold_once(&args, out),
    }
}
