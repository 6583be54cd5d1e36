//! `subagents log <dir>`: one line per event (position, stream, version,
//! type, short payload), or JSON lines with `--json`. `--from` past the end
//! of the log (or stream) is an error, and so is a stream the log does not
//! hold; right after the end prints nothing.

use std::io::Write;

use clap::Args;
use subagent_core::StreamId;
use subagent_store::EventLogExt;

use crate::error::CliError;
use crate::CliResult;

/// Arguments of `subagents log`.
#[derive(Args)]
pub(crate) struct LogArgs {
    /// The log: a directory, or postgres://USER@HOST:PORT/DB?schema=NAME.
    #[arg(value_name = "LOG", value_parser = crate::target::LogParser::any())]
    log: crate::target::LogTarget,
    /// Print each event as one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Only this stream (`runtime` or `session-<uuid>`).
    #[arg(long)]
    stream: Option<String>,
    /// Start at this position (or stream version with --stream), from 1.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    from: u64,
}

const PAYLOAD_CHARS: usize = 96;

/// Prints the log to `out`.
///
/// # Errors
/// A missing directory, a malformed `--stream`, `--from` past the end, a
/// locked or corrupt log, a write failure.
pub(crate) fn run(args: &LogArgs, out: &mut dyn Write) -> CliResult {
    let stream: Option<StreamId> = args.stream.as_deref().map(str::parse).transpose()?;
    let log = crate::inspect::open(&args.log)?;
    let (what, last) = match stream {
        Some(stream) => match log.stream_version(&stream)? {
            0 => return Err(CliError::NoSuchStream(stream).into()),
            version => (stream.to_string(), version),
        },
        None => ("the log".to_owned(), log.head()),
    };
    if args.from > last.saturating_add(1) {
        return Err(CliError::FromPastEnd {
            from: args.from,
            what,
            last,
        }
        .into());
    }
    let records: Box<dyn Iterator<Item = _>> = match stream {
        Some(stream) => Box::new(log.read_stream(stream, args.from)),
        None => Box::new(log.read_all(args.from)),
    };
    for record in records {
        let record = record?;
        if args.json {
            serde_json::to_writer(&mut *out, &record)?;
            writeln!(out)?;
        } else {
            let payload = serde_json::to_value(&record.event)?;
            let data = payload
                .get("data")
                .map(ToString::to_string)
                .unwrap_or_default();
            writeln!(
                out,
                "{:>8}  {}  v{:<4} {:<20} {}",
                record.position,
                record.stream,
                record.version,
                record.event.type_name(),
                shorten(&data, PAYLOAD_CHARS)
            )?;
        }
    }
    Ok(())
}

/// At most `max` characters of `text`, with an ellipsis when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
