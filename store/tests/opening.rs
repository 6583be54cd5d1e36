//! What `RocksLog` refuses to open, and how (issue 12): one writer per
//! directory by an OS lock, never a new log over the remains of one, a
//! read-only handle that cannot write.

use subagent_core::{Event, NewEvent, SessionId, StreamId};
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
    assert_eq!(err.code(), "store/locked");
    // Readers need no lock.
    let reader = RocksLog::open_read_only(&path).unwrap();
    assert_eq!(reader.head(), 1);
    drop(first);
    let again = RocksLog::open(&path, RocksOptions::default()).unwrap();
    assert_eq!(again.head(), 1);
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
    assert_eq!(err.code(), "store/read-only");
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
    assert_eq!(err.code(), "store/not-a-log");
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
        assert_eq!(err.code(), "store/damaged");
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
