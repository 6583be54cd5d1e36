//! The conformance suite every [`EventLog`] backend must pass.
//!
//! Each check is a public async function over a [`Harness`]; the
//! [`conformance_suite!`](crate::conformance_suite) macro turns them into one
//! `#[tokio::test]` each for a backend. A new backend (PostgreSQL, ...)
//! implements [`Harness`] and invokes the macro.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use subagent_core::{
    ContentBlock, Event, NewEvent, RecordedEvent, SessionId, StreamId, MAX_EVENT_BYTES,
};
use tokio_stream::StreamExt;

use crate::append_check::IdLocation;
use crate::error::StoreError;
use crate::indexes::{IndexDamage, IndexEntry, LogIndex};
use crate::log::{EventLog, EventLogExt, ExpectedVersion, StreamAppend};
use crate::subscription::SubscriptionItem;

/// How the suite opens, reopens and damages a backend's storage.
pub trait Harness: Send + 'static {
    /// The backend.
    type Log: EventLog + Clone;
    /// Opens fresh, empty storage.
    fn open(&mut self) -> Self::Log;
    /// Closes `log` (the suite holds no other handle) and opens the same storage again.
    fn reopen(&mut self, log: Self::Log) -> Self::Log;
    /// Flips one bit of byte `byte` of the stored record at `position`.
    fn corrupt(&mut self, log: &Self::Log, position: u64, byte: usize);
    /// Damages one index entry; false when the backend cannot represent
    /// that damage (the suite only asks for damage every backend can hold:
    /// redirecting an entry, adding the next version, deleting the last).
    fn damage_index(&mut self, log: &Self::Log, damage: IndexDamage) -> bool;
}

/// A session stream and an event that belongs in it.
pub fn session_stream() -> StreamId {
    StreamId::Session(SessionId::new())
}

/// A session-stream event numbered `turn` (its payload identifies it in asserts).
pub fn turn(turn: u64) -> NewEvent {
    NewEvent::new(Event::TurnStarted { turn, epoch: 1 })
}

fn turn_of(record: &RecordedEvent) -> u64 {
    match record.event {
        Event::TurnStarted { turn, .. } => turn,
        _ => u64::MAX,
    }
}

fn everything<L: EventLog>(log: &L) -> Vec<RecordedEvent> {
    log.read_all(1)
        .collect::<Result<_, _>>()
        .expect("log reads back")
}

async fn append<L: EventLog>(
    log: &L,
    stream: StreamId,
    expected: ExpectedVersion,
    events: Vec<NewEvent>,
) -> Result<crate::AppendOutcome, StoreError> {
    log.append(stream, expected, events).await
}

/// Positions and versions start at 1, have no gaps, and reads return what was written.
pub async fn positions_and_versions_start_at_one_without_gaps<H: Harness>(mut harness: H) {
    let log = harness.open();
    assert_eq!(log.head(), 0);
    let (a, b) = (session_stream(), session_stream());
    let first = append(&log, a, ExpectedVersion::NoStream, vec![turn(1), turn(2)])
        .await
        .unwrap();
    assert_eq!(
        (
            first.first_position,
            first.last_position,
            first.stream_version
        ),
        (1, 2, 2)
    );
    assert!(!first.deduplicated);
    let second = append(&log, b, ExpectedVersion::Any, vec![turn(3)])
        .await
        .unwrap();
    assert_eq!((second.first_position, second.stream_version), (3, 1));
    let third = append(&log, a, ExpectedVersion::Exact(2), vec![turn(4)])
        .await
        .unwrap();
    assert_eq!((third.first_position, third.stream_version), (4, 3));
    assert_eq!(log.head(), 4);
    let all = everything(&log);
    assert_eq!(
        all.iter().map(|r| r.position).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        all.iter().map(turn_of).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    let stream_a: Vec<_> = log.read_stream(a, 1).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        stream_a
            .iter()
            .map(|r| (r.version, turn_of(r)))
            .collect::<Vec<_>>(),
        vec![(1, 1), (2, 2), (3, 4)]
    );
    assert_eq!(log.stream_version(&a).unwrap(), 3);
    assert_eq!(log.stream_version(&session_stream()).unwrap(), 0);
    assert!(all.iter().all(|r| r.recorded_at > 0));
}

