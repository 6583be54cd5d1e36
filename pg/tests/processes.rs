//! Writers in separate processes on one PostgreSQL log: this test binary
//! runs itself as a child (the ignored `append_child` entry point) that
//! appends and prints `ACK <event id> <position>` after each acknowledged
//! append.
//! - Three children appending at once: the positions are gap-free, every
//!   acknowledged event is at its acknowledged position, and a subscriber
//!   in the parent sees every event once, in order.
//! - Three children racing on ONE stream with the SAME event ids (each
//!   appends event k at the version it last read, retrying on a conflict):
//!   the version check and the id check hold across transactions of
//!   separate processes, so each event is written once, at one position
//!   every child was told, and the stream's versions are gap-free.
//! - A child SIGKILLed mid-append, over several rounds: every acknowledged
//!   event survives at its position, the log stays a gap-free prefix with
//!   indexes that agree, and the next writer is not blocked by the dead
//!   one's transaction (the server rolls it back and releases the counter).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::StreamExt as _;
use subagent_core::{Event, EventId, NewEvent, SessionId, StreamId};
use subagent_pg::testing::{unique_schema, TestServer};
use subagent_pg::PgLog;
use subagent_store::{EventLog, EventLogExt, ExpectedVersion, Subscription, SubscriptionItem};

const PORT_ENV: &str = "SUBAGENTS_PG_CHILD_PORT";
const SCHEMA_ENV: &str = "SUBAGENTS_PG_CHILD_SCHEMA";
/// How many appends the child makes per task; 0 for endless.
const COUNT_ENV: &str = "SUBAGENTS_PG_CHILD_COUNT";
const TASKS_ENV: &str = "SUBAGENTS_PG_CHILD_TASKS";
/// Set: the child races on this one stream (a UUID) with the event ids
/// every racer shares, instead of appending to streams of its own.
const RACE_ENV: &str = "SUBAGENTS_PG_CHILD_RACE";

/// The id every racer gives its `k`th event on `stream`.
fn race_id(stream: SessionId, k: u64) -> EventId {
    EventId::from_uuid(uuid::Uuid::from_u128(
        stream.as_uuid().as_u128() ^ u128::from(k + 1),
    ))
}

/// The race: event `k` appended at the version last read, re-read and
/// retried on a conflict, until written or found already written.
async fn race(log: &PgLog, stream: SessionId, count: u64) {
    for k in 0..count {
        loop {
            let expected = log
                .stream_version(&StreamId::Session(stream))
                .expect("version");
            let mut event = NewEvent::new(Event::TurnStarted { turn: k, epoch: 1 });
            event.event_id = race_id(stream, k);
            match log
                .append(
                    StreamId::Session(stream),
                    ExpectedVersion::Exact(expected),
                    vec![event],
                )
                .await
            {
                Ok(outcome) => {
                    let mut out = std::io::stdout().lock();
                    writeln!(
                        out,
                        "ACK {} {} {}",
                        race_id(stream, k),
                        outcome.first_position,
                        if outcome.deduplicated { "dup" } else { "new" }
                    )
                    .expect("stdout");
                    out.flush().expect("flush");
                    break;
                }
                Err(subagent_store::StoreError::Conflict { .. }) => continue,
                Err(err) => panic!("append: {err:?}"),
            }
        }
    }
}

/// Not a test: the child process of the tests below.
#[test]
#[ignore = "entry point of the multi-process tests' child"]
fn append_child() {
    let (Ok(port), Ok(schema)) = (std::env::var(PORT_ENV), std::env::var(SCHEMA_ENV)) else {
        return;
    };
    let count: u64 = std::env::var(COUNT_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let tasks: usize = std::env::var(TASKS_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port.parse().expect("port"))
        .user("postgres")
        .dbname("postgres");
    let log =
        PgLog::connect(subagent_pg::PgOptions::new(config).with_schema(schema)).expect("connect");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    if let Ok(stream) = std::env::var(RACE_ENV) {
        let stream = SessionId::parse(&stream).expect("race stream");
        runtime.block_on(race(&log, stream, count));
        return;
    }
    runtime.block_on(async move {
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let log = log.clone();
            handles.push(tokio::spawn(async move {
                let stream = StreamId::Session(SessionId::new());
                let mut turn = 0;
                while count == 0 || turn < count {
                    let event = NewEvent::new(Event::TurnStarted { turn, epoch: 1 });
                    let id = event.event_id;
                    // Exact: each task owns its stream, so the check always holds.
                    let outcome = log
                        .append(stream, ExpectedVersion::Exact(turn), vec![event])
                        .await
                        .expect("append");
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {id} {}", outcome.first_position).expect("stdout");
                    out.flush().expect("flush");
                    turn += 1;
                }
            }));
        }
        for handle in handles {
            handle.await.expect("task");
        }
    });
}

