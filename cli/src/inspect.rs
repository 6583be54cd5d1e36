//! The replay commands: `tree`, `children`, `replay`, `diff`, `verify`,
//! `export`, `import`. Each opens the log, reads, prints (human-readable by
//! default, JSON with `--json`) and exits non-zero with a clear message on
//! bad input: an unknown session, a position past the head, a non-empty
//! import target.

use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::json;
use subagent_core::SessionId;
use subagent_projections::Projections;
use subagent_replay::{diff, export, import_directory, state_at, verify, ReplayError};
use subagent_store::{EventLog, RocksLog, RocksOptions};

use crate::{render, CliResult};

/// Which log, and at which position.
#[derive(Args)]
pub struct At {
    /// The log directory.
    dir: PathBuf,
    /// Replay up to this position (default: the head).
    #[arg(long)]
    at: Option<u64>,
    /// Machine-readable JSON output.
    #[arg(long)]
    json: bool,
}

/// The replay subcommands.
#[derive(Subcommand)]
pub enum Inspect {
    /// The descendant tree of a root (default: every host root).
    Tree {
        #[command(flatten)]
        at: At,
        /// The session whose subtree to draw.
        #[arg(long)]
        root: Option<String>,
    },
    /// The direct children of a parent, in catalog order.
    Children {
        #[command(flatten)]
        at: At,
        /// The parent session id.
        parent: String,
    },
    /// Every projection as it was at a position.
    Replay {
        #[command(flatten)]
        at: At,
    },
    /// What changed between two positions.
    Diff {
        /// The log directory.
        dir: PathBuf,
        /// The earlier position.
        #[arg(long)]
        from: u64,
        /// The later position (default: the head).
        #[arg(long)]
        to: Option<u64>,
        /// Machine-readable JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Check the history against the state machine, the indexes against the
    /// records, and the rebuilt state against the checkpointed one.
    Verify {
        /// The log directory.
        dir: PathBuf,
    },
    /// Write the log as JSON lines to stdout (or --out FILE).
    Export {
        /// The log directory.
        dir: PathBuf,
        /// Output file instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Read an export into a new log, all or nothing.
    Import {
        /// The new (absent or empty) log directory; left untouched on failure.
        dir: PathBuf,
        /// The JSON lines file.
        file: PathBuf,
    },
}

/// Every inspection command reads through a read-only handle: it never
/// changes the directory, works on a read-only mount and beside a live host.
fn open(dir: &Path) -> Result<RocksLog, Box<dyn std::error::Error>> {
    Ok(RocksLog::open_read_only(dir)?)
}

fn session(state: &Projections, text: &str) -> Result<SessionId, Box<dyn std::error::Error>> {
    let id = SessionId::parse(text)?;
    if state.sessions.contains_key(&id) || state.catalogs.contains_key(&id) {
        Ok(id)
    } else {
        Err(ReplayError::UnknownSession(id).into())
    }
}

fn print_json(value: &impl serde::Serialize) -> CliResult {
    let mut out = BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Runs one replay subcommand.
///
/// # Errors
/// Bad input and read failures, as readable messages.
pub fn run(command: Inspect) -> CliResult {
    match command {
        Inspect::Tree { at, root } => {
            let state = state_at(&open(&at.dir)?, at.at)?;
            let roots = match root {
                Some(text) => vec![session(&state, &text)?],
                None => state.roots.clone(),
            };
            if at.json {
                let trees: Vec<_> = roots
                    .iter()
                    .map(|r| json!({"root": r, "descendants": state.list_descendants(*r)}))
                    .collect();
                return print_json(&trees);
            }
            if roots.is_empty() {
                println!("(no sessions at position {})", state.position);
            }
            for root in roots {
                print!("{}", render::tree(&state, root));
            }
            Ok(())
        }
        Inspect::Children { at, parent } => {
            let state = state_at(&open(&at.dir)?, at.at)?;
            let parent = session(&state, &parent)?;
            if at.json {
                return print_json(&state.list_children(parent));
            }
            print!("{}", render::children(&state, parent));
            Ok(())
        }
        Inspect::Replay { at } => {
            let state = state_at(&open(&at.dir)?, at.at)?;
            if at.json {
                return print_json(&state);
            }
            print!("{}", render::summary(&state));
            Ok(())
        }
        Inspect::Diff {
            dir,
            from,
            to,
            json,
        } => {
            let log = open(&dir)?;
            let to_position = to.unwrap_or(log.head());
            if from > to_position {
                return Err(format!("--from {from} is after --to {to_position}").into());
            }
            let (before, after) = (
                state_at(&log, Some(from))?,
                state_at(&log, Some(to_position))?,
            );
            let changes = diff(&before, &after);
            if json {
                return print_json(&changes);
            }
            println!("changes from position {from} to {to_position}:");
            for change in &changes {
                println!("  {change}");
            }
            if changes.is_empty() {
                println!("  (none)");
            }
            Ok(())
        }
        Inspect::Verify { dir } => {
            let report = verify(&open(&dir)?)?;
            println!(
                "verified {} events (head {}); checkpoint: {}",
                report.events,
                report.head,
                report
                    .checkpoint_position
                    .map_or_else(|| "none".to_owned(), |p| format!("at {p}"))
            );
            if let Some(problem) = &report.checkpoint_problem {
                println!("checkpoint unusable: {problem}");
            }
            if let Some(violation) = &report.impossible_history {
                println!("{}: {violation}", violation.code());
            }
            for problem in &report.index_problems {
                println!("index: {problem}");
            }
            for line in &report.differences {
                println!("{line}");
            }
            if report.is_ok() {
                println!(
                    "OK: the history is admissible, the indexes agree with the records, and incremental and checkpointed projections equal the rebuilt ones"
                );
                Ok(())
            } else {
                Err("verification failed".into())
            }
        }
        Inspect::Export { dir, out } => {
            let log = open(&dir)?;
            let count = match out {
                Some(path) => export(&log, &mut BufWriter::new(std::fs::File::create(path)?))?,
                None => export(&log, &mut BufWriter::new(std::io::stdout().lock()))?,
            };
            eprintln!("exported {count} events");
            Ok(())
        }
        Inspect::Import { dir, file } => {
            let input = BufReader::new(std::fs::File::open(&file)?);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let count = runtime
                .block_on(import_directory(&dir, input))
                .map_err(|err| {
                    format!("{} ({}); {} is untouched", err, err.code(), dir.display())
                })?;
            println!("imported {count} events into {}", dir.display());
            Ok(())
        }
    }
}
