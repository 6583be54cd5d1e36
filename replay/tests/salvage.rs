//! `salvage`: the longest trustworthy prefix of a damaged log, copied into a
//! new directory, and an exact account of what was left behind.

mod common;

use common::{append_raw, attachment_line, history_with_image, lines, runtime, PNG};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use subagent_core::{ErrorCode, RecordedEvent};
use subagent_projections::testing::{history, impossible_histories, steps, Step};
use subagent_projections::HistoryCheck;
use subagent_replay::{
    export, import_directory, longest_prefix, salvage, verify, PrefixEnd, ReplayError,
    SalvageReport,
};
use subagent_store::{EventLog, EventLogExt, RocksLog, RocksOptions, StoreError};

fn ok(records: &[RecordedEvent]) -> impl Iterator<Item = Result<RecordedEvent, StoreError>> + '_ {
    records.iter().cloned().map(Ok)
}

/// A history of a few hundred records: a root, children, turns, messages,
/// settlements, external runs.
fn long_history() -> Vec<RecordedEvent> {
    let mut plan = Vec::new();
    for round in 0..40 {
        plan.push(Step::Child {
            parent: round % 3,
            continuable: round % 4 != 3,
        });
        plan.extend(std::iter::repeat_n(Step::Advance { target: round + 1 }, 6));
        plan.push(Step::Message { target: round + 1 });
        plan.push(Step::Advance { target: round + 1 });
    }
    history(&plan)
}

/// Writes `records` one append each (Sync), so the write-ahead log holds
/// one record per event, as a host's log does.
fn write_log(dir: &Path, records: &[RecordedEvent]) {
    append_raw(
        &RocksLog::open(dir, RocksOptions::default()).unwrap(),
        records,
    );
}

/// Every file below `dir`, with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect()
}

fn wal_file(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "log"))
        .expect("the log has a write-ahead file")
}

fn read_back(dir: &Path) -> Vec<RecordedEvent> {
    let log = RocksLog::open_read_only(dir).expect("the salvaged log opens");
    log.read_all(1).map(Result::unwrap).collect()
}

// ---- the prefix ---------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Cut anywhere, a history keeps exactly its longest prefix that ends
    /// on a complete decision: the cut itself when the history may end
    /// there, else the last such point before it.
    #[test]
    fn a_cut_history_keeps_its_last_complete_decision(plan in steps(40), cut in any::<prop::sample::Index>()) {
        let records = history(&plan);
        let cut = cut.index(records.len() + 1);
        let prefix = longest_prefix(ok(&records[..cut]));
        prop_assert_eq!(&prefix.end, &PrefixEnd::Whole);
        prop_assert!(prefix.kept <= cut as u64);
        let kept = usize::try_from(prefix.kept).unwrap();
        prop_assert!(HistoryCheck::history(&records[..kept]).is_ok());
        prop_assert_eq!(prefix.incomplete_decision, (cut - kept) as u64);
        // Nothing longer up to the cut would do.
        for longer in kept + 1..=cut {
            prop_assert!(HistoryCheck::history(&records[..longer]).is_err(), "{} of {}", longer, cut);
        }
    }
}

#[test]
fn some_cuts_fall_inside_a_decision() {
    let records = long_history();
    let inside = (1..records.len())
        .filter(|&cut| longest_prefix(ok(&records[..cut])).kept < cut as u64)
        .count();
    assert!(inside > 0, "the sample has multi-event decisions");
}

#[test]
fn an_unreadable_record_ends_the_prefix_at_the_decision_before_it() {
    let records = long_history();
    for cut in [1, 2, 17, records.len() / 2, records.len() - 1] {
        let damaged = ok(&records[..cut]).chain(std::iter::once(Err(StoreError::Corrupt {
            position: cut as u64 + 1,
            reason: "checksum mismatch".into(),
        })));
        let prefix = longest_prefix(damaged);
        assert!(
            matches!(&prefix.end, PrefixEnd::Unreadable { position, reason }
                if *position == cut as u64 + 1 && reason.contains("checksum mismatch")),
            "{prefix:?}"
        );
        assert_eq!(prefix.kept, longest_prefix(ok(&records[..cut])).kept);
    }
}

