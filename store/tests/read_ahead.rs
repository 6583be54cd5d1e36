//! `read_ahead::scan` gives exactly what `read_all` gives: every record in
//! position order, each once, from any start; a break stops it; a corrupt
//! record mid-log is met in its place after every record before it (never
//! skipped, never hidden by the reader threads); a visitor's error ends it.

use std::ops::ControlFlow;

use subagent_core::{Event, NewEvent, SessionId, StreamId};
use subagent_store::read_ahead::scan;
use subagent_store::{
    Durability, EventLog, EventLogExt, ExpectedVersion, MemoryLog, RocksLog, RocksOptions,
    StoreError,
};

/// Enough records for the reader threads to run (several pages).
const RECORDS: u64 = 10_000;

fn fill(log: &dyn EventLog) {
    let stream = StreamId::Session(SessionId::new());
    for batch in 0..RECORDS / 100 {
        let events = (0..100)
            .map(|turn| {
                NewEvent::new(Event::TurnStarted {
                    turn: batch * 100 + turn,
                    epoch: 1,
                })
            })
            .collect();
        log.append(stream, ExpectedVersion::Any, events)
            .wait()
            .expect("append");
    }
    assert_eq!(log.head(), RECORDS);
}

fn scanned(log: &dyn EventLog, from: u64) -> Result<Vec<u64>, (Vec<u64>, StoreError)> {
    let mut seen = Vec::new();
    match scan(log, from, |record| {
        seen.push(record.position);
        Ok::<_, StoreError>(ControlFlow::Continue(()))
    }) {
        Ok(()) => Ok(seen),
        Err(err) => Err((seen, err)),
    }
}

fn rocks() -> (tempfile::TempDir, RocksLog) {
    let dir = tempfile::tempdir().unwrap();
    let log = RocksLog::open(
        dir.path(),
        RocksOptions {
            durability: Durability::Buffered,
        },
    )
    .unwrap();
    fill(&log);
    (dir, log)
}

#[test]
fn every_record_once_in_order_from_any_start() {
    let (_dir, rocks) = rocks();
    let memory = MemoryLog::new();
    fill(&memory);
    for log in [&rocks as &dyn EventLog, &memory] {
        for from in [
            0,
            1,
            2,
            1023,
            1024,
            1025,
            5_000,
            RECORDS - 1,
            RECORDS,
            RECORDS + 1,
        ] {
            let expected: Vec<u64> = log.read_all(from).map(|r| r.unwrap().position).collect();
            assert_eq!(expected, (from.max(1)..=RECORDS).collect::<Vec<_>>());
            assert_eq!(scanned(log, from).expect("scan"), expected, "from {from}");
        }
    }
}

#[test]
fn a_break_stops_the_scan_where_the_visitor_said() {
    let (_dir, log) = rocks();
    for stop_at in [1, 1024, 4097, 9_999] {
        let mut seen = 0u64;
        scan(&log, 1, |record| {
            seen += 1;
            Ok::<_, StoreError>(if record.position == stop_at {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })
        .unwrap();
        assert_eq!(seen, stop_at);
    }
}

#[test]
fn a_corrupt_record_is_met_in_its_place() {
    let (_dir, log) = rocks();
    for bad in [2_500, 6_000] {
        log.corrupt_record(bad, 40).unwrap();
        let (seen, err) = scanned(&log, 1).expect_err("the corruption is reported");
        let first_bad = if bad == 6_000 { 2_500 } else { bad };
        assert_eq!(seen, (1..first_bad).collect::<Vec<_>>());
        assert!(
            matches!(err, StoreError::Corrupt { position, .. } if position == first_bad),
            "{err:?}"
        );
        // Past the first one, the second.
        if bad == 6_000 {
            let (seen, err) = scanned(&log, 2_501).expect_err("the second corruption");
            assert_eq!(seen, (2_501..6_000).collect::<Vec<_>>());
            assert!(
                matches!(
                    err,
                    StoreError::Corrupt {
                        position: 6_000,
                        ..
                    }
                ),
                "{err:?}"
            );
        }
    }
}

#[test]
fn a_visitors_error_ends_the_scan() {
    let (_dir, log) = rocks();
    let mut seen = 0u64;
    let err = scan(&log, 1, |record| {
        seen += 1;
        if record.position == 5_000 {
            return Err(StoreError::Closed);
        }
        Ok(ControlFlow::Continue(()))
    })
    .unwrap_err();
    assert!(matches!(err, StoreError::Closed));
    assert_eq!(seen, 5_000);
}
