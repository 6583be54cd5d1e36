//! The replay tools against adversarial input (issue 12): impossible
//! histories, damaged indexes, numbers at `u64::MAX`, oversized lines, and
//! imports that fail halfway.

mod common;

use common::{append_raw, lines, runtime, sample};
use std::io::{BufRead, BufReader, Cursor, Read};
use std::path::Path;

use subagent_core::{ErrorCode, RecordedEvent, StreamId, MAX_EVENT_BYTES};
use subagent_projections::testing::impossible_histories;
use subagent_replay::{export, import, import_directory, verify, ReplayError};
use subagent_store::{EventLog, IdLocation, IndexDamage, MemoryLog, RocksLog, RocksOptions};

#[test]
fn import_refuses_every_impossible_history_at_its_line() {
    let cases = impossible_histories();
    for case in &cases {
        let log = MemoryLog::new();
        match runtime().block_on(import(&log, Cursor::new(lines(&case.records)))) {
            Err(err @ ReplayError::ImpossibleHistory { .. }) => {
                assert_eq!(err.code(), ErrorCode::ReplayImpossibleHistory);
                let ReplayError::ImpossibleHistory { line, violation } = &err else {
                    unreachable!()
                };
                assert_eq!(violation.position, case.position, "{}: {err}", case.name);
                assert_eq!(*line as u64, case.position, "{}: {err}", case.name);
            }
            other => panic!("{}: expected ImpossibleHistory, got {other:?}", case.name),
        }
    }
    println!("{} impossible histories refused", cases.len());
}

#[test]
fn verify_reports_every_impossible_history_with_its_position() {
    for case in impossible_histories() {
        let log = MemoryLog::new();
        append_raw(&log, &case.records);
        let report = verify(&log).unwrap();
        assert!(!report.is_ok(), "{}", case.name);
        let violation = report
            .impossible_history
            .unwrap_or_else(|| panic!("{}: not reported", case.name));
        assert_eq!(
            violation.position, case.position,
            "{}: {violation}",
            case.name
        );
        assert!(report.index_problems.is_empty(), "{}", case.name);
    }
}

#[test]
fn verify_passes_an_admissible_log() {
    let log = MemoryLog::new();
    append_raw(&log, &sample());
    let report = verify(&log).unwrap();
    assert!(report.is_ok(), "{report:?}");
}

/// Every kind of index damage, on a log holding `sample()`, and the text its
/// report line must contain.
fn damages(records: &[RecordedEvent]) -> Vec<(IndexDamage, &'static str)> {
    let worker = records[4].stream;
    let worker_count = records.iter().filter(|r| r.stream == worker).count() as u64;
    let runtime_count = records
        .iter()
        .filter(|r| r.stream == StreamId::Runtime)
        .count() as u64;
    let target = &records[6];
    vec![
        (
            IndexDamage::Stream {
                stream: worker,
                version: 2,
                position: Some(1),
            },
            "points at position 1, not at its record",
        ),
        (
            IndexDamage::Stream {
                stream: worker,
                version: worker_count,
                position: None,
            },
            "no entry for version",
        ),
        (
            IndexDamage::Stream {
                stream: StreamId::Runtime,
                version: runtime_count + 1,
                position: Some(2),
            },
            "but the stream has 2 record(s)",
        ),
        (
            IndexDamage::EventId {
                event_id: target.event_id,
                location: None,
            },
            "no entry for event",
        ),
        (
            IndexDamage::EventId {
                event_id: target.event_id,
                location: Some(IdLocation {
                    stream: target.stream,
                    position: 3,
                    version: target.version,
                }),
            },
            "points at position 3",
        ),
        (
            IndexDamage::EventId {
                event_id: subagent_core::EventId::new(),
                location: Some(IdLocation {
                    stream: target.stream,
                    position: target.position,
                    version: target.version,
                }),
            },
            "which holds no such event",
        ),
    ]
}

fn assert_reported(report: &subagent_replay::VerifyReport, expected: &str) {
    assert!(!report.is_ok());
    assert!(
        report.index_problems.iter().any(|p| p.contains(expected)),
        "{expected:?} not in {:#?}",
        report.index_problems
    );
    assert!(report.impossible_history.is_none(), "{report:?}");
}

#[test]
fn verify_reports_damaged_indexes_of_the_memory_backend() {
    let records = sample();
    for (damage, expected) in damages(&records) {
        let log = MemoryLog::new();
        append_raw(&log, &records);
        assert!(verify(&log).unwrap().is_ok());
        assert!(log.damage_index(damage.clone()), "{damage:?}");
        assert_reported(&verify(&log).unwrap(), expected);
    }
}

#[test]
fn verify_reports_damaged_indexes_of_the_rocks_backend() {
    let records = sample();
    for (damage, expected) in damages(&records) {
        let dir = tempfile::tempdir().unwrap();
        let log = RocksLog::open(dir.path(), RocksOptions::default()).unwrap();
        append_raw(&log, &records);
        assert!(verify(&log).unwrap().is_ok());
        log.damage_index(damage.clone()).unwrap();
        let log = {
            drop(log);
            RocksLog::open(dir.path(), RocksOptions::default()).unwrap()
        };
        assert_reported(&verify(&log).unwrap(), expected);
    }
}

