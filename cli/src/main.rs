//! `subagents`: the command line of the subagents runtime.
//!
//! Each subcommand lives in its own module; this file only parses arguments
//! and dispatches. Errors print as `error: ...` with exit status 1.

mod bench;
mod demo;
mod inspect;
mod log_cmd;
mod render;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The default data directory of `demo`.
pub const DEFAULT_DATA_DIR: &str = "./subagents-data";

/// Boxed error for command results; every failure ends as one readable line.
pub type CliResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(
    name = "subagents",
    version,
    about = "Durable, replayable subagent delegation on an event log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Delegate through the runtime into a log and show the result.
    Demo {
        /// The log directory (created if missing).
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        data: PathBuf,
        /// Keep the research child working this many extra milliseconds
        /// (for crash drills).
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
    },
    /// Print the events of a log, one line each.
    Log(log_cmd::LogArgs),
    /// Replay debugging: tree, children, replay, diff, verify, export, import.
    #[command(flatten)]
    Inspect(inspect::Inspect),
    /// Measure the engine against baselines doing the same work.
    Bench {
        #[command(subcommand)]
        part: bench::BenchPart,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { data, hold_ms } => demo::run(&data, hold_ms),
        Command::Log(args) => log_cmd::run(&args),
        Command::Inspect(command) => inspect::run(command),
        Command::Bench { part } => bench::run(part),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
