//! A check of RocksDB's own log-format files (the MANIFEST that `CURRENT`
//! names, and every write-ahead log) before RocksDB reads them.
//!
//! Why: RocksDB's log reader can loop forever on some damage. A single
//! flipped bit that turns a record's type into a "recyclable" one sends
//! `log::Reader::ReadRecord` into an endless loop while it reads the
//! MANIFEST at open (found by the corruption attack at 200 flips per file;
//! compare facebook/rocksdb#11968 and #13333). Every command would then hang
//! instead of failing. So before any open this module walks each such file
//! in the log format RocksDB writes (32 KiB blocks of records, each
//! `[masked crc32c: u32 LE][length: u16 LE][type: u8][payload]`, a record
//! never crossing a block, a block's tail of under 7 bytes zero) and
//! refuses, as `store/damaged` naming the file and the offset, any record
//! whose type this store never writes (it writes only full, first, middle
//! and last records: no recycled logs, no WAL compression), that runs past
//! its block, or whose checksum fails. RocksDB still checks everything
//! itself after this; the walk only makes sure it gets input it can handle.
//!
//! **A write torn by a crash** is the one incomplete record it accepts,
//! and only at the very end of the newest write-ahead log ([`WalTail`]): a
//! killed process can leave one (Linux copies a `write` a page at a time
//! and stops at a page boundary for a fatal signal), and that write was
//! never acknowledged, for the append returns only once it is complete.
//! The end is torn when the file stops inside a record's header, inside a
//! record's payload that no prefix of the bytes left checks out against
//! (a whole record whose length field was damaged would: that is refused),
//! or after the first fragments of a record whose last never came. Every
//! record before it must check out as ever. An incomplete end of an older
//! write-ahead log is refused: its last write was acknowledged, and the
//! tail tolerance RocksDB then opens with would drop it. (The MANIFEST's
//! incomplete end is RocksDB's own to drop: it reads the MANIFEST that way
//! whatever the WAL mode.)
//!
//! Cost: one sequential read of the MANIFEST and the WALs, which RocksDB
//! reads at open anyway; the table files are not touched.

use std::path::Path;

use crate::error::StoreError;

/// RocksDB's log block size.
const BLOCK: usize = 32 * 1024;
/// A record header: checksum, length, type.
const HEADER: usize = 7;
/// The record types this store's logs hold: full, first, middle, last.
const WRITTEN_TYPES: [u8; 4] = [1, 2, 3, 4];
/// RocksDB's (and LevelDB's) checksum mask.
const MASK_DELTA: u32 = 0xa282_ead8;

/// Checks the MANIFEST named by `CURRENT` and every `*.log` file in `dir`.
///
/// # Errors
/// [`StoreError::Damaged`] naming the file and offset of the first record
/// RocksDB must not be handed; [`StoreError::Io`] when a file cannot be read.
pub(super) fn check(dir: &Path) -> Result<WalTail, StoreError> {
    check_files(dir, Strictness::Everything)
}

/// How the newest write-ahead log ends.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum WalTail {
    /// With whole records: RocksDB recovers it under absolute consistency.
    Whole,
    /// Inside an incomplete write: RocksDB recovers it tolerating that one
    /// incomplete record, which it drops.
    Torn(TornWrite),
}

/// An incomplete write at the end of a log's newest write-ahead log, which
/// its open dropped ([`RocksLog::torn_write`](super::RocksLog::torn_write)):
/// a write a crash tore, never acknowledged, or, for a read-only open
/// beside a live writer, one still being written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornWrite {
    /// The write-ahead log.
    pub file: std::path::PathBuf,
    /// Where in it the incomplete write begins.
    pub offset: u64,
}

impl std::fmt::Display for TornWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the write-ahead log {} ends in an incomplete write at byte {}, never \
             acknowledged (torn by a crash, or still being written by a running host); \
             it is not read",
            self.file.display(),
            self.offset
        )
    }
}

impl WalTail {
    /// The WAL recovery mode RocksDB is to open the log with.
    pub(super) fn recovery_mode(&self) -> rocksdb::DBRecoveryMode {
        match self {
            WalTail::Whole => rocksdb::DBRecoveryMode::AbsoluteConsistency,
            WalTail::Torn(_) => rocksdb::DBRecoveryMode::TolerateCorruptedTailRecords,
        }
    }
}

