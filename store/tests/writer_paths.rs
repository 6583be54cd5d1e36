//! The RocksDB writer keeps one appender's appends in the order it issued
//! them, even when it does not wait for one before issuing the next and
//! other threads keep the writer busy (in both durability modes): what the
//! runtime's pipelining relies on, and what any change to the writer's
//! hand-off (such as committing in the appender's thread, tried and
//! measured in BENCHMARKS.md) must keep. Also the writer's marks of the
//! streams it wrote, and the stream subscriptions that read nothing when
//! their stream did not grow.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

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
    // Noise appends so far, by every noise thread.
    let noise_appends = Arc::new(AtomicU64::new(0));
    // The chain starts once every noise thread has written once, so they
    // are all running when it does.
    let started = Arc::new(Barrier::new(4));
    let noise: Vec<_> = (0..3)
        .map(|_| {
            let (log, stop, started, appends) = (
                log.clone(),
                Arc::clone(&stop),
                Arc::clone(&started),
                Arc::clone(&noise_appends),
            );
            std::thread::spawn(move || {
                let stream = StreamId::Session(SessionId::new());
                let mut written = 0u64;
                loop {
                    log.append(stream, ExpectedVersion::Any, vec![turn(written)])
                        .wait()
                        .expect("noise append");
                    written += 1;
                    appends.fetch_add(1, Ordering::Relaxed);
                    if written == 1 {
                        started.wait();
                    }
                    if stop.load(Ordering::Relaxed) {
                        return written;
                    }
                }
            })
        })
        .collect();
    started.wait();
    let chain = StreamId::Session(SessionId::new());
    let links = 2_000u64;
    let tickets: Vec<_> = (0..links)
        .map(|version| log.append(chain, ExpectedVersion::Exact(version), vec![turn(version)]))
        .collect();
    // Before the chain is awaited, the noise threads append beside it (a
    // second round each, at least), so its appends meet a busy writer and
    // are committed by others too, however the threads are scheduled.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while noise_appends.load(Ordering::Relaxed) < 6 {
        assert!(
            std::time::Instant::now() < deadline,
            "the noise threads stopped appending"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
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

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Waits (at most a generous bound, so a broken backstop fails instead of
/// hanging) until the log's head reaches `head`.
async fn head_reaches(log: &RocksLog, head: u64) {
    let mut watch = log.watch_head();
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        watch.wait_for(|now| *now >= head),
    )
    .await
    .unwrap_or_else(|_| panic!("the head never reached {head}: {}", log.head()))
    .expect("the log closed");
}

/// A multi-thread runtime of two workers, where a `Sync` appender may
/// block its thread.
fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
}

/// In both modes, appends no one awaits are committed anyway, in order,
/// by the writer thread's backstop: while appends come, and after the log
/// went quiet and the thread fell asleep.
#[test]
fn appends_no_one_awaits_are_committed_by_the_backstop() {
    for durability in [Durability::Buffered, Durability::Sync] {
        appends_no_one_awaits_are_committed_by_the_backstop_in(durability);
    }
}

fn appends_no_one_awaits_are_committed_by_the_backstop_in(durability: Durability) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), durability);
    let stream = StreamId::Session(SessionId::new());
    multi_thread_runtime().block_on(async {
        let first = log.append(stream, ExpectedVersion::Exact(0), vec![turn(0)]);
        let second = log.append(stream, ExpectedVersion::Exact(1), vec![turn(1)]);
        head_reaches(&log, 2).await;
        assert_eq!(log.commit_counts().by_appenders, 0, "nobody awaited yet");
        assert!(log.commit_counts().by_thread >= 1);
        assert_eq!(first.await.unwrap().first_position, 1);
        assert_eq!(second.await.unwrap().first_position, 2);
        // Quiet for longer than the thread's idle rounds: it sleeps until
        // the next append wakes it.
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        let third = log.append(stream, ExpectedVersion::Exact(2), vec![turn(2)]);
        head_reaches(&log, 3).await;
        assert_eq!(third.await.unwrap().stream_version, 3);
    });
}

