//! `export` writes the log as JSON lines (one stored record envelope per
//! line, as `subagents log --json` prints them); `import` reads them back
//! into an empty log so that a second export is identical: same positions,
//! stream versions, event ids, timestamps and payloads.

use std::io::{BufRead, Write};

use subagent_core::{NewEvent, RecordedEvent, StreamId};
use subagent_store::record::decode_body;
use subagent_store::{AppendTicket, EventLog, EventLogExt, ExpectedVersion};

use crate::error::ReplayError;

/// Writes every record of `log` to `out`; returns how many.
///
/// # Errors
/// A read failure or a write failure.
pub fn export<L: EventLog + ?Sized>(log: &L, out: &mut impl Write) -> Result<u64, ReplayError> {
    let mut count = 0;
    for record in log.read_all(1) {
        serde_json::to_writer(&mut *out, &record?).map_err(std::io::Error::other)?;
        out.write_all(b"\n")?;
        count += 1;
    }
    out.flush()?;
    Ok(count)
}

/// Appends up to this many records before waiting for their tickets, so the
/// writer can group-commit them.
const IMPORT_WINDOW: usize = 4096;

/// Reads an export into `log`, which must be empty; returns how many records.
/// Consecutive records of one stream become one append. Each append names the
/// exact expected stream version, and its placement is checked against the
/// positions in the file.
///
/// # Errors
/// [`ReplayError::NotEmpty`]; [`ReplayError::BadImport`] for a line that is
/// not a record, or records whose positions are not 1, 2, 3, ... in order.
/// Records before a bad line may already be appended.
pub async fn import<L: EventLog + ?Sized>(
    log: &L,
    input: impl BufRead,
) -> Result<u64, ReplayError> {
    if log.head() != 0 {
        return Err(ReplayError::NotEmpty(log.head()));
    }
    let mut pending: Vec<(usize, u64, AppendTicket)> = Vec::new();
    let mut batch: Vec<RecordedEvent> = Vec::new();
    let mut batch_line = 0;
    let mut count = 0u64;
    for (index, line) in input.lines().enumerate() {
        let line_number = index + 1;
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let record = decode_body(line.as_bytes()).map_err(|err| ReplayError::BadImport {
            line: line_number,
            reason: err.to_string(),
        })?;
        if record.position != count + 1 {
            return Err(ReplayError::BadImport {
                line: line_number,
                reason: format!("expected position {}, found {}", count + 1, record.position),
            });
        }
        let continues_batch = batch
            .last()
            .is_some_and(|last: &RecordedEvent| last.stream == record.stream);
        let version_ok = match batch.last() {
            Some(last) if continues_batch => record.version == last.version + 1,
            _ => record.version >= 1,
        };
        if !version_ok {
            return Err(ReplayError::BadImport {
                line: line_number,
                reason: format!(
                    "stream version {} of {} is out of sequence",
                    record.version, record.stream
                ),
            });
        }
        count += 1;
        if batch
            .last()
            .is_some_and(|last: &RecordedEvent| last.stream != record.stream)
        {
            pending.push(submit(log, std::mem::take(&mut batch), batch_line));
        }
        if batch.is_empty() {
            batch_line = line_number;
        }
        batch.push(record);
        if pending.len() >= IMPORT_WINDOW {
            settle(std::mem::take(&mut pending)).await?;
        }
    }
    if !batch.is_empty() {
        pending.push(submit(log, batch, batch_line));
    }
    settle(pending).await?;
    Ok(count)
}

fn submit<L: EventLog + ?Sized>(
    log: &L,
    batch: Vec<RecordedEvent>,
    line: usize,
) -> (usize, u64, AppendTicket) {
    let stream: StreamId = batch[0].stream;
    let first_position = batch[0].position;
    let expected = ExpectedVersion::Exact(batch[0].version.saturating_sub(1));
    let events = batch
        .into_iter()
        .map(|record| NewEvent {
            event_id: record.event_id,
            correlation_id: record.correlation_id,
            causation_id: record.causation_id,
            event: record.event,
            recorded_at: Some(record.recorded_at),
        })
        .collect();
    (line, first_position, log.append(stream, expected, events))
}

async fn settle(pending: Vec<(usize, u64, AppendTicket)>) -> Result<(), ReplayError> {
    for (line, first_position, ticket) in pending {
        let outcome = ticket.await.map_err(|err| ReplayError::BadImport {
            line,
            reason: err.to_string(),
        })?;
        if outcome.first_position != first_position || outcome.deduplicated {
            return Err(ReplayError::BadImport {
                line,
                reason: format!(
                    "record landed at position {} instead of {first_position}",
                    outcome.first_position
                ),
            });
        }
    }
    Ok(())
}
