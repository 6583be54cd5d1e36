//! The RocksDB writer's two paths: in `Buffered` mode a lone append is
//! written in the appender's own thread (durable in the log's sense, and
//! visible, when `append` returns), and a busy log hands appends to the
//! writer thread; mixed, an appender's appends still land in the order it
//! issued them, even when it does not wait for one before issuing the next.
//! In `Sync` mode every append goes through the writer thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use subagent_core::{Event, NewEvent, SessionId, StreamId};
use subagent_store::{
    Durability, EventLog, EventLogExt, ExpectedVersion, RocksLog, RocksOptions, StoreError,
};

fn turn(turn: u64) -> NewEvent {
    NewEvent::new(Event::TurnStarted { turn, epoch: 1 })
}

fn open(dir: &std::path::Path, durability: Durability) -> RocksLog {
    RocksLog::open(dir, RocksOptions { durability }).expect("open")
}

#[test]
fn a_lone_buffered_append_is_written_before_append_returns() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), Durability::Buffered);
    let stream = StreamId::Session(SessionId::new());
    for version in 0..3u64 {
        let ticket = log.append(stream, ExpectedVersion::Exact(version), vec![turn(version)]);
        // Not yet awaited, already in the log.
        assert_eq!(log.head(), version + 1);
        assert_eq!(log.stream_version(&stream).unwrap(), version + 1);
        let outcome = ticket.wait().expect("append");
        assert_eq!(outcome.first_position, version + 1);
    }
    // Refusals come back the same way, and write nothing.
    let refused = log
        .append(stream, ExpectedVersion::Exact(0), vec![turn(9)])
        .wait()
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::Conflict { .. }),
        "{refused:?}"
    );
    assert_eq!(log.head(), 3);
    drop(log);
    let reopened = open(dir.path(), Durability::Buffered);
    assert_eq!(reopened.head(), 3, "inline appends reach the disk");
}

/// One appender issues a chain of appends, each expecting exactly the
/// version the previous one leaves, without waiting in between, while
/// other threads keep the writer busy (so the chain's appends are written
/// sometimes inline, sometimes by the writer thread). Had a later one
/// overtaken an earlier one, it would be refused as a conflict.
fn chained_appends_keep_their_order(durability: Durability) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), durability);
    let stop = Arc::new(AtomicBool::new(false));
    let noise: Vec<_> = (0..3)
        .map(|_| {
            let (log, stop) = (log.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let stream = StreamId::Session(SessionId::new());
                let mut written = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    log.append(stream, ExpectedVersion::Any, vec![turn(written)])
                        .wait()
                        .expect("noise append");
                    written += 1;
                }
                written
            })
        })
        .collect();
    let chain = StreamId::Session(SessionId::new());
    let links = 2_000u64;
    let tickets: Vec<_> = (0..links)
        .map(|version| log.append(chain, ExpectedVersion::Exact(version), vec![turn(version)]))
        .collect();
    let mut last_position = 0;
    for (version, ticket) in (0..links).zip(tickets) {
        let outcome = ticket
            .wait()
            .unwrap_or_else(|err| panic!("link {version}: {err:?}"));
        assert_eq!(outcome.stream_version, version + 1);
        assert!(outcome.first_position > last_position, "link {version}");
        last_position = outcome.first_position;
    }
    stop.store(true, Ordering::Relaxed);
    let noise_written: u64 = noise.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(noise_written > 0, "the writer was never busy");
    assert_eq!(log.head(), links + noise_written);
    let versions: Vec<u64> = log
        .read_stream(chain, 1)
        .map(|record| record.unwrap().version)
        .collect();
    assert_eq!(versions, (1..=links).collect::<Vec<_>>());
}

#[test]
fn buffered_appends_of_one_appender_keep_their_order_on_either_path() {
    // Rounds: which appends meet a busy writer is up to the scheduler.
    for _ in 0..5 {
        chained_appends_keep_their_order(Durability::Buffered);
    }
}

#[test]
fn sync_appends_of_one_appender_keep_their_order() {
    chained_appends_keep_their_order(Durability::Sync);
}
