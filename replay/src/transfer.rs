//! `export` writes the log as JSON lines (one stored record envelope per
//! line, as `subagents log --json` prints them); `import` reads them back
//! into an empty log so that a second export is identical: same positions,
//! stream versions, event ids, timestamps, payloads and attachments.
//!
//! Attachments travel as their own lines, `{"attachment":"sha256:…",
//! "bytes":"<base64>"}`, each written once, just before the first record
//! that names it ([`subagent_core::attachment::stored_attachments`]).
//! Import checks that the bytes hash to the id, and stores them in the same
//! append as the record that names them; a record naming an attachment no
//! line before it carried, or an attachment line no record after it names,
//! is refused.
//!
//! Import refuses, before appending it, any line that is longer than
//! [`MAX_EVENT_BYTES`] (without reading it whole), is not a record, breaks
//! the numbering (positions 1, 2, 3, ...; each stream's versions 1, 2, 3,
//! ... in position order), or makes the history one the state machine could
//! not have produced ([`HistoryCheck`]). [`import_directory`] makes a whole
//! import atomic: it builds the log in a hidden sibling directory and renames
//! it into place only once complete and synced.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use subagent_core::attachment::stored_attachments;
use subagent_core::{
    Attachment, AttachmentId, EventId, NewEvent, RecordedEvent, StreamId, MAX_ATTACHMENT_BYTES,
    MAX_EVENT_BYTES,
};
use subagent_projections::HistoryCheck;
use subagent_store::record::decode_body;
use subagent_store::{
    AppendTicket, Durability, EventLog, EventLogExt, ExpectedVersion, RocksLog, RocksOptions,
    StoreError, StreamAppend,
};

use crate::error::ReplayError;
use crate::lines::BoundedLines;
use crate::progress::Progress;

/// One attachment of an export.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttachmentLine {
    attachment: AttachmentId,
    /// Base64 (standard alphabet, padded).
    bytes: String,
}

/// How every attachment line opens (and no record line does).
const ATTACHMENT_LINE_PREFIX: &[u8] = b"{\"attachment\":";

/// The longest attachment line: the largest attachment as base64, and the
/// rest of the line.
const MAX_ATTACHMENT_LINE_BYTES: usize = MAX_ATTACHMENT_BYTES.div_ceil(3) * 4 + 256;

/// Writes every record of `log` to `out`, each attachment once before the
/// first record that names it; returns how many records.
///
/// # Errors
/// A read failure or a write failure; [`StoreError::Damaged`] when a record
/// names an attachment the log does not hold.
pub fn export<L: EventLog + ?Sized>(log: &L, out: &mut impl Write) -> Result<u64, ReplayError> {
    export_with_progress(log, out, &())
}

/// [`export`], telling `progress` how many records it has written of the
/// head's.
///
/// # Errors
/// As [`export`].
pub fn export_with_progress<L: EventLog + ?Sized, P: Progress + ?Sized>(
    log: &L,
    out: &mut impl Write,
    progress: &P,
) -> Result<u64, ReplayError> {
    progress.set_total(log.head());
    let mut count = 0;
    let mut lines = ExportLines::default();
    for record in log.read_all(1) {
        lines.write(log, &record?, out)?;
        count += 1;
        progress.reached(count);
    }
    out.flush()?;
    Ok(count)
}

/// The lines of an export, written a record at a time: each attachment once,
/// as its own line before the first record that names it, then the record.
/// The one writer of the export form ([`export`], and `salvage`'s copy).
#[derive(Default)]
pub(crate) struct ExportLines {
    /// The attachments already written.
    written: HashSet<AttachmentId>,
}

