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
use subagent_store::{
    EventLog, EventLogExt, ExpectedVersion, Fence, Lease, StoreError, StreamAppend,
};

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
        .append_fenced(vec![turn_in(root, number)], Vec::new(), fences)
        .await?;
    Ok(outcomes[0].last_position)
}

const LONG: Duration = Duration::from_secs(60);

/// How many records the log holds, read from the table (a handle's cached
/// head may lag another handle's commit).
fn records_in(log: &PgLog) -> usize {
    let records: Vec<_> = log
        .read_all(1)
        .collect::<Result<_, _>>()
        .expect("read the log");
    records.len()
}

/// Two trees' leases held by one host: the first retaken since, so the
/// lease returned for it is stale; the second current.
fn stale_and_good(log: &PgLog) -> (Lease, Lease) {
    let stale_root = SessionId::new();
    let stale = log.acquire_lease(stale_root, "host-a", LONG).expect("take");
    log.acquire_lease(stale_root, "host-a", LONG)
        .expect("retake");
    let good = log
        .acquire_lease(SessionId::new(), "host-a", LONG)
        .expect("take");
    (stale, good)
}

/// One turn event appended to `root`'s stream.
fn turn_in(root: SessionId, number: u64) -> StreamAppend {
    StreamAppend {
        stream: StreamId::Session(root),
        expected: ExpectedVersion::Any,
        events: vec![turn(number)],
    }
}

/// A session inside a transaction that has run `statement`, holding the
/// locks it took until the test commits or rolls back.
async fn holding(statement: &str) -> Client {
    let client = sql().await;
    client.batch_execute("BEGIN").await.expect("begin");
    client.batch_execute(statement).await.expect(statement);
    client
}

