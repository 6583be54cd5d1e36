//! `subagents log <dir>`: one line per event (position, stream, version,
//! type, short payload), or JSON lines with `--json`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;
use subagent_core::StreamId;
use subagent_store::{EventLogExt, RocksLog};

use crate::CliResult;

/// Arguments of `subagents log`.
#[derive(Args)]
pub struct LogArgs {
    /// The log directory.
    dir: PathBuf,
    /// Print each event as one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Only this stream (`runtime` or `session-<uuid>`).
    #[arg(long)]
    stream: Option<String>,
    /// Start at this position (or stream version with --stream).
    #[arg(long, default_value_t = 1)]
    from: u64,
}

const PAYLOAD_CHARS: usize = 96;

/// Prints the log.
///
/// # Errors
/// A missing directory, a malformed `--stream`, a locked or corrupt log.
pub fn run(args: &LogArgs) -> CliResult {
    if !args.dir.join("CURRENT").exists() {
        return Err(format!("{} is not a subagents log", args.dir.display()).into());
    }
    let stream: Option<StreamId> = args.stream.as_deref().map(str::parse).transpose()?;
    let log = RocksLog::open_read_only(&args.dir)?;
    let records: Box<dyn Iterator<Item = _>> = match stream {
        Some(stream) => Box::new(log.read_stream(stream, args.from)),
        None => Box::new(log.read_all(args.from)),
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    for record in records {
        let record = record?;
        if args.json {
            serde_json::to_writer(&mut out, &record)?;
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
    out.flush()?;
    Ok(())
}

/// At most `max` characters of `text`, with an ellipsis when cut.
pub fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
