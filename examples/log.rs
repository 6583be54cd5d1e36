//! `cargo run --example log`: the event log on its own, below the runtime.
//!
//! An append is atomic and resolves only once durable; `ExpectedVersion`
//! is checked inside it; retrying the same events (same event ids) is
//! idempotent; reads go by stream version or global position; a
//! subscription catches up, then follows.

use subagent_core::{Event, NewEvent, SessionId, StreamId};
use subagent_store::{
    EventLog, EventLogExt, ExpectedVersion, RocksLog, RocksOptions, StoreError, SubscriptionItem,
};
use tokio_stream::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // ANCHOR: log
    let log = RocksLog::open(dir.path(), RocksOptions::default())?; // Durability::Sync
    let stream = StreamId::Session(SessionId::new());
    let events = vec![NewEvent::new(Event::TurnStarted { turn: 1, epoch: 1 })];
    let first = log
        .append(stream, ExpectedVersion::NoStream, events.clone())
        .await?;
    let retried = log
        .append(stream, ExpectedVersion::NoStream, events)
        .await?; // same event ids
    assert!(retried.deduplicated && retried.first_position == first.first_position);

    let late = vec![NewEvent::new(Event::TurnStarted { turn: 2, epoch: 1 })];
    match log.append(stream, ExpectedVersion::NoStream, late).await {
        Err(StoreError::Conflict { actual, .. }) => {
            println!("conflict: the stream is at version {actual}")
        }
        other => return Err(format!("expected a conflict, got {other:?}").into()),
    }
    for record in log.read_stream(stream, 1) {
        let record = record?;
        println!(
            "v{} at position {}: {}",
            record.version,
            record.position,
            record.event.type_name()
        );
    }
    let mut live = log.subscribe(1); // events..., CaughtUp { head }, live events...
    while let Some(item) = live.next().await {
        if let SubscriptionItem::CaughtUp { head } = item? {
            println!("caught up at head {head}");
            break;
        }
    }
    // ANCHOR_END: log
    println!(
        "first append: positions {}..={}, deduplicated retry: {}",
        first.first_position, first.last_position, retried.deduplicated
    );
    Ok(())
}
