//! `subagents-bench PART [ARGS]`: runs one part of the benchmark and prints
//! its table. A reader that closes the pipe early ends it quietly (exit 0);
//! any other failure is one `error:` line and exit 1.

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use clap::Parser;
use subagent_bench::{run, BenchPart};

/// mimalloc, as in `subagents`, so the engine and the baselines it is
/// measured against allocate as the shipped binary does (ARCHITECTURE.md,
/// "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Measure the engine against baselines doing the same work.
#[derive(Parser)]
#[command(name = "subagents-bench", version)]
struct Cli {
    #[command(subcommand)]
    part: BenchPart,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = run(cli.part, &mut out).and_then(|()| Ok(out.flush()?));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if reader_gone(&*err) => ExitCode::SUCCESS,
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `err` is stdout's reader having closed the pipe.
fn reader_gone(err: &(dyn std::error::Error + 'static)) -> bool {
    err.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
}
