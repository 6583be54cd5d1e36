//! What `RocksLog` refuses to open, and how (issue 12): one writer per
//! directory by an OS lock (waiting out a lock held for a moment), never a
//! new log over the remains of one, a read-only handle that cannot write.

use subagent_core::{ErrorCode, Event, NewEvent, SessionId, StreamId};
use subagent_store::{EventLog, ExpectedVersion, RocksLog, RocksOptions, StoreError};

fn append_one(log: &RocksLog) -> Result<u64, StoreError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let stream = StreamId::Session(SessionId::new());
    runtime
        .block_on(log.append(
            stream,
            ExpectedVersion::Any,
            vec![NewEvent::new(Event::TurnStarted { turn: 1, epoch: 1 })],
        ))
        .map(|outcome| outcome.first_position)
}

#[test]
fn a_second_writer_is_refused_by_the_lock_until_the_first_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    // "lock" in the path must not matter: the lock is the OS's answer.
    let path = dir.path().join("blocklock");
    let first = RocksLog::open(&path, RocksOptions::default()).unwrap();
    append_one(&first).unwrap();
    let err = RocksLog::open(&path, RocksOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert_eq!(err.code(), ErrorCode::StoreLocked);
    // Readers need no lock.
    let reader = RocksLog::open_read_only(&path).unwrap();
    assert_eq!(reader.head(), 1);
    drop(first);
    let again = RocksLog::open(&path, RocksOptions::default()).unwrap();
    assert_eq!(again.head(), 1);
}

/// A lock held for a moment, as a child forked by another thread holds it
/// between its fork and its `exec`, delays an open instead of failing it;
/// a lock that stays held is `Locked` once the wait is over.
#[test]
fn an_open_waits_out_a_lock_held_for_a_moment_but_not_one_that_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    drop(RocksLog::open(&path, RocksOptions::default()).unwrap());
    let holder = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join(subagent_store::rocks::LOCK_FILE))
        .unwrap();
    holder.try_lock().unwrap();
    // Timed from before the holder's thread starts, so the open cannot
    // look shorter than the hold, however the two threads are scheduled.
    let began = std::time::Instant::now();
    let released = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(holder);
    });
    let log = RocksLog::open(&path, RocksOptions::default()).unwrap();
    assert!(began.elapsed() >= std::time::Duration::from_millis(100));
    released.join().unwrap();
    drop(log);

    let holder = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join(subagent_store::rocks::LOCK_FILE))
        .unwrap();
    holder.try_lock().unwrap();
    let began = std::time::Instant::now();
    let err = RocksLog::open(&path, RocksOptions::default())
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::StoreLocked);
    assert!(began.elapsed() >= std::time::Duration::from_millis(500));
}

#[test]
fn a_read_only_handle_refuses_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    append_one(&RocksLog::open(&path, RocksOptions::default()).unwrap()).unwrap();
    let reader = RocksLog::open_read_only(&path).unwrap();
    assert!(reader.is_read_only());
    let err = append_one(&reader).unwrap_err();
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
    assert_eq!(err.code(), ErrorCode::StoreReadOnly);
    let err = reader.write_checkpoint("projections", b"{}").unwrap_err();
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err:?}");
    assert_eq!(reader.head(), 1);
}

#[test]
fn read_only_open_of_nothing_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent");
    let err = RocksLog::open_read_only(&path).err().unwrap();
    assert!(matches!(err, StoreError::NotALog { .. }), "{err:?}");
    assert_eq!(err.code(), ErrorCode::StoreNotALog);
    assert!(!path.exists());
    std::fs::create_dir(&path).unwrap();
    let err = RocksLog::open_read_only(&path).err().unwrap();
    assert!(matches!(err, StoreError::NotALog { .. }), "{err:?}");
    assert_eq!(std::fs::read_dir(&path).unwrap().count(), 0);
}

#[test]
fn table_files_without_current_are_damage_not_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    {
        let log = RocksLog::open(&path, RocksOptions::default()).unwrap();
        append_one(&log).unwrap();
    }
    // Reopen so the first session's WAL is flushed into a table file.
    drop(RocksLog::open(&path, RocksOptions::default()).unwrap());
    std::fs::remove_file(path.join("CURRENT")).unwrap();
    let listing = |path: &std::path::Path| {
        let mut names: Vec<String> = std::fs::read_dir(path)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing(&path);
    assert!(
        before.iter().any(|name| name.ends_with(".sst")),
        "{before:?}"
    );
    for err in [
        RocksLog::open(&path, RocksOptions::default())
            .err()
            .unwrap(),
        RocksLog::open_read_only(&path).err().unwrap(),
    ] {
        assert!(matches!(err, StoreError::Damaged { .. }), "{err:?}");
        assert_eq!(err.code(), ErrorCode::StoreDamaged);
        assert!(err.to_string().contains("no CURRENT"), "{err}");
    }
    assert_eq!(listing(&path), before);
}

#[test]
fn a_directory_of_other_things_is_not_a_log() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
    let err = RocksLog::open(dir.path(), RocksOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, StoreError::NotALog { .. }), "{err:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// The offsets of every record header in a log-format file (32 KiB blocks,