/// The check before a salvage, which opens past write-ahead damage on
/// purpose: the MANIFEST is checked whole, and a write-ahead log only for
/// records RocksDB cannot safely be handed (a type this store never writes,
/// or a record running past its block) up to its first checksum failure,
/// which RocksDB itself stops at or skips.
///
/// # Errors
/// As [`check`].
pub(super) fn check_for_salvage(dir: &Path) -> Result<WalTail, StoreError> {
    check_files(dir, Strictness::WalShapeOnly)
}

/// How much of a write-ahead log [`check_files`] holds against it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strictness {
    Everything,
    WalShapeOnly,
}

fn check_files(dir: &Path, strictness: Strictness) -> Result<WalTail, StoreError> {
    let mut files = Vec::new();
    match std::fs::read_to_string(dir.join("CURRENT")) {
        Ok(current) => {
            let name = current.trim_end_matches('\n');
            // A `CURRENT` that does not name a MANIFEST is RocksDB's to report.
            if name.starts_with("MANIFEST-") && !name.contains('/') {
                files.push(dir.join(name));
            }
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(io_error(&dir.join("CURRENT"), &err)),
    }
    let entries = std::fs::read_dir(dir).map_err(|err| io_error(dir, &err))?;
    for entry in entries {
        let path = entry.map_err(|err| io_error(dir, &err))?.path();
        if path.extension().is_some_and(|ext| ext == "log") && path.is_file() {
            files.push(path);
        }
    }
    // The newest write-ahead log that holds anything: RocksDB creates an
    // empty one after each recovery, and a crash before it deletes the
    // recovered ones leaves a torn write behind only empty logs, still the
    // last write ever attempted.
    let newest_wal = files
        .iter()
        .filter_map(|file| Some((wal_number(file)?, file)))
        .filter(|(_, file)| std::fs::metadata(file).is_ok_and(|meta| meta.len() > 0))
        .max()
        .map(|(_, file)| file.clone());
    let mut tail = WalTail::Whole;
    for file in files {
        let reader = match std::fs::File::open(&file) {
            Ok(reader) => reader,
            // A MANIFEST that `CURRENT` names but is missing is RocksDB's to report.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(io_error(&file, &err)),
        };
        let is_wal = file.extension().is_some_and(|ext| ext == "log");
        let result = match walk_file(reader).map_err(|err| io_error(&file, &err))? {
            Err((_, Problem::Checksum)) if is_wal && strictness == Strictness::WalShapeOnly => {
                Ok(())
            }
            // A salvage stops at (or skips) an incomplete end like any damage.
            Ok(Ending::Torn { .. }) if strictness == Strictness::WalShapeOnly => Ok(()),
            Ok(Ending::Torn { at, .. }) if newest_wal.as_ref() == Some(&file) => {
                tail = WalTail::Torn(TornWrite {
                    file: file.clone(),
                    offset: at as u64,
                });
                Ok(())
            }
            // RocksDB reads the MANIFEST tolerating an incomplete end (an
            // edit a crash tore was never applied), whatever the WAL mode.
            Ok(Ending::Torn { .. }) if !is_wal => Ok(()),
            // An older write-ahead log's last write was acknowledged, and
            // the tail tolerance a torn newest log opens with would drop an
            // incomplete end of any log without a word: refused.
            Ok(Ending::Torn { at, was }) => Err(was.unwrap_or((at, Problem::Incomplete))),
            Ok(Ending::Whole) => Ok(()),
            Err(problem) => Err(problem),
        };
        if let Err((offset, problem)) = result {
            let what = problem.to_string();
            return Err(StoreError::Damaged {
                path: dir.display().to_string(),
                reason: format!("{}: {what} at byte {offset}", file.display()),
            });
        }
    }
    Ok(tail)
}

/// The number of a write-ahead log file (`000020.log`): the newest has the
/// greatest.
fn wal_number(file: &Path) -> Option<u64> {
    if file.extension()? != "log" {
        return None;
    }
    file.file_stem()?.to_str()?.parse().ok()
}

/// How a log-format file whose records check out ends.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    /// With whole records (and perhaps a block's zero padding).
    Whole,
    /// Inside a write torn by a crash, which began at byte `at` (the
    /// start of the incomplete record, or of its first fragment). `was`:
    /// the problem a walk that knows no torn writes reports for it, if any
    /// (a record running past the end of the file): what an older
    /// write-ahead log is refused for.
    Torn {
        at: usize,
        was: Option<(usize, Problem)>,
    },
}