/// A ticket dropped before its answer hands its append to the thread:
/// it is written, and later appends land after it.
#[test]
fn a_dropped_ticket_is_still_committed() {
    for durability in [Durability::Buffered, Durability::Sync] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), durability);
        let stream = StreamId::Session(SessionId::new());
        multi_thread_runtime().block_on(async {
            drop(log.append(stream, ExpectedVersion::Exact(0), vec![turn(0)]));
            head_reaches(&log, 1).await;
            let next = log
                .append(stream, ExpectedVersion::Exact(1), vec![turn(1)])
                .await
                .unwrap();
            assert_eq!(next.first_position, 2, "{durability:?}");
        });
    }
}

/// A lone appender that awaits each append commits it in its own task
/// (no handoff to the writer thread and back), in `Sync` mode inside
/// `block_in_place`, so only where its runtime lets it block: on a
/// current-thread runtime, the thread commits every `Sync` group, so no
/// fsync stalls the only worker.
#[test]
fn a_lone_awaiting_appender_leads_where_it_may_block() {
    // (mode, multi-thread runtime, in a task spawned on a worker rather
    // than in `block_on`, whether the appender leads)
    for (durability, multi_thread, spawned, led) in [
        (Durability::Buffered, false, false, true),
        (Durability::Buffered, true, true, true),
        (Durability::Sync, false, false, false),
        (Durability::Sync, true, false, true),
        (Durability::Sync, true, true, true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), durability);
        let stream = StreamId::Session(SessionId::new());
        let runtime = if multi_thread {
            multi_thread_runtime()
        } else {
            tokio_runtime()
        };
        let appender = {
            let log = log.clone();
            async move {
                for version in 0..100 {
                    log.append(stream, ExpectedVersion::Exact(version), vec![turn(version)])
                        .await
                        .unwrap();
                }
            }
        };
        if spawned {
            // On a worker, a `Sync` lead's `block_in_place` hands the
            // worker's core to another thread for the fsync, and takes it
            // back.
            runtime.block_on(runtime.spawn(appender)).unwrap();
        } else {
            runtime.block_on(appender);
        }
        let counts = log.commit_counts();
        let durability = (durability, multi_thread, spawned);
        if led {
            // The backstop may take an append between its queueing and
            // its ticket's poll, rarely.
            assert!(counts.by_appenders >= 50, "{durability:?}: {counts:?}");
        } else {
            assert_eq!(counts.by_appenders, 0, "{durability:?}: {counts:?}");
            assert_eq!(counts.by_thread, 100, "{durability:?}: {counts:?}");
        }
        assert_eq!(
            counts.by_appenders + counts.by_thread,
            100,
            "{durability:?}"
        );
    }
}

/// `Sync` appenders in company hand their appends to the writer thread
/// instead of each fsyncing in place: after a group of more than one
/// request, the next single appends are the thread's (256 of them,
/// `SYNC_COMPANY_ROUNDS`); once that many groups of one have passed, a
/// lone appender leads again.
#[test]
fn sync_appenders_in_company_hand_their_appends_to_the_thread() {
    let groups = |counts: subagent_store::CommitCounts| counts.by_appenders + counts.by_thread;
    let runtime = multi_thread_runtime();
    // Eight appends queued before any is awaited, on a fresh log (no
    // company yet, so the first ticket leads): it commits them as one
    // group, unless the backstop took some first (it looks every 2 ms);
    // then again, on another fresh log, so the last group before the
    // singles below is one of eight.
    let mut attempts = 0;
    let (_dir, log) = loop {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), Durability::Sync);
        let stream = StreamId::Session(SessionId::new());
        runtime.block_on(async {
            let queued: Vec<_> = (0..8)
                .map(|version| {
                    log.append(stream, ExpectedVersion::Exact(version), vec![turn(version)])
                })
                .collect();
            for ticket in queued {
                ticket.await.expect("queued");
            }
        });
        if groups(log.commit_counts()) == 1 {
            break (dir, log);
        }
        attempts += 1;
        assert!(attempts < 20, "eight queued appends never made one group");
    };
    runtime.block_on(async {
        let in_company = log.commit_counts();
        let stream = StreamId::Session(SessionId::new());
        let mut version = 0;
        let mut append = || {
            version += 1;
            log.append(
                stream,
                ExpectedVersion::Exact(version - 1),
                vec![turn(version)],
            )
        };
        for _ in 0..256 {
            append().await.unwrap();
        }
        let handed = log.commit_counts();
        assert_eq!(handed.by_appenders, in_company.by_appenders, "{handed:?}");
        assert_eq!(handed.by_thread, in_company.by_thread + 256, "{handed:?}");
        for _ in 0..100 {
            append().await.unwrap();
        }
        let alone = log.commit_counts();
        assert!(
            alone.by_appenders - handed.by_appenders >= 50,
            "alone again, the appender leads: {alone:?}"
        );
    });
}

