//! Single-stream appends: numbering, expected versions, idempotent ids,
//! refused shapes, and concurrent appenders.

use std::collections::{BTreeMap, BTreeSet};

use subagent_core::{ErrorCode, Event, NewEvent, StreamId};

use crate::error::StoreError;
use crate::log::{EventLog, EventLogExt, ExpectedVersion};

use super::{append, everything, session_stream, turn, turn_of, Harness};

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
        assert_eq!(err.code(), ErrorCode::StoreConflict);
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
    assert_eq!(err.code(), ErrorCode::StoreDuplicateEventId);
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
    assert_eq!(err.code(), ErrorCode::StoreMisplacedEvent);
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
