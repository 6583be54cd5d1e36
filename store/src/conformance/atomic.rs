//! Atomic multi-stream appends, and the largest event.

use subagent_core::{ContentBlock, ErrorCode, Event, NewEvent, StreamId, MAX_EVENT_BYTES};

use crate::error::StoreError;
use crate::log::{EventLog, ExpectedVersion, StreamAppend};

use super::{append, everything, session_stream, turn, Harness};

/// One part of an atomic append.
pub(super) fn part(
    stream: StreamId,
    expected: ExpectedVersion,
    events: Vec<NewEvent>,
) -> StreamAppend {
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
    assert_eq!(err.code(), ErrorCode::StoreMisplacedEvent);
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
    assert_eq!(err.code(), ErrorCode::StoreEventTooLarge);
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
    assert_eq!(err.code(), ErrorCode::StoreEventTooLarge);
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