/// Runs `body`, and counts the panics raised on this thread meanwhile
/// (the others go to the hook as before).
fn panics_on_this_thread(body: impl FnOnce()) -> usize {
    let here = std::thread::current().id();
    let count = Arc::new(AtomicU64::new(0));
    let previous = Arc::new(std::panic::take_hook());
    {
        let (count, previous) = (Arc::clone(&count), Arc::clone(&previous));
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().id() == here {
                count.fetch_add(1, Ordering::Relaxed);
            } else {
                previous(info);
            }
        }));
    }
    body();
    drop(std::panic::take_hook());
    let previous = Arc::try_unwrap(previous).unwrap_or_else(|_| unreachable!("the hook is gone"));
    std::panic::set_hook(previous);
    usize::try_from(count.load(Ordering::Relaxed)).unwrap()
}

/// `block_in_place` refuses where the runtime context forbids blocking,
/// though the runtime is a multi-thread one: inside a `LocalSet`, and
/// with a multi-thread runtime's handle entered inside a current-thread
/// runtime's `block_on`. A `Sync` append there goes to the writer thread,
/// the refusal does not reach the appender, and it is met once per
/// thread: the thread's later appends go to the writer thread at once.
#[test]
fn a_sync_append_where_blocking_is_refused_goes_to_the_thread() {
    let multi = multi_thread_runtime();
    let appends = |log: RocksLog| async move {
        let stream = StreamId::Session(SessionId::new());
        for version in 0..3 {
            let outcome = log
                .append(stream, ExpectedVersion::Exact(version), vec![turn(version)])
                .await
                .unwrap();
            assert_eq!(outcome.stream_version, version + 1);
        }
    };
    for local_set in [true, false] {
        // A thread of its own: the refusal is remembered per thread.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let dir = tempfile::tempdir().unwrap();
                let log = open(dir.path(), Durability::Sync);
                let panics = panics_on_this_thread(|| {
                    if local_set {
                        let local = tokio::task::LocalSet::new();
                        multi.block_on(local.run_until(appends(log.clone())));
                    } else {
                        tokio_runtime().block_on(async {
                            let _entered = multi.handle().enter();
                            appends(log.clone()).await;
                        });
                    }
                });
                assert_eq!(
                    panics, 1,
                    "local set: {local_set}: one refusal, then remembered"
                );
                let counts = log.commit_counts();
                assert_eq!(
                    (counts.by_appenders, counts.by_thread),
                    (0, 3),
                    "{counts:?}"
                );
            });
        });
    }
}

/// A ticket put in the background (`TransactionTicket::in_background`)
/// does not hold its task for an fsync: in `Sync` mode a lone appender's
/// append goes to the writer thread at once, while in `Buffered` mode the
/// poll still leads.
#[test]
fn a_ticket_in_the_background_is_committed_without_holding_its_task() {
    for (durability, led) in [(Durability::Sync, false), (Durability::Buffered, true)] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), durability);
        let stream = StreamId::Session(SessionId::new());
        multi_thread_runtime().block_on(async {
            for version in 0..20 {
                let ticket = log
                    .append_atomic(vec![subagent_store::StreamAppend {
                        stream,
                        expected: ExpectedVersion::Exact(version),
                        events: vec![turn(version)],
                    }])
                    .in_background();
                let outcomes = ticket.await.unwrap();
                assert_eq!(outcomes[0].stream_version, version + 1);
            }
        });
        let counts = log.commit_counts();
        if led {
            assert!(counts.by_appenders >= 10, "{durability:?}: {counts:?}");
        } else {
            assert_eq!(
                (counts.by_appenders, counts.by_thread),
                (0, 20),
                "{durability:?}: {counts:?}"
            );
        }
    }
}

