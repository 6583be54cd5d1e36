//! Replay debugging end to end on RocksDB: state at any position, checkpoints
//! across close and reopen, verify, diff, export and import.

mod common;

use common::{lines, runtime, sample};
use std::io::Cursor;

use proptest::prelude::*;
use subagent_core::{RecordedEvent, SessionMode};
use subagent_projections::testing::{history, steps, HistoryBuilder};
use subagent_projections::{HistoryCheck, MapSizes, Projections, MAP_SIZES_NAME};
use subagent_replay::{
    diff, export, import, state_at, verify, Change, Checkpointed, ReplayError, CHECKPOINT_NAME,
};
use subagent_store::{EventLog, MemoryLog, RocksLog, RocksOptions};

/// Writes `records` into `log` through `import`, keeping their positions.
fn load<L: EventLog>(log: &L, records: &[RecordedEvent]) {
    let count = runtime()
        .block_on(import(log, Cursor::new(lines(records))))
        .unwrap();
    assert_eq!(count, records.len() as u64);
}

/// The longest prefix of `records` up to half of them that does not end
/// inside a decision (an export of a real log never does).
fn first_half(records: &[RecordedEvent]) -> usize {
    (0..=records.len() / 2)
        .rev()
        .find(|&cut| HistoryCheck::history(&records[..cut]).is_ok())
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Invariant 10 on a real log: at every position, across checkpoints,
    /// close and reopen, incremental == rebuilt.
    #[test]
    fn checkpointed_state_equals_rebuilt_across_close_and_reopen(steps in steps(40), every in 1u64..10) {
        let records = history(&steps);
        let dir = tempfile::tempdir().unwrap();
        let half = first_half(&records);
        {
            let log = RocksLog::open(dir.path(), RocksOptions::default()).unwrap();
            load(&log, &records[..half]);
            let (opened, _) = Checkpointed::open(log, every).unwrap();
            prop_assert_eq!(opened.state(), &Projections::fold(&records[..half]));
            opened.close().unwrap();
        }
        let log = RocksLog::open(dir.path(), RocksOptions::default()).unwrap();
        let (mut opened, report) = Checkpointed::open(log.clone(), every).unwrap();
        prop_assert_eq!(report.checkpoint_position, Some(half as u64));
        prop_assert_eq!(report.tail_events, 0);
        // The rest arrives while the projections are open, as in the runtime.
        let tail = &records[half..];
        runtime().block_on(async {
            for record in tail {
                let new = subagent_core::NewEvent::new(record.event.clone());
                log.append(record.stream, subagent_store::ExpectedVersion::Any, vec![new]).await.unwrap();
            }
        });
        opened.catch_up().unwrap();
        prop_assert_eq!(opened.state().position, records.len() as u64);
        let rebuilt = state_at(&log, None).unwrap();
        prop_assert_eq!(opened.state(), &rebuilt);
        for position in (0..=records.len()).step_by(7) {
            let mut expected = Projections::fold(&records[..position]);
            expected.position = position as u64;
            let mut at = state_at(&log, Some(position as u64)).unwrap();
            // Event ids and timestamps of the appended tail differ; states do not depend on them.
            at.position = position as u64;
            prop_assert_eq!(at, expected);
        }
        let report = verify(&log).unwrap();
        prop_assert!(report.is_ok(), "{:?}", report);
    }
}

/// Periodic saves come once the events since the last one number at
/// least the entries it held (and the minimum): the gaps between saves
/// grow with the state, where a fixed interval of 2 would have saved at
/// every other event.
#[test]
fn checkpointed_saves_as_often_as_the_state_is_large() {
    const MINIMUM: u64 = 2;
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    for n in 0..40 {
        history.child(root, 1, &format!("child {n}"), SessionMode::OneShot, false);
    }
    let (mut opened, _) = Checkpointed::open(MemoryLog::new(), MINIMUM).unwrap();
    // (position, entries of the state saved)
    let mut saved = vec![(0, 0)];
    for record in &history.records {
        opened.apply(record).unwrap();
        let stored = MapSizes::from_stored(opened.log().read_checkpoint(MAP_SIZES_NAME));
        if let Some(sizes) = stored.filter(|sizes| sizes.position != saved.last().unwrap().0) {
            assert_eq!(sizes.position, record.position);
            saved.push((sizes.position, sizes.entries()));
        }
    }
    assert!(saved.len() > 3, "{saved:?}");
    assert!(saved.len() < history.records.len() / 8, "{saved:?}");
    for pair in saved.windows(2) {
        let [(before, entries), (at, _)] = pair else {
            unreachable!()
        };
        assert_eq!(at - before, MINIMUM.max(*entries), "{pair:?}");
    }
}

