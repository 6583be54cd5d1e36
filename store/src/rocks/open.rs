//! Opening a log directory: what a directory must hold before RocksDB may
//! touch it, the process lock, and the RocksDB options every open shares.
//!
//! The rules, each one a refusal that leaves the directory as it was:
//! - **Only an absent or empty directory becomes a new log.** A directory
//!   with RocksDB files but no `CURRENT` is damage, not an empty log
//!   ([`StoreError::Damaged`]); RocksDB's `create_if_missing` would start a
//!   new, empty database over it. A non-empty directory holding no log at all
//!   is [`StoreError::NotALog`].
//! - **One writer per directory.** A read-write open takes an exclusive
//!   `flock` on [`LOCK_FILE`] before RocksDB opens; another holder gives
//!   [`StoreError::Locked`] once it has held for `LOCK_WAIT` (a forked
//!   child shares the lock until its `exec`). The lock is the operating system's answer, not a
//!   match on an error's text (a corrupt block's "block checksum mismatch"
//!   once read as a lock error).
//! - **The write-ahead log is recovered in absolute-consistency mode.** Any
//!   damaged WAL record, wherever it is, fails the open with
//!   [`StoreError::Damaged`]; nothing after it is dropped or deleted.
//!   ARCHITECTURE.md ("Opening") explains why not point-in-time or tail
//!   tolerance.
//! - **RocksDB writes no info log into the directory.** Its messages go to
//!   `tracing` (target `rocksdb`, warnings and errors only), so inspecting a
//!   log, even on a read-only mount, never changes it.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::path::Path;

use rocksdb::{
    BlockBasedOptions, ColumnFamilyDescriptor, DBCompressionType, DBRecoveryMode, InfoLogger,
    LogLevel, Options,
};

use super::keys;
use crate::error::StoreError;

/// The file a read-write handle holds an exclusive `flock` on.
pub const LOCK_FILE: &str = "subagents.lock";

/// RocksDB's pointer to the live MANIFEST: present in every log directory.
const CURRENT_FILE: &str = "CURRENT";

/// What a directory holds, judged before anything is opened or created.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum DirectoryState {
    /// Nothing there: a read-write open creates a log.
    Absent,
    /// An empty directory (or one holding only [`LOCK_FILE`]).
    Empty,
    /// A RocksDB database (it has `CURRENT`).
    Log,
}

/// Whether a file name is one RocksDB writes into a database directory.
fn is_rocksdb_file(name: &str) -> bool {
    let numbered = |suffix: &str| {
        name.strip_suffix(suffix)
            .is_some_and(|stem| !stem.is_empty() && stem.bytes().all(|b| b.is_ascii_digit()))
    };
    numbered(".sst")
        || numbered(".log")
        || numbered(".blob")
        || name.starts_with("MANIFEST-")
        || name.starts_with("OPTIONS-")
        || name == "IDENTITY"
        || name == "LOCK"
}

/// Classifies `path` without changing it.
///
/// # Errors
/// [`StoreError::Damaged`] for RocksDB files without `CURRENT`,
/// [`StoreError::NotALog`] for a file or a directory of other things,
/// [`StoreError::Io`] when the directory cannot be read.
pub(super) fn classify(path: &Path) -> Result<DirectoryState, StoreError> {
    let io = |err: std::io::Error| StoreError::Io(format!("reading {}: {err}", path.display()));
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(DirectoryState::Absent),
        Err(err) => return Err(io(err)),
    };
    if !metadata.is_dir() {
        return Err(StoreError::NotALog {
            path: path.display().to_string(),
            reason: "it is not a directory".into(),
        });
    }
    if path.join(CURRENT_FILE).exists() {
        return Ok(DirectoryState::Log);
    }
    let mut rocksdb_files = Vec::new();
    let mut other_files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let name = entry
            .map_err(io)?
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name == LOCK_FILE {
            continue;
        }
        if is_rocksdb_file(&name) {
            rocksdb_files.push(name);
        } else {
            other_files.push(name);
        }
    }
    rocksdb_files.sort();
    other_files.sort();
    if let Some(first) = rocksdb_files.first() {
        return Err(StoreError::Damaged {
            path: path.display().to_string(),
            reason: format!(
                "it holds {} RocksDB file(s) ({first}, ...) but no CURRENT; \
                 refusing to create a new log over them",
                rocksdb_files.len()
            ),
        });
    }
    if let Some(first) = other_files.first() {
        return Err(StoreError::NotALog {
            path: path.display().to_string(),
            reason: format!("it is not empty ({first}, ...) and holds no log"),
        });
    }
    Ok(DirectoryState::Empty)
}

