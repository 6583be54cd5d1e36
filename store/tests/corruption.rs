//! Permanent corruption attack on a real RocksDB log (issue 12).
//!
//! A log is written in two sessions, so its directory holds every kind of
//! file: table files (`*.sst`, the first session's records, flushed when the
//! second session opened), the write-ahead log (`*.log`, the second
//! session's), `MANIFEST-*`, `CURRENT`, `OPTIONS-*` and `IDENTITY`. Then, for
//! each file and many offsets, a fresh copy of the directory gets one byte
//! flipped and is opened read-write and read-only. For every flip the outcome
//! must be one of:
//! - a typed [`StoreError`] at open, the data files left byte for byte as
//!   they were, and a second open refused the same way (nothing healed by
//!   deleting);
//! - a typed [`StoreError`] from a read;
//! - every acknowledged record intact: the whole log and every stream read
//!   back equal to what was appended.
//!
//! Never a silent loss: an open and full read that succeed with fewer or
//! different records fail the test. `make test` flips a few offsets per file
//! (`SUBAGENTS_CORRUPTION_FLIPS`, default 12); `make soak` flips many more.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use subagent_core::{Event, NewEvent, RecordedEvent, SessionId, StreamId};
use subagent_store::{
    Durability, EventLog, EventLogExt, ExpectedVersion, RocksLog, RocksOptions, StoreError,
    TornWrite,
};

const FLIPS_ENV: &str = "SUBAGENTS_CORRUPTION_FLIPS";
const STREAMS: usize = 6;

/// The acknowledged content of the log: the whole log, and each stream.
struct Acknowledged {
    all: Vec<RecordedEvent>,
    streams: BTreeMap<StreamId, Vec<RecordedEvent>>,
}

fn append_round(log: &RocksLog, streams: &[StreamId], turns: std::ops::Range<u64>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for turn in turns {
            for stream in streams {
                let events = (0..3)
                    .map(|step| {
                        NewEvent::new(Event::TurnStarted {
                            turn: turn * 3 + step,
                            epoch: 1,
                        })
                    })
                    .collect();
                log.append(*stream, ExpectedVersion::Any, events)
                    .await
                    .expect("append");
            }
        }
    });
}

/// Writes the pristine log and returns what was acknowledged.
fn write_pristine(dir: &Path) -> Acknowledged {
    let streams: Vec<StreamId> = (0..STREAMS)
        .map(|_| StreamId::Session(SessionId::new()))
        .collect();
    let options = RocksOptions {
        durability: Durability::Sync,
    };
    {
        let log = RocksLog::open(dir, options).expect("open");
        append_round(&log, &streams, 0..20);
    }
    // Reopening flushes the first session's write-ahead log into table files.
    let log = RocksLog::open(dir, options).expect("reopen");
    append_round(&log, &streams, 20..30);
    let all: Vec<RecordedEvent> = log
        .read_all(1)
        .collect::<Result<_, _>>()
        .expect("read back");
    let streams = streams
        .iter()
        .map(|stream| {
            let records = log
                .read_stream(*stream, 1)
                .collect::<Result<Vec<_>, _>>()
                .expect("stream");
            (*stream, records)
        })
        .collect();
    Acknowledged { all, streams }
}

/// The kind of a file in a log directory, for the report.
fn kind_of(name: &str) -> &'static str {
    if name.ends_with(".sst") {
        "sst"
    } else if name.ends_with(".log") {
        "wal"
    } else if name.starts_with("MANIFEST-") {
        "manifest"
    } else if name == "CURRENT" {
        "current"
    } else if name.starts_with("OPTIONS-") {
        "options"
    } else if name == "IDENTITY" {
        "identity"
    } else {
        "other"
    }
}

/// The data files of a directory and their bytes: everything but the lock
/// file, which holds nothing.
fn data_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| entry.expect("entry"))
        .filter(|entry| entry.file_name() != subagent_store::rocks::LOCK_FILE)
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(entry.path()).expect("read file"))
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for (name, bytes) in data_files(from) {
        std::fs::write(to.join(name), bytes).expect("copy");
    }
}

/// The offsets flipped in a file of `len` bytes: both ends (headers, footers,
/// the WAL's last record) and evenly spread ones in between.
fn offsets(len: usize, flips: usize) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    let mut chosen: Vec<usize> = (0..flips.min(len))
        .map(|index| index * len / flips.min(len))
        .chain((0..8.min(len)).map(|back| len - 1 - back))
        .chain(0..4.min(len))
        .collect();
    chosen.sort_unstable();
    chosen.dedup();
    chosen
}

