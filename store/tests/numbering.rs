//! The writer's reading of a stream's version from disk. Numbers read
//! from disk are never trusted to have room: a stream index damaged to
//! version `u64::MAX` refuses the next append with a typed error instead of
//! panicking the writer thread (which used to take every later append down
//! with it). An append that expects no stream is checked by a point lookup
//! of version 1, not a seek, and still refused on a stream written before.

use subagent_core::{ErrorCode, Event, NewEvent, SessionId, StreamId};
use subagent_store::{
    EventLog, EventLogExt, ExpectedVersion, IndexDamage, RocksLog, RocksOptions, StoreError,
};

#[tokio::test]
async fn a_stream_version_at_u64_max_is_refused_and_the_log_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let stream = StreamId::Session(SessionId::new());
    let turn = |turn| NewEvent::new(Event::TurnStarted { turn, epoch: 1 });
    {
        let log = RocksLog::open(dir.path(), RocksOptions::default()).unwrap();
        log.append(stream, ExpectedVersion::Any, vec![turn(1)])
            .await
            .unwrap();
        log.damage_index(IndexDamage::Stream {
            stream,
            version: u64::MAX,
            position: Some(1),
        })
        .unwrap();
    }
    let log = RocksLog::open(dir.path(), RocksOptions::default()).unwrap();
    assert_eq!(log.stream_version(&stream).unwrap(), u64::MAX);
    let err = log
        .append(stream, ExpectedVersion::Any, vec![turn(2)])
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::StoreNumberingExhausted, "{err}");
    assert_eq!(log.head(), 1);
    // The writer is still alive: another stream appends fine.
    let other = StreamId::Session(SessionId::new());
    let outcome = log
        .append(other, ExpectedVersion::NoStream, vec![turn(3)])
        .await
        .unwrap();
    assert_eq!(outcome.first_position, 2);
    assert_eq!(log.read_all(1).count(), 2);
}

#[tokio::test]
async fn expecting_no_stream_is_refused_on_a_stream_written_before_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let stream = StreamId::Session(SessionId::new());
    let turn = |turn| NewEvent::new(Event::TurnStarted { turn, epoch: 1 });
    {
        let log = RocksLog::open(dir.path(), RocksOptions::default()).unwrap();
        log.append(
            stream,
            ExpectedVersion::Any,
            vec![turn(1), turn(2), turn(3)],
        )
        .await
        .unwrap();
    }
    // Reopened, the writer knows no stream's version: it reads it.
    let log = RocksLog::open(dir.path(), RocksOptions::default()).unwrap();
    let err = log
        .append(stream, ExpectedVersion::NoStream, vec![turn(4)])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Conflict {
            stream,
            expected: ExpectedVersion::NoStream,
            actual: 3,
        }
    );
    assert_eq!(log.head(), 3);
    // Nor does a stream it just refused get a wrong version cached.
    let err = log
        .append(stream, ExpectedVersion::Exact(2), vec![turn(4)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { actual: 3, .. }),
        "{err}"
    );
    // A stream with no events takes it, at version 1.
    let fresh = StreamId::Session(SessionId::new());
    let outcome = log
        .append(fresh, ExpectedVersion::NoStream, vec![turn(1)])
        .await
        .unwrap();
    assert_eq!((outcome.first_position, outcome.stream_version), (4, 1));
    let outcome = log
        .append(stream, ExpectedVersion::Exact(3), vec![turn(4)])
        .await
        .unwrap();
    assert_eq!((outcome.first_position, outcome.stream_version), (5, 4));
}