#[test]
fn a_position_past_the_head_is_a_clear_error() {
    let log = MemoryLog::new();
    load(&log, &sample());
    let head = log.head();
    match state_at(&log, Some(head + 1)) {
        Err(err @ ReplayError::PositionPastHead { .. }) => {
            assert_eq!(
                err.to_string(),
                format!("position {} is past the head of the log ({head})", head + 1)
            );
        }
        other => panic!("expected PositionPastHead, got {other:?}"),
    }
}

#[test]
fn bad_checkpoints_are_discarded_and_rebuilt_never_trusted() {
    let records = sample();
    let log = MemoryLog::new();
    load(&log, &records);
    let rebuilt = Projections::fold(&records);

    use subagent_projections::checkpoint;
    let mut corrupt = checkpoint::encode(&rebuilt);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    // What another build would write: a frame of another version.
    let of_version = |mut frame: Vec<u8>, version: u32| {
        frame[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = checkpoint::checksum(&frame).unwrap();
        frame[12..16].copy_from_slice(&crc.to_le_bytes());
        frame
    };
    let next = checkpoint::CHECKPOINT_VERSION + 1;
    let older = checkpoint::FIRST_BINARY_VERSION;
    for (bytes, why, other_version) in [
        (b"garbage".to_vec(), "malformed", None),
        (corrupt, "checksum", None),
        (
            br#"{"checkpointVersion": 9, "position": 1, "state": {}}"#.to_vec(),
            "only versions 1 and 2 were JSON",
            None,
        ),
        (
            br#"{"checkpointVersion":2,"position":1,"state":{}}"#.to_vec(),
            "checkpoint of format version 2, which this build does not read",
            Some(2),
        ),
        (
            of_version(checkpoint::encode(&rebuilt), older),
            &*format!("checkpoint of format version {older}, which"),
            Some(older),
        ),
        (
            of_version(checkpoint::encode(&rebuilt), next),
            &*format!("checkpoint of format version {next}, which"),
            Some(next),
        ),
    ] {
        log.write_checkpoint(CHECKPOINT_NAME, &bytes).unwrap();
        let (opened, report) = Checkpointed::open(log.clone(), 0).unwrap();
        assert!(
            report
                .discarded
                .as_deref()
                .unwrap_or_default()
                .contains(why),
            "{report:?}"
        );
        assert_eq!(report.tail_events, records.len() as u64);
        assert_eq!(opened.state(), &rebuilt);
        // Verify flags a damaged checkpoint, and only notes one of another
        // format version: that is an upgrade, not damage.
        let verified = verify(&log).unwrap();
        assert_eq!(verified.checkpoint_other_version, other_version, "{why}");
        assert_eq!(
            verified.checkpoint_problem.is_some(),
            other_version.is_none(),
            "{why}"
        );
        assert_eq!(verified.is_ok(), other_version.is_some(), "{verified:?}");
        assert_eq!(verified.checkpoint_position, None);
    }

    // A well-formed checkpoint from the future (a longer, lost log) is refused too.
    let mut future = rebuilt.clone();
    future.position = 10_000;
    log.write_checkpoint(
        CHECKPOINT_NAME,
        &subagent_projections::checkpoint::encode(&future),
    )
    .unwrap();
    let (opened, report) = Checkpointed::open(log.clone(), 0).unwrap();
    assert!(report.discarded.unwrap().contains("past the head"));
    assert_eq!(opened.state(), &rebuilt);
    let verified = verify(&log).unwrap();
    assert!(!verified.is_ok());
    let past_head = Some(format!(
        "checkpoint at 10000 is past the head {}",
        records.len()
    ));
    assert_eq!(verified.checkpoint_problem, past_head);

    // So is one of an older or a newer format: it may not be read, but its
    // position is where every format keeps it, and a lost tail is a
    // problem.
    for version in [older, next] {
        let other = of_version(checkpoint::encode(&future), version);
        log.write_checkpoint(CHECKPOINT_NAME, &other).unwrap();
        let verified = verify(&log).unwrap();
        assert!(!verified.is_ok(), "{version}");
        assert_eq!(verified.checkpoint_other_version, None);
        assert_eq!(verified.checkpoint_problem, past_head);
    }
}

/// Beside each checkpoint the sizes of its maps are saved, and every fold
/// from position 1 (`state_at`, `verify`, an open that refolds) starts from
/// them: the same state, its maps allocated up front. Sizes that do not
/// decode are no hint, and no error.
#[test]
fn the_sizes_saved_beside_a_checkpoint_size_the_next_full_fold() {
    let records = sample();
    let head = records.len() as u64;
    let log = MemoryLog::new();
    load(&log, &records);
    let rebuilt = Projections::fold(&records);
    assert!(
        rebuilt.sessions.len() * 4 < records.len(),
        "{}",
        rebuilt.sessions.len()
    );
    assert!(log.read_checkpoint(MAP_SIZES_NAME).unwrap().is_none());
    let without = state_at(&log, None).unwrap();
    assert_eq!(without, rebuilt);
    assert!(without.sessions.capacity() < records.len());

    let (opened, _) = Checkpointed::open(log.clone(), 0).unwrap();
    let log = opened.close().unwrap();
    let saved = log.read_checkpoint(MAP_SIZES_NAME).unwrap().unwrap();
    assert_eq!(MapSizes::decode(&saved), Some(MapSizes::of(&rebuilt)));
    assert_eq!(MapSizes::of(&rebuilt).position, head);

    // A hint of one session an event: each fold from position 1 reserves
    // it, scaled to where the fold stops, and folds the same state.
    let every_event = MapSizes::every_map(head, head);
    log.write_checkpoint(MAP_SIZES_NAME, &every_event.encode())
        .unwrap();
    let presized = state_at(&log, None).unwrap();
    assert_eq!(presized, rebuilt);
    assert!(presized.sessions.capacity() >= records.len());
    assert!(presized.inboxes.capacity() >= records.len());
    let half = state_at(&log, Some(head / 2)).unwrap();
    assert_eq!(half, Projections::fold(&records[..records.len() / 2]));
    assert!(half.sessions.capacity() >= records.len() / 2);
    assert!(half.sessions.capacity() < presized.sessions.capacity());
    assert!(verify(&log).unwrap().is_ok());
    // An open whose checkpoint is discarded refolds from the hint.
    log.write_checkpoint(CHECKPOINT_NAME, b"not a checkpoint")
        .unwrap();
    let (opened, report) = Checkpointed::open(log.clone(), 0).unwrap();
    assert!(report.discarded.is_some());
    assert_eq!(opened.state(), &rebuilt);
    assert!(opened.state().sessions.capacity() >= records.len());

    // Bytes that are not sizes are ignored.
    log.write_checkpoint(MAP_SIZES_NAME, b"not sizes").unwrap();
    let ignored = state_at(&log, None).unwrap();
    assert_eq!(ignored, rebuilt);
    assert!(ignored.sessions.capacity() < records.len());

    // A log with sizes and no checkpoint at all (the sizes copied into a
    // fresh log): its open refolds from them.
    let fresh = MemoryLog::new();
    load(&fresh, &records);
    fresh
        .write_checkpoint(MAP_SIZES_NAME, &every_event.encode())
        .unwrap();
    let (opened, report) = Checkpointed::open(fresh, 0).unwrap();
    assert_eq!((report.checkpoint_position, report.discarded), (None, None));
    assert_eq!(opened.state(), &rebuilt);
    assert!(opened.state().sessions.capacity() >= records.len());
}

#[test]
fn verify_reports_a_checkpoint_that_disagrees_with_the_log() {
    let records = sample();
    let log = MemoryLog::new();
    load(&log, &records);
    let (opened, _) = Checkpointed::open(log.clone(), 0).unwrap();
    let log = opened.close().unwrap();
    assert!(verify(&log).unwrap().is_ok());

    let mut tampered = Projections::fold(&records);
    tampered.roots.clear();
    log.write_checkpoint(
        CHECKPOINT_NAME,
        &subagent_projections::checkpoint::encode(&tampered),
    )
    .unwrap();
    let report = verify(&log).unwrap();
    assert!(!report.is_ok());
    assert!(
        report
            .differences
            .iter()
            .any(|line| line.contains("$.roots")),
        "{:#?}",
        report.differences
    );
}

#[test]
fn verify_fails_on_a_corrupt_record_with_its_position() {
    let log = MemoryLog::new();
    load(&log, &sample());
    assert!(log.corrupt_record(4, 30));
    let err = verify(&log).unwrap_err();
    assert!(err.to_string().contains("position 4"), "{err}");
}

#[test]
fn diff_lists_what_happened_between_two_positions() {
    let records = sample();
    let log = MemoryLog::new();
    load(&log, &records);
    let before = state_at(&log, Some(3)).unwrap();
    let after = state_at(&log, None).unwrap();
    let changes = diff(&before, &after);
    let mut kinds: Vec<&str> = changes
        .iter()
        .map(|change| match change {
            Change::SessionAdded { .. } => "session",
            Change::ActivationStarted { .. } => "started",
            Change::ActivationSettled { .. } => "settled",
            Change::ActivationEnded { .. } => "ended",
            Change::MessagesAccepted { .. } => "accepted",
            Change::MessagesClaimed { .. } => "claimed",
            Change::RunPhase { .. } => "run",
            _ => "other",
        })
        .collect();
    kinds.sort_unstable();
    // Worker and grandchild; the worker's epoch starts and settles; the
    // grandchild's run is requested; the worker's inbox (prompt, message)
    // and the root's (the settlement notice); the worker's claim.
    assert_eq!(
        kinds,
        vec!["accepted", "accepted", "claimed", "run", "session", "session", "settled", "started"]
    );
    assert!(diff(&after, &after).is_empty());
}

#[test]
fn export_then_import_reproduces_the_log_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let source = RocksLog::open(dir.path().join("a"), RocksOptions::default()).unwrap();
    load(&source, &sample());
    let mut first = Vec::new();
    export(&source, &mut first).unwrap();
    let target = RocksLog::open(dir.path().join("b"), RocksOptions::default()).unwrap();
    runtime()
        .block_on(import(&target, Cursor::new(first.clone())))
        .unwrap();
    let mut second = Vec::new();
    export(&target, &mut second).unwrap();
    assert_eq!(
        String::from_utf8(first).unwrap(),
        String::from_utf8(second.clone()).unwrap()
    );

    match runtime().block_on(import(&target, Cursor::new(second))) {
        Err(ReplayError::NotEmpty(head)) => assert_eq!(head, target.head()),
        other => panic!("expected NotEmpty, got {other:?}"),
    }
}