/// What happened to one flip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    RefusedAtOpen,
    RefusedAtRead,
    Intact,
}

fn is_typed_damage(err: &StoreError) -> bool {
    matches!(
        err,
        StoreError::Damaged { .. }
            | StoreError::Corrupt { .. }
            | StoreError::NotALog { .. }
            | StoreError::UnsupportedFormat { .. }
            | StoreError::UnsupportedSchema { .. }
            | StoreError::Io(_)
    )
}

/// Reads everything back; `Ok` only if it equals what was acknowledged.
fn read_back(log: &RocksLog, acknowledged: &Acknowledged, what: &str) -> Outcome {
    let all: Result<Vec<RecordedEvent>, StoreError> = log.read_all(1).collect();
    let all = match all {
        Ok(all) => all,
        Err(err) => {
            assert!(is_typed_damage(&err), "{what}: read gave {err:?}");
            return Outcome::RefusedAtRead;
        }
    };
    assert_eq!(
        all.len(),
        acknowledged.all.len(),
        "{what}: SILENT LOSS: the log reads back {} records, {} were acknowledged",
        all.len(),
        acknowledged.all.len()
    );
    assert!(
        all == acknowledged.all,
        "{what}: SILENT CHANGE: records differ from those acknowledged"
    );
    assert_eq!(log.head(), acknowledged.all.len() as u64, "{what}: head");
    for (stream, expected) in &acknowledged.streams {
        match log.read_stream(*stream, 1).collect::<Result<Vec<_>, _>>() {
            Ok(records) => assert!(
                &records == expected,
                "{what}: SILENT LOSS in stream {stream}: {} of {} records",
                records.len(),
                expected.len()
            ),
            Err(err) => {
                assert!(is_typed_damage(&err), "{what}: stream read gave {err:?}");
                return Outcome::RefusedAtRead;
            }
        }
    }
    Outcome::Intact
}

/// Opens a flipped copy one way; checks the refusal or the content.
fn attack(
    dir: &Path,
    acknowledged: &Acknowledged,
    what: &str,
    open: impl Fn(&Path) -> Result<RocksLog, StoreError>,
) -> Outcome {
    let before = data_files(dir);
    match open(dir) {
        Ok(log) => read_back(&log, acknowledged, what),
        Err(err) => {
            assert!(is_typed_damage(&err), "{what}: open gave {err:?}");
            assert!(
                data_files(dir) == before,
                "{what}: a refused open changed the directory ({err})"
            );
            let again = open(dir).err();
            assert!(
                again.is_some(),
                "{what}: the first open was refused ({err}) but the second succeeded"
            );
            Outcome::RefusedAtOpen
        }
    }
}

#[test]
fn no_flipped_byte_in_any_file_loses_an_acknowledged_event_silently() {
    let flips: usize = std::env::var(FLIPS_ENV)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(12);
    let root = tempfile::tempdir().expect("tempdir");
    let pristine = root.path().join("pristine");
    let acknowledged = write_pristine(&pristine);
    let files = data_files(&pristine);
    let kinds: std::collections::BTreeSet<&str> = files.keys().map(|name| kind_of(name)).collect();
    for required in ["sst", "wal", "manifest", "current", "options"] {
        assert!(
            kinds.contains(required),
            "the pristine log has no {required} file: {:?}",
            files.keys().collect::<Vec<_>>()
        );
    }
    // (kind, outcome) -> count, for the report.
    let mut tally: BTreeMap<(&str, &str, Outcome), usize> = BTreeMap::new();
    let mut attempt = 0usize;
    for (name, bytes) in &files {
        for offset in offsets(bytes.len(), flips) {
            // Vary the flipped bit with the attempt, never a no-op.
            let mask = 1u8 << (attempt % 8);
            attempt += 1;
            for (mode, read_only) in [("read-write", false), ("read-only", true)] {
                let copy: PathBuf = root.path().join(format!("flip-{attempt}-{mode}"));
                copy_dir(&pristine, &copy);
                let mut damaged = bytes.clone();
                damaged[offset] ^= mask;
                std::fs::write(copy.join(name), &damaged).expect("write flip");
                let what = format!("{mode} open of {name} with byte {offset} ^ {mask:#04x}");
                let outcome = attack(&copy, &acknowledged, &what, |dir| {
                    if read_only {
                        RocksLog::open_read_only(dir)
                    } else {
                        RocksLog::open(dir, RocksOptions::default())
                    }
                });
                *tally.entry((kind_of(name), mode, outcome)).or_default() += 1;
                std::fs::remove_dir_all(&copy).expect("cleanup");
            }
        }
    }
    println!("flips per file: {flips}; files: {}", files.len());
    println!("{:<10} {:<11} {:<15} count", "kind", "open", "outcome");
    for ((kind, mode, outcome), count) in &tally {
        println!(
            "{kind:<10} {mode:<11} {:<15} {count}",
            format!("{outcome:?}")
        );
    }
    // The attack reached the data: some flips must be refused in each of the
    // write-ahead log and the table files, or the test proved nothing.
    for kind in ["wal", "sst"] {
        let refused: usize = tally
            .iter()
            .filter(|((k, _, outcome), _)| *k == kind && *outcome != Outcome::Intact)
            .map(|(_, count)| count)
            .sum();
        assert!(refused > 0, "no flip in a {kind} file was ever detected");
    }
}