/// What is wrong with a record.
#[derive(Debug, PartialEq, Eq)]
enum Problem {
    /// A type this store never writes (the type RocksDB may loop on).
    Type(u8),
    /// A record longer than what is left of its block (or of the file).
    PastBlock(usize),
    /// The payload does not match the checksum.
    Checksum,
    /// The file ends inside a header, or before a record's last fragment.
    Incomplete,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Type(kind) => {
                write!(f, "a record of type {kind}, which this store never writes")
            }
            Problem::PastBlock(length) => {
                write!(f, "a {length}-byte record running past its block")
            }
            Problem::Checksum => f.write_str("a record failing its checksum"),
            Problem::Incomplete => f.write_str("an incomplete record at the end of the file"),
        }
    }
}

/// Walks one log-format file a block at a time (a record never crosses a
/// block, so memory stays one block however large the WAL): how it ends,
/// or the offset of its first bad record and what is wrong with it.
///
/// # Errors
/// The read's IO error.
fn walk_file(mut file: impl std::io::Read) -> std::io::Result<Result<Ending, (usize, Problem)>> {
    let mut buffer = vec![0u8; BLOCK];
    let mut walk = Walk::default();
    loop {
        let mut filled = 0;
        while filled < BLOCK {
            match file.read(&mut buffer[filled..]) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        let last = filled < BLOCK;
        if let Some(end) = walk.block(&buffer[..filled], last) {
            return Ok(end);
        }
        walk.block_start += BLOCK;
    }
}

/// Walks a log-format file held in memory (tests).
#[cfg(test)]
fn walk(bytes: &[u8]) -> Result<Ending, (usize, Problem)> {
    walk_file(bytes).expect("reading a slice cannot fail")
}

/// Where a walk is: the offset of its block, and where the record whose
/// last fragment has not come yet began.
#[derive(Default)]
struct Walk {
    block_start: usize,
    open_record: Option<usize>,
}

impl Walk {
    /// Walks the records of one block, `last` when the file ends in it;
    /// `Some` once the walk is over: a problem (its offset in the file),
    /// or how the file ends.
    fn block(&mut self, block: &[u8], last: bool) -> Option<Result<Ending, (usize, Problem)>> {
        let mut at = 0;
        while block.len() - at >= HEADER {
            let header = &block[at..at + HEADER];
            let stored = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
            let length = usize::from(u16::from_le_bytes([header[4], header[5]]));
            let kind = header[6];
            if kind == 0 && length == 0 {
                // Zeroes: a block's padding, or space preallocated past the
                // last record. Nothing more in this block.
                return last.then(|| Ok(self.ending(None)));
            }
            let offset = self.block_start + at;
            if !WRITTEN_TYPES.contains(&kind) {
                return Some(Err((offset, Problem::Type(kind))));
            }
            let rest = &block[at + HEADER..];
            let Some(payload) = rest.get(..length) else {
                let past = (offset, Problem::PastBlock(length));
                // The file ends inside this record: torn, unless some
                // prefix of what is left is the whole record under a
                // damaged length.
                return Some(if last && !some_prefix_checks_out(kind, stored, rest) {
                    Ok(Ending::Torn {
                        at: self.open_record.unwrap_or(offset),
                        was: Some(past),
                    })
                } else {
                    Err(past)
                });
            };
            if !checks_out(kind, stored, payload) {
                return Some(Err((offset, Problem::Checksum)));
            }
            self.open_record = match kind {
                FIRST => Some(offset),
                MIDDLE => self.open_record,
                _ => None,
            };
            at += HEADER + length;
        }
        if !last {
            return None;
        }
        // Fewer bytes than a header are left at the end of the file: a
        // header torn, whatever its bytes (RocksDB pads a block only when
        // it writes the next record in the next block).
        let torn_header = at < block.len();
        Some(Ok(self.ending(torn_header.then_some(self.block_start + at))))
    }

    /// How the file ends after its last whole record: torn if a header
    /// was cut at `torn_header`, or a record's last fragment never came.
    fn ending(&self, torn_header: Option<usize>) -> Ending {
        match self.open_record.or(torn_header) {
            Some(at) => Ending::Torn { at, was: None },
            None => Ending::Whole,
        }
    }
}

/// The record types of a record's first and middle fragments.
const FIRST: u8 = 2;
const MIDDLE: u8 = 3;

/// Whether `payload` under type `kind` matches the `stored` checksum.
fn checks_out(kind: u8, stored: u32, payload: &[u8]) -> bool {
    unmask(stored) == record_crc(kind, payload)
}

/// A record's checksum as RocksDB computes it (before masking): over its
/// type, then its payload.
fn record_crc(kind: u8, payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&[kind]), payload)
}