/// A failed precondition is `Conflict { expected, actual }` and writes nothing.
pub async fn conflicting_expected_versions_are_refused_and_change_nothing<H: Harness>(
    mut harness: H,
) {
    let log = harness.open();
    let stream = session_stream();
    append(&log, stream, ExpectedVersion::NoStream, vec![turn(1)])
        .await
        .unwrap();
    let before = everything(&log);
    for expected in [
        ExpectedVersion::NoStream,
        ExpectedVersion::Exact(0),
        ExpectedVersion::Exact(2),
    ] {
        let err = append(&log, stream, expected, vec![turn(9)])
            .await
            .unwrap_err();
        assert_eq!(
            err,
            StoreError::Conflict {
                stream,
                expected,
                actual: 1
            }
        );
        assert_eq!(err.code(), "store/conflict");
    }
    let other = session_stream();
    let err = append(&log, other, ExpectedVersion::Exact(1), vec![turn(9)])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { actual: 0, .. }));
    assert_eq!(everything(&log), before);
    assert_eq!(log.head(), 1);
}

/// Re-appending ids already in the stream returns the original placement.
pub async fn reappending_the_same_event_ids_is_idempotent<H: Harness>(mut harness: H) {
    let log = harness.open();
    let stream = session_stream();
    append(&log, stream, ExpectedVersion::Any, vec![turn(0)])
        .await
        .unwrap();
    let batch = vec![turn(1), turn(2)];
    let original = append(&log, stream, ExpectedVersion::Exact(1), batch.clone())
        .await
        .unwrap();
    let retried = append(&log, stream, ExpectedVersion::Exact(1), batch.clone())
        .await
        .unwrap();
    assert!(retried.deduplicated);
    assert_eq!(
        (retried.first_position, retried.last_position),
        (original.first_position, original.last_position)
    );
    assert_eq!(retried.stream_version, original.stream_version);
    assert_eq!(log.head(), 3);
    // Retries also dedupe when issued together, before either is durable.
    let fresh = vec![turn(3)];
    let (one, two) = tokio::join!(
        append(&log, stream, ExpectedVersion::Any, fresh.clone()),
        append(&log, stream, ExpectedVersion::Any, fresh)
    );
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_eq!(one.first_position, two.first_position);
    assert!(one.deduplicated != two.deduplicated);
    assert_eq!(log.head(), 4);
}

/// Ids reused other than as a whole retry are refused; the log is unchanged.
pub async fn partial_repeated_or_cross_stream_ids_are_refused<H: Harness>(mut harness: H) {
    let log = harness.open();
    let (a, b) = (session_stream(), session_stream());
    let known = turn(1);
    append(&log, a, ExpectedVersion::Any, vec![known.clone()])
        .await
        .unwrap();
    let before = everything(&log);
    let cases = [
        (
            a,
            vec![known.clone(), turn(2)],
            "batch is only partly appended already",
        ),
        (
            a,
            vec![turn(2), known.clone()],
            "batch is only partly appended already",
        ),
        (b, vec![known.clone()], "already appended to another stream"),
    ];
    for (stream, events, why) in cases {
        match append(&log, stream, ExpectedVersion::Any, events).await {
            Err(StoreError::DuplicateEventId { reason, .. }) => assert_eq!(reason, why),
            other => panic!("expected DuplicateEventId ({why}), got {other:?}"),
        }
    }
    let repeated = turn(5);
    let err = append(
        &log,
        b,
        ExpectedVersion::Any,
        vec![repeated.clone(), repeated],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "store/duplicate-event-id");
    assert_eq!(everything(&log), before);
}

