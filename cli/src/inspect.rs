//! The replay commands: `tree`, `children`, `replay`, `diff`, `verify`,
//! `export`, `import`, `salvage`. Each opens the log, reads, prints (human-readable by
//! default, JSON with `--json`) and exits non-zero with a clear message on
//! bad input: an unknown or malformed session, a position past the head,
//! `--from` after `--to`, a file that cannot be opened or created, a
//! non-empty import target. Output goes to the one handled stdout.
//! `replay`, `verify`, `export` and `import` show a progress bar on stderr
//! while they work, when it is a terminal ([`crate::progress`]).

use std::io::{BufReader, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::json;
use subagent_core::SessionId;
use subagent_pg::{PgLog, PgOptions};
use subagent_projections::Projections;
use subagent_replay::{
    diff, export_with_progress, import, import_directory, state_at, state_at_with_progress,
    verify_with_progress, ReplayError,
};
use subagent_store::EventLog;

use crate::error::CliError;
use crate::progress::Bar;
use crate::target::{self, LogTarget};
use crate::{render, CliResult};

/// Which log, and at which position.
#[derive(Args)]
pub(crate) struct At {
    /// The log: a directory, or postgres://USER@HOST:PORT/DB?schema=NAME.
    #[arg(value_name = "LOG", value_parser = target::LogParser::any())]
    log: LogTarget,
    /// Replay up to this position (default: the head).
    #[arg(long)]
    at: Option<u64>,
    /// Machine-readable JSON output.
    #[arg(long)]
    json: bool,
}

/// The replay subcommands.
#[derive(Subcommand)]
pub(crate) enum Inspect {
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
        /// The log: a directory, or postgres://USER@HOST:PORT/DB?schema=NAME.
        #[arg(value_name = "LOG", value_parser = target::LogParser::any())]
        log: LogTarget,
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
        /// The log: a directory, or postgres://USER@HOST:PORT/DB?schema=NAME.
        #[arg(value_name = "LOG", value_parser = target::LogParser::any())]
        log: LogTarget,
    },
    /// Write the log as JSON lines to stdout (or --out FILE).
    Export {
        /// The log: a directory, or postgres://USER@HOST:PORT/DB?schema=NAME.
        #[arg(value_name = "LOG", value_parser = target::LogParser::any())]
        log: LogTarget,
        /// Output file instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Read an export into a new log, all or nothing.
    Import {
        /// The new log: an absent or empty directory, or a PostgreSQL URL
        /// whose schema does not exist yet; left untouched on failure.
        #[arg(value_name = "LOG", value_parser = target::LogParser::any())]
        log: LogTarget,
        /// The JSON lines file.
        file: PathBuf,
    },
    /// Copy the longest trustworthy prefix of a damaged log into a new log,
    /// and say exactly what was lost. The damaged log is never written to.
    Salvage {
        /// The damaged log directory.
        source: PathBuf,
        /// The new (absent or empty) log directory; left untouched on failure.
        target: PathBuf,
        /// Write every record left behind that still reads to this new file,
        /// as export lines.
        #[arg(long)]
        dropped: Option<PathBuf>,
        /// Machine-readable JSON report.
        #[arg(long)]
        json: bool,
    },
}

/// Opens an existing log for reading (never creates one): every
/// inspection command leaves the log as it was, works on a read-only mount
/// and beside a live host.
///
/// # Errors
/// The store's open failure (`store/not-a-log`, `store/damaged`, ...).
pub(crate) fn open(log: &LogTarget) -> Result<Box<dyn EventLog>, Box<dyn std::error::Error>> {
    log.open_existing()
}

/// Imports into a new PostgreSQL schema, all or nothing: the lines go into
/// a staging schema of their own, which is renamed into place in one
/// statement once complete (refused if the target exists), or dropped.
///
/// # Errors
/// A bad line, a store failure, or a target schema that already exists.
fn import_postgres(
    runtime: &tokio::runtime::Runtime,
    options: &PgOptions,
    input: impl std::io::BufRead,
) -> Result<u64, Box<dyn std::error::Error>> {
    let staging = format!(
        "import_{}_{}",
        std::process::id(),
        SessionId::new().as_uuid().simple()
    );
    let staging: String = staging.chars().take(subagent_pg::MAX_SCHEMA_NAME).collect();
    let staged = options.clone().with_schema(staging.clone());
    let imported = PgLog::connect(staged.clone())
        .map_err(Box::<dyn std::error::Error>::from)
        .and_then(|log| {
            let count = runtime
                .block_on(import(&log, input))
                .map_err(|err| format!("{err} ({})", err.code()))?;
            drop(log);
            subagent_pg::rename_schema(options, &staging)?;
            Ok(count)
        });
    if imported.is_err() {
        // Best effort: the staging schema is ours alone.
        let _ = subagent_pg::drop_schema(&staged, &staging);
    }
    imported
}

fn session(state: &Projections, text: &str) -> Result<SessionId, Box<dyn std::error::Error>> {
    let id = SessionId::parse(text)?;
    if state.sessions.contains_key(&id) || state.catalogs.contains_key(&id) {
        Ok(id)
    } else {
        Err(ReplayError::UnknownSession(id).into())
    }
}

/// A replay error whose IO failure is `path`'s (the one file the operation
/// reads or writes) names that file.
fn naming(path: &Path, err: ReplayError) -> Box<dyn std::error::Error> {
    match err {
        ReplayError::Io(source) => CliError::File {
            path: path.to_owned(),
            source,
        }
        .into(),
        other => other.into(),
    }
}

fn print_json(out: &mut dyn Write, value: &impl serde::Serialize) -> CliResult {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Runs one replay subcommand, writing to `out`.
///
/// # Errors
/// Bad input, read and write failures, as readable messages.
pub(crate) fn run(command: Inspect, out: &mut dyn Write) -> CliResult {
    match command {
        Inspect::Tree { at, root } => {
            let state = state_at(&*open(&at.log)?, at.at)?;
            let roots = match root {
                Some(text) => vec![session(&state, &text)?],
                None => state.roots.clone(),
            };
            if at.json {
                let trees: Vec<_> = roots
                    .iter()
                    .map(|r| json!({"root": r, "descendants": state.list_descendants(*r)}))
                    .collect();
                return print_json(out, &trees);
            }
            if roots.is_empty() {
                writeln!(out, "(no sessions at position {})", state.position)?;
            }
            for root in roots {
                render::tree(out, &state, root)?;
            }
            Ok(())
        }
        Inspect::Children { at, parent } => {
            let state = state_at(&*open(&at.log)?, at.at)?;
            let parent = session(&state, &parent)?;
            if at.json {
                return print_json(out, &state.list_children(parent));
            }
            render::children(out, &state, parent)?;
            Ok(())
        }
        Inspect::Replay { at } => {
            let bar = Bar::records("replay");
            let state = state_at_with_progress(&*open(&at.log)?, at.at, &bar)?;
            bar.finish();
            if at.json {
                return print_json(out, &state);
            }
            render::summary(out, &state)?;
            Ok(())
        }
        Inspect::Diff {
            log,
            from,
            to,
            json,
        } => {
            let log = open(&log)?;
            let (to_name, to_position) = match to {
                Some(to) => ("--to", to),
                None => ("the head", log.head()),
            };
            // A position past the head is reported as such, before the order.
            let after = state_at(&*log, Some(to_position))?;
            let before = state_at(&*log, Some(from))?;
            if from > to_position {
                return Err(CliError::FromAfterTo {
                    from,
                    to_name,
                    to: to_position,
                }
                .into());
            }
            let changes = diff(&before, &after);
            if json {
                return print_json(out, &changes);
            }
            writeln!(out, "changes from position {from} to {to_position}:")?;
            for change in &changes {
                writeln!(out, "  {change}")?;
            }
            if changes.is_empty() {
                writeln!(out, "  (none)")?;
            }
            Ok(())
        }
        Inspect::Verify { log } => {
            let bar = Bar::records("verify");
            let report = verify_with_progress(&*open(&log)?, &bar)?;
            bar.finish();
            let checkpoint = match (report.checkpoint_position, report.checkpoint_other_version) {
                (Some(position), _) => format!("at {position}"),
                (None, Some(version)) => format!("of format {version}, not read"),
                (None, None) => "none".to_owned(),
            };
            writeln!(
                out,
                "verified {} events (head {}); checkpoint: {checkpoint}",
                report.events, report.head,
            )?;
            if let Some(problem) = &report.checkpoint_problem {
                writeln!(out, "checkpoint unusable: {problem}")?;
            }
            for note in report.notes() {
                writeln!(out, "note: {note}")?;
            }
            if let Some(violation) = &report.impossible_history {
                writeln!(out, "{}: {violation}", violation.code())?;
            }
            for problem in &report.index_problems {
                writeln!(out, "index: {problem}")?;
            }
            for problem in &report.attachment_problems {
                writeln!(out, "attachment: {problem}")?;
            }
            for line in &report.differences {
                writeln!(out, "{line}")?;
            }
            if report.is_ok() {
                writeln!(
                    out,
                    "OK: the history is admissible, the indexes agree with the records, every attachment a record names is stored intact, and incremental and checkpointed projections equal the rebuilt ones"
                )?;
                Ok(())
            } else {
                Err(CliError::VerificationFailed.into())
            }
        }
        Inspect::Export { log, out: target } => {
            let log = open(&log)?;
            // Records written to a terminal would be broken into by a bar
            // on the same screen.
            let bar = Bar::records("export")
                .hidden_if(target.is_none() && std::io::stdout().is_terminal());
            let count = match target {
                Some(path) => {
                    let file = match std::fs::File::create(&path) {
                        Ok(file) => file,
                        Err(source) => return Err(CliError::File { path, source }.into()),
                    };
                    export_with_progress(&*log, &mut BufWriter::new(file), &bar)
                        .map_err(|err| naming(&path, err))?
                }
                None => export_with_progress(&*log, &mut &mut *out, &bar)?,
            };
            bar.finish();
            let _ = writeln!(std::io::stderr(), "exported {count} events");
            Ok(())
        }
        Inspect::Import { log, file } => {
            let input = std::fs::File::open(&file).map_err(|source| CliError::File {
                path: file.clone(),
                source,
            })?;
            // A regular file's length is the bar's total; a pipe or a device
            // has none (a spinner then).
            let length = input
                .metadata()
                .ok()
                .filter(std::fs::Metadata::is_file)
                .map(|metadata| metadata.len());
            let bar = Bar::bytes("import", length);
            let input = bar.wrap_read(BufReader::new(input));
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let count = match &log {
                LogTarget::Dir(dir) => {
                    runtime
                        .block_on(import_directory(dir, input))
                        .map_err(|err| {
                            format!("{} ({}); {} is untouched", err, err.code(), dir.display())
                        })?
                }
                LogTarget::Postgres(options, _) => import_postgres(&runtime, options, input)
                    .map_err(|err| format!("{err}; {log} is untouched"))?,
            };
            bar.finish();
            writeln!(out, "imported {count} events into {log}")?;
            Ok(())
        }
        Inspect::Salvage {
            source,
            target,
            dropped,
            json,
        } => crate::salvage_cmd::run(&source, &target, dropped.as_deref(), json, out),
    }
}