#[test]
fn a_misnumbered_record_ends_the_prefix() {
    let records = long_history();
    let mut skipped = records[..10].to_vec();
    skipped.extend(records[11..].iter().cloned());
    let prefix = longest_prefix(ok(&skipped));
    assert!(
        matches!(&prefix.end, PrefixEnd::Misnumbered { position: 11, reason } if reason.contains("expected position 11")),
        "{prefix:?}"
    );
    assert!(prefix.kept <= 10);
}

#[test]
fn an_impossible_record_ends_the_prefix_before_it() {
    for case in impossible_histories() {
        let prefix = longest_prefix(ok(&case.records));
        // Either the record at the case's position is refused, or (a history
        // that ends inside a decision) it ends the records unfinished.
        match &prefix.end {
            PrefixEnd::Impossible { position, .. } => {
                assert_eq!(*position, case.position, "{}: {prefix:?}", case.name);
            }
            PrefixEnd::Whole => {
                assert_eq!(case.position, case.records.len() as u64, "{}", case.name);
                assert!(prefix.incomplete_decision > 0, "{}: {prefix:?}", case.name);
            }
            other => panic!("{}: {other:?}", case.name),
        }
        assert!(prefix.kept < case.position, "{}: {prefix:?}", case.name);
        let kept = usize::try_from(prefix.kept).unwrap();
        assert!(
            HistoryCheck::history(&case.records[..kept]).is_ok(),
            "{}",
            case.name
        );
    }
}

// ---- salvage of a real log --------------------------------------------------------

#[test]
fn an_intact_log_is_copied_whole() {
    let records = long_history();
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = (dir.path().join("source"), dir.path().join("copy"));
    write_log(&source, &records);
    let before = snapshot(&source);

    let report = runtime().block_on(salvage(&source, &target, None)).unwrap();
    assert_eq!(report.prefix.kept, records.len() as u64);
    assert_eq!(report.prefix.end, PrefixEnd::Whole);
    assert_eq!(report.last_known, records.len() as u64);
    assert_eq!(report.lost, 0);
    assert_eq!(report.dropped_readable, 0);
    assert_eq!(read_back(&target), records);
    assert_eq!(snapshot(&source), before, "the source is never written to");
}

#[test]
fn a_damaged_write_ahead_log_yields_a_verified_prefix_and_names_what_was_lost() {
    let records = long_history();
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = (dir.path().join("source"), dir.path().join("copy"));
    write_log(&source, &records);
    let wal = wal_file(&source);
    let mut bytes = std::fs::read(&wal).unwrap();
    assert!(bytes.len() > 4096, "the events are in the write-ahead log");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&wal, &bytes).unwrap();
    let damaged = snapshot(&source);
    let refused = RocksLog::open_read_only(&source)
        .err()
        .expect("an ordinary open refuses the damage");
    assert_eq!(refused.code(), ErrorCode::StoreDamaged, "{refused}");

    let mut dropped_out = Vec::new();
    let report: SalvageReport = runtime()
        .block_on(salvage(&source, &target, Some(&mut dropped_out)))
        .unwrap();
    let head = records.len() as u64;
    println!(
        "head {head}: kept {}, lost {}, {} left behind still read ({:?})",
        report.prefix.kept, report.lost, report.dropped_readable, report.prefix.end
    );
    assert!(
        report.prefix.kept > 0 && report.prefix.kept < head,
        "{report:?}"
    );
    assert_eq!(
        report.last_known, head,
        "the damaged log still shows its head"
    );
    assert_eq!(report.lost, head - report.prefix.kept);

    // The copy is exactly the originals' prefix, and passes every check.
    let kept = usize::try_from(report.prefix.kept).unwrap();
    assert_eq!(read_back(&target), records[..kept]);
    let verified = verify(&RocksLog::open_read_only(&target).unwrap()).unwrap();
    assert!(verified.is_ok(), "{verified:?}");

    // What was left behind but still reads is listed and written out, each
    // the original record at its position, and none within the prefix.
    let written: Vec<RecordedEvent> = String::from_utf8(dropped_out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(written.len() as u64, report.dropped_readable);
    assert_eq!(report.dropped.len(), written.len());
    for (listed, record) in report.dropped.iter().zip(&written) {
        assert!(record.position > report.prefix.kept);
        assert_eq!(listed.position, record.position);
        assert_eq!(
            &records[usize::try_from(record.position).unwrap() - 1],
            record
        );
    }
    assert_eq!(snapshot(&source), damaged, "the source is never written to");
}