/// Empty and misplaced appends are refused with typed errors; the log is unchanged.
pub async fn empty_and_misplaced_appends_are_refused<H: Harness>(mut harness: H) {
    let log = harness.open();
    assert_eq!(
        append(&log, StreamId::Runtime, ExpectedVersion::Any, vec![]).await,
        Err(StoreError::EmptyAppend)
    );
    let err = append(&log, StreamId::Runtime, ExpectedVersion::Any, vec![turn(1)])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "store/misplaced-event");
    let provider = NewEvent::new(Event::ProviderRemoved { name: "x".into() });
    let err = append(
        &log,
        session_stream(),
        ExpectedVersion::Any,
        vec![turn(1), provider],
    )
    .await
    .unwrap_err();
    assert!(matches!(
        err,
        StoreError::MisplacedEvent {
            event_type: "ProviderRemoved",
            ..
        }
    ));
    assert_eq!(log.head(), 0);
    assert!(everything(&log).is_empty());
}

/// Many concurrent appenders get unique, gap-free positions and per-stream versions.
pub async fn concurrent_appenders_get_unique_gap_free_positions<H: Harness>(mut harness: H) {
    const TASKS: u64 = 16;
    const APPENDS: u64 = 40;
    let log = harness.open();
    let shared = session_stream();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let own = session_stream();
            let mut acknowledged = Vec::new();
            for index in 0..APPENDS {
                let stream = if index % 2 == 0 { own } else { shared };
                let outcome = append(
                    &log,
                    stream,
                    ExpectedVersion::Any,
                    vec![turn(task * 1000 + index), turn(task * 1000 + index)],
                )
                .await
                .unwrap();
                acknowledged.push(outcome.first_position);
            }
            acknowledged
        }));
    }
    let mut acknowledged = BTreeSet::new();
    for task in tasks {
        for position in task.await.unwrap() {
            assert!(
                acknowledged.insert(position),
                "position {position} acknowledged twice"
            );
        }
    }
    let total = TASKS * APPENDS * 2;
    assert_eq!(log.head(), total);
    let all = everything(&log);
    assert_eq!(
        all.iter().map(|r| r.position).collect::<Vec<_>>(),
        (1..=total).collect::<Vec<_>>()
    );
    let mut versions: BTreeMap<StreamId, Vec<u64>> = BTreeMap::new();
    for record in &all {
        versions
            .entry(record.stream)
            .or_default()
            .push(record.version);
    }
    for (stream, seen) in versions {
        assert_eq!(
            seen,
            (1..=seen.len() as u64).collect::<Vec<_>>(),
            "versions of {stream}"
        );
    }
}