impl ExportLines {
    /// Writes `record`'s lines, reading its attachments from `log`.
    ///
    /// # Errors
    /// A read or write failure; [`StoreError::Damaged`] when `record` names
    /// an attachment `log` does not hold.
    pub(crate) fn write<L: EventLog + ?Sized>(
        &mut self,
        log: &L,
        record: &RecordedEvent,
        out: &mut impl Write,
    ) -> Result<(), ReplayError> {
        for id in stored_attachments(&record.event) {
            if !self.written.insert(id) {
                continue;
            }
            let bytes = log.attachment(&id)?.ok_or_else(|| StoreError::Damaged {
                path: "the log".into(),
                reason: format!(
                    "the record at position {} names attachment {id}, which the blob store does not hold",
                    record.position
                ),
            })?;
            let line = AttachmentLine {
                attachment: id,
                bytes: STANDARD.encode(bytes),
            };
            serde_json::to_writer(&mut *out, &line).map_err(std::io::Error::other)?;
            out.write_all(b"\n")?;
        }
        serde_json::to_writer(&mut *out, record).map_err(std::io::Error::other)?;
        out.write_all(b"\n")?;
        Ok(())
    }
}

/// The attachments an import has read and not yet stored, and those it
/// stored.
#[derive(Default)]
struct Carried {
    /// Read from an attachment line, waiting for the record that names them.
    waiting: HashMap<AttachmentId, (usize, Attachment)>,
    /// Already given to an append.
    stored: HashSet<AttachmentId>,
}

impl Carried {
    /// Admits an attachment line: its bytes must hash to its id.
    fn admit(&mut self, line: usize, text: &[u8]) -> Result<(), ReplayError> {
        let bad = |reason: String| ReplayError::BadImport { line, reason };
        let parsed: AttachmentLine = serde_json::from_slice(text)
            .map_err(|err| bad(format!("not an attachment line: {err}")))?;
        let bytes = STANDARD
            .decode(parsed.bytes.as_bytes())
            .map_err(|err| bad(format!("the attachment's bytes are not base64: {err}")))?;
        let attachment = Attachment::new(bytes);
        if attachment.id() != parsed.attachment {
            return Err(bad(format!(
                "the bytes of attachment {} hash to {}",
                parsed.attachment,
                attachment.id()
            )));
        }
        if self.stored.contains(&attachment.id()) || self.waiting.contains_key(&attachment.id()) {
            return Err(bad(format!(
                "attachment {} is carried twice",
                attachment.id()
            )));
        }
        self.waiting.insert(attachment.id(), (line, attachment));
        Ok(())
    }

    /// The attachments `record` names that are waiting, to store with it.
    fn take_for(
        &mut self,
        line: usize,
        record: &RecordedEvent,
    ) -> Result<Vec<Attachment>, ReplayError> {
        let mut taken = Vec::new();
        for id in stored_attachments(&record.event) {
            if let Some((_, attachment)) = self.waiting.remove(&id) {
                self.stored.insert(id);
                taken.push(attachment);
            } else if !self.stored.contains(&id) {
                return Err(ReplayError::BadImport {
                    line,
                    reason: format!(
                        "the record names attachment {id}, which no line before it carries"
                    ),
                });
            }
        }
        Ok(taken)
    }

    /// Refuses attachment lines no record named.
    fn finish(self) -> Result<(), ReplayError> {
        match self.waiting.into_values().min_by_key(|(line, _)| *line) {
            None => Ok(()),
            Some((line, attachment)) => Err(ReplayError::BadImport {
                line,
                reason: format!(
                    "attachment {} is named by no record after it",
                    attachment.id()
                ),
            }),
        }
    }
}

/// Appends up to this many records before waiting for their tickets, so the
/// writer can group-commit them.
const IMPORT_WINDOW: usize = 4096;