/// How long an open waits for a held lock before answering `Locked`.
///
/// `flock` belongs to an open file description, and a child process forked
/// by any thread of this process shares every open description until its
/// `exec` closes the close-on-exec ones. A log dropped while another thread
/// spawns a process (the `process` provider does) therefore stays locked for
/// the child's fork-to-exec window, a few milliseconds on a loaded machine.
/// Waiting this long turns that window into a short delay; a real holder
/// still gets `Locked`, only half a second later.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Creates `path` if needed and takes the exclusive lock of a read-write
/// handle; the lock lasts as long as the returned file is open. A held lock
/// is retried for up to [`LOCK_WAIT`].
///
/// # Errors
/// [`StoreError::Locked`] when another handle (in this or another process)
/// holds it, [`StoreError::Io`] naming the file and the OS error otherwise.
pub(super) fn lock(path: &Path) -> Result<File, StoreError> {
    std::fs::create_dir_all(path)
        .map_err(|err| StoreError::Io(format!("creating {}: {err}", path.display())))?;
    let lock_path = path.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|err| StoreError::Io(format!("opening {}: {err}", lock_path.display())))?;
    let began = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if began.elapsed() < LOCK_WAIT => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    path: path.display().to_string(),
                })
            }
            Err(std::fs::TryLockError::Error(err)) => {
                return Err(StoreError::Io(format!(
                    "locking {}: {err}",
                    lock_path.display()
                )))
            }
        }
    }
}

/// The database options of every open; `create` only for a new log.
/// `recovery` is absolute consistency, except when the newest write-ahead
/// log ends in a write torn by a crash (`log_files::WalTail`), and in a
/// salvage, which opens read-only past damage on purpose.
pub(super) fn db_options_recovering(create: bool, recovery: DBRecoveryMode) -> Options {
    let mut options = Options::default();
    options.create_if_missing(create);
    options.create_missing_column_families(create);
    options.set_compression_type(DBCompressionType::Lz4);
    options.set_wal_recovery_mode(recovery);
    options.set_paranoid_checks(true);
    options.set_info_logger(InfoLogger::new_callback_logger(
        LogLevel::Warn,
        // RocksDB also writes its options dump at `Header` level, whatever
        // the threshold: that is not a warning, so it goes to `debug`.
        |level, message| match level {
            LogLevel::Warn => tracing::warn!(target: "rocksdb", "{}", message.trim_end()),
            LogLevel::Error | LogLevel::Fatal => {
                tracing::error!(target: "rocksdb", "{}", message.trim_end());
            }
            LogLevel::Debug | LogLevel::Info | LogLevel::Header => {
                tracing::debug!(target: "rocksdb", "{}", message.trim_end());
            }
        },
    ));
    options
}

/// The column families with their options.
pub(super) fn families() -> [ColumnFamilyDescriptor; 5] {
    keys::ALL_FAMILIES.map(|name| {
        let mut family_options = Options::default();
        family_options.set_compression_type(DBCompressionType::Lz4);
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        family_options.set_block_based_table_factory(&table);
        // No memtable bloom filter on any family: each insert would set
        // bits in a filter of 2% of the write buffer (1.3 MB a family),
        // a cache miss on every index key an append writes, to spare the
        // rare lookup of an absent key (an id at or below `id_ceiling`, a
        // new stream's version 1) a search of the skiplist.
        // BENCHMARKS.md, "The memtables without bloom filters".
        ColumnFamilyDescriptor::new(name, family_options)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocksdb_file_names_are_recognised() {
        for name in [
            "000012.sst",
            "000004.log",
            "MANIFEST-000005",
            "OPTIONS-000007",
            "IDENTITY",
            "LOCK",
        ] {
            assert!(is_rocksdb_file(name), "{name}");
        }
        for name in [
            "notes.txt",
            ".log",
            "a.sst",
            "subagents.lock",
            "CURRENT.bak",
        ] {
            assert!(!is_rocksdb_file(name), "{name}");
        }
    }

    #[test]
    fn classify_tells_absent_empty_log_damaged_and_foreign_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        assert_eq!(classify(&path).unwrap(), DirectoryState::Absent);
        std::fs::create_dir(&path).unwrap();
        assert_eq!(classify(&path).unwrap(), DirectoryState::Empty);
        std::fs::write(path.join(LOCK_FILE), b"").unwrap();
        assert_eq!(classify(&path).unwrap(), DirectoryState::Empty);
        std::fs::write(path.join("000009.sst"), b"x").unwrap();
        let err = classify(&path).unwrap_err();
        assert!(
            matches!(&err, StoreError::Damaged { reason, .. } if reason.contains("000009.sst")),
            "{err:?}"
        );
        std::fs::write(path.join(CURRENT_FILE), b"MANIFEST-000001\n").unwrap();
        assert_eq!(classify(&path).unwrap(), DirectoryState::Log);

        let foreign = dir.path().join("home");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join("notes.txt"), b"mine").unwrap();
        let err = classify(&foreign).unwrap_err();
        assert!(matches!(err, StoreError::NotALog { .. }), "{err:?}");
        let err = classify(&foreign.join("notes.txt")).unwrap_err();
        assert!(matches!(err, StoreError::NotALog { .. }), "{err:?}");
    }
}