/// 7-byte headers), stopping at padding.
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut block = 0;
    while block < bytes.len() {
        let mut at = block;
        let end = bytes.len().min(block + 32 * 1024);
        while end - at >= 7 {
            let length = usize::from(u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]));
            if bytes[at + 6] == 0 && length == 0 {
                break;
            }
            offsets.push(at);
            at += 7 + length;
        }
        block += 32 * 1024;
    }
    offsets
}

/// Opens `path` both ways on a watchdog thread: RocksDB's log reader loops
/// forever on a record whose type was flipped to a "recyclable" one, so an
/// open that does not return within a minute fails the test instead of
/// hanging it.
fn open_both_ways_within_a_minute(path: &std::path::Path) -> Vec<Result<(), StoreError>> {
    let (sender, receiver) = std::sync::mpsc::channel();
    let path = path.to_owned();
    std::thread::spawn(move || {
        let read_only = RocksLog::open_read_only(&path).map(drop);
        let read_write = RocksLog::open(&path, RocksOptions::default()).map(drop);
        let _ = sender.send(vec![read_only, read_write]);
    });
    receiver
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the open returned instead of looping forever")
}

#[test]
fn a_record_type_flipped_in_the_manifest_or_wal_is_refused_not_looped_on() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("log");
    {
        let log = RocksLog::open(&pristine, RocksOptions::default()).unwrap();
        for _ in 0..20 {
            append_one(&log).unwrap();
        }
    }
    // A second session: the MANIFEST gains edits, the WAL holds records.
    {
        let log = RocksLog::open(&pristine, RocksOptions::default()).unwrap();
        append_one(&log).unwrap();
    }
    let files: Vec<_> = std::fs::read_dir(&pristine)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.starts_with("MANIFEST-") || name.ends_with(".log")
        })
        .collect();
    assert!(files
        .iter()
        .any(|f| f.to_string_lossy().contains("MANIFEST-")));
    assert!(files.iter().any(|f| f.to_string_lossy().ends_with(".log")));
    let mut attacked = 0;
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        for (index, offset) in record_offsets(&bytes).into_iter().enumerate() {
            // The type byte turned "recyclable full" (5): the hang's trigger.
            let copy = dir.path().join(format!("flip-{attacked}"));
            std::fs::create_dir(&copy).unwrap();
            for entry in std::fs::read_dir(&pristine).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
            }
            let mut damaged = bytes.clone();
            damaged[offset + 6] = 5;
            std::fs::write(copy.join(file.file_name().unwrap()), &damaged).unwrap();
            for outcome in open_both_ways_within_a_minute(&copy) {
                let err = outcome.expect_err("a damaged record type is refused");
                assert_eq!(
                    err.code(),
                    ErrorCode::StoreDamaged,
                    "record {index} of {file:?}: {err}"
                );
                assert!(err.to_string().contains("type 5"), "{err}");
            }
            attacked += 1;
        }
    }
    assert!(attacked >= 4, "only {attacked} records attacked");
}

/// A checkpoint rewritten shorter and then longer, and another beside it,
/// read back in the process that wrote them (a value held across a rewrite
/// left as it was read), from a read-only open of the log as its
/// write-ahead log left it (nothing was flushed, so from the memtable), and
/// after a read-write reopen, whose head follows the stored marker.
#[test]
fn checkpoints_rewritten_shorter_and_longer_read_back_after_every_kind_of_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let long = vec![7u8; 100_000];
    let short = vec![8u8; 10];
    let longer = vec![9u8; 200_000];
    {
        let log = RocksLog::open(&path, RocksOptions::default()).unwrap();
        for _ in 0..50 {
            append_one(&log).unwrap();
        }
        assert_eq!(log.head(), 50);
        log.write_checkpoint("projections", &long).unwrap();
        let held = log.read_checkpoint("projections").unwrap().unwrap();
        log.write_checkpoint("projections", &short).unwrap();
        assert_eq!(
            &*held,
            &long[..],
            "a value read is not changed under its reader"
        );
        drop(held);
        let read = log.read_checkpoint("projections").unwrap().unwrap();
        assert_eq!(&*read, &short[..]);
        drop(read);
        log.write_checkpoint("projections", &longer).unwrap();
        log.write_checkpoint("other", &short).unwrap();
        for _ in 0..10 {
            append_one(&log).unwrap();
        }
        assert_eq!(
            &*log.read_checkpoint("projections").unwrap().unwrap(),
            &longer[..]
        );
    }
    let reader = RocksLog::open_read_only(&path).unwrap();
    assert_eq!(reader.head(), 60);
    assert_eq!(
        &*reader.read_checkpoint("projections").unwrap().unwrap(),
        &longer[..]
    );
    assert_eq!(
        &*reader.read_checkpoint("other").unwrap().unwrap(),
        &short[..]
    );
    drop(reader);
    let log = RocksLog::open(&path, RocksOptions::default()).unwrap();
    assert_eq!(log.head(), 60);
    assert_eq!(
        &*log.read_checkpoint("projections").unwrap().unwrap(),
        &longer[..]
    );
    assert_eq!(append_one(&log).unwrap(), 61);
}