/// Reads an export into `log`, which must be empty; returns how many records.
/// Every line is checked (see the module doc) before it is appended.
/// Consecutive records of one stream become one append. Each append names the
/// exact expected stream version, and its placement is checked against the
/// positions in the file.
///
/// This writes into `log` as it reads, so records before a bad line may
/// already be appended: use [`import_directory`] for an all-or-nothing import.
///
/// # Errors
/// [`ReplayError::NotEmpty`]; [`ReplayError::LineTooLong`];
/// [`ReplayError::BadImport`] for a line that is not a record or breaks the
/// numbering; [`ReplayError::ImpossibleHistory`] for a history the state
/// machine could not have produced (including one that ends inside a
/// decision).
pub async fn import<L: EventLog + ?Sized>(
    log: &L,
    input: impl BufRead,
) -> Result<u64, ReplayError> {
    if log.head() != 0 {
        return Err(ReplayError::NotEmpty(log.head()));
    }
    let mut lines = BoundedLines::new(input, MAX_EVENT_BYTES)
        .allow_longer(ATTACHMENT_LINE_PREFIX, MAX_ATTACHMENT_LINE_BYTES);
    let mut numbering = Numbering::default();
    let mut history = HistoryCheck::new();
    let mut carried = Carried::default();
    let mut pending: Vec<Submitted> = Vec::new();
    let mut batch: Vec<RecordedEvent> = Vec::new();
    let mut batch_attachments: Vec<Attachment> = Vec::new();
    let mut batch_lines: BatchLines = Vec::new();
    let mut last_line = 0;
    while let Some((line, text)) = lines.next_line()? {
        last_line = line;
        if text.trim_ascii().is_empty() {
            continue;
        }
        if text.starts_with(ATTACHMENT_LINE_PREFIX) {
            carried.admit(line, text)?;
            continue;
        }
        if text.len() > MAX_EVENT_BYTES {
            return Err(ReplayError::LineTooLong {
                line,
                limit: MAX_EVENT_BYTES,
            });
        }
        let record = decode_body(text).map_err(|err| ReplayError::BadImport {
            line,
            reason: match err {
                // A line has no position until it decodes: its line number
                // says where it is, not the `0` the decoder fills in.
                StoreError::Corrupt { reason, .. } => format!("not a record: {reason}"),
                other => other.to_string(),
            },
        })?;
        numbering
            .admit(&record)
            .map_err(|reason| ReplayError::BadImport { line, reason })?;
        history
            .check(&record)
            .map_err(|violation| ReplayError::ImpossibleHistory { line, violation })?;
        let attachments = carried.take_for(line, &record)?;
        if batch
            .last()
            .is_some_and(|last| last.stream != record.stream)
        {
            pending.push(submit(
                log,
                std::mem::take(&mut batch),
                std::mem::take(&mut batch_attachments),
                std::mem::take(&mut batch_lines),
            ));
        }
        if batch.is_empty() {
            batch_lines.clear();
        }
        batch_lines.push((record.event_id, line));
        batch.push(record);
        batch_attachments.extend(attachments);
        if pending.len() >= IMPORT_WINDOW {
            settle(std::mem::take(&mut pending)).await?;
        }
    }
    history
        .finish()
        .map_err(|violation| ReplayError::ImpossibleHistory {
            line: last_line,
            violation,
        })?;
    carried.finish()?;
    if !batch.is_empty() {
        pending.push(submit(log, batch, batch_attachments, batch_lines));
    }
    settle(pending).await?;
    Ok(numbering.position)
}

/// The numbering an import must follow: positions 1, 2, 3, ... and, per
/// stream, versions 1, 2, 3, ...
#[derive(Default)]
pub(crate) struct Numbering {
    /// The last position admitted.
    pub(crate) position: u64,
    /// The last version admitted per stream.
    versions: HashMap<StreamId, u64>,
}

impl Numbering {
    pub(crate) fn admit(&mut self, record: &RecordedEvent) -> Result<(), String> {
        let position = self
            .position
            .checked_add(1)
            .ok_or("the position passes u64::MAX")?;
        if record.position != position {
            return Err(format!(
                "expected position {position}, found {}",
                record.position
            ));
        }
        let last = self.versions.get(&record.stream).copied().unwrap_or(0);
        let version = last
            .checked_add(1)
            .ok_or_else(|| format!("the version of {} passes u64::MAX", record.stream))?;
        if record.version != version {
            return Err(format!(
                "stream version {} of {} is out of sequence (expected {version})",
                record.version, record.stream
            ));
        }
        self.position = position;
        self.versions.insert(record.stream, version);
        Ok(())
    }
}

/// One batch submitted: the line and event id of each of its records, its
/// first position, and the append's ticket.
type Submitted = (BatchLines, u64, AppendTicket);

