//! Crash safety of the RocksDB log in `Sync` mode (DESIGN invariant 11).
//!
//! The test re-runs this test binary as a child process (the ignored
//! `crash_writer_child` entry point) that appends from several tasks and
//! prints `ACK <event id> <position>` after each acknowledged append. The
//! parent kills it with SIGKILL at a random moment after its first
//! acknowledgement, reopens the log and checks
//! that every acknowledged event is there at its position and that the log is
//! a gap-free, fully decodable prefix. Rounds accumulate in one directory, so
//! later rounds also reopen logs that were killed before.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use subagent_core::{Event, EventId, NewEvent, SessionId, StreamId};
use subagent_store::{EventLog, EventLogExt, ExpectedVersion, RocksLog, RocksOptions};

const CHILD_DIR_ENV: &str = "SUBAGENTS_CRASH_CHILD_DIR";
const ROUNDS: u64 = 4;

/// Not a test: the child process of `sigkill_never_loses_an_acknowledged_append`.
#[test]
#[ignore = "entry point of the crash test's child process"]
fn crash_writer_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let log = RocksLog::open(&dir, RocksOptions::default()).expect("child opens the log");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async move {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let log = log.clone();
            tasks.push(tokio::spawn(async move {
                let stream = StreamId::Session(SessionId::new());
                for turn in 0.. {
                    let event = NewEvent::new(Event::TurnStarted { turn, epoch: 1 });
                    let id = event.event_id;
                    let outcome = log
                        .append(stream, ExpectedVersion::Any, vec![event])
                        .await
                        .expect("append");
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {id} {}", outcome.first_position).expect("stdout");
                    out.flush().expect("flush");
                }
            }));
        }
        for task in tasks {
            let _ = task.await;
        }
    });
}

fn pseudo_random_millis(round: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    50 + (u64::from(nanos) ^ round.wrapping_mul(0x9E37_79B9)) % 400
}

#[test]
fn sigkill_never_loses_an_acknowledged_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut all_acknowledged: HashMap<EventId, u64> = HashMap::new();
    for round in 0..ROUNDS {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "crash_writer_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("piped stdout");
        let (working, first_ack) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut acks = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut parts = line.split_whitespace();
                if parts.next() != Some("ACK") {
                    continue;
                }
                // A line cut by the kill has no position or a bad one: skip it.
                let (Some(id), Some(position)) = (parts.next(), parts.next()) else {
                    continue;
                };
                if let (Ok(id), Ok(position)) = (EventId::parse(id), position.parse::<u64>()) {
                    acks.push((id, position));
                    let _ = working.send(());
                }
            }
            acks
        });
        // Opening (and recovering) the growing log takes a while, more on a
        // loaded machine: the random moment is counted from the child's
        // first acknowledgement, then it is killed mid-flight.
        first_ack
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("round {round}: the child never acknowledged an append"));
        std::thread::sleep(Duration::from_millis(pseudo_random_millis(round)));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        let acks = reader.join().expect("reader thread");
        assert!(
            !acks.is_empty(),
            "round {round}: the child acknowledged nothing before the kill"
        );
        all_acknowledged.extend(acks);

        let log =
            RocksLog::open(dir.path(), RocksOptions::default()).expect("reopen after SIGKILL");
        let records: Vec<_> = log
            .read_all(1)
            .collect::<Result<_, _>>()
            .expect("every record decodes");
        assert_eq!(
            records.len() as u64,
            log.head(),
            "round {round}: head matches the records"
        );
        let mut versions: BTreeMap<StreamId, u64> = BTreeMap::new();
        let mut by_id = HashMap::new();
        for (index, record) in records.iter().enumerate() {
            assert_eq!(record.position, index as u64 + 1, "gap-free positions");
            let version = versions.entry(record.stream).or_insert(0);
            *version += 1;
            assert_eq!(
                record.version, *version,
                "gap-free versions of {}",
                record.stream
            );
            by_id.insert(record.event_id, record.position);
        }
        for (id, position) in &all_acknowledged {
            assert_eq!(
                by_id.get(id),
                Some(position),
                "round {round}: acknowledged {id} lost or moved"
            );
        }
    }
}