/// Racing appenders with the same `Exact` precondition: exactly one wins each version.
pub async fn racing_exact_version_appends_admit_exactly_one_winner<H: Harness>(mut harness: H) {
    let log = harness.open();
    let stream = session_stream();
    for version in 0..10u64 {
        let attempts: Vec<_> = (0..8)
            .map(|_| {
                let log = log.clone();
                tokio::spawn(async move {
                    append(
                        &log,
                        stream,
                        ExpectedVersion::Exact(version),
                        vec![turn(version)],
                    )
                    .await
                })
            })
            .collect();
        let mut winners = 0;
        for attempt in attempts {
            match attempt.await.unwrap() {
                Ok(_) => winners += 1,
                Err(StoreError::Conflict { actual, .. }) => assert_eq!(actual, version + 1),
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(winners, 1, "version {version}");
    }
    assert_eq!(log.stream_version(&stream).unwrap(), 10);
}

/// Paged reads start at any position or version and cross page boundaries.
pub async fn reads_start_anywhere_and_cross_pages<H: Harness>(mut harness: H) {
    let log = harness.open();
    let (a, b) = (session_stream(), session_stream());
    let count = crate::log::READ_PAGE as u64 + 300;
    for index in 0..count {
        let stream = if index % 3 == 0 { a } else { b };
        append(&log, stream, ExpectedVersion::Any, vec![turn(index)])
            .await
            .unwrap();
    }
    let from_middle: Vec<_> = log.read_all(500).collect::<Result<_, _>>().unwrap();
    assert_eq!(from_middle.len() as u64, count - 499);
    assert_eq!(from_middle[0].position, 500);
    let b_tail: Vec<_> = log.read_stream(b, 700).collect::<Result<_, _>>().unwrap();
    let b_total = log.stream_version(&b).unwrap();
    assert_eq!(b_tail.len() as u64, b_total - 699);
    assert!(b_tail
        .windows(2)
        .all(|w| w[1].version == w[0].version + 1 && w[1].position > w[0].position));
    assert!(log.read_all_page(count + 1, 10).unwrap().is_empty());
    assert!(log
        .read_stream_page(&a, log.stream_version(&a).unwrap() + 1, 10)
        .unwrap()
        .is_empty());
    assert_eq!(log.read_all_page(1, 5).unwrap().len(), 5);
}

/// A subscription replays history, says "caught up" once, then follows live
/// appends without gap or duplicate.
pub async fn subscription_catches_up_then_goes_live<H: Harness>(mut harness: H) {
    let log = harness.open();
    let stream = session_stream();
    for index in 0..25 {
        append(&log, stream, ExpectedVersion::Any, vec![turn(index)])
            .await
            .unwrap();
    }
    let mut subscription = log.subscribe(1);
    let writer = {
        let log = log.clone();
        tokio::spawn(async move {
            for index in 25..100 {
                append(&log, stream, ExpectedVersion::Any, vec![turn(index)])
                    .await
                    .unwrap();
            }
        })
    };
    let mut positions = Vec::new();
    let mut caught_up_at = None;
    while positions.len() < 100 {
        let item = tokio::time::timeout(Duration::from_secs(10), subscription.next())
            .await
            .expect("subscription stalled")
            .expect("subscription ended")
            .expect("subscription failed");
        match item {
            SubscriptionItem::Event(record) => positions.push(record.position),
            SubscriptionItem::CaughtUp { head } => {
                assert!(caught_up_at.is_none(), "caught up twice");
                assert!(head >= 25);
                assert_eq!(
                    positions.len() as u64,
                    head,
                    "caught up before delivering history"
                );
                caught_up_at = Some(head);
            }
        }
    }
    writer.await.unwrap();
    assert!(caught_up_at.is_some());
    assert_eq!(positions, (1..=100).collect::<Vec<_>>());
    let mut from_middle = log.subscribe(98);
    let mut tail = Vec::new();
    while let Some(Ok(item)) = from_middle.next().await {
        match item {
            SubscriptionItem::Event(record) => tail.push(record.position),
            SubscriptionItem::CaughtUp { head } => {
                assert_eq!(head, 100);
                break;
            }
        }
    }
    assert_eq!(tail, vec![98, 99, 100]);
}

/// Closing and reopening keeps records, versions, head and idempotency.
pub async fn reopen_keeps_everything<H: Harness>(mut harness: H) {
    let log = harness.open();
    let stream = session_stream();
    let batch = vec![turn(1), turn(2)];
    append(&log, stream, ExpectedVersion::NoStream, batch.clone())
        .await
        .unwrap();
    append(
        &log,
        StreamId::Runtime,
        ExpectedVersion::Any,
        vec![NewEvent::new(Event::ProviderRemoved { name: "p".into() })],
    )
    .await
    .unwrap();
    let before = everything(&log);
    let log = harness.reopen(log);
    assert_eq!(everything(&log), before);
    assert_eq!(log.head(), 3);
    assert_eq!(log.stream_version(&stream).unwrap(), 2);
    let retried = append(&log, stream, ExpectedVersion::NoStream, batch)
        .await
        .unwrap();
    assert!(retried.deduplicated);
    assert_eq!(retried.first_position, 1);
    let next = append(&log, stream, ExpectedVersion::Exact(2), vec![turn(3)])
        .await
        .unwrap();
    assert_eq!((next.first_position, next.stream_version), (4, 3));
}

/// A flipped byte is a typed `Corrupt` at that position on every read path;
/// other records stay readable.
pub async fn a_flipped_byte_is_reported_as_corrupt<H: Harness>(mut harness: H) {
    let log = harness.open();
    let stream = session_stream();
    for index in 0..5 {
        append(&log, stream, ExpectedVersion::Any, vec![turn(index)])
            .await
            .unwrap();
    }
    let log = harness.reopen(log);
    for byte in [0usize, 3, 40] {
        harness.corrupt(&log, 3, byte);
        let results: Vec<_> = log.read_all(1).collect();
        assert_eq!(
            results.len(),
            3,
            "two good records, then the error, then the end"
        );
        assert!(results[0].is_ok() && results[1].is_ok());
        assert!(
            matches!(&results[2], Err(StoreError::Corrupt { position: 3, .. })),
            "{:?}",
            results[2]
        );
        assert_eq!(
            log.read_all_page(1, 10).unwrap().len(),
            2,
            "a page ends before the bad record"
        );
        assert_eq!(log.read_stream_page(&stream, 1, 10).unwrap().len(), 2);
        let err = log.read_stream_page(&stream, 3, 10).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { position: 3, .. }));
        let stream_results: Vec<_> = log.read_stream(stream, 1).collect();
        assert!(matches!(
            stream_results.last(),
            Some(Err(StoreError::Corrupt { position: 3, .. }))
        ));
        assert_eq!(err.code(), "store/corrupt");
        assert_eq!(log.read_all_page(4, 10).unwrap().len(), 2);
        // Restore the record (flipping the same bit twice) for the next round.
        harness.corrupt(&log, 3, byte);
        assert_eq!(everything(&log).len(), 5);
    }
}