/// Whether some prefix of `rest` (the empty one included) matches the
/// `stored` checksum under type `kind`: a whole record whose length field
/// was damaged. One pass, the checksum extended a byte at a time; a torn
/// tail is at most a block.
fn some_prefix_checks_out(kind: u8, stored: u32, rest: &[u8]) -> bool {
    let expected = unmask(stored);
    let mut crc = record_crc(kind, &[]);
    if crc == expected {
        return true;
    }
    rest.iter().any(|byte| {
        crc = crc32c::crc32c_append(crc, std::slice::from_ref(byte));
        crc == expected
    })
}

/// RocksDB stores `mask(crc)`; this undoes it.
fn unmask(masked: u32) -> u32 {
    let rotated = masked.wrapping_sub(MASK_DELTA);
    rotated.rotate_left(15)
}

fn io_error(path: &Path, err: &std::io::Error) -> StoreError {
    StoreError::Io(format!("{}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RocksDB's mask, for building records.
    fn mask(crc: u32) -> u32 {
        crc.rotate_right(15).wrapping_add(MASK_DELTA)
    }

    fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
        let crc = mask(record_crc(kind, payload));
        let mut bytes = crc.to_le_bytes().to_vec();
        bytes.extend(u16::try_from(payload.len()).unwrap().to_le_bytes());
        bytes.push(kind);
        bytes.extend(payload);
        bytes
    }

    #[test]
    fn well_formed_records_and_padding_pass() {
        let mut file = record(1, b"hello");
        file.extend(record(2, b"first"));
        file.extend(record(4, b"last"));
        file.extend([0u8; 16]);
        assert_eq!(walk(&file), Ok(Ending::Whole));
        // A record exactly filling the block, then a second block.
        let mut blocks = record(1, &vec![7u8; BLOCK - HEADER]);
        blocks.extend(record(1, b"next block"));
        assert_eq!(walk(&blocks), Ok(Ending::Whole));
        assert_eq!(walk(&[]), Ok(Ending::Whole));
    }

    #[test]
    fn a_recyclable_type_and_a_flipped_byte_are_refused() {
        let good = record(1, b"payload");
        let mut recyclable = good.clone();
        recyclable[6] = 5;
        assert_eq!(walk(&recyclable), Err((0, Problem::Type(5))));
        // Every flip of every bit, the length's included: a longer length
        // leaves the whole record as a prefix that checks out.
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut flipped = good.clone();
                flipped[at] ^= 1 << bit;
                assert!(walk(&flipped).is_err(), "flip of bit {bit} at {at} passed");
            }
        }
        for kind in [2, 3, 4] {
            let mut retyped = good.clone();
            retyped[6] = kind;
            assert_eq!(walk(&retyped), Err((0, Problem::Checksum)));
        }
    }

    #[test]
    fn a_write_torn_at_the_end_is_told_from_damage() {
        let file = record(1, b"whole");
        let torn_at = file.len();
        let last = record(1, b"the write a crash cut short");
        // Cut inside the payload, inside the header, or with none of it.
        for keep in 1..last.len() {
            let mut cut = file.clone();
            cut.extend(&last[..keep]);
            let expected = if keep < HEADER {
                Ending::Torn {
                    at: torn_at,
                    was: None,
                }
            } else {
                Ending::Torn {
                    at: torn_at,
                    was: Some((torn_at, Problem::PastBlock(last.len() - HEADER))),
                }
            };
            assert_eq!(walk(&cut), Ok(expected), "kept {keep}");
        }
        // A whole last record whose length grew is damage, not a tear; so
        // is a record before it whose length grew past the file's end.
        let mut longer = file.clone();
        longer.extend(&last);
        longer[torn_at + 5] ^= 0x01;
        assert_eq!(
            walk(&longer).unwrap_err().1,
            Problem::PastBlock(last.len() - HEADER + 256)
        );
        let mut earlier = file.clone();
        earlier.extend(&last);
        earlier[5] ^= 0x40;
        assert!(matches!(walk(&earlier), Err((0, Problem::PastBlock(_)))));
        // A record's first fragments without its last: torn where it began.
        let mut fragments = file.clone();
        fragments.extend(record(2, b"first"));
        fragments.extend(record(3, b"middle"));
        assert_eq!(
            walk(&fragments),
            Ok(Ending::Torn {
                at: torn_at,
                was: None
            })
        );
        fragments.extend(record(4, b"last"));
        assert_eq!(walk(&fragments), Ok(Ending::Whole));
        // Cut where a full block ends, after a first fragment filling it.
        let block = record(2, &vec![7u8; BLOCK - HEADER]);
        assert_eq!(walk(&block), Ok(Ending::Torn { at: 0, was: None }));
        // A record running past a full block is damage, even at the end of
        // the file: RocksDB never writes one across a block.
        let mut full = record(1, &vec![7u8; BLOCK - 2 * HEADER - 20]);
        full.extend(&record(1, &[9u8; 40])[..HEADER + 20]);
        assert_eq!(full.len(), BLOCK);
        assert_eq!(
            walk(&full),
            Err((BLOCK - HEADER - 20, Problem::PastBlock(40)))
        );
    }

    #[test]
    fn only_the_newest_write_ahead_log_that_holds_anything_may_end_torn() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join(name);
        let whole = record(1, b"whole");
        let torn_payload = [whole.clone(), record(1, b"cut short")[..10].to_vec()].concat();
        let torn_header = [whole.clone(), vec![0, 0, 0]].concat();
        let open_fragment = [whole.clone(), record(2, b"first")].concat();
        std::fs::write(at("999999.log"), &whole).unwrap();
        for (torn, tail_at) in [
            (&torn_payload, whole.len()),
            (&torn_header, whole.len()),
            (&open_fragment, whole.len()),
        ] {
            std::fs::write(at("1000000.log"), torn).unwrap();
            let tail = check(dir.path()).unwrap();
            assert_eq!(
                tail,
                WalTail::Torn(TornWrite {
                    file: at("1000000.log"),
                    offset: tail_at as u64,
                })
            );
            assert_eq!(
                tail.recovery_mode(),
                rocksdb::DBRecoveryMode::TolerateCorruptedTailRecords
            );
            // Behind only an empty log (a crash before the recovered logs
            // were deleted), it is still the last write attempted.
            std::fs::write(at("1000001.log"), b"").unwrap();
            assert!(matches!(check(dir.path()), Ok(WalTail::Torn(_))));
            std::fs::remove_file(at("1000001.log")).unwrap();
        }
        std::fs::write(at("1000000.log"), &whole).unwrap();
        assert_eq!(check(dir.path()), Ok(WalTail::Whole));
        assert_eq!(
            check(dir.path()).unwrap().recovery_mode(),
            rocksdb::DBRecoveryMode::AbsoluteConsistency
        );
        // An older log's incomplete end, whatever its kind, is refused.
        for (torn, what) in [
            (
                &torn_payload,
                "a 9-byte record running past its block at byte 12",
            ),
            (
                &torn_header,
                "an incomplete record at the end of the file at byte 12",
            ),
            (
                &open_fragment,
                "an incomplete record at the end of the file at byte 12",
            ),
        ] {
            std::fs::write(at("999999.log"), torn).unwrap();
            let refused = check(dir.path()).unwrap_err().to_string();
            assert!(
                refused.contains(&format!("999999.log: {what}")),
                "{refused}"
            );
            // A salvage leaves it to RocksDB, which stops there.
            assert_eq!(check_for_salvage(dir.path()), Ok(WalTail::Whole));
        }
        std::fs::write(at("999999.log"), &whole).unwrap();
        // A MANIFEST's incomplete end is RocksDB's to drop.
        std::fs::write(at("CURRENT"), "MANIFEST-000005\n").unwrap();
        std::fs::write(at("MANIFEST-000005"), &torn_payload).unwrap();
        assert_eq!(check(dir.path()), Ok(WalTail::Whole));
        std::fs::write(at("MANIFEST-000005"), [whole.clone(), vec![7; 10]].concat()).unwrap();
        assert!(
            check(dir.path()).is_err(),
            "a damaged MANIFEST is still refused"
        );
    }

    #[test]
    fn a_header_torn_into_zeroes_is_torn_too() {
        let whole = record(1, b"whole");
        for zeroes in 1..HEADER {
            let file = [whole.clone(), vec![0; zeroes]].concat();
            assert_eq!(
                walk(&file),
                Ok(Ending::Torn {
                    at: whole.len(),
                    was: None,
                }),
                "{zeroes} zero bytes"
            );
        }
    }
}
