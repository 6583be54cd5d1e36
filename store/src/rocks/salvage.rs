//! Reading what is left of a damaged log, for `subagents salvage`.
//!
//! A damaged log refuses every ordinary open ([`super::open`]). Salvage
//! opens it read-only twice, with RocksDB's lenient WAL recovery modes, and
//! never writes to it:
//! - [`SalvageRecovery::UpToDamage`] replays the write-ahead log up to its
//!   first damaged record (point-in-time): a consistent prefix of the
//!   history, the candidate to copy;
//! - [`SalvageRecovery::PastDamage`] skips damaged WAL records and replays the
//!   rest: it shows what the log held beyond the damage (the last head marker
//!   and the positions still readable), so the salvage report can say what
//!   was left behind.

use std::path::Path;

use rocksdb::{DBRecoveryMode, DB};

use super::log_files;
use super::open::{self, DirectoryState};
use super::{family, keys, map_rocks_error, RocksLog};
use crate::error::StoreError;

/// How a damaged write-ahead log is replayed for salvage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SalvageRecovery {
    /// Up to the first damaged record (RocksDB's point-in-time recovery).
    UpToDamage,
    /// Skipping damaged records (RocksDB's skip-any-corrupted-records).
    PastDamage,
}

/// A damaged log opened read-only for salvage.
pub struct DamagedLog {
    /// The log, read-only. Its `head()` is the last stored position; reads
    /// stop before the first gap or unreadable record.
    pub log: RocksLog,
    /// The head marker as stored (the position of the last group commit the
    /// replayed data reached), if it decodes.
    pub head_marker: Option<u64>,
    /// Every position stored in the log family, in order (a gap shows lost
    /// records; an unreadable value is still listed).
    pub stored_positions: Vec<u64>,
}

impl RocksLog {
    /// Opens a possibly damaged log read-only for salvage, without the
    /// consistency checks of [`RocksLog::open_read_only`]. Nothing in the
    /// directory is changed.
    ///
    /// # Errors
    /// [`StoreError::NotALog`] when there is no log, and the damage RocksDB
    /// cannot open past (a table file it cannot open, a MANIFEST that does
    /// not decode).
    pub fn open_damaged(
        path: impl AsRef<Path>,
        recovery: SalvageRecovery,
    ) -> Result<DamagedLog, StoreError> {
        let path = path.as_ref().to_path_buf();
        if open::classify(&path)? != DirectoryState::Log {
            return Err(StoreError::NotALog {
                path: path.display().to_string(),
                reason: "there is no log there".into(),
            });
        }
        log_files::check_for_salvage(&path)?;
        let mode = match recovery {
            SalvageRecovery::UpToDamage => DBRecoveryMode::PointInTime,
            SalvageRecovery::PastDamage => DBRecoveryMode::SkipAnyCorruptedRecord,
        };
        let db = DB::open_cf_descriptors_read_only(
            &open::db_options_recovering(false, mode),
            &path,
            open::families(),
            false,
        )
        .map_err(|err| map_rocks_error(err, 0, &path))?;
        let head_marker = db
            .get_cf(family(&db, keys::CF_META)?, keys::META_HEAD)
            .map_err(|err| map_rocks_error(err, 0, &path))?
            .and_then(|bytes| keys::decode_u64(&bytes));
        let mut stored_positions = Vec::new();
        let mut iter = db.raw_iterator_cf(family(&db, keys::CF_LOG)?);
        iter.seek_to_first();
        while let Some(key) = iter.key() {
            if let Some(position) = keys::decode_u64(key) {
                stored_positions.push(position);
            }
            iter.next();
        }
        // A table file that fails mid-scan ends the listing; what was listed
        // stands, and reads report the damage.
        drop(iter);
        let head = stored_positions.last().copied().unwrap_or(0);
        Ok(DamagedLog {
            log: RocksLog::read_only_over(db, path, head, None),
            head_marker,
            stored_positions,
        })
    }
}