fn part(stream: StreamId, expected: ExpectedVersion, events: Vec<NewEvent>) -> StreamAppend {
    StreamAppend {
        stream,
        expected,
        events,
    }
}

/// An atomic append writes every part, with contiguous positions in part
/// order, or nothing at all when any part fails.
pub async fn atomic_appends_write_every_part_or_none<H: Harness>(mut harness: H) {
    let log = harness.open();
    let (parent, child) = (session_stream(), session_stream());
    log.append(parent, ExpectedVersion::Any, vec![turn(0)])
        .await
        .unwrap();
    let outcomes = log
        .append_atomic(vec![
            part(child, ExpectedVersion::NoStream, vec![turn(1), turn(2)]),
            part(parent, ExpectedVersion::Exact(1), vec![turn(3)]),
        ])
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 2);
    assert_eq!(
        (
            outcomes[0].first_position,
            outcomes[0].last_position,
            outcomes[0].stream_version
        ),
        (2, 3, 2)
    );
    assert_eq!(
        (
            outcomes[1].first_position,
            outcomes[1].last_position,
            outcomes[1].stream_version
        ),
        (4, 4, 2)
    );
    let before = everything(&log);
    // The second part conflicts: the first must not be written either.
    let other = session_stream();
    let err = log
        .append_atomic(vec![
            part(other, ExpectedVersion::NoStream, vec![turn(4)]),
            part(parent, ExpectedVersion::Exact(1), vec![turn(5)]),
        ])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { actual: 2, .. }),
        "{err:?}"
    );
    let misplaced = NewEvent::new(Event::ProviderRemoved { name: "x".into() });
    let err = log
        .append_atomic(vec![
            part(other, ExpectedVersion::Any, vec![turn(6)]),
            part(parent, ExpectedVersion::Any, vec![misplaced]),
        ])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "store/misplaced-event");
    assert_eq!(everything(&log), before);
    assert_eq!(log.stream_version(&other).unwrap(), 0);
    assert_eq!(
        log.append_atomic(vec![]).await.unwrap_err(),
        StoreError::EmptyAppend
    );
}

/// Retrying a whole atomic append is idempotent; a stream named twice, an id
/// repeated across parts, or a retry mixed with fresh parts is refused.
pub async fn atomic_retries_are_idempotent_and_malformed_ones_refused<H: Harness>(mut harness: H) {
    let log = harness.open();
    let (a, b) = (session_stream(), session_stream());
    let parts = vec![
        part(a, ExpectedVersion::NoStream, vec![turn(1)]),
        part(b, ExpectedVersion::NoStream, vec![turn(2)]),
    ];
    let original = log.append_atomic(parts.clone()).await.unwrap();
    let retried = log.append_atomic(parts.clone()).await.unwrap();
    assert!(retried.iter().all(|outcome| outcome.deduplicated));
    assert_eq!(
        retried.iter().map(|o| o.first_position).collect::<Vec<_>>(),
        original
            .iter()
            .map(|o| o.first_position)
            .collect::<Vec<_>>()
    );
    let before = everything(&log);
    let err = log
        .append_atomic(vec![
            part(a, ExpectedVersion::Any, vec![turn(3)]),
            part(a, ExpectedVersion::Any, vec![turn(4)]),
        ])
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::RepeatedStream { stream: a });
    let shared = turn(5);
    let err = log
        .append_atomic(vec![
            part(a, ExpectedVersion::Any, vec![shared.clone()]),
            part(b, ExpectedVersion::Any, vec![shared]),
        ])
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::DuplicateEventId {
            reason: "repeated within one append",
            ..
        }
    ));
    let mixed = vec![
        parts[0].clone(),
        part(session_stream(), ExpectedVersion::Any, vec![turn(6)]),
    ];
    let err = log.append_atomic(mixed).await.unwrap_err();
    assert!(
        matches!(err, StoreError::DuplicateEventId { .. }),
        "{err:?}"
    );
    assert_eq!(everything(&log), before);
}

