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
pub(super) fn check(dir: &Path) -> Result<(), StoreError> {
    check_files(dir, Strictness::Everything)
}

/// The check before a salvage, which opens past write-ahead damage on
/// purpose: the MANIFEST is checked whole, and a write-ahead log only for
/// records RocksDB cannot safely be handed (a type this store never writes,
/// or a record running past its block) up to its first checksum failure,
/// which RocksDB itself stops at or skips.
///
/// # Errors
/// As [`check`].
pub(super) fn check_for_salvage(dir: &Path) -> Result<(), StoreError> {
    check_files(dir, Strictness::WalShapeOnly)
}

/// How much of a write-ahead log [`check_files`] holds against it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strictness {
    Everything,
    WalShapeOnly,
}

fn check_files(dir: &Path, strictness: Strictness) -> Result<(), StoreError> {
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
            other => other,
        };
        if let Err((offset, problem)) = result {
            let what = problem.to_string();
            return Err(StoreError::Damaged {
                path: dir.display().to_string(),
                reason: format!("{}: {what} at byte {offset}", file.display()),
            });
        }
    }
    Ok(())
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
        }
    }
}

/// Walks one log-format file a block at a time (a record never crosses a
/// block, so memory stays one block however large the WAL): the offset of
/// its first bad record and what is wrong with it.
///
/// # Errors
/// The read's IO error.
fn walk_file(mut file: impl std::io::Read) -> std::io::Result<Result<(), (usize, Problem)>> {
    let mut buffer = vec![0u8; BLOCK];
    let mut block_start = 0;
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
        if filled == 0 {
            return Ok(Ok(()));
        }
        if let Err((at, problem)) = walk_block(&buffer[..filled]) {
            return Ok(Err((block_start + at, problem)));
        }
        if filled < BLOCK {
            return Ok(Ok(()));
        }
        block_start += BLOCK;
    }
}

/// Walks a log-format file held in memory (tests).
#[cfg(test)]
fn walk(bytes: &[u8]) -> Result<(), (usize, Problem)> {
    walk_file(bytes).expect("reading a slice cannot fail")
}

/// Walks the records of one block; the offset within it of the first bad
/// one.
fn walk_block(block: &[u8]) -> Result<(), (usize, Problem)> {
    let mut at = 0;
    while block.len() - at >= HEADER {
        let header = &block[at..at + HEADER];
        let stored = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let length = usize::from(u16::from_le_bytes([header[4], header[5]]));
        let kind = header[6];
        if kind == 0 && length == 0 {
            // Zeroes: a block's padding, or space preallocated past the
            // last record. Nothing more in this block.
            break;
        }
        if !WRITTEN_TYPES.contains(&kind) {
            return Err((at, Problem::Type(kind)));
        }
        let Some(payload) = block.get(at + HEADER..at + HEADER + length) else {
            return Err((at, Problem::PastBlock(length)));
        };
        let actual = crc32c::crc32c_append(crc32c::crc32c(&[kind]), payload);
        if unmask(stored) != actual {
            return Err((at, Problem::Checksum));
        }
        at += HEADER + length;
    }
    Ok(())
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
        let crc = mask(crc32c::crc32c_append(crc32c::crc32c(&[kind]), payload));
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
        assert_eq!(walk(&file), Ok(()));
        // A record exactly filling the block, then a second block.
        let mut blocks = record(1, &vec![7u8; BLOCK - HEADER]);
        blocks.extend(record(1, b"next block"));
        assert_eq!(walk(&blocks), Ok(()));
        assert_eq!(walk(&[]), Ok(()));
    }

    #[test]
    fn a_recyclable_type_a_flipped_byte_and_a_torn_record_are_refused() {
        let good = record(1, b"payload");
        let mut recyclable = good.clone();
        recyclable[6] = 5;
        assert_eq!(walk(&recyclable), Err((0, Problem::Type(5))));
        for at in 0..good.len() {
            if at == 6 {
                continue;
            }
            let mut flipped = good.clone();
            flipped[at] ^= 0x10;
            assert!(walk(&flipped).is_err(), "flip at {at} passed");
        }
        let torn = &good[..good.len() - 2];
        assert_eq!(walk(torn), Err((0, Problem::PastBlock(7))));
    }
}
