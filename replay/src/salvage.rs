//! [`salvage`]: the longest trustworthy prefix of a damaged log, copied into
//! a new directory, with an exact account of what was left behind.
//!
//! A damaged log refuses every ordinary open (`store/damaged`), because
//! opening past damage could silently drop acknowledged events. Salvage is
//! the deliberate way past it. It never writes to the source:
//! 1. it opens the source read-only, replaying the write-ahead log up to its
//!    first damaged record ([`SalvageRecovery::UpToDamage`]);
//! 2. it reads records from position 1 and keeps the longest prefix that is
//!    readable, gap-free and numbered in order, is a history `decide` could
//!    have produced ([`HistoryCheck`]), whose attachments all read intact
//!    from the blob store, and ends on a complete decision (never half of an
//!    atomic append);
//! 3. it copies that prefix, with its attachments, into the new directory
//!    through [`import_directory`], all or nothing, so the copy passes every
//!    check an import makes;
//! 4. it reopens the source skipping damaged write-ahead records
//!    ([`SalvageRecovery::PastDamage`]) to see what the log held beyond the
//!    prefix: the last position it knew of, and every record past the prefix
//!    that still reads. Those are listed (and, if asked, written out as JSON
//!    lines), not copied: a log cannot hold a hole, and a record after lost
//!    ones may depend on them.

use std::collections::VecDeque;
use std::io::{BufReader, Read, Write};
use std::path::Path;

use serde::Serialize;
use subagent_core::attachment::stored_attachments;
use subagent_core::{RecordedEvent, StreamId};
use subagent_projections::HistoryCheck;
use subagent_store::rocks::SalvageRecovery;
use subagent_store::{EventLog, EventLogExt, RocksLog, StoreError};

use crate::error::ReplayError;
use crate::transfer::{import_directory, ExportLines, Numbering};

/// At most this many records left behind are listed in a report; the rest
/// are counted (and all are written out when a file is given).
pub const DROPPED_LISTED: usize = 1000;

/// Why the kept prefix ends where it does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum PrefixEnd {
    /// The whole readable log was kept: nothing after it was readable.
    Whole,
    /// The record at `position` does not read (damage, or a gap).
    Unreadable {
        /// The first position that does not read.
        position: u64,
        /// The store's error.
        reason: String,
    },
    /// The record at `position` breaks the numbering.
    Misnumbered {
        /// Its position.
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// The record at `position` is not something `decide` could have produced.
    Impossible {
        /// Its position.
        position: u64,
        /// The broken rule.
        reason: String,
    },
    /// The record at `position` names an attachment the blob store does not
    /// hold, or whose bytes no longer hash to its id.
    AttachmentUnreadable {
        /// Its position.
        position: u64,
        /// Which attachment, and what is wrong with it.
        reason: String,
    },
}

/// The longest trustworthy prefix of a sequence of records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Prefix {
    /// Positions `1..=kept` are kept.
    pub kept: u64,
    /// Why it ends there.
    pub end: PrefixEnd,
    /// How many records after `kept` were read and checked but dropped
    /// because they complete no decision before the end.
    pub incomplete_decision: u64,
}

/// The longest prefix of `records` (read from position 1) that reads, is
/// numbered 1, 2, 3, ..., is admissible to `decide`, and ends on a complete
/// decision. Reading stops at the first record that fails.
#[must_use]
pub fn longest_prefix(
    records: impl IntoIterator<Item = Result<RecordedEvent, StoreError>>,
) -> Prefix {
    prefix_where(records, |_| Ok(()))
}

/// [`longest_prefix`], also ending before the first record whose
/// attachments `attachments_intact` refuses (the reason it gives).
fn prefix_where(
    records: impl IntoIterator<Item = Result<RecordedEvent, StoreError>>,
    mut attachments_intact: impl FnMut(&RecordedEvent) -> Result<(), String>,
) -> Prefix {
    let mut numbering = Numbering::default();
    let mut history = HistoryCheck::new();
    // The last position at which the history may end.
    let mut boundary = 0;
    let mut end = PrefixEnd::Whole;
    for item in records {
        let position = numbering.position.saturating_add(1);
        let record = match item {
            Ok(record) => record,
            Err(err) => {
                end = PrefixEnd::Unreadable {
                    position,
                    reason: err.to_string(),
                };
                break;
            }
        };
        if let Err(reason) = numbering.admit(&record) {
            end = PrefixEnd::Misnumbered { position, reason };
            break;
        }
        if let Err(violation) = history.check(&record) {
            end = PrefixEnd::Impossible {
                position,
                reason: violation.to_string(),
            };
            break;
        }
        if let Err(reason) = attachments_intact(&record) {
            end = PrefixEnd::AttachmentUnreadable { position, reason };
            break;
        }
        if history.finish().is_ok() {
            boundary = record.position;
        }
    }
    Prefix {
        kept: boundary,
        end,
        incomplete_decision: numbering.position - boundary,
    }
}

/// A record that was in the damaged log past the kept prefix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DroppedRecord {
    /// Its position.
    pub position: u64,
    /// Its stream.
    pub stream: StreamId,
    /// Its event type.
    pub event_type: &'static str,
}