fn stored_entries<L: EventLog>(log: &L, index: LogIndex) -> BTreeSet<String> {
    log.index_entries(index)
        .map(|entry| format!("{:?}", entry.expect("index entry decodes")))
        .collect()
}

fn derived_entries(records: &[RecordedEvent], index: LogIndex) -> BTreeSet<String> {
    records
        .iter()
        .map(|record| {
            let entry = match index {
                LogIndex::Streams => IndexEntry::Stream {
                    stream: record.stream,
                    version: record.version,
                    position: record.position,
                },
                LogIndex::EventIds => IndexEntry::EventId {
                    event_id: record.event_id,
                    location: IdLocation {
                        stream: record.stream,
                        position: record.position,
                        version: record.version,
                    },
                },
            };
            format!("{entry:?}")
        })
        .collect()
}

/// The indexes hold exactly one stream entry and one event-id entry per
/// record, pointing back at it; lookups agree; and the listing shows the
/// entries as stored, so a damaged entry is visible to `verify`.
pub async fn index_entries_point_back_at_every_record<H: Harness>(mut harness: H) {
    let log = harness.open();
    let (a, b) = (session_stream(), session_stream());
    append(&log, a, ExpectedVersion::Any, vec![turn(1), turn(2)])
        .await
        .unwrap();
    log.append_atomic(vec![
        part(b, ExpectedVersion::Any, vec![turn(3)]),
        part(a, ExpectedVersion::Any, vec![turn(4)]),
    ])
    .await
    .unwrap();
    let log = harness.reopen(log);
    let records = everything(&log);
    for index in [LogIndex::Streams, LogIndex::EventIds] {
        assert_eq!(
            stored_entries(&log, index),
            derived_entries(&records, index)
        );
    }
    for record in &records {
        assert_eq!(
            log.indexed_position(&record.stream, record.version)
                .unwrap(),
            Some(record.position)
        );
        assert_eq!(
            log.locate_event(&record.event_id).unwrap(),
            Some(IdLocation {
                stream: record.stream,
                position: record.position,
                version: record.version
            })
        );
    }
    assert_eq!(log.indexed_position(&a, 4).unwrap(), None);
    assert_eq!(log.indexed_position(&a, 0).unwrap(), None);
    assert_eq!(log.locate_event(&turn(9).event_id).unwrap(), None);

    // Damage: redirect a's version 1, add a version 4 to b, forget the last
    // record's id, and add an id no record has.
    let stranger = turn(9).event_id;
    let last = records.last().unwrap();
    for damage in [
        IndexDamage::Stream {
            stream: a,
            version: 1,
            position: Some(3),
        },
        IndexDamage::Stream {
            stream: b,
            version: 2,
            position: Some(1),
        },
        IndexDamage::EventId {
            event_id: last.event_id,
            location: None,
        },
        IndexDamage::EventId {
            event_id: stranger,
            location: Some(IdLocation {
                stream: a,
                position: 2,
                version: 2,
            }),
        },
    ] {
        assert!(harness.damage_index(&log, damage.clone()), "{damage:?}");
    }
    assert_eq!(log.indexed_position(&a, 1).unwrap(), Some(3));
    assert_eq!(log.indexed_position(&b, 2).unwrap(), Some(1));
    assert_eq!(log.locate_event(&last.event_id).unwrap(), None);
    let streams = stored_entries(&log, LogIndex::Streams);
    assert_eq!(streams.len(), records.len() + 1);
    assert!(streams.contains(&format!(
        "{:?}",
        IndexEntry::Stream {
            stream: a,
            version: 1,
            position: 3
        }
    )));
    let ids = stored_entries(&log, LogIndex::EventIds);
    assert_eq!(ids.len(), records.len());
    assert!(ids
        .iter()
        .any(|entry| entry.contains(&stranger.to_string())));
    assert!(!ids
        .iter()
        .any(|entry| entry.contains(&last.event_id.to_string())));
}