fn child(server: &TestServer, schema: &str, count: u64, tasks: usize) -> Child {
    child_command(server, schema, count, tasks)
        .spawn()
        .expect("spawn the child")
}

fn child_command(server: &TestServer, schema: &str, count: u64, tasks: usize) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--exact",
            "append_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(PORT_ENV, server.port().to_string())
        .env(SCHEMA_ENV, schema)
        .env(COUNT_ENV, count.to_string())
        .env(TASKS_ENV, tasks.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command
}

/// The child's acknowledgements: event id → position.
fn acks(output: impl BufRead) -> HashMap<EventId, u64> {
    output
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| {
            // The harness may print `test append_child ... ` ahead of the
            // first line.
            let start = line.find("ACK ")?;
            let mut words = line[start + 4..].split(' ');
            let id = EventId::parse(words.next()?).ok()?;
            Some((id, words.next()?.parse().ok()?))
        })
        .collect()
}

/// Every acknowledged event is at its position, positions are 1..=head
/// without a gap, and every record's stream index entry points at it.
fn check_log(log: &PgLog, acknowledged: &HashMap<EventId, u64>) -> u64 {
    let records: Vec<_> = log
        .read_all(1)
        .map(|record| record.expect("read"))
        .collect();
    let head = records.len() as u64;
    assert_eq!(
        records.iter().map(|r| r.position).collect::<Vec<_>>(),
        (1..=head).collect::<Vec<_>>(),
        "gap-free"
    );
    let at: HashMap<EventId, u64> = records.iter().map(|r| (r.event_id, r.position)).collect();
    for (id, position) in acknowledged {
        assert_eq!(
            at.get(id),
            Some(position),
            "acknowledged {id} at {position}"
        );
    }
    for record in &records {
        assert_eq!(
            log.indexed_position(&record.stream, record.version)
                .expect("index"),
            Some(record.position)
        );
    }
    head
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_append_gap_free_and_a_subscriber_sees_each_event_once() {
    let server = TestServer::shared().expect("a PostgreSQL server");
    let schema = unique_schema("processes");
    let log = PgLog::connect(server.options(&schema)).expect("connect");
    let (per_task, tasks) = (40u64, 2usize);
    let total = 3 * per_task * tasks as u64;
    // Two subscribers read while the children write: one from the start,
    // one that joins once the log has events and catches up to them.
    let early = tokio::spawn(deliver(log.subscribe(1), total));
    let children: Vec<Child> = (0..3)
        .map(|_| child(server, &schema, per_task, tasks))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while log.head() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the children appended nothing"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let late = tokio::spawn(deliver(log.subscribe(1), total));
    let mut acknowledged = HashMap::new();
    for mut child in children {
        let stdout = child.stdout.take().expect("stdout");
        acknowledged.extend(acks(BufReader::new(stdout)));
        assert!(child.wait().expect("wait").success(), "a child failed");
    }
    assert_eq!(
        acknowledged.len() as u64,
        total,
        "every append acknowledged once"
    );
    let mut positions: Vec<u64> = acknowledged.values().copied().collect();
    positions.sort_unstable();
    assert_eq!(
        positions,
        (1..=total).collect::<Vec<_>>(),
        "acknowledged positions are 1..=total"
    );
    assert_eq!(check_log(&log, &acknowledged), total);
    let (early, late) = (
        early.await.expect("subscriber"),
        late.await.expect("subscriber"),
    );
    for delivered in [&early, &late] {
        assert_eq!(
            delivered.positions,
            (1..=total).collect::<Vec<_>>(),
            "each once, in order"
        );
    }
    // The early one caught up on an empty log: it read every event live,
    // while the children were writing.
    assert!(early.live, "the early subscriber delivered nothing live");
}

/// What a subscriber delivered, and whether any event came after it had
/// caught up (live).
struct Delivered {
    positions: Vec<u64>,
    live: bool,
}

/// Reads `subscription` until `total` events arrived.
async fn deliver(mut subscription: Subscription, total: u64) -> Delivered {
    let mut delivered = Delivered {
        positions: Vec::new(),
        live: false,
    };
    let mut caught_up = false;
    while delivered.positions.len() < total as usize {
        let item = tokio::time::timeout(Duration::from_secs(30), subscription.next())
            .await
            .expect("the subscription stalled")
            .expect("the subscription ended")
            .expect("the subscription failed");
        match item {
            SubscriptionItem::Event(record) => {
                delivered.live |= caught_up;
                delivered.positions.push(record.position);
            }
            SubscriptionItem::CaughtUp { .. } => caught_up = true,
        }
    }
    delivered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_racing_on_one_stream_write_each_event_once() {
    let server = TestServer::shared().expect("a PostgreSQL server");
    let schema = unique_schema("race");
    let log = PgLog::connect(server.options(&schema)).expect("connect");
    let stream = SessionId::new();
    let count = 30u64;
    let racers: Vec<Child> = (0..3)
        .map(|_| {
            child_command(server, &schema, count, 1)
                .env(RACE_ENV, stream.to_string())
                .spawn()
                .expect("spawn a racer")
        })
        .collect();
    // Per event id: the positions each racer was told, and how many wrote it.
    let mut told: HashMap<EventId, (Vec<u64>, usize)> = HashMap::new();
    for mut racer in racers {
        let stdout = racer.stdout.take().expect("stdout");
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Some(start) = line.find("ACK ") else {
                continue;
            };
            let words: Vec<&str> = line[start + 4..].split(' ').collect();
            let id = EventId::parse(words[0]).expect("id");
            let entry = told.entry(id).or_default();
            entry.0.push(words[1].parse().expect("position"));
            entry.1 += usize::from(words[2] == "new");
        }
        assert!(racer.wait().expect("wait").success(), "a racer failed");
    }
    let records: Vec<_> = log
        .read_stream(StreamId::Session(stream), 1)
        .map(|record| record.expect("read"))
        .collect();
    assert_eq!(
        records.iter().map(|r| r.version).collect::<Vec<_>>(),
        (1..=count).collect::<Vec<_>>(),
        "each event once, versions gap-free"
    );
    for (k, record) in (0..count).zip(&records) {
        assert_eq!(record.event_id, race_id(stream, k), "in the order raced");
        let (positions, writers) = &told[&record.event_id];
        assert_eq!(positions.len(), 3, "every racer acknowledged event {k}");
        assert!(
            positions.iter().all(|p| *p == record.position),
            "event {k}: told {positions:?}, stored at {}",
            record.position
        );
        assert_eq!(*writers, 1, "event {k} written by exactly one racer");
    }
    assert_eq!(check_log(&log, &HashMap::new()), count);
}

#[test]
fn a_writer_killed_mid_append_loses_no_acknowledged_event() {
    let server = TestServer::shared().expect("a PostgreSQL server");
    let schema = unique_schema("sigkill");
    let mut acknowledged = HashMap::new();
    for round in 0..3u64 {
        let mut writer = child(server, &schema, 0, 4);
        let mut lines = BufReader::new(writer.stdout.take().expect("stdout")).lines();
        // Up to its first acknowledgement (the harness prints its own lines first).
        let mut seen = Vec::new();
        for line in lines.by_ref() {
            let line = line.expect("read");
            let acked = line.contains("ACK ");
            seen.push(line);
            if acked {
                break;
            }
        }
        assert!(
            seen.last().is_some_and(|line| line.contains("ACK ")),
            "the writer acknowledged nothing: {seen:?}"
        );
        // Kill it 20 to 120 ms into its appends, mid-transaction most likely.
        std::thread::sleep(Duration::from_millis(20 + 50 * round));
        writer.kill().expect("SIGKILL");
        let _ = writer.wait();
        seen.extend(lines.map_while(Result::ok));
        let before = acknowledged.len();
        acknowledged.extend(acks(std::io::Cursor::new(seen.join("\n"))));
        assert!(
            acknowledged.len() > before,
            "round {round} acknowledged nothing"
        );
        let log = PgLog::connect(server.options(&schema)).expect("connect after the kill");
        let head = check_log(&log, &acknowledged);
        assert!(head >= acknowledged.len() as u64);
        // The dead writer's transaction is gone: the next append goes through.
        let next = NewEvent::new(Event::TurnStarted { turn: 0, epoch: 1 });
        let outcome = log
            .append(
                StreamId::Session(SessionId::new()),
                ExpectedVersion::NoStream,
                vec![next],
            )
            .wait()
            .expect("the counter is not held by the dead writer");
        // The dead writer's last COMMIT may still have landed after the
        // read above; the append waited on the counter lock, so by now
        // every transaction of the dead writer has ended.
        let after = check_log(&log, &acknowledged);
        assert!(outcome.first_position > head);
        assert_eq!(
            outcome.first_position, after,
            "the append is the last record"
        );
    }
}
