//! `subagents salvage SOURCE TARGET`: the longest trustworthy prefix of a
//! damaged log copied into a new log ([`subagent_replay::salvage`]), and a
//! report of exactly what was lost: the positions the new log lacks, why the
//! prefix ends where it does, and the records past it that still read (left
//! behind, and written out with `--dropped FILE`).

use std::io::{BufWriter, Write};
use std::path::Path;

use subagent_replay::{salvage, PrefixEnd, SalvageReport};

use crate::error::CliError;
use crate::CliResult;

/// How many records left behind the human report names one by one.
const NAMED: usize = 10;

/// Runs the salvage and prints its report.
///
/// # Errors
/// A target that is not empty, a source that holds no log or cannot be read
/// even leniently, a `--dropped` file that exists or cannot be created, and
/// write failures; the target is then untouched.
pub(crate) fn run(
    source: &Path,
    target: &Path,
    dropped: Option<&Path>,
    json: bool,
    out: &mut dyn Write,
) -> CliResult {
    let mut dropped_file = match dropped {
        Some(path) => Some(BufWriter::new(std::fs::File::create_new(path).map_err(
            |source| CliError::File {
                path: path.to_owned(),
                source,
            },
        )?)),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime
        .block_on(salvage(
            source,
            target,
            dropped_file.as_mut().map(|file| file as &mut dyn Write),
        ))
        .map_err(|err| {
            // The --dropped file was made by this run: a failed run leaves none.
            if let Some(path) = dropped {
                drop(dropped_file.take());
                let _ = std::fs::remove_file(path);
            }
            format!("{err} ({}); {} is untouched", err.code(), target.display())
        })?;
    if let Some(file) = dropped_file.as_mut() {
        file.flush().map_err(|source| CliError::File {
            path: dropped.unwrap_or(target).to_owned(),
            source,
        })?;
    }
    if json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    print(out, &report, target, dropped)
}

fn print(
    out: &mut dyn Write,
    report: &SalvageReport,
    target: &Path,
    dropped: Option<&Path>,
) -> CliResult {
    let kept = report.prefix.kept;
    writeln!(
        out,
        "salvaged {kept} events (positions 1..={kept}) into {}",
        target.display()
    )?;
    if report.lost == 0 {
        writeln!(
            out,
            "nothing lost: the log held {} events",
            report.last_known
        )?;
    } else {
        writeln!(
            out,
            "lost {} events: positions {}..={} (the log held {})",
            report.lost,
            kept + 1,
            report.last_known,
            report.last_known
        )?;
    }
    match &report.prefix.end {
        PrefixEnd::Whole if report.lost > 0 => {
            writeln!(
                out,
                "the prefix ends where the write-ahead log is damaged: nothing past it replays in order"
            )?;
        }
        PrefixEnd::Whole => {}
        PrefixEnd::Unreadable { position, reason } => {
            writeln!(
                out,
                "the prefix ends: position {position} does not read: {reason}"
            )?;
        }
        PrefixEnd::Misnumbered { position, reason } => {
            writeln!(
                out,
                "the prefix ends: position {position} is misnumbered: {reason}"
            )?;
        }
        PrefixEnd::Impossible { position, reason } => {
            writeln!(
                out,
                "the prefix ends: position {position} is impossible: {reason}"
            )?;
        }
        PrefixEnd::AttachmentUnreadable { position, reason } => {
            writeln!(
                out,
                "the prefix ends: position {position} names an attachment that is lost: {reason}"
            )?;
        }
    }
    if report.prefix.incomplete_decision > 0 {
        writeln!(
            out,
            "{} readable events after it were dropped: they begin a decision that does not complete",
            report.prefix.incomplete_decision
        )?;
    }
    if report.dropped_readable > 0 {
        let place = dropped.map_or_else(
            || "rerun with --dropped FILE to keep them".to_owned(),
            |path| format!("written to {}", path.display()),
        );
        writeln!(
            out,
            "{} events past the damage still read, left behind (a log cannot hold a gap); {place}:",
            report.dropped_readable
        )?;
        for record in report.dropped.iter().take(NAMED) {
            writeln!(
                out,
                "  {:>8}  {}  {}",
                record.position, record.stream, record.event_type
            )?;
        }
        if report.dropped_readable > NAMED as u64 {
            writeln!(
                out,
                "  ... and {} more",
                report.dropped_readable - NAMED as u64
            )?;
        }
    }
    if let Some(reason) = &report.beyond_unreadable {
        writeln!(
            out,
            "past the damage the log could not be read at all: {reason}"
        )?;
    }
    writeln!(
        out,
        "the new log passed import's checks; `subagents verify {}` checks it again",
        target.display()
    )?;
    Ok(())
}