/// An event whose record would pass [`MAX_EVENT_BYTES`] is refused with
/// `store/event-too-large`, alone or as one part of an atomic append, and
/// nothing is written; one of exactly the limit is accepted.
pub async fn an_oversized_event_is_refused_and_changes_nothing<H: Harness>(mut harness: H) {
    let log = harness.open();
    let stream = session_stream();
    append(&log, stream, ExpectedVersion::Any, vec![turn(1)])
        .await
        .unwrap();
    let before = everything(&log);
    // An assistant message whose record body is exactly `size` bytes at
    // position 2, version 2 (timestamps have 13 digits until 2286).
    let sized = |size: usize| {
        let message = |text: String| {
            NewEvent::new(Event::AssistantMessage {
                turn: 1,
                content: vec![ContentBlock::text(text)],
                usage: None,
            })
        };
        let probe = message(String::new());
        let empty = serde_json::to_vec(&probe.clone().into_record(2, stream, 2, 1_700_000_000_000))
            .unwrap()
            .len();
        let mut event = message("x".repeat(size - empty));
        event.event_id = probe.event_id;
        event
    };
    let oversized = sized(MAX_EVENT_BYTES + 1);
    let err = append(&log, stream, ExpectedVersion::Any, vec![oversized.clone()])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "store/event-too-large");
    assert!(
        matches!(
            err,
            StoreError::EventTooLarge {
                event_type: "AssistantMessage",
                bytes,
                limit: MAX_EVENT_BYTES
            } if bytes == MAX_EVENT_BYTES + 1
        ),
        "{err:?}"
    );
    let err = log
        .append_atomic(vec![
            part(session_stream(), ExpectedVersion::Any, vec![turn(2)]),
            part(stream, ExpectedVersion::Any, vec![oversized]),
        ])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "store/event-too-large");
    assert_eq!(everything(&log), before);
    assert_eq!(log.stream_version(&stream).unwrap(), 1);

    append(
        &log,
        stream,
        ExpectedVersion::Exact(1),
        vec![sized(MAX_EVENT_BYTES)],
    )
    .await
    .unwrap();
    let written = everything(&log);
    assert_eq!(written.len(), 2);
    assert_eq!(
        serde_json::to_vec(&written[1]).unwrap().len(),
        MAX_EVENT_BYTES,
        "the accepted record is exactly at the limit"
    );
}

/// Generates one `#[tokio::test]` per conformance check for a backend.
/// `$make` is an expression producing a fresh [`Harness`].
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@tests $make;
            positions_and_versions_start_at_one_without_gaps,
            conflicting_expected_versions_are_refused_and_change_nothing,
            reappending_the_same_event_ids_is_idempotent,
            partial_repeated_or_cross_stream_ids_are_refused,
            empty_and_misplaced_appends_are_refused,
            concurrent_appenders_get_unique_gap_free_positions,
            racing_exact_version_appends_admit_exactly_one_winner,
            reads_start_anywhere_and_cross_pages,
            subscription_catches_up_then_goes_live,
            reopen_keeps_everything,
            a_flipped_byte_is_reported_as_corrupt,
            atomic_appends_write_every_part_or_none,
            atomic_retries_are_idempotent_and_malformed_ones_refused,
            index_entries_point_back_at_every_record,
            an_oversized_event_is_refused_and_changes_nothing
        );
    };
    (@tests $make:expr; $($name:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                $crate::conformance::$name($make).await;
            }
        )+
    };
}