#[test]
fn salvage_refuses_a_non_empty_target_and_a_source_that_is_no_log() {
    let records = long_history();
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = (dir.path().join("source"), dir.path().join("copy"));
    write_log(&source, &records);
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep.txt"), b"mine").unwrap();
    let refused = runtime()
        .block_on(salvage(&source, &target, None))
        .unwrap_err();
    assert!(
        matches!(refused, ReplayError::DirectoryNotEmpty(_)),
        "{refused}"
    );
    assert_eq!(std::fs::read(target.join("keep.txt")).unwrap(), b"mine");

    let nothing = dir.path().join("nothing");
    std::fs::create_dir(&nothing).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    let refused = runtime()
        .block_on(salvage(&nothing, &elsewhere, None))
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::StoreNotALog, "{refused}");
    assert!(!elsewhere.exists(), "nothing was created");
}

#[test]
fn a_salvaged_export_matches_the_original_export_up_to_the_prefix() {
    let records = long_history();
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = (dir.path().join("source"), dir.path().join("copy"));
    write_log(&source, &records);
    runtime().block_on(salvage(&source, &target, None)).unwrap();
    let mut original = Vec::new();
    export(&RocksLog::open_read_only(&source).unwrap(), &mut original).unwrap();
    let mut copied = Vec::new();
    export(&RocksLog::open_read_only(&target).unwrap(), &mut copied).unwrap();
    assert_eq!(original, copied);
}

// ---- attachments -------------------------------------------------------------------

#[test]
fn a_log_with_an_attachment_is_salvaged_with_it() {
    let (records, id) = history_with_image();
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = (dir.path().join("source"), dir.path().join("copy"));
    // Written through an import, which stores the image with the prompt
    // that names it, as the gateway does.
    let last = records.len() - 1;
    let text =
        lines(&records[..last]) + &attachment_line(&id.to_string(), PNG) + &lines(&records[last..]);
    runtime()
        .block_on(import_directory(&source, std::io::Cursor::new(text)))
        .unwrap();

    let report = runtime().block_on(salvage(&source, &target, None)).unwrap();
    assert_eq!(report.prefix.end, PrefixEnd::Whole);
    assert_eq!(report.prefix.kept, records.len() as u64);
    let copy = RocksLog::open_read_only(&target).unwrap();
    assert_eq!(copy.attachment(&id).unwrap().as_deref(), Some(PNG));
    let verified = verify(&copy).unwrap();
    assert!(verified.is_ok(), "{verified:?}");
    let (mut original, mut copied) = (Vec::new(), Vec::new());
    export(&RocksLog::open_read_only(&source).unwrap(), &mut original).unwrap();
    export(&copy, &mut copied).unwrap();
    assert_eq!(original, copied, "the image travels with the prompt");
}

#[test]
fn a_record_whose_attachment_is_lost_ends_the_prefix_before_it() {
    let (records, id) = history_with_image();
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = (dir.path().join("source"), dir.path().join("copy"));
    // The records without the image's bytes: the blob store lost them.
    write_log(&source, &records);

    let report = runtime().block_on(salvage(&source, &target, None)).unwrap();
    let named_at = records.len() as u64;
    assert!(
        matches!(&report.prefix.end, PrefixEnd::AttachmentUnreadable { position, reason }
            if *position == named_at
                && reason.contains(&id.to_string())
                && reason.contains("not in the blob store")),
        "{report:?}"
    );
    assert!(report.prefix.kept < named_at, "{report:?}");
    assert_eq!(report.lost, named_at - report.prefix.kept);
    let kept = usize::try_from(report.prefix.kept).unwrap();
    assert_eq!(read_back(&target), records[..kept]);
    let verified = verify(&RocksLog::open_read_only(&target).unwrap()).unwrap();
    assert!(verified.is_ok(), "{verified:?}");
}