#[test]
fn the_reported_u64_max_import_is_refused_not_a_panic() {
    // Issue 12, item 8: two runtime lines, the first at version u64::MAX,
    // panicked with "attempt to add with overflow".
    let providers: Vec<RecordedEvent> = sample()
        .into_iter()
        .filter(|record| record.stream == StreamId::Runtime)
        .take(2)
        .enumerate()
        .map(|(index, mut record)| {
            record.position = index as u64 + 1;
            record
        })
        .collect();
    let mut input = providers.clone();
    input[0].version = u64::MAX;
    let log = MemoryLog::new();
    match runtime().block_on(import(&log, Cursor::new(lines(&input)))) {
        Err(err @ ReplayError::BadImport { line: 1, .. }) => {
            assert_eq!(err.code(), ErrorCode::ReplayBadImport);
            assert!(err.to_string().contains("out of sequence"), "{err}");
        }
        other => panic!("expected BadImport at line 1, got {other:?}"),
    }
    assert_eq!(log.head(), 0);

    let mut input = providers;
    input[0].position = u64::MAX;
    let log = MemoryLog::new();
    assert!(matches!(
        runtime().block_on(import(&log, Cursor::new(lines(&input)))),
        Err(ReplayError::BadImport { line: 1, .. })
    ));
}

/// An endless line of `x`, counting what is read from it.
struct Endless {
    read: std::rc::Rc<std::cell::Cell<usize>>,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(b'x');
        self.read.set(self.read.get() + buf.len());
        Ok(buf.len())
    }
}

#[test]
fn an_oversized_import_line_is_refused_without_reading_it_whole() {
    let read = std::rc::Rc::new(std::cell::Cell::new(0));
    let input = BufReader::new(Endless {
        read: std::rc::Rc::clone(&read),
    });
    let log = MemoryLog::new();
    let started = std::time::Instant::now();
    match runtime().block_on(import(&log, input)) {
        Err(err @ ReplayError::LineTooLong { line: 1, .. }) => {
            assert_eq!(err.code(), ErrorCode::ReplayLineTooLong);
        }
        other => panic!("expected LineTooLong, got {other:?}"),
    }
    assert!(
        read.get() <= MAX_EVENT_BYTES + 64 * 1024,
        "read {} bytes",
        read.get()
    );
    println!(
        "refused after reading {} bytes in {:?}",
        read.get(),
        started.elapsed()
    );
    assert_eq!(log.head(), 0);

    // A line of exactly the limit gets through the reader (and then fails
    // as the non-record it is).
    let exact = "x".repeat(MAX_EVENT_BYTES) + "\n";
    assert!(matches!(
        runtime().block_on(import(&log, Cursor::new(exact))),
        Err(ReplayError::BadImport { line: 1, .. })
    ));
}

fn siblings(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn import_dir(dir: &Path, input: impl BufRead) -> Result<u64, ReplayError> {
    runtime().block_on(import_directory(dir, input))
}

#[test]
fn import_directory_is_all_or_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let records = sample();

    // A failure on the last line leaves no directory and no staging behind.
    let mut bad = records.clone();
    bad.extend(
        impossible_histories()
            .remove(0)
            .records
            .into_iter()
            .last()
            .map(|mut record| {
                record.position = records.len() as u64 + 1;
                record.version = 1;
                record
            }),
    );
    assert!(matches!(
        import_dir(&dir, Cursor::new(lines(&bad))),
        Err(ReplayError::ImpossibleHistory { .. })
    ));
    assert!(!dir.exists());
    assert!(siblings(&dir).is_empty(), "{:?}", siblings(&dir));

    // A non-empty directory is refused and left as it was.
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "mine").unwrap();
    let err = import_dir(&dir, Cursor::new(lines(&records))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ReplayDirectoryNotEmpty);
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
        "mine"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();

    // A file in the way is refused and left as it was.
    std::fs::write(&dir, "a file").unwrap();
    assert!(import_dir(&dir, Cursor::new(lines(&records))).is_err());
    assert_eq!(std::fs::read_to_string(&dir).unwrap(), "a file");
    std::fs::remove_file(&dir).unwrap();

    // An empty directory, or none, is filled with exactly the export.
    for make_empty in [true, false] {
        if make_empty {
            std::fs::create_dir(&dir).unwrap();
        }
        let count = import_dir(&dir, Cursor::new(lines(&records))).unwrap();
        assert_eq!(count, records.len() as u64);
        assert_eq!(siblings(&dir), vec!["log".to_owned()]);
        let log = RocksLog::open(&dir, RocksOptions::default()).unwrap();
        let mut out = Vec::new();
        export(&log, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), lines(&records));
        assert!(verify(&log).unwrap().is_ok());
        drop(log);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
