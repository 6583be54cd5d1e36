//! `subagents`: the command line of the subagents runtime.
//!
//! Each subcommand lives in its own module; this file only parses arguments,
//! dispatches, and turns the outcome into an exit status. Every command
//! writes its output to one [`output::Stdout`]: a closed pipe ends quietly
//! with status 0, any other write error and every command failure print one
//! `error: ...` line on stderr with status 1.

mod completions;
mod demo;
mod error;
mod hosting;
mod inspect;
mod log_cmd;
mod output;
mod progress;
mod render;
mod salvage_cmd;
mod serve_cmd;
mod shipped;
mod signals;
mod target;
mod telemetry;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::output::Fate;

/// mimalloc rather than the system allocator: the runtime makes many small,
/// short-lived allocations (events, records, projections), and the startup
/// from a checkpoint builds hundreds of thousands of heap objects at once
/// (ARCHITECTURE.md, "Allocator"; BENCHMARKS.md, "The checkpoint's maps sized
/// once, and mimalloc").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The default data directory of `demo`.
pub const DEFAULT_DATA_DIR: &str = "./subagents-data";

/// Boxed error for command results; every failure ends as one readable line.
pub type CliResult = Result<(), Box<dyn std::error::Error>>;

/// `--version`: the build, and the storage formats it reads and writes.
fn version_text() -> &'static str {
    static TEXT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let oldest_schema = subagent_core::upcast::UPCASTERS
            .first()
            .map_or(subagent_core::CURRENT_SCHEMA_VERSION, |step| {
                step.from_version
            });
        format!(
            "{}\nlog directory format {} (RocksDB), record format {}\nevent schema {} written; {} to {} read (older ones upcast)\ncheckpoint format {} (another is discarded and the log refolded)",
            env!("CARGO_PKG_VERSION"),
            subagent_store::rocks::FORMAT_VERSION,
            subagent_core::record::RECORD_FORMAT,
            subagent_core::CURRENT_SCHEMA_VERSION,
            oldest_schema,
            subagent_core::CURRENT_SCHEMA_VERSION,
            subagent_projections::checkpoint::CHECKPOINT_VERSION,
        )
    });
    TEXT.as_str()
}

#[derive(Parser)]
#[command(
    name = "subagents",
    version = version_text(),
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
        /// Delegate into a PostgreSQL log instead of the --data directory:
        /// postgres://USER@HOST:PORT/DB?schema=NAME (created if missing).
        #[arg(long, value_name = "URL", value_parser = target::LogParser::postgres_only())]
        store: Option<target::LogTarget>,
        /// Keep the research child working this many extra milliseconds
        /// (for crash drills; at most 3,600,000).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(..=3_600_000))]
        hold_ms: u64,
        /// Run fact-check (the grandchild research delegates to) and digger
        /// on an ACP agent: "PROGRAM ARGS…" split at white space, run in
        /// the current directory.
        #[arg(long, value_name = "COMMAND", value_parser = acp_command)]
        acp: Option<subagent_acp::AcpCommand>,
        /// Seconds an ACP agent may send nothing during a turn before the
        /// turn is cancelled and settles `error` (`acp/idle-timeout`).
        #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        acp_idle: u64,
        /// Span export (off by default).
        #[command(flatten)]
        telemetry: telemetry::TelemetryArgs,
        /// How it holds its trees on a PostgreSQL store.
        #[command(flatten)]
        host: hosting::HostArgs,
    },
    /// Serve the runtime over HTTP: the spec's remote methods, roots,
    /// children, reads and a live event stream (see the README).
    Serve(serve_cmd::ServeArgs),
    /// Print the events of a log, one line each.
    Log(log_cmd::LogArgs),
    /// Replay debugging: tree, children, replay, diff, verify, export, import,
    /// salvage.
    #[command(flatten)]
    Inspect(inspect::Inspect),
    /// Print a shell completion script (bash, zsh or fish) on stdout.
    Completions {
        /// The shell.
        shell: completions::Shell,
    },
    /// Print the man page (roff) on stdout.
    Manpage,
}

/// The command-line definition, for completions and the man page.
fn definition() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = output::Stdout::stdout();
    let result = match cli.command {
        Command::Demo {
            data,
            store,
            hold_ms,
            acp,
            acp_idle,
            telemetry,
            host,
        } => demo::run(
            &data,
            store.as_ref(),
            &demo::Options {
                hold_ms,
                acp: acp.map(|command| {
                    let idle = std::time::Duration::from_secs(acp_idle);
                    let timeouts = subagent_acp::AcpTimeouts {
                        idle,
                        ..command.timeouts
                    };
                    command.timeouts(timeouts)
                }),
                telemetry,
                host,
            },
            &mut out,
        ),
        Command::Serve(args) => serve_cmd::run(&args, &mut out),
        Command::Log(args) => log_cmd::run(&args, &mut out),
        Command::Inspect(command) => inspect::run(command, &mut out),
        Command::Completions { shell } => completions::write(shell, definition(), &mut out),
        Command::Manpage => {
            let formats = version_text()
                .split_once('\n')
                .map_or("", |(_, formats)| formats);
            completions::manpage(definition(), formats, &mut out)
        }
    };
    // The output's fate decides first: a failed command write surfaces as
    // whatever error wrapped it, but the cause is stdout.
    match (out.finish(), result) {
        (Fate::ReaderGone, _) => ExitCode::SUCCESS,
        (Fate::Failed(_, cause), _) => fail(&error::CliError::Stdout(cause)),
        (Fate::Delivered, Ok(())) => ExitCode::SUCCESS,
        (Fate::Delivered, Err(err)) => fail(&*err),
    }
}

/// Parses `--acp`: a program and its arguments.
fn acp_command(line: &str) -> Result<subagent_acp::AcpCommand, subagent_acp::EmptyCommand> {
    subagent_acp::AcpCommand::parse(line)
}

/// Prints `error: <err>` on stderr (best effort: stderr may be closed too).
/// A command ended by a signal exits as a shell reports it (130, 143).
fn fail(err: &(dyn std::error::Error + 'static)) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "error: {err}");
    match err.downcast_ref::<error::CliError>() {
        Some(error::CliError::Stopped { signal }) => ExitCode::from(signal.exit_status()),
        _ => ExitCode::FAILURE,
    }
}
