//! Reading a log back: its records, one stream's events, counts by kind, the
//! projections rebuilt from the records, and DESIGN.md's inbox invariants
//! checked on them. Each function takes any log (`&dyn EventLog`), so it
//! also reads logs no [`Harness`](super::Harness) owns. Every read panics if
//! a record does not read back.

use std::collections::HashSet;

use subagent_core::{Event, EventKind, RecordedEvent, SessionId, StreamId};
use subagent_projections::Projections;
use subagent_store::{EventLog, EventLogExt};

/// Every record of `log`, in position order.
pub(crate) fn records(log: &dyn EventLog) -> Vec<RecordedEvent> {
    log.read_all(1)
        .map(|record| record.expect("the log reads back"))
        .collect()
}

/// The events of `session`'s stream, in order.
pub(crate) fn events(log: &dyn EventLog, session: SessionId) -> Vec<Event> {
    stream_events(log, StreamId::Session(session))
}

/// The events of `stream`, in order.
pub(crate) fn stream_events(log: &dyn EventLog, stream: StreamId) -> Vec<Event> {
    log.read_stream(stream, 1)
        .map(|record| record.expect("the log reads back").event)
        .collect()
}

/// How many of `events` are of `kind`.
pub(crate) fn count(events: &[Event], kind: EventKind) -> usize {
    events.iter().filter(|event| event.kind() == kind).count()
}

/// The projections rebuilt from the whole log.
pub(crate) fn fold(log: &dyn EventLog) -> Projections {
    Projections::fold(&records(log))
}

/// DESIGN.md invariants 4 and 5, on projections rebuilt from the log: every
/// accepted message is pending, claimed by exactly one turn, or dropped; no
/// message is both pending and claimed; nothing is claimed twice.
pub(crate) fn assert_inbox_invariants(log: &dyn EventLog) {
    let records = records(log);
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