/// A write a crash tore at the end of the newest write-ahead log was never
/// acknowledged (an append returns only once its write is complete): the
/// log opens without it, every record before it intact (those of the same
/// log included), and the next open finds the log whole. A last record
/// whose length field grew is damage, not a tear: refused.
#[test]
fn a_write_torn_at_the_end_of_the_wal_is_dropped_and_nothing_acknowledged_is() {
    let root = tempfile::tempdir().expect("tempdir");
    let pristine = root.path().join("pristine");
    write_pristine(&pristine);
    let kept_before_tear = {
        // Reopening moves the pristine records into table files; these two
        // groups are then the newest write-ahead log's two records, and the
        // cuts below tear the second.
        let log = RocksLog::open(&pristine, RocksOptions::default()).expect("reopen");
        let stream = StreamId::Session(SessionId::new());
        append_round(&log, &[stream], 0..2);
        held_less(&log, 3)
    };
    let files = data_files(&pristine);
    let (wal, bytes) = newest_wal(&files);
    let length_at =
        |start: usize| usize::from(u16::from_le_bytes([bytes[start + 4], bytes[start + 5]]));
    let second = 7 + length_at(0);
    let length = length_at(second);
    assert_eq!(
        (bytes[6], bytes[second + 6], second + 7 + length),
        (1, 1, bytes.len()),
        "the newest WAL holds the two groups, whole"
    );
    let mut kept: Vec<usize> = (second..=second + 8)
        .chain(bytes.len() - 16..bytes.len())
        .collect();
    kept.push(second + (bytes.len() - second) / 2);
    for keep in kept {
        let copy = root.path().join(format!("kept-{keep}"));
        copy_dir(&pristine, &copy);
        std::fs::write(copy.join(wal), &bytes[..keep]).expect("truncate");
        let what = format!("{wal} cut to {keep} of {} bytes", bytes.len());
        // Cut where the second record begins, the log is whole and shorter:
        // nothing is torn.
        let torn = (keep > second).then(|| TornWrite {
            file: copy.join(wal),
            offset: second as u64,
        });
        let log = RocksLog::open_read_only(&copy)
            .unwrap_or_else(|err| panic!("{what}, read-only: {err}"));
        assert_eq!(read_back(&log, &kept_before_tear, &what), Outcome::Intact);
        assert_eq!(log.torn_write(), torn.as_ref(), "{what}, read-only");
        drop(log);
        let log = RocksLog::open(&copy, RocksOptions::default())
            .unwrap_or_else(|err| panic!("{what}: {err}"));
        assert_eq!(read_back(&log, &kept_before_tear, &what), Outcome::Intact);
        assert_eq!(log.torn_write(), torn.as_ref(), "{what}");
        drop(log);
        let log = RocksLog::open(&copy, RocksOptions::default())
            .unwrap_or_else(|err| panic!("{what}, opened again: {err}"));
        assert_eq!(read_back(&log, &kept_before_tear, &what), Outcome::Intact);
        assert_eq!(log.torn_write(), None, "{what}, opened again: whole");
        let next = log
            .append(
                StreamId::Runtime,
                ExpectedVersion::Any,
                vec![NewEvent::new(Event::ProviderRemoved {
                    name: "after".into(),
                })],
            )
            .wait()
            .unwrap_or_else(|err| panic!("{what}: append after: {err}"));
        assert_eq!(
            next.first_position,
            kept_before_tear.all.len() as u64 + 1,
            "{what}"
        );
    }
    // The length field of the whole last record grown: a prefix of what
    // follows its header checks out, so it is no tear.
    let acknowledged = held_less(&RocksLog::open_read_only(&pristine).expect("pristine"), 0);
    for bit in [0, 3, 8, 15] {
        let copy = root.path().join(format!("longer-{bit}"));
        copy_dir(&pristine, &copy);
        let mut longer = bytes.clone();
        let grown = (length | (1 << bit)).max(length + 1);
        longer[second + 4..second + 6]
            .copy_from_slice(&u16::try_from(grown).expect("u16").to_le_bytes());
        std::fs::write(copy.join(wal), &longer).expect("write");
        let outcome = attack(
            &copy,
            &acknowledged,
            &format!("{wal} with its last length {grown} for {length}"),
            |dir| RocksLog::open(dir, RocksOptions::default()),
        );
        assert_eq!(outcome, Outcome::RefusedAtOpen, "length {grown}");
    }
}

