//! A turn's transcript entries are issued without waiting for each to be
//! durable (`drivers/local/in_flight.rs`): they share group commits with
//! each other and with the turn's end, they are not held back until the
//! turn ends, every one is recorded in the order the agent sent it, and a
//! failed append among them ends the turn (which only the driver's polling
//! of the entries in flight can notice while the agent holds its turn).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{spec, Harness};
use subagent_core::{ContentBlock, Delivery, ErrorCode, Event, SubagentError, SubagentStopReason};
use subagent_runtime::{
    Agent, AgentHost, AgentSpec, BoxFuture, TranscriptItem, TurnEnd, TurnInput,
};
use subagent_store::filling::FillingLog;
use subagent_store::{Durability, RocksLog, RocksOptions};
use tokio::sync::watch;

/// How every agent of a [`Streamer`] host runs a turn.
#[derive(Clone)]
struct Streamer {
    /// Assistant messages sent per turn, `entry 0`, `entry 1`, ...
    entries: usize,
    /// When set, the turn sends its entries only once this holds `true`.
    gate: Option<watch::Receiver<bool>>,
    /// When set, the turn ends only once this holds `true` (or the turn is
    /// cancelled).
    hold: Option<watch::Receiver<bool>>,
}

impl AgentHost for Streamer {
    fn create(
        &self,
        _spec: AgentSpec,
    ) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        let agent = self.clone();
        Box::pin(async move { Ok(Box::new(agent) as Box<dyn Agent>) })
    }
}

impl Agent for Streamer {
    fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd> {
        Box::pin(async move {
            if let Some(gate) = &mut self.gate {
                let _ = gate.wait_for(|open| *open).await;
            }
            for entry in 0..self.entries {
                let line = vec![ContentBlock::text(format!("entry {entry}"))];
                if input
                    .transcript
                    .send(TranscriptItem::Assistant(line))
                    .await
                    .is_err()
                {
                    break;
                }
            }
            if let Some(hold) = &mut self.hold {
                tokio::select! {
                    _ = hold.wait_for(|released| *released) => {}
                    () = input.cancel.cancelled() => {}
                }
            }
            TurnEnd {
                stop_reason: SubagentStopReason::Completed,
                diagnostic: None,
                structured: None,
            }
        })
    }
}

/// The texts of the assistant messages among `events`, in order.
fn assistant_texts(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::AssistantMessage { content, .. } => Some(
                content
                    .iter()
                    .filter_map(|block| block.as_text().map(str::to_owned))
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect()
}

/// A fresh RocksDB log in `durability` mode, and the directory it lives in.
fn rocks_log(durability: Durability) -> (tempfile::TempDir, RocksLog) {
    let dir = tempfile::tempdir().unwrap();
    let log = RocksLog::open(dir.path(), RocksOptions { durability }).unwrap();
    (dir, log)
}

fn turns_ended(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|event| matches!(event, Event::TurnEnded { .. }))
        .count()
}

#[tokio::test]
async fn a_turns_entries_and_its_end_share_group_commits() {
    let (_dir, log) = rocks_log(Durability::Buffered);
    let host = Arc::new(Streamer {
        entries: 10,
        gate: None,
        hold: None,
    });
    let h = Harness::builder(host).over(log.clone()).open().await;
    let child = h
        .start(spec("spawn", "streamer", Delivery::Caller))
        .await
        .unwrap();
    child.result().await.unwrap();
    let child = child.child_id();

    // A second turn: the send, the claim, then ten entries and the end.
    let counts = log.commit_counts();
    let before = counts.by_appenders + counts.by_thread;
    h.send(child, "again").await.unwrap();
    h.until_events("the second turn's end", child, |events| {
        turns_ended(events) == 2
    })
    .await;
    let counts = log.commit_counts();
    let commits = counts.by_appenders + counts.by_thread - before;

    // Awaited one by one, the turn took 13 commits (the send, the claim,
    // each entry, the end); issued, the entries and the end share one, or
    // a few when the writer thread's backstop (every 2 ms while appends
    // wait) or the async runtime's cooperative budget splits them. The
    // bound leaves room for a loaded machine (CI runs test binaries side
    // by side) and still refuses the 13 of one commit an entry.
    assert!(
        (2..=10).contains(&commits),
        "the second turn took {commits} group commits"
    );

    // In the order sent, each before the turn's end.
    let events = h.events(child);
    let second = events
        .iter()
        .rposition(|event| matches!(event, Event::TurnStarted { .. }))
        .unwrap();
    let expected: Vec<String> = (0..10).map(|entry| format!("entry {entry}")).collect();
    assert_eq!(assistant_texts(&events[second..]), expected);
    assert!(
        matches!(events.last(), Some(Event::TurnEnded { .. })),
        "{events:?}"
    );
    h.runtime.close().await.unwrap();
}