/// Appenders that are ready at the same time share a group: once a recent
/// group held more than one request, a ticket's first poll yields once before
/// leading, so the other tasks queue their appends first and the leader
/// commits them all. Had each ticket led on its first poll, the 64 tasks
/// (on one thread, each running to its await) would make 64 commits.
#[test]
fn buffered_appenders_ready_together_share_one_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), Durability::Buffered);
    let appenders = 64u64;
    let (positions, before) = tokio_runtime().block_on(async {
        // Eight appends queued before any is awaited: a group of more
        // than one (the writer thread's backstop may take some alone).
        let stream = StreamId::Session(SessionId::new());
        let queued: Vec<_> = (0..8)
            .map(|version| log.append(stream, ExpectedVersion::Exact(version), vec![turn(version)]))
            .collect();
        for (position, ticket) in (1..).zip(queued) {
            assert_eq!(ticket.await.expect("queued").first_position, position);
        }
        let before = log.commit_counts();
        assert!(before.by_appenders + before.by_thread < 8, "{before:?}");
        let tasks: Vec<_> = (0..appenders)
            .map(|_| {
                let log = log.clone();
                tokio::spawn(async move {
                    let stream = StreamId::Session(SessionId::new());
                    log.append(stream, ExpectedVersion::Exact(0), vec![turn(0)])
                        .await
                        .expect("append")
                        .first_position
                })
            })
            .collect();
        let mut positions = Vec::new();
        for task in tasks {
            positions.push(task.await.expect("task"));
        }
        (positions, before)
    });
    let mut sorted = positions.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (9..appenders + 9).collect::<Vec<_>>(),
        "every append, once"
    );
    let after = log.commit_counts();
    let led = after.by_appenders - before.by_appenders;
    let by_thread = after.by_thread - before.by_thread;
    // One group led by the first task, and a few more should the writer
    // thread's backstop look at the queue meanwhile (every 2 ms). On a
    // loaded machine the backstop may take the whole group before any
    // task polls its ticket (CI saw `led == 0, by_thread == 2`), so who
    // committed is not asserted here: that an awaiting appender leads is
    // `a_lone_awaiting_appender_leads_where_it_may_block`'s to check.
    assert!(
        led + by_thread <= 8,
        "{appenders} appends in {led} led and {by_thread} backstop commits"
    );
}

/// Dropping the last handle commits what is queued and frees the
/// directory, even while a ticket is still held: the ticket keeps neither
/// the writer nor the database, and reads its answer afterwards.
#[test]
fn a_ticket_outliving_its_log_holds_no_lock_and_reads_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), Durability::Buffered);
    let stream = StreamId::Session(SessionId::new());
    let ticket = log.append(stream, ExpectedVersion::Exact(0), vec![turn(0)]);
    drop(log);
    let reopened = open(dir.path(), Durability::Buffered);
    assert_eq!(reopened.head(), 1, "the close committed the queued append");
    let outcome = tokio_runtime().block_on(ticket).unwrap();
    assert_eq!(outcome.first_position, 1);
}

/// Dropping the last handle while other tasks hold or lead tickets frees
/// the directory at once, and its close commits every queued append: held
/// tickets keep neither the writer nor the database open. (The last drop
/// also waits for a commit in progress before letting the writer's
/// database handle go; that window is too narrow for this test to hit
/// reliably, so it is argued in `Shared`'s drop, not proven here.)
#[test]
fn the_last_drop_frees_the_directory_while_tickets_are_leading() {
    let runtime = multi_thread_runtime();
    for round in 0..30 {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), Durability::Buffered);
        let holders = 16;
        let left = Arc::new(std::sync::atomic::AtomicUsize::new(holders));
        let path = Arc::new(dir.path().to_path_buf());
        let clones: Vec<RocksLog> = (0..holders).map(|_| log.clone()).collect();
        drop(log);
        let tasks: Vec<_> = clones
            .into_iter()
            .map(|log| {
                let (left, path) = (Arc::clone(&left), Arc::clone(&path));
                runtime.spawn(async move {
                    let stream = StreamId::Session(SessionId::new());
                    let ticket = log.append(stream, ExpectedVersion::Any, vec![turn(0)]);
                    drop(log);
                    if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                        // The last handle is gone: the directory is free.
                        // Its close committed every queued append.
                        let reopened = RocksLog::open(&*path, RocksOptions::default())
                            .unwrap_or_else(|err| panic!("round {round}: {err:?}"));
                        assert_eq!(reopened.head(), holders as u64, "round {round}");
                    }
                    ticket
                        .await
                        .unwrap_or_else(|err| panic!("round {round}: {err:?}"));
                })
            })
            .collect();
        runtime.block_on(async {
            for task in tasks {
                task.await.unwrap();
            }
        });
    }
}