#[test]
fn malformed_or_out_of_order_imports_are_refused() {
    let records = sample();
    let mut swapped = records.clone();
    swapped.swap(1, 2);
    let mut version_gap = records[..2].to_vec();
    version_gap[1].version = 5;
    for (input, line, why) in [
        ("not json\n".to_owned(), 1, "malformed envelope"),
        (lines(&swapped), 2, "expected position 2"),
        (lines(&records[1..]), 1, "expected position 1"),
    ] {
        let log = MemoryLog::new();
        match runtime().block_on(import(&log, Cursor::new(input))) {
            Err(ReplayError::BadImport { line: at, reason }) => {
                assert_eq!(at, line);
                assert!(reason.contains(why), "{reason}");
                assert!(
                    !reason.contains("position 0"),
                    "a line has no position yet: {reason}"
                );
            }
            other => panic!("expected BadImport, got {other:?}"),
        }
    }
    let log = MemoryLog::new();
    let mut gap_lines = lines(&version_gap[..1]);
    let mut second = version_gap[1].clone();
    second.stream = version_gap[0].stream;
    gap_lines.push_str(&(serde_json::to_string(&second).unwrap() + "\n"));
    assert!(matches!(
        runtime().block_on(import(&log, Cursor::new(gap_lines))),
        Err(ReplayError::BadImport { line: 2, .. })
    ));
}

#[test]
fn an_event_id_used_again_is_refused_at_the_line_that_reuses_it() {
    let records = sample();
    // Two records of one stream in a row (one append of the import), and a
    // later record of another stream.
    let same = (0..records.len() - 1)
        .find(|&i| records[i].stream == records[i + 1].stream)
        .expect("the sample has a stream with two records in a row");
    let other = (same + 2..records.len())
        .find(|&j| records[j].stream != records[same].stream)
        .expect("and a later record of another stream");
    for reuse in [same + 1, other] {
        let mut reused = records.clone();
        reused[reuse].event_id = records[same].event_id;
        let log = MemoryLog::new();
        match runtime().block_on(import(&log, Cursor::new(lines(&reused)))) {
            Err(ReplayError::BadImport { line, reason }) => {
                assert_eq!(line, reuse + 1, "{reason}");
                assert!(reason.contains("conflicts"), "{reason}");
            }
            other => panic!("expected BadImport, got {other:?}"),
        }
    }
}