/// What [`salvage`] kept and what it left behind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SalvageReport {
    /// The kept prefix (`1..=prefix.kept`, now the new log).
    pub prefix: Prefix,
    /// The highest position the damaged log shows it held: its last head
    /// marker or its last stored record, whichever is later, read both
    /// stopping at and skipping write-ahead damage. Positions
    /// `prefix.kept + 1 ..= last_known` are lost to the new log.
    pub last_known: u64,
    /// How many acknowledged positions the new log lacks:
    /// `last_known - prefix.kept`.
    pub lost: u64,
    /// How many records past the prefix still read (left behind all the same).
    pub dropped_readable: u64,
    /// The first [`DROPPED_LISTED`] of them.
    pub dropped: Vec<DroppedRecord>,
    /// Why the source could not be read past its damage, when it could not.
    pub beyond_unreadable: Option<String>,
}

/// Copies the longest trustworthy prefix of the log at `source` (which may
/// be damaged, and is never written to) into a new log at `target` (absent
/// or empty, left untouched on failure), and says what was left behind.
/// Each readable record left behind is written to `dropped_out` as one JSON
/// line (an export line), when given.
///
/// # Errors
/// [`ReplayError::DirectoryNotEmpty`] for `target`; `store/not-a-log` when
/// `source` holds no log; `store/damaged` when even the lenient open fails
/// (a table file or MANIFEST it cannot read past); failures writing the copy
/// or `dropped_out`.
pub async fn salvage(
    source: &Path,
    target: &Path,
    dropped_out: Option<&mut dyn Write>,
) -> Result<SalvageReport, ReplayError> {
    crate::transfer::require_empty(target)?;
    let up_to = RocksLog::open_damaged(source, SalvageRecovery::UpToDamage)?;
    let prefix = prefix_where(up_to.log.read_all(1), |record| {
        attachments_intact(&up_to.log, record)
    });
    let limit = usize::try_from(prefix.kept).unwrap_or(usize::MAX);
    let lines = PrefixLines::new(&up_to.log, up_to.log.read_all(1).take(limit));
    let copied = import_directory(target, BufReader::new(lines)).await?;
    if copied != prefix.kept {
        // The same read-only snapshot read twice: cannot differ.
        return Err(ReplayError::BadImport {
            line: usize::try_from(copied).unwrap_or(usize::MAX),
            reason: format!("copied {copied} records of a {}-record prefix", prefix.kept),
        });
    }
    let mut last_known = up_to.head_marker.unwrap_or(0).max(up_to.log.head());
    drop(up_to);
    let mut report = SalvageReport {
        lost: last_known.saturating_sub(prefix.kept),
        prefix,
        last_known,
        dropped_readable: 0,
        dropped: Vec::new(),
        beyond_unreadable: None,
    };
    match RocksLog::open_damaged(source, SalvageRecovery::PastDamage) {
        Ok(past) => {
            last_known = last_known
                .max(past.head_marker.unwrap_or(0))
                .max(past.log.head());
            report.last_known = last_known;
            report.lost = last_known.saturating_sub(report.prefix.kept);
            left_behind(&past.log, &past.stored_positions, &mut report, dropped_out)?;
        }
        Err(err) => report.beyond_unreadable = Some(err.to_string()),
    }
    Ok(report)
}

/// Whether every attachment `record` names reads from `log`, and hashes to
/// its id (the store checks that as it reads); the first that does not, as a
/// reason.
fn attachments_intact(log: &RocksLog, record: &RecordedEvent) -> Result<(), String> {
    for id in stored_attachments(&record.event) {
        match log.attachment(&id) {
            Ok(Some(_)) => {}
            Ok(None) => return Err(format!("attachment {id} is not in the blob store")),
            Err(err) => return Err(format!("attachment {id} does not read: {err}")),
        }
    }
    Ok(())
}

/// Lists (and writes out) every readable record of `log` past the prefix.
fn left_behind(
    log: &RocksLog,
    stored: &[u64],
    report: &mut SalvageReport,
    mut out: Option<&mut dyn Write>,
) -> Result<(), ReplayError> {
    for &position in stored.iter().filter(|&&p| p > report.prefix.kept) {
        let Some(Ok(record)) = log.read_all(position).next() else {
            continue;
        };
        if record.position != position {
            continue;
        }
        if let Some(out) = out.as_deref_mut() {
            serde_json::to_writer(&mut *out, &record).map_err(std::io::Error::other)?;
            out.write_all(b"\n")?;
        }
        report.dropped_readable += 1;
        if report.dropped.len() < DROPPED_LISTED {
            report.dropped.push(DroppedRecord {
                position,
                stream: record.stream,
                event_type: record.event.type_name(),
            });
        }
    }
    if let Some(out) = out {
        out.flush()?;
    }
    Ok(())
}

/// The prefix's records as export lines, with their attachments, read
/// lazily: the copy never holds the log in memory.
struct PrefixLines<'a, I> {
    log: &'a RocksLog,
    records: I,
    writer: ExportLines,
    line: VecDeque<u8>,
}

impl<'a, I> PrefixLines<'a, I> {
    fn new(log: &'a RocksLog, records: I) -> Self {
        PrefixLines {
            log,
            records,
            writer: ExportLines::default(),
            line: VecDeque::new(),
        }
    }
}

impl<I: Iterator<Item = Result<RecordedEvent, StoreError>>> Read for PrefixLines<'_, I> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.line.is_empty() {
            match self.records.next() {
                None => return Ok(0),
                Some(record) => {
                    let record = record.map_err(std::io::Error::other)?;
                    let mut bytes = Vec::new();
                    self.writer
                        .write(self.log, &record, &mut bytes)
                        .map_err(std::io::Error::other)?;
                    self.line = bytes.into();
                }
            }
        }
        self.line.read(buf)
    }
}