/// Waits until a session is blocked on a lock in a statement that names
/// `"{schema}".{table}`: the moment a test's ordering relies on, observed
/// rather than slept for. `client` must not be inside a transaction (the
/// activity view is a snapshot per transaction).
async fn until_waiting_on(client: &Client, schema: &str, table: &str) {
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
    // Long enough that the fenced append and the refused take below come
    // before it lapses on a loaded machine.
    let term = Duration::from_secs(5);
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
    assert_eq!(records_in(&host_b), 1);
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
    // Token 0 is no exception: without a lease, every fence is stale.
    assert!(matches!(
        append_for(
            &host_a,
            unleased,
            1,
            vec![Fence {
                root: unleased,
                token: 0
            }]
        )
        .await,
        Err(StoreError::Fenced { current: 0, .. })
    ));
    assert_eq!(records_in(&host_a), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_out_request_fails_alone_in_its_group() {
    let schema = unique_schema("group");
    let log = connect(&schema);
    let (stale, good) = stale_and_good(&log);
    let (stale_root, good_root) = (stale.root, good.root);
    // The writer's first transaction waits for a counter another session
    // holds, so the four appends queued meanwhile form its next group.
    let blocker = holding(&format!(
        "SELECT head FROM \"{schema}\".counter WHERE id = 1 FOR UPDATE"
    ))
    .await;
    let first = log.append_with_attachments(vec![turn_in(good_root, 0)], Vec::new());
    until_waiting_on(&sql().await, &schema, "counter").await;
    let tickets = [
        log.append_fenced(vec![turn_in(good_root, 1)], Vec::new(), vec![good.fence()]),
        log.append_fenced(
            vec![turn_in(stale_root, 2)],
            Vec::new(),
            vec![stale.fence()],
        ),
        log.append_fenced(vec![turn_in(good_root, 3)], Vec::new(), vec![good.fence()]),
        log.append_with_attachments(vec![turn_in(stale_root, 4)], Vec::new()),
    ];
    blocker
        .batch_execute("ROLLBACK")
        .await
        .expect("release the counter");
    assert_eq!(first.await.map(|outcomes| outcomes[0].last_position), Ok(1));
    let mut results = Vec::new();
    for ticket in tickets {
        results.push(ticket.await.map(|outcomes| outcomes[0].last_position));
    }
    assert_eq!(results[0], Ok(2));
    assert!(matches!(
        results[1],
        Err(StoreError::Fenced {
            presented: 1,
            current: 2,
            ..
        })
    ));
    assert_eq!(results[2], Ok(3));
    // An unfenced append is not checked (a single-host writer, or tooling).
    assert_eq!(results[3], Ok(4));
    assert_eq!(log.stream_version(&StreamId::Session(stale_root)), Ok(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_request_keeps_its_answer_when_its_group_fails_to_commit() {
    let schema = unique_schema("groupfail");
    let log = connect(&schema);
    let (stale, good) = stale_and_good(&log);
    let (stale_root, good_root) = (stale.root, good.root);
    let watcher = sql().await;
    // A first group of one fenced-out request waits for the counter, so
    // the next two form one group behind it; it writes nothing, so it
    // never reaches the records table, which the next group will.
    let counter = holding(&format!(
        "SELECT head FROM \"{schema}\".counter WHERE id = 1 FOR UPDATE"
    ))
    .await;
    let first = log.append_fenced(
        vec![turn_in(stale_root, 0)],
        Vec::new(),
        vec![stale.fence()],
    );
    until_waiting_on(&watcher, &schema, "counter").await;
    let staged = log.append_fenced(vec![turn_in(good_root, 1)], Vec::new(), vec![good.fence()]);
    let fenced = log.append_fenced(
        vec![turn_in(stale_root, 2)],
        Vec::new(),
        vec![stale.fence()],
    );
    let events = holding(&format!("LOCK TABLE \"{schema}\".events IN SHARE MODE")).await;
    counter
        .batch_execute("ROLLBACK")
        .await
        .expect("release the counter");
    assert!(matches!(first.await, Err(StoreError::Fenced { .. })));
    // The second group checked both, staged one, and waits to write it:
    // its connection is cut there, so its commit fails.
    until_waiting_on(&watcher, &schema, "events").await;
    watcher
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND query LIKE $1",
            &[&format!("%\"{schema}\".events%")],
        )
        .await
        .expect("cut the writer's connection");
    let staged = staged.await;
    assert!(
        matches!(staged, Err(StoreError::Unavailable { .. })),
        "{staged:?}"
    );
    // The fenced one rested on nothing staged: it still learns it lost
    // the tree, not that the outcome is unknown.
    assert_eq!(
        fenced.await,
        Err(StoreError::Fenced {
            root: stale_root,
            presented: 1,
            current: 2,
            holder: "host-a".into(),
        })
    );
    events.batch_execute("ROLLBACK").await.expect("unblock");
    assert_eq!(records_in(&connect(&schema)), 0);
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
    let blocker = holding(&format!(
        "SELECT head FROM \"{schema}\".counter WHERE id = 1 FOR UPDATE"
    ))
    .await;
    let late = {
        let host_a = host_a.clone();
        let fence = lease_a.fence();
        tokio::spawn(async move { append_for(&host_a, root, 1, vec![fence]).await })
    };
    until_waiting_on(&sql().await, &schema, "counter").await;
    assert!(!late.is_finished(), "the append waits for the counter");
    // The lease lapses meanwhile; the takeover needs no counter lock.
    tokio::time::sleep(term + Duration::from_millis(50)).await;
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
    assert_eq!(records_in(&host_b), 0, "nothing of it was written");
    assert_eq!(
        append_for(&host_b, root, 2, vec![lease_b.fence()]).await,
        Ok(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_waits_for_an_append_that_passed_its_fence_check() {
    let schema = unique_schema("order");
    let (host_a, host_b) = (connect(&schema), connect(&schema));
    let watcher = sql().await;
    let root = SessionId::new();
    let term = Duration::from_millis(50);
    let lease_a = host_a.acquire_lease(root, "host-a", term).expect("take");
    // Another session blocks inserts into the records: host A's append
    // takes the counter, passes its fence check, and waits to write.
    let blocker = holding(&format!("LOCK TABLE \"{schema}\".events IN SHARE MODE")).await;
    let append = {
        let host_a = host_a.clone();
        let fence = lease_a.fence();
        tokio::spawn(async move { append_for(&host_a, root, 1, vec![fence]).await })
    };
    until_waiting_on(&watcher, &schema, "events").await;
    tokio::time::sleep(term + Duration::from_millis(50)).await;
    // The lease has lapsed, but the append that passed its check still
    // share-locks the lease row: the takeover's token bump waits for it.
    let takeover = {
        let host_b = host_b.clone();
        tokio::task::spawn_blocking(move || host_b.acquire_lease(root, "host-b", LONG))
    };
    until_waiting_on(&watcher, &schema, "leases").await;
    assert!(!takeover.is_finished());
    blocker.batch_execute("ROLLBACK").await.expect("unblock");
    assert_eq!(append.await.expect("the append's task"), Ok(1));
    let lease_b = takeover.await.expect("task").expect("take over");
    assert_eq!(lease_b.token, lease_a.token + 1);
    // The term runs from the take, not from before its wait.
    assert!(host_b.leases().expect("list")[0].remaining > Duration::from_secs(50));
    // And after it, the old fence is stale.
    assert!(matches!(
        append_for(&host_a, root, 2, vec![lease_a.fence()]).await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(records_in(&host_b), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_check_waiting_on_a_takeover_reads_the_new_token() {
    let schema = unique_schema("reread");
    let host_a = connect(&schema);
    let root = SessionId::new();
    let lease_a = host_a.acquire_lease(root, "host-a", LONG).expect("take");
    // A takeover in progress: its token bump written but not committed.
    let takeover = sql().await;
    takeover.batch_execute("BEGIN").await.expect("begin");
    takeover
        .execute(
            format!(
                "UPDATE \"{schema}\".leases SET token = token + 1, holder = 'host-b' \
                 WHERE root = $1"
            )
            .as_str(),
            &[root.as_uuid()],
        )
        .await
        .expect("bump the token");
    let append = {
        let host_a = host_a.clone();
        let fence = lease_a.fence();
        tokio::spawn(async move { append_for(&host_a, root, 1, vec![fence]).await })
    };
    // The append's fence check waits on the row, then reads it again.
    until_waiting_on(&sql().await, &schema, "leases").await;
    takeover.batch_execute("COMMIT").await.expect("commit");
    assert_eq!(
        append.await.expect("the append's task"),
        Err(StoreError::Fenced {
            root,
            presented: 1,
            current: 2,
            holder: "host-b".into(),
        })
    );
    assert_eq!(records_in(&host_a), 0);
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
    // A lease with a forged term or token is refused too.
    let lease = log.acquire_lease(root, "host", LONG).expect("take");
    let forged_term = subagent_store::Lease {
        term: Duration::ZERO,
        ..lease.clone()
    };
    assert!(matches!(
        log.renew_lease(&forged_term),
        Err(StoreError::InvalidLease { .. })
    ));
    assert!(matches!(
        log.release_lease(&forged_term),
        Err(StoreError::InvalidLease { .. })
    ));
    let forged_token = subagent_store::Lease {
        token: u64::MAX,
        ..lease.clone()
    };
    for refused in [
        log.renew_lease(&forged_token).map(drop),
        log.release_lease(&forged_token),
    ] {
        assert!(
            matches!(refused, Err(StoreError::Fenced { current: 1, .. })),
            "{refused:?}"
        );
    }
    assert_eq!(log.leases().expect("list")[0].token, lease.token);
}
