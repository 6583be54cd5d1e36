//! Helpers shared by the runtime's integration tests.
// Each test binary uses only some of them.
#![allow(dead_code)]

use std::collections::HashSet;

use std::sync::Arc;

use subagent_core::Event;
use subagent_projections::Projections;
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::{CapacityLimits, ScriptedHost, SubagentRuntime};
use subagent_store::{EventLogExt, MemoryLog};

/// A runtime over a fresh in-memory log, with `host`'s agents, the given
/// capacity limits and the `spawn` provider registered.
pub(crate) async fn spawn_runtime(
    host: ScriptedHost,
    limits: CapacityLimits,
) -> (MemoryLog, SubagentRuntime) {
    let log = MemoryLog::new();
    let (runtime, _) = SubagentRuntime::open_with(Arc::new(log.clone()), Arc::new(host), limits)
        .await
        .expect("runtime opens");
    runtime
        .register_provider(Arc::new(SpawnProvider))
        .await
        .expect("spawn registers");
    (log, runtime)
}

/// DESIGN.md invariants 4 and 5, on projections rebuilt from the log: every
/// accepted message is pending, claimed by exactly one turn, or dropped; no
/// message is both pending and claimed; nothing is claimed twice.
pub(crate) fn assert_inbox_invariants(log: &MemoryLog) {
    let records: Vec<_> = log
        .read_all(1)
        .map(|record| record.expect("log reads back"))
        .collect();
    let state = Projections::fold(&records);
    for (session, inbox) in &state.inboxes {
        let pending: HashSet<_> = inbox.pending_ids().collect();
        assert!(
            pending.iter().all(|id| !inbox.claimed.contains_key(id)),
            "{session}: a message is pending and claimed"
        );
        assert_eq!(
            inbox.accepted as usize,
            pending.len() + inbox.claimed.len() + inbox.dropped.len(),
            "{session}: a message was lost or duplicated"
        );
    }
    let mut claimed = HashSet::new();
    for record in &records {
        if let Event::MessagesClaimed { ids, .. } = &record.event {
            assert!(
                ids.iter().all(|id| claimed.insert(*id)),
                "a message was claimed twice"
            );
        }
    }
}

/// Starts a child of `parent` with a fresh cancellation signal.
pub(crate) async fn start(
    runtime: &SubagentRuntime,
    parent: &subagent_runtime::LiveAgent,
    spec: subagent_core::SubagentActivationSpec,
) -> Result<subagent_runtime::SubagentActivation, subagent_core::SubagentError> {
    runtime
        .start_activation(parent, spec, tokio_util::sync::CancellationToken::new())
        .await
}

/// The events of `session`'s stream, in order.
pub(crate) fn events(
    log: &dyn subagent_store::EventLog,
    session: subagent_core::SessionId,
) -> Vec<Event> {
    stream_events(log, subagent_core::StreamId::Session(session))
}

/// The events of `stream`, in order.
pub(crate) fn stream_events(
    log: &dyn subagent_store::EventLog,
    stream: subagent_core::StreamId,
) -> Vec<Event> {
    log.read_stream(stream, 1)
        .map(|record| record.expect("the log reads back").event)
        .collect()
}

/// How many of `events` are of `kind`.
pub(crate) fn count(events: &[Event], kind: subagent_core::EventKind) -> usize {
    events.iter().filter(|event| event.kind() == kind).count()
}

/// The projections rebuilt from the whole log.
pub(crate) fn fold(log: &dyn subagent_store::EventLog) -> Projections {
    let records: Vec<_> = log
        .read_all(1)
        .map(|record| record.expect("the log reads back"))
        .collect();
    Projections::fold(&records)
}

/// Polls `done` every 5 ms until it holds; panics naming `what` after 10 s.
pub(crate) async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// One text block.
pub(crate) fn text(content: &str) -> Vec<subagent_core::ContentBlock> {
    vec![subagent_core::ContentBlock::text(content)]
}