/// The physical records of a write-ahead log: offset, type, length.
fn physical_records(bytes: &[u8]) -> Vec<(usize, u8, usize)> {
    const BLOCK: usize = 32 * 1024;
    let mut records = Vec::new();
    let mut at = 0;
    while at + 7 <= bytes.len() {
        if BLOCK - at % BLOCK < 7 {
            at += BLOCK - at % BLOCK;
            continue;
        }
        let length = usize::from(u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]));
        records.push((at, bytes[at + 6], length));
        at += 7 + length;
    }
    records
}

/// A group larger than a block is written in fragments; a crash that tears
/// it after its first fragment, inside the next one's header or payload,
/// or a byte short of its end, tore a write that was never acknowledged:
/// dropped whole, everything before it kept.
#[test]
fn a_write_torn_between_its_fragments_is_dropped_whole() {
    let root = tempfile::tempdir().expect("tempdir");
    let pristine = root.path().join("pristine");
    write_pristine(&pristine);
    let kept_before_tear = {
        let log = RocksLog::open(&pristine, RocksOptions::default()).expect("reopen");
        append_round(&log, &[StreamId::Session(SessionId::new())], 0..1);
        let large = NewEvent::new(Event::ProviderRemoved {
            name: "n".repeat(40_000),
        });
        log.append(StreamId::Runtime, ExpectedVersion::Any, vec![large])
            .wait()
            .expect("append the large group");
        held_less(&log, 1)
    };
    let files = data_files(&pristine);
    let (wal, bytes) = newest_wal(&files);
    let records = physical_records(bytes);
    let kinds: Vec<u8> = records.iter().map(|(_, kind, _)| *kind).collect();
    assert_eq!(
        kinds,
        [1, 2, 4],
        "a whole group, then the large one in two fragments"
    );
    let (first, last) = (records[1].0, records[2].0);
    for keep in [first + 100, last, last + 3, last + 100, bytes.len() - 1] {
        let copy = root.path().join(format!("kept-{keep}"));
        copy_dir(&pristine, &copy);
        std::fs::write(copy.join(wal), &bytes[..keep]).expect("truncate");
        let what = format!("{wal} cut to {keep} of {} bytes", bytes.len());
        let log = RocksLog::open(&copy, RocksOptions::default())
            .unwrap_or_else(|err| panic!("{what}: {err}"));
        assert_eq!(read_back(&log, &kept_before_tear, &what), Outcome::Intact);
    }
}

/// What `log` holds, read whole, less its last `dropped` records: what was
/// acknowledged before the write a test tears.
fn held_less(log: &RocksLog, dropped: usize) -> Acknowledged {
    let mut all: Vec<RecordedEvent> = log
        .read_all(1)
        .collect::<Result<_, _>>()
        .expect("read back");
    all.truncate(all.len() - dropped);
    let mut streams: BTreeMap<StreamId, Vec<RecordedEvent>> = BTreeMap::new();
    for record in &all {
        streams
            .entry(record.stream)
            .or_default()
            .push(record.clone());
    }
    Acknowledged { all, streams }
}

/// The newest write-ahead log among a directory's `files` (by number, as
/// RocksDB names them): its name and bytes.
fn newest_wal(files: &BTreeMap<String, Vec<u8>>) -> (&String, &Vec<u8>) {
    files
        .iter()
        .filter(|(name, _)| kind_of(name) == "wal")
        .max_by_key(|(name, _)| {
            name.trim_end_matches(".log")
                .parse::<u64>()
                .expect("a WAL number")
        })
        .expect("a write-ahead log")
}