/// A new stream whose mark `log` (opened empty) keeps apart from those of
/// every stream written so far: probed, since streams that share a slot of
/// the writer's table answer for each other.
fn stream_apart(log: &RocksLog) -> StreamId {
    loop {
        let candidate = StreamId::Session(SessionId::new());
        if !log.may_have_written_after(&candidate, 0) {
            return candidate;
        }
    }
}

/// The writer marks every stream a group wrote before it publishes the
/// group's head, so the log can tell a stream subscription its stream did
/// not grow (and it skips its read); nothing it did not see written since
/// the log was opened is ever answered "not grown".
#[test]
fn the_log_knows_which_streams_grew_since_it_opened() {
    let dir = tempfile::tempdir().unwrap();
    let mine = StreamId::Session(SessionId::new());
    let other;
    {
        let log = open(dir.path(), Durability::Buffered);
        assert!(
            !log.may_have_written_after(&mine, 0),
            "an empty log opened: nothing was written"
        );
        log.append(mine, ExpectedVersion::Any, vec![turn(1)])
            .wait()
            .unwrap();
        assert!(log.may_have_written_after(&mine, 0));
        other = stream_apart(&log);
        assert!(!log.may_have_written_after(&mine, 1));
        log.append(other, ExpectedVersion::Any, vec![turn(1)])
            .wait()
            .unwrap();
        assert!(log.may_have_written_after(&other, 1));
        assert!(
            !log.may_have_written_after(&mine, 1),
            "another stream's append grew it"
        );
    }
    // Reopened at head 2: what was written before is not known.
    let log = open(dir.path(), Durability::Buffered);
    assert!(log.may_have_written_after(&mine, 1));
    assert!(log.may_have_written_after(&other, 0));
    assert!(!log.may_have_written_after(&mine, 2));
    assert!(!log.may_have_written_after(&other, 2));
}

/// The subscription's next item, within a generous bound.
async fn next(subscription: &mut subagent_store::Subscription) -> subagent_store::SubscriptionItem {
    use tokio_stream::StreamExt as _;
    tokio::time::timeout(std::time::Duration::from_secs(20), subscription.next())
        .await
        .expect("the subscription stalled")
        .expect("the subscription ended")
        .expect("the subscription failed")
}

/// The subscription's next item, which must be an event.
async fn next_event(
    subscription: &mut subagent_store::Subscription,
) -> subagent_core::RecordedEvent {
    match next(subscription).await {
        subagent_store::SubscriptionItem::Event(record) => record,
        other => panic!("expected the stream's next event, got {other:?}"),
    }
}

/// Fails with `why` if the subscription yields anything within `millis`.
async fn assert_quiet(subscription: &mut subagent_store::Subscription, millis: u64, why: &str) {
    use tokio_stream::StreamExt as _;
    let waited = std::time::Duration::from_millis(millis);
    assert!(
        tokio::time::timeout(waited, subscription.next())
            .await
            .is_err(),
        "{why}"
    );
}

/// A stream subscription on a reopened log reads its stream's history
/// (written before the opening, so not in the writer's marks), then,
/// through head changes that brought only another stream's events, still
/// delivers its own next event, once.
#[test]
fn a_stream_subscription_on_a_reopened_log_sees_history_then_live_events() {
    let dir = tempfile::tempdir().unwrap();
    let mine = StreamId::Session(SessionId::new());
    let mut other = None;
    {
        let log = open(dir.path(), Durability::Buffered);
        for number in 1..=3 {
            log.append(mine, ExpectedVersion::Any, vec![turn(number)])
                .wait()
                .unwrap();
            let other = *other.get_or_insert_with(|| stream_apart(&log));
            log.append(other, ExpectedVersion::Any, vec![turn(number)])
                .wait()
                .unwrap();
        }
    }
    let other = other.expect("chosen in the first round");
    let log = open(dir.path(), Durability::Buffered);
    tokio_runtime().block_on(async {
        let mut subscription = log.subscribe_stream(mine, 2);
        let mut history = Vec::new();
        loop {
            match next(&mut subscription).await {
                subagent_store::SubscriptionItem::Event(record) => history.push(record.version),
                subagent_store::SubscriptionItem::CaughtUp { head } => {
                    assert_eq!(head, 6);
                    break;
                }
            }
        }
        assert_eq!(history, vec![2, 3]);
        for number in 4..=20 {
            log.append(other, ExpectedVersion::Any, vec![turn(number)])
                .await
                .unwrap();
            // The subscription sees each head change on its own, and
            // finds nothing of its stream in it.
            assert_quiet(&mut subscription, 10, "another stream's event reached it").await;
        }
        log.append(mine, ExpectedVersion::Any, vec![turn(4)])
            .await
            .unwrap();
        let record = next_event(&mut subscription).await;
        assert_eq!(
            (record.stream, record.version, record.position),
            (mine, 4, 24)
        );
        assert_quiet(&mut subscription, 100, "an event past the stream's end").await;
    });
}

