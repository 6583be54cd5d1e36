//! The RocksDB writer keeps one appender's appends in the order it issued
//! them, even when it does not wait for one before issuing the next and
//! other threads keep the writer busy (in both durability modes): what the
//! runtime's pipelining relies on, and what any change to the writer's
//! hand-off (such as committing in the appender's thread, tried and
//! measured in BENCHMARKS.md) must keep.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use subagent_core::{Event, NewEvent, SessionId, StreamId};
use subagent_store::{Durability, EventLog, EventLogExt, ExpectedVersion, RocksLog, RocksOptions};

fn turn(turn: u64) -> NewEvent {
    NewEvent::new(Event::TurnStarted { turn, epoch: 1 })
}

fn open(dir: &std::path::Path, durability: Durability) -> RocksLog {
    RocksLog::open(dir, RocksOptions { durability }).expect("open")
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
