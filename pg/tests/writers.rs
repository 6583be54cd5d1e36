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