/// A RocksDB log that counts its stream-index page reads, and answers
/// everything else as the log it wraps.
#[derive(Clone)]
struct CountingStreamReads {
    inner: RocksLog,
    reads: Arc<AtomicU64>,
}

impl EventLog for CountingStreamReads {
    fn append_with_attachments(
        &self,
        parts: Vec<subagent_store::StreamAppend>,
        attachments: Vec<subagent_core::Attachment>,
    ) -> subagent_store::TransactionTicket {
        self.inner.append_with_attachments(parts, attachments)
    }
    fn attachment(
        &self,
        id: &subagent_core::AttachmentId,
    ) -> Result<Option<Vec<u8>>, subagent_store::StoreError> {
        self.inner.attachment(id)
    }
    fn attachment_ids(
        &self,
    ) -> Result<Vec<subagent_core::AttachmentId>, subagent_store::StoreError> {
        self.inner.attachment_ids()
    }
    fn read_all_page(
        &self,
        from: u64,
        limit: usize,
    ) -> Result<Vec<subagent_core::RecordedEvent>, subagent_store::StoreError> {
        self.inner.read_all_page(from, limit)
    }
    fn read_stream_page(
        &self,
        stream: &StreamId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<subagent_core::RecordedEvent>, subagent_store::StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_stream_page(stream, from, limit)
    }
    fn stream_version(&self, stream: &StreamId) -> Result<u64, subagent_store::StoreError> {
        self.inner.stream_version(stream)
    }
    fn head(&self) -> u64 {
        self.inner.head()
    }
    fn watch_head(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.watch_head()
    }
    fn subscribe(&self, from: u64) -> subagent_store::Subscription {
        self.inner.subscribe(from)
    }
    fn subscribe_stream(&self, stream: StreamId, from: u64) -> subagent_store::Subscription {
        subagent_store::subscription::follow_stream(self.clone(), self.watch_head(), stream, from)
    }
    fn may_have_written_after(&self, stream: &StreamId, position: u64) -> bool {
        self.inner.may_have_written_after(stream, position)
    }
    fn durability(&self) -> Durability {
        self.inner.durability()
    }
    fn read_checkpoint(
        &self,
        name: &str,
    ) -> Result<Option<subagent_store::CheckpointBytes<'_>>, subagent_store::StoreError> {
        self.inner.read_checkpoint(name)
    }
    fn write_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), subagent_store::StoreError> {
        self.inner.write_checkpoint(name, bytes)
    }
    fn index_entries(&self, index: subagent_store::LogIndex) -> subagent_store::IndexEntries<'_> {
        self.inner.index_entries(index)
    }
    fn locate_event(
        &self,
        event_id: &subagent_core::EventId,
    ) -> Result<Option<subagent_store::IdLocation>, subagent_store::StoreError> {
        self.inner.locate_event(event_id)
    }
    fn indexed_position(
        &self,
        stream: &StreamId,
        version: u64,
    ) -> Result<Option<u64>, subagent_store::StoreError> {
        self.inner.indexed_position(stream, version)
    }
}

