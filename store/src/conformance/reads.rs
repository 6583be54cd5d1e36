//! Reading back: pages from any position, catch-up subscriptions, reopening,
//! and a flipped byte reported as corruption.

use std::time::Duration;

use subagent_core::{ErrorCode, Event, NewEvent, StreamId};
use tokio_stream::StreamExt;

use crate::error::StoreError;
use crate::log::{EventLog, EventLogExt, ExpectedVersion};
use crate::subscription::SubscriptionItem;

use super::{append, everything, session_stream, turn, Harness};

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
    // A subscription slower than the writer reads all 100 as history and
    // says "caught up" after the last: read until both have happened.
    while positions.len() < 100 || caught_up_at.is_none() {
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

/// A stream subscription delivers its stream's events alone, by version,
/// across pages, says "caught up" once, then follows live appends to it
/// while other streams are appended to, without gap or duplicate.
pub async fn stream_subscription_sees_its_stream_alone_once_in_order<H: Harness>(mut harness: H) {
    let log = harness.open();
    let (mine, other, empty) = (session_stream(), session_stream(), session_stream());
    // History past one read page, interleaved with another stream.
    let page = crate::log::READ_PAGE as u64;
    let mut number = 0;
    while log.stream_version(&mine).unwrap() <= page {
        for stream in [mine, other] {
            let events = (0..64)
                .map(|_| {
                    number += 1;
                    turn(number)
                })
                .collect();
            append(&log, stream, ExpectedVersion::Any, events)
                .await
                .unwrap();
        }
    }
    let history = log.stream_version(&mine).unwrap();
    let mut subscription = log.subscribe_stream(mine, 1);
    let mut quiet = log.subscribe_stream(empty, 1);
    let writer = {
        let log = log.clone();
        tokio::spawn(async move {
            for index in 0..60u64 {
                let stream = if index % 3 == 0 { mine } else { other };
                append(
                    &log,
                    stream,
                    ExpectedVersion::Any,
                    vec![turn(10_000 + index)],
                )
                .await
                .unwrap();
            }
        })
    };
    let total = history + 20;
    let mut versions = Vec::new();
    let mut caught_up_at = None;
    while (versions.len() as u64) < total || caught_up_at.is_none() {
        let item = tokio::time::timeout(Duration::from_secs(10), subscription.next())
            .await
            .expect("stream subscription stalled")
            .expect("stream subscription ended")
            .expect("stream subscription failed");
        match item {
            SubscriptionItem::Event(record) => {
                assert_eq!(record.stream, mine, "another stream's event");
                versions.push(record.version);
            }
            SubscriptionItem::CaughtUp { head } => {
                assert!(caught_up_at.is_none(), "caught up twice");
                let mine_by_then = log
                    .read_stream(mine, 1)
                    .filter(|record| record.as_ref().unwrap().position <= head)
                    .count();
                assert_eq!(
                    versions.len(),
                    mine_by_then,
                    "caught up at {head} before delivering the stream's history"
                );
                assert!(versions.len() as u64 >= history);
                caught_up_at = Some(head);
            }
        }
    }
    writer.await.unwrap();
    assert_eq!(versions, (1..=total).collect::<Vec<_>>());
    // Nothing more of it is pending.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), subscription.next())
            .await
            .is_err(),
        "an event past the stream's end"
    );
    // A stream without events catches up at once, then sees its first.
    match quiet.next().await {
        Some(Ok(SubscriptionItem::CaughtUp { .. })) => {}
        other => panic!("an empty stream's subscription began with {other:?}"),
    }
    append(&log, empty, ExpectedVersion::NoStream, vec![turn(1)])
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), quiet.next()).await {
        Ok(Some(Ok(SubscriptionItem::Event(record)))) => {
            assert_eq!((record.stream, record.version), (empty, 1));
        }
        other => panic!("the first event of a quiet stream: {other:?}"),
    }
    // From the middle of the stream.
    let mut tail = log.subscribe_stream(mine, total - 2);
    let mut from_middle = Vec::new();
    while let Some(Ok(item)) = tail.next().await {
        match item {
            SubscriptionItem::Event(record) => from_middle.push(record.version),
            SubscriptionItem::CaughtUp { head } => {
                assert_eq!(head, log.head());
                break;
            }
        }
    }
    assert_eq!(from_middle, vec![total - 2, total - 1, total]);
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
        assert_eq!(err.code(), ErrorCode::StoreCorrupt);
        assert_eq!(log.read_all_page(4, 10).unwrap().len(), 2);
        // Restore the record (flipping the same bit twice) for the next round.
        harness.corrupt(&log, 3, byte);
        assert_eq!(everything(&log).len(), 5);
    }
}

/// A checkpoint reads back byte for byte what was last written under its
/// name, however large (8 MiB here, past any page or block), names are
/// kept apart, an absent one reads as `None`, and all of it survives
/// reopening.
pub async fn checkpoints_read_back_what_was_last_written<H: Harness>(mut harness: H) {
    let log = harness.open();
    assert!(log.read_checkpoint("projections").unwrap().is_none());
    let large: Vec<u8> = (0..8u32 * 1024 * 1024)
        .map(|at| (at.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    log.write_checkpoint("projections", b"replaced").unwrap();
    log.write_checkpoint("projections", &large).unwrap();
    log.write_checkpoint("other", b"other").unwrap();
    let check = |log: &H::Log| {
        let read = log
            .read_checkpoint("projections")
            .unwrap()
            .expect("written");
        assert_eq!(read.len(), large.len());
        assert!(*read == large[..], "the large checkpoint read back changed");
        assert_eq!(
            log.read_checkpoint("other").unwrap().as_deref(),
            Some(&b"other"[..])
        );
        assert!(log.read_checkpoint("absent").unwrap().is_none());
    };
    check(&log);
    let log = harness.reopen(log);
    check(&log);
}
