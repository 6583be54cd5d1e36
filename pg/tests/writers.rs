//! Several writers on one schema (each handle has its own pool, writer and
//! listener, as a process would), subscriptions that follow another
//! handle's appends, and a lost server: a typed error, nothing
//! acknowledged, reads recover through the pool, and a retry with the same
//! event ids through a new handle is idempotent.

use std::time::Duration;

use futures::StreamExt as _;

use subagent_core::{Event, NewEvent, StreamId};
use subagent_pg::testing::{unique_schema, TestServer};
use subagent_pg::PgLog;
use subagent_store::conformance::{session_stream, turn};
use subagent_store::{EventLog, EventLogExt, ExpectedVersion, StoreError, SubscriptionItem};

fn server() -> &'static TestServer {
    TestServer::shared().expect("a PostgreSQL test server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn handles_share_one_gap_free_commit_ordered_log() {
    let schema = unique_schema("writers");
    let logs: Vec<PgLog> = (0..3)
        .map(|_| PgLog::connect(server().options(&schema)).expect("connect"))
        .collect();
    let mut subscription = logs[0].subscribe(1);
    let tasks: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(writer, log)| {
            let log = log.clone();
            tokio::spawn(async move {
                let stream = session_stream();
                for index in 0..50u64 {
                    log.append(
                        stream,
                        ExpectedVersion::Any,
                        vec![turn(writer as u64 * 1000 + index)],
                    )
                    .await
                    .expect("append");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer");
    }
    let total = 150;
    let positions: Vec<u64> = logs[1]
        .read_all(1)
        .map(|record| record.expect("read").position)
        .collect();
    assert_eq!(positions, (1..=total).collect::<Vec<_>>());
    // Every handle's head reaches the end (its own appends, or another's
    // seen through NOTIFY or the poll).
    for log in &logs {
        let mut head = log.watch_head();
        tokio::time::timeout(
            Duration::from_secs(10),
            head.wait_for(|head| *head == total),
        )
        .await
        .expect("head caught up")
        .expect("head watch");
    }
    // The subscription of the first handle delivers all of them, once each, in order.
    let mut delivered = Vec::new();
    while delivered.len() < total as usize {
        let item = tokio::time::timeout(Duration::from_secs(10), subscription.next())
            .await
            .expect("subscription stalled")
            .expect("subscription ended")
            .expect("subscription failed");
        if let SubscriptionItem::Event(record) = item {
            delivered.push(record.position);
        }
    }
    assert_eq!(delivered, (1..=total).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_server_is_a_typed_error_and_a_retry_is_idempotent() {
    let mut server = TestServer::start().expect("a PostgreSQL test server of its own");
    let schema = unique_schema("lost");
    let log = PgLog::connect(server.options(&schema)).expect("connect");
    let first = NewEvent::new(Event::ProviderRemoved { name: "a".into() });
    log.append(StreamId::Runtime, ExpectedVersion::NoStream, vec![first])
        .await
        .expect("append");

    server.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stream = session_stream();
    let batch = vec![turn(1), turn(2)];
    let err = log
        .append(stream, ExpectedVersion::NoStream, batch.clone())
        .await
        .expect_err("nothing is acknowledged without the server");
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    assert_eq!(err.code().as_str(), "store/unavailable");

    server.restart().expect("restart");
    // Reads reconnect through the pool (the first use may still meet a
    // connection of the dead server).
    let mut read = Err(StoreError::Closed);
    for _ in 0..20 {
        read = log.read_all_page(1, 10);
        if read.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(read.expect("reads recover").len(), 1);
    // The writer is fail-stop: nothing decided on top of the lost append
    // lands through this handle.
    let refused = log
        .append(session_stream(), ExpectedVersion::Any, vec![turn(3)])
        .await
        .expect_err("fail-stop");
    assert!(
        matches!(refused, StoreError::Unavailable { .. }),
        "{refused:?}"
    );
    drop(log);

    // A new handle retries with the same ids: written once, then deduplicated.
    let log = PgLog::connect(server.options(&schema)).expect("reconnect");
    let written = log
        .append(stream, ExpectedVersion::NoStream, batch.clone())
        .await
        .expect("retry");
    assert_eq!((written.first_position, written.deduplicated), (2, false));
    let again = log
        .append(stream, ExpectedVersion::NoStream, batch)
        .await
        .expect("retry again");
    assert_eq!((again.first_position, again.deduplicated), (2, true));
    assert_eq!(log.head(), 3);
}

/// Waits until a session is blocked on a lock in a statement that names
/// `"{schema}".{table}` (as `leases.rs` does): the moment the test's
/// grouping relies on, observed rather than slept for. `client` must not be
/// inside a transaction (the activity view is a snapshot per transaction).
async fn until_waiting_on(client: &subagent_pg::tokio_postgres::Client, schema: &str, table: &str) {
    let pattern = format!("%\"{schema}\".{table}%");
    for _ in 0..1000 {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE $1",
                &[&pattern],
            )
            .await
            .expect("read pg_stat_activity");
        if row.get::<_, i64>(0) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing waited on a lock in {table} within 10 s");
}

/// When a group's commit fails, a refusal that was decided on that group's
/// own staged writes is answered with the commit's failure, not with a
/// conflict against writes that never happened. A deferred constraint
/// trigger makes the commit fail for one stream; the counter row, held from
/// another connection, holds the writer in a first group of one append
/// (seen in `pg_stat_activity` waiting for the counter's lock before the
/// next two are sent), so the two queue behind it and the writer takes them
/// as one group: that first group commits alone, and the doomed group
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_group_answers_its_later_refusals_with_the_failure() {
    use subagent_pg::tokio_postgres::NoTls;
    let schema = unique_schema("failed_group");
    let log = PgLog::connect(server().options(&schema)).expect("connect");
    let doomed = session_stream();
    let (mut sql, connection) = server().config().connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    let (watcher, connection) = server().config().connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    sql.batch_execute(&format!(
        "CREATE FUNCTION \"{schema}\".refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
         CREATE CONSTRAINT TRIGGER refuse_doomed AFTER INSERT ON \"{schema}\".streams
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
         WHEN (NEW.stream = '{doomed}') EXECUTE FUNCTION \"{schema}\".refuse();"
    ))
    .await
    .expect("the trigger");

    // Hold the counter: the writer takes the first append and waits.
    let holder = sql.transaction().await.expect("begin");
    holder
        .execute(
            format!("SELECT head FROM \"{schema}\".counter FOR UPDATE").as_str(),
            &[],
        )
        .await
        .expect("lock the counter");
    let first = log.append(session_stream(), ExpectedVersion::NoStream, vec![turn(1)]);
    // The writer has taken the first append as a group of its own and waits
    // for the counter's lock.
    until_waiting_on(&watcher, &schema, "counter").await;
    // Queued behind it while the writer waits, so taken together as the
    // next group: A is staged, and B is refused on A's staged version.
    let a = log.append(doomed, ExpectedVersion::NoStream, vec![turn(2)]);
    let b = log.append(doomed, ExpectedVersion::NoStream, vec![turn(3)]);
    holder.rollback().await.expect("release the counter");

    // The first group (the first append alone) commits.
    let first = first.await.expect("the first group commits");
    assert_eq!(first.first_position, 1);
    let (a, b) = (a.await, b.await);
    assert!(a.is_err(), "the doomed commit acknowledged nothing: {a:?}");
    let b = b.expect_err("nothing of the failed group is acknowledged");
    assert!(
        !matches!(b, StoreError::Conflict { .. }),
        "a conflict with a write that never happened: {b:?}"
    );
    // Whatever committed is exactly what was acknowledged: the first.
    let read = log.read_all_page(1, 10).expect("read");
    assert_eq!(read.len(), 1);
    assert_eq!(log.stream_version(&doomed).expect("version"), 0);
}