/// Head changes that brought only another stream's events cost a stream
/// subscription no read of the stream index (the writer's marks say its
/// stream did not grow); one that brought its own event costs a read, and
/// delivers it.
#[test]
fn a_stream_subscription_reads_nothing_for_other_streams_commits() {
    let dir = tempfile::tempdir().unwrap();
    let rocks = open(dir.path(), Durability::Buffered);
    let mine = StreamId::Session(SessionId::new());
    rocks
        .append(mine, ExpectedVersion::Any, vec![turn(1)])
        .wait()
        .unwrap();
    let other = stream_apart(&rocks);
    let log = CountingStreamReads {
        inner: rocks,
        reads: Arc::new(AtomicU64::new(0)),
    };
    tokio_runtime().block_on(async {
        let mut subscription = log.subscribe_stream(mine, 1);
        assert!(matches!(
            next(&mut subscription).await,
            subagent_store::SubscriptionItem::Event(record) if record.version == 1
        ));
        assert!(matches!(
            next(&mut subscription).await,
            subagent_store::SubscriptionItem::CaughtUp { head: 1 }
        ));
        let reads_caught_up = log.reads.load(Ordering::SeqCst);
        assert!(reads_caught_up >= 1, "the history was read");
        for number in 1..=20 {
            log.append(other, ExpectedVersion::Any, vec![turn(number)])
                .await
                .unwrap();
            // Each head change reaches the subscription, which finds
            // nothing of its stream in it.
            assert_quiet(&mut subscription, 10, "another stream's event reached it").await;
        }
        assert_eq!(
            log.reads.load(Ordering::SeqCst),
            reads_caught_up,
            "another stream's commits made the subscription read the index"
        );
        log.append(mine, ExpectedVersion::Any, vec![turn(2)])
            .await
            .unwrap();
        let record = next_event(&mut subscription).await;
        assert_eq!(
            (record.stream, record.version, record.position),
            (mine, 2, 22)
        );
        assert!(log.reads.load(Ordering::SeqCst) > reads_caught_up);
    });
}

/// An event whose id sorts below every id a clock would mint now.
fn turn_with_low_id(turn_number: u64, low: u8) -> NewEvent {
    let mut bytes = [0u8; 16];
    bytes[15] = low;
    NewEvent {
        event_id: subagent_core::EventId::from_uuid(uuid::Uuid::from_bytes(bytes)),
        ..turn(turn_number)
    }
}

#[test]
fn fresh_ids_are_not_looked_up_and_every_other_id_is() {
    let dir = tempfile::tempdir().unwrap();
    let stream = StreamId::Session(SessionId::new());
    let append = |log: &RocksLog, event: &NewEvent| {
        log.append(stream, ExpectedVersion::Any, vec![event.clone()])
            .wait()
            .unwrap()
    };
    let (first, second) = (turn(1), turn(2));
    {
        let log = open(dir.path(), Durability::Buffered);
        assert!(!append(&log, &first).deduplicated);
        assert!(!append(&log, &second).deduplicated);
        assert_eq!(log.commit_counts().id_lookups, 0, "fresh ids");
        // A retry of either is looked up, and answered from the index.
        assert!(append(&log, &first).deduplicated);
        assert!(append(&log, &second).deduplicated);
        assert_eq!(log.commit_counts().id_lookups, 2);
    }
    // Reopened, the ceiling is read back from the index: a retry of the
    // greatest id is still a retry, and a fresh id still free.
    let log = open(dir.path(), Durability::Sync);
    let retried = append(&log, &second);
    assert!(retried.deduplicated);
    assert_eq!(retried.first_position, 2);
    assert_eq!(log.commit_counts().id_lookups, 1);
    assert!(!append(&log, &turn(3)).deduplicated);
    assert_eq!(log.commit_counts().id_lookups, 1);
    // An id below the ceiling that was never appended is looked up, found
    // absent, written, and a retry of it found.
    let low = turn_with_low_id(4, 1);
    let written = append(&log, &low);
    assert_eq!((written.deduplicated, written.first_position), (false, 4));
    assert!(append(&log, &low).deduplicated);
    assert_eq!(log.commit_counts().id_lookups, 3);
    // The same id appended twice at once: whether the two share a group
    // (the group's own ids answer, with no lookup) or not (the index does,
    // the id being at the ceiling by then), the second is a retry.
    let fresh = turn(5);
    let tickets: Vec<_> = (0..2)
        .map(|_| log.append(stream, ExpectedVersion::Any, vec![fresh.clone()]))
        .collect();
    let answers: Vec<_> = tickets
        .into_iter()
        .map(|ticket| ticket.wait().unwrap())
        .collect();
    assert_eq!(
        answers
            .iter()
            .map(|answer| (answer.deduplicated, answer.first_position))
            .collect::<Vec<_>>(),
        vec![(false, 5), (true, 5)]
    );
    assert!((3..=4).contains(&log.commit_counts().id_lookups));
    assert_eq!(log.head(), 5);
}