/// The event id and input line of each record of a batch, in order.
type BatchLines = Vec<(EventId, usize)>;

fn submit<L: EventLog + ?Sized>(
    log: &L,
    batch: Vec<RecordedEvent>,
    attachments: Vec<Attachment>,
    lines: BatchLines,
) -> Submitted {
    let stream: StreamId = batch[0].stream;
    let first_position = batch[0].position;
    // `Numbering` admitted the version, so it is at least 1.
    let expected = ExpectedVersion::Exact(batch[0].version.saturating_sub(1));
    let events = batch
        .into_iter()
        .map(|record| NewEvent {
            event_id: record.event_id,
            correlation_id: record.correlation_id,
            causation_id: record.causation_id,
            trace: record.trace,
            event: record.event,
            recorded_at: Some(record.recorded_at),
        })
        .collect();
    let parts = vec![StreamAppend {
        stream,
        expected,
        events,
    }];
    (
        lines,
        first_position,
        AppendTicket::from(log.append_with_attachments(parts, attachments)),
    )
}

/// The input line an append's refusal is about: the last record of the
/// batch with the event id it names (the reuse, when the batch repeats an
/// id), else the batch's first line.
fn line_of(lines: &BatchLines, err: &StoreError) -> usize {
    let named = match err {
        StoreError::DuplicateEventId { event_id, .. } => lines
            .iter()
            .rev()
            .find(|(id, _)| id == event_id)
            .map(|&(_, line)| line),
        _ => None,
    };
    named.unwrap_or_else(|| first_line(lines))
}

/// The input line of a batch's first record.
fn first_line(lines: &BatchLines) -> usize {
    lines.first().map_or(0, |&(_, line)| line)
}

async fn settle(pending: Vec<Submitted>) -> Result<(), ReplayError> {
    for (lines, first_position, ticket) in pending {
        let outcome = ticket.await.map_err(|err| ReplayError::BadImport {
            line: line_of(&lines, &err),
            reason: err.to_string(),
        })?;
        let line = first_line(&lines);
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

/// Imports an export into a new RocksDB log at `dir`, all or nothing: `dir`
/// must not exist or be an empty directory. The log is built in a hidden
/// sibling directory (`.<name>.importing-<random>`), synced, and renamed to
/// `dir` only once the whole import succeeded. On any failure the sibling is
/// removed and `dir` is untouched; a killed import leaves only the sibling
/// (safe to delete), never a partial `dir`. Returns how many records.
///
/// # Errors
/// [`ReplayError::DirectoryNotEmpty`], everything [`import`] refuses, and
/// IO failures.
pub async fn import_directory(dir: &Path, input: impl BufRead) -> Result<u64, ReplayError> {
    require_empty(dir)?;
    let (parent, name) = split(dir)?;
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{name}.importing-"))
        .tempdir_in(&parent)?;
    // Buffered appends: durability comes from syncing every file below
    // before the rename, not from one fsync per group commit.
    let log = RocksLog::open(
        staging.path(),
        RocksOptions {
            durability: Durability::Buffered,
        },
    )?;
    let count = import(&log, input).await?;
    drop(log);
    sync_tree(staging.path())?;
    let staged = staging.keep();
    if let Err(err) = std::fs::rename(&staged, dir) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(err.into());
    }
    sync_directory(&parent)?;
    Ok(count)
}

/// Checks that `dir` is absent or an empty directory.
///
/// # Errors
/// [`ReplayError::DirectoryNotEmpty`], or the OS error reading it.
pub(crate) fn require_empty(dir: &Path) -> Result<(), ReplayError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ReplayError::DirectoryNotEmpty(dir.to_path_buf()));
            }
            Ok(())
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// The parent directory and the file name of `dir`.
fn split(dir: &Path) -> Result<(PathBuf, String), ReplayError> {
    let name = dir
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} does not name a directory", dir.display()),
            )
        })?;
    let parent = match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name.to_owned()))
}

/// Syncs every file below `dir`, then `dir` itself.
fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        } else {
            std::fs::File::open(entry.path())?.sync_all()?;
        }
    }
    sync_directory(dir)
}

fn sync_directory(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