#[tokio::test]
async fn an_entry_is_durable_while_its_turn_still_runs() {
    for durability in [Durability::Buffered, Durability::Sync] {
        let (_dir, log) = rocks_log(durability);
        let (release, hold) = watch::channel(false);
        let host = Arc::new(Streamer {
            entries: 1,
            gate: None,
            hold: Some(hold),
        });
        let h = Harness::builder(host).over(log.clone()).open().await;
        let child = h
            .start(spec("spawn", "holder", Delivery::Caller))
            .await
            .unwrap();
        let id = child.child_id();
        // The agent holds its turn open; its entry is read back from the
        // log (durable records only) before the turn is let go.
        h.until_events("the entry, while the turn runs", id, |events| {
            assistant_texts(events) == ["entry 0"]
        })
        .await;
        assert_eq!(turns_ended(&h.events(id)), 0, "{durability:?}");
        release.send(true).unwrap();
        child.result().await.unwrap();
        assert_eq!(turns_ended(&h.events(id)), 1, "{durability:?}");
        h.runtime.close().await.unwrap();
    }
}

#[tokio::test]
async fn more_entries_than_can_be_in_flight_are_all_recorded_in_order() {
    // 64 may be in flight at once; the agent's channel holds 64 more.
    let host = Arc::new(Streamer {
        entries: 300,
        gate: None,
        hold: None,
    });
    let h = Harness::open(host).await;
    let child = h
        .start(spec("spawn", "chatty", Delivery::Caller))
        .await
        .unwrap();
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    let events = h.events(child.child_id());
    let expected: Vec<String> = (0..300).map(|entry| format!("entry {entry}")).collect();
    assert_eq!(assistant_texts(&events), expected);
    // The turn ended after its last entry (and settled the activation).
    let ended = events
        .iter()
        .position(|event| matches!(event, Event::TurnEnded { .. }))
        .unwrap();
    let last_entry = events
        .iter()
        .rposition(|event| matches!(event, Event::AssistantMessage { .. }))
        .unwrap();
    assert!(last_entry < ended, "{events:?}");
}

#[tokio::test]
async fn a_failed_append_in_flight_ends_the_turn() {
    let log = FillingLog::new();
    let (open, gate) = watch::channel(false);
    let (_release, hold) = watch::channel(false);
    let host = Arc::new(Streamer {
        entries: 1,
        gate: Some(gate),
        hold: Some(hold),
    });
    let h = Harness::builder(host).over(log.clone()).open().await;
    let child = h
        .start(spec("spawn", "doomed", Delivery::Caller))
        .await
        .unwrap();
    let id = child.child_id();
    h.until_events("the turn to start", id, |events| {
        events
            .iter()
            .any(|event| matches!(event, Event::TurnStarted { .. }))
    })
    .await;
    // The disk fills before the agent's one entry: it is decided, but its
    // append fails. The agent then holds its turn open forever, so only
    // the failed entry in flight can end the turn.
    log.set_full(true);
    open.send(true).unwrap();
    let failed = tokio::time::timeout(Duration::from_secs(10), child.result())
        .await
        .expect("the failed append ends the turn")
        .unwrap_err();
    assert_eq!(failed.code(), ErrorCode::Internal, "{failed}");
    assert!(
        failed.to_string().contains("No space left on device"),
        "{failed}"
    );
    assert!(assistant_texts(&h.events(id)).is_empty());
    assert_eq!(turns_ended(&h.events(id)), 0);
}
