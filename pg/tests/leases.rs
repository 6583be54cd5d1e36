//! Tree leases and fencing on a real server: one holder at a time, a
//! takeover only after the lease lapses (or is released), every take
//! bumping the token, and an append that presents a stale fence refused
//! with nothing written, even one already waiting to write when the tree
//! was taken over.

use std::time::Duration;

use subagent_core::{SessionId, StreamId};
use subagent_pg::testing::{unique_schema, TestServer};
use subagent_pg::tokio_postgres::{Client, NoTls};
use subagent_pg::PgLog;
use subagent_store::conformance::turn;
use subagent_store::{EventLog, EventLogExt, ExpectedVersion, Fence, StoreError, StreamAppend};

fn server() -> &'static TestServer {
    TestServer::shared().expect("a PostgreSQL test server")
}

async fn sql() -> Client {
    let (client, connection) = server().config().connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

fn connect(schema: &str) -> PgLog {
    PgLog::connect(server().options(schema)).expect("connect")
}

/// One turn event appended to `root`'s own stream under `fences`.
async fn append_for(
    log: &PgLog,
    root: SessionId,
    number: u64,
    fences: Vec<Fence>,
) -> Result<u64, StoreError> {
    let outcomes = log
        .append_fenced(
            vec![StreamAppend {
                stream: StreamId::Session(root),
                expected: ExpectedVersion::Any,
                events: vec![turn(number)],
            }],
            Vec::new(),
            fences,
        )
        .await?;
    Ok(outcomes[0].last_position)
}

const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_at_a_time_and_every_take_bumps_the_token() {
    let schema = unique_schema("lease");
    let (host_a, host_b) = (connect(&schema), connect(&schema));
    let root = SessionId::new();
    let lease = host_a.acquire_lease(root, "host-a", LONG).expect("take");
    assert_eq!((lease.token, lease.holder.as_str()), (1, "host-a"));
    match host_b.acquire_lease(root, "host-b", LONG) {
        Err(StoreError::LeaseHeld {
            root: held,
            holder,
            remaining,
        }) => {
            assert_eq!((held, holder.as_str()), (root, "host-a"));
            assert!(remaining > Duration::from_secs(50) && remaining <= LONG);
        }
        other => panic!("a held lease was taken: {other:?}"),
    }
    // The holder taking its own lease again (a restart under the same
    // name) bumps the token, fencing out its earlier incarnation.
    let again = host_a.acquire_lease(root, "host-a", LONG).expect("retake");
    assert_eq!(again.token, 2);
    assert!(matches!(
        append_for(&host_a, root, 1, vec![lease.fence()]).await,
        Err(StoreError::Fenced {
            presented: 1,
            current: 2,
            ..
        })
    ));
    assert_eq!(
        append_for(&host_a, root, 2, vec![again.fence()]).await,
        Ok(1)
    );
    // Renewal keeps the token; the listing shows the holder.
    assert_eq!(host_a.renew_lease(&again).expect("renew").token, 2);
    let listed = host_b.leases().expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].root, listed[0].holder.as_str(), listed[0].token),
        (root, "host-a", 2)
    );
    // Another tree is leased independently.
    let other = host_b
        .acquire_lease(SessionId::new(), "host-b", LONG)
        .expect("another tree");
    assert_eq!(other.token, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_lease_lapses_the_new_holder_fences_the_old_one_out() {
    let schema = unique_schema("lapse");
    let (host_a, host_b) = (connect(&schema), connect(&schema));
    let root = SessionId::new();
    let term = Duration::from_millis(300);
    let lease_a = host_a.acquire_lease(root, "host-a", term).expect("take");
    assert_eq!(
        append_for(&host_a, root, 1, vec![lease_a.fence()]).await,
        Ok(1)
    );
    assert!(matches!(
        host_b.acquire_lease(root, "host-b", LONG),
        Err(StoreError::LeaseHeld { .. })
    ));
    tokio::time::sleep(term + Duration::from_millis(100)).await;
    assert_eq!(
        host_b.leases().expect("list")[0].remaining,
        Duration::ZERO,
        "lapsed on the server's clock"
    );
    let lease_b = host_b
        .acquire_lease(root, "host-b", LONG)
        .expect("take over");
    assert_eq!(lease_b.token, 2);
    // The old holder's late append, renewal and release are all refused,
    // naming the new holder, and write nothing.
    let refused = append_for(&host_a, root, 2, vec![lease_a.fence()]).await;
    assert_eq!(
        refused,
        Err(StoreError::Fenced {
            root,
            presented: 1,
            current: 2,
            holder: "host-b".into(),
        })
    );
    assert_eq!(refused.unwrap_err().code().as_str(), "store/fenced");
    assert_eq!(host_b.head(), 1);
    assert_eq!(host_b.stream_version(&StreamId::Session(root)), Ok(1));
    assert!(matches!(
        host_a.renew_lease(&lease_a),
        Err(StoreError::Fenced { current: 2, .. })
    ));
    assert!(matches!(
        host_a.release_lease(&lease_a),
        Err(StoreError::Fenced { current: 2, .. })
    ));
    // The new holder appends.
    assert_eq!(
        append_for(&host_b, root, 3, vec![lease_b.fence()]).await,
        Ok(2)
    );
    let positions: Vec<u64> = host_a
        .read_all(1)
        .map(|record| record.expect("read").position)
        .collect();
    assert_eq!(positions, [1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_is_taken_at_once_and_a_fence_without_a_lease_is_stale() {
    let schema = unique_schema("release");
    let (host_a, host_b) = (connect(&schema), connect(&schema));
    let root = SessionId::new();
    let lease_a = host_a.acquire_lease(root, "host-a", LONG).expect("take");
    host_a.release_lease(&lease_a).expect("release");
    // Released but not yet taken: the token is still current.
    assert_eq!(
        append_for(&host_a, root, 1, vec![lease_a.fence()]).await,
        Ok(1)
    );
    let lease_b = host_b.acquire_lease(root, "host-b", LONG).expect("take");
    assert_eq!(lease_b.token, 2);
    // A fence for a tree nobody ever leased is stale: token 0.
    let unleased = SessionId::new();
    assert_eq!(
        append_for(
            &host_a,
            unleased,
            1,
            vec![Fence {
                root: unleased,
                token: 1
            }]
        )
        .await,
        Err(StoreError::Fenced {
            root: unleased,
            presented: 1,
            current: 0,
            holder: String::new(),
        })
    );
    assert_eq!(host_a.head(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_out_request_fails_alone_in_its_group() {
    let schema = unique_schema("group");
    let log = connect(&schema);
    let (stale_root, good_root) = (SessionId::new(), SessionId::new());
    let stale = log.acquire_lease(stale_root, "host-a", LONG).expect("take");
    log.acquire_lease(stale_root, "host-a", LONG)
        .expect("retake");
    let good = log.acquire_lease(good_root, "host-a", LONG).expect("take");
    // Enqueued together, so the writer may fold them into one transaction:
    // the stale one is refused and the others land.
    let part = |root: SessionId, number: u64| StreamAppend {
        stream: StreamId::Session(root),
        expected: ExpectedVersion::Any,
        events: vec![turn(number)],
    };
    let tickets = [
        log.append_fenced(vec![part(good_root, 1)], Vec::new(), vec![good.fence()]),
        log.append_fenced(vec![part(stale_root, 2)], Vec::new(), vec![stale.fence()]),
        log.append_fenced(vec![part(good_root, 3)], Vec::new(), vec![good.fence()]),
        log.append_with_attachments(vec![part(stale_root, 4)], Vec::new()),
    ];
    let mut results = Vec::new();
    for ticket in tickets {
        results.push(ticket.await.map(|outcomes| outcomes[0].last_position));
    }
    assert_eq!(results[0], Ok(1));
    assert!(matches!(
        results[1],
        Err(StoreError::Fenced {
            presented: 1,
            current: 2,
            ..
        })
    ));
    assert_eq!(results[2], Ok(2));
    // An unfenced append is not checked (a single-host writer, or tooling).
    assert_eq!(results[3], Ok(3));
    assert_eq!(log.stream_version(&StreamId::Session(stale_root)), Ok(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_waiting_to_write_when_the_tree_is_taken_over_is_refused() {
    let schema = unique_schema("inflight");
    let (host_a, host_b) = (connect(&schema), connect(&schema));
    let root = SessionId::new();
    let term = Duration::from_millis(200);
    let lease_a = host_a.acquire_lease(root, "host-a", term).expect("take");
    // Another transaction holds the counter lock: host A's append is
    // queued behind it, already past the point where it was issued.
    let blocker = sql().await;
    blocker.batch_execute("BEGIN").await.expect("begin");
    blocker
        .batch_execute(&format!(
            "SELECT head FROM \"{schema}\".counter WHERE id = 1 FOR UPDATE"
        ))
        .await
        .expect("hold the counter");
    let late = {
        let host_a = host_a.clone();
        let fence = lease_a.fence();
        tokio::spawn(async move { append_for(&host_a, root, 1, vec![fence]).await })
    };
    tokio::time::sleep(term + Duration::from_millis(100)).await;
    assert!(!late.is_finished(), "the append waits for the counter");
    // The takeover does not need the counter lock.
    let lease_b = host_b
        .acquire_lease(root, "host-b", LONG)
        .expect("take over");
    blocker
        .batch_execute("ROLLBACK")
        .await
        .expect("release the counter");
    let refused = late.await.expect("the append's task");
    assert!(
        matches!(
            refused,
            Err(StoreError::Fenced {
                presented: 1,
                current: 2,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(host_b.head(), 0, "nothing of it was written");
    assert_eq!(
        append_for(&host_b, root, 2, vec![lease_b.fence()]).await,
        Ok(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_waits_for_an_append_that_passed_its_fence_check() {
    let schema = unique_schema("order");
    let (host_a, host_b) = (connect(&schema), connect(&schema));
    let root = SessionId::new();
    let lease_a = host_a
        .acquire_lease(root, "host-a", Duration::from_millis(50))
        .expect("take");
    // Another session blocks inserts into the records: host A's append
    // takes the counter, passes its fence check, and waits to write.
    let blocker = sql().await;
    blocker.batch_execute("BEGIN").await.expect("begin");
    blocker
        .batch_execute(&format!("LOCK TABLE \"{schema}\".events IN SHARE MODE"))
        .await
        .expect("block the inserts");
    let append = {
        let host_a = host_a.clone();
        let fence = lease_a.fence();
        tokio::spawn(async move { append_for(&host_a, root, 1, vec![fence]).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!append.is_finished(), "the append waits to write");
    // The lease has lapsed, but the append that passed its check still
    // holds the lease row: the takeover waits for it to commit.
    let takeover = {
        let host_b = host_b.clone();
        tokio::task::spawn_blocking(move || host_b.acquire_lease(root, "host-b", LONG))
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !takeover.is_finished(),
        "the token bump waits for the checked append"
    );
    blocker.batch_execute("ROLLBACK").await.expect("unblock");
    assert_eq!(append.await.expect("the append's task"), Ok(1));
    let lease_b = takeover.await.expect("task").expect("take over");
    assert_eq!(lease_b.token, lease_a.token + 1);
    // And after it, the old fence is stale.
    assert!(matches!(
        append_for(&host_a, root, 2, vec![lease_a.fence()]).await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(host_b.head(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lease_requests_are_refused_and_write_nothing() {
    let schema = unique_schema("badlease");
    let log = connect(&schema);
    let root = SessionId::new();
    for (holder, term) in [
        ("", LONG),
        ("host\u{0}", LONG),
        ("host", Duration::ZERO),
        ("host", Duration::from_secs(2 * 24 * 60 * 60)),
    ] {
        let refused = log.acquire_lease(root, holder, term);
        assert!(
            matches!(refused, Err(StoreError::InvalidLease { .. })),
            "{holder:?} {term:?}: {refused:?}"
        );
        assert_eq!(refused.unwrap_err().code().as_str(), "store/invalid-lease");
    }
    assert!(log.leases().expect("list").is_empty());
}
