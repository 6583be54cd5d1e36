//! `GET /v1/events`: the log as Server-Sent Events, optionally only one
//! root's tree (`?root=ID`).
//!
//! Each event's `id:` is its log position and its `event:` its type; its
//! data is the recorded event with its envelope. A reconnect with
//! `Last-Event-ID: N` (or `?after=N`) resumes at position N + 1: positions
//! are durable, so there is no gap and no duplicate, across a restart of
//! the server too. After the history the stream sends one `caught-up`
//! event (`{"head": N}`, no id), then follows live. A resume position past
//! the head is `replay/position-past-head`; a `root` the log does not know
//! is `replay/unknown-session`, and a child's id there a bad request.
//!
//! A slow consumer does not stall the runtime: the subscription reads from
//! the log at the consumer's pace, behind whatever the runtime appends. It
//! runs in a task of its own, ended when the server shuts down or the
//! stream's runtime stops serving (its log failed), whether or not the
//! client still reads: a stalled client never holds a failed log handle.
//!
//! Each open stream is counted (`subagents_sse_subscribers` on
//! `GET /metrics`) until it is dropped, which a client going away does.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use serde::Deserialize;
use subagent_core::{Event, RecordedEvent, SessionId, StreamId};
use subagent_replay::ReplayError;
use subagent_store::{EventLog, EventLogExt, SubscriptionItem};
use tokio_stream::{Stream, StreamExt};

use super::query;
use crate::error::GatewayError;
use crate::metrics::Subscriber;
use crate::server::Gateway;

/// `?root=ID&after=N`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// Only the events of this root's tree.
    root: Option<SessionId>,
    /// Resume after this position (`Last-Event-ID` wins when both are given).
    after: Option<u64>,
}

/// The stream.
pub(crate) async fn stream(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, GatewayError> {
    let EventsQuery { root, after } = query(&uri)?;
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .ok_or_else(|| GatewayError::bad_request("Last-Event-ID must be a log position"))?,
        None => after.unwrap_or(0),
    };
    // A resume point past the head names events this log never held (a
    // client of another log): refused as every read past the head is,
    // rather than a `caught-up` at a head the log does not have.
    let head = gateway.runtime()?.log().head();
    if after > head {
        return Err(ReplayError::PositionPastHead { at: after, head }.into());
    }
    if let Some(root) = root {
        match gateway.runtime()?.root_of(root) {
            None => return Err(ReplayError::UnknownSession(root).into()),
            Some(actual) if actual != root => {
                return Err(GatewayError::bad_request(format!(
                    "{root} is not a root: it is in the tree of {actual}"
                )))
            }
            Some(_) => {}
        }
    }
    let subscription = gateway.runtime()?.log().subscribe(after.saturating_add(1));
    let mut tree = TreeFilter {
        root,
        members: HashMap::new(),
    };
    let runtime = gateway.runtime()?;
    // The stream ends with the runtime it reads: once that stops serving
    // (its log failed), the client reconnects with `Last-Event-ID` to the
    // reopened one, and this stream lets go of the failed log handle.
    let mut health = gateway.supervised.watch();
    let ended = {
        let shutdown = gateway.shutdown.clone();
        async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                _ = health.wait_for(|now| !matches!(now, subagent_runtime::Health::Serving { .. })) => {}
            }
        }
    };
    let events = subscription
        .map_while(move |item| match item {
            Ok(SubscriptionItem::Event(record)) => {
                if !tree.admits(&runtime, &record) {
                    return Some(None);
                }
                let event = SseEvent::default()
                    .id(record.position.to_string())
                    .event(record.event.type_name())
                    .json_data(&record)
                    .ok()?;
                Some(Some(event))
            }
            Ok(SubscriptionItem::CaughtUp { head }) => Some(Some(
                SseEvent::default()
                    .event("caught-up")
                    .data(format!("{{\"head\":{head}}}")),
            )),
            Err(err) => {
                tracing::error!(error = %err, "the event stream's log read failed");
                None
            }
        })
        .filter_map(|event| event.map(Ok));
    // The log is read by a task of its own, aborted when the stream ends
    // (at shutdown, or when its runtime stops serving) even if the client
    // has stopped reading: a stalled client must not keep a failed log
    // handle (a RocksDB directory's lock) from the reopen.
    let (frames, received) = tokio::sync::mpsc::channel(FORWARDED_FRAMES);
    let forward = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if frames.send(event).await.is_err() {
                return;
            }
        }
    });
    let stop = forward.abort_handle();
    tokio::spawn(async move {
        tokio::select! {
            () = ended => stop.abort(),
            _ = forward => {}
        }
    });
    let events = Counted {
        events: tokio_stream::wrappers::ReceiverStream::new(received),
        _subscriber: gateway.metrics.subscriber(),
    };
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// How many frames the reading task may be ahead of the client.
const FORWARDED_FRAMES: usize = 256;

/// An open stream, counted while it lives: the count sits inside the
/// stream, so a client that goes away (the stream is dropped) is no longer
/// counted. It ends when its reading task does.
struct Counted<S> {
    events: S,
    _subscriber: Subscriber,
}

impl<S: Stream + Unpin> Stream for Counted<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        Pin::new(&mut self.events).poll_next(cx)
    }
}

/// Which streams belong to the requested tree, cached per session (a
/// session's root never changes).
///
/// A session this host's projections do not know yet is resolved from the
/// log instead: on a shared log the stream may read another host's records
/// before this host's follower has folded them, and a session's creation
/// (its stream's first record) names its parent, whose own membership is
/// known or resolved the same way. Only a known answer is cached, so "not
/// in this tree" is never remembered for a session not yet seen.
struct TreeFilter {
    root: Option<SessionId>,
    members: HashMap<SessionId, bool>,
}

impl TreeFilter {
    fn admits(
        &mut self,
        runtime: &subagent_runtime::SubagentRuntime,
        record: &RecordedEvent,
    ) -> bool {
        let Some(root) = self.root else {
            return true;
        };
        let StreamId::Session(session) = record.stream else {
            return false;
        };
        // The record may be the session's creation itself: no need to read
        // it back.
        let creation = match &record.event {
            Event::SessionCreated {
                session: created,
                parent,
                ..
            } if *created == session => Some(*parent),
            _ => None,
        };
        self.member(runtime, root, session, creation)
            .unwrap_or(false)
    }

    /// Whether `session` is in `root`'s tree, caching the answer for it and
    /// for every session on the way up to one already known; `None` (not
    /// cached) when neither the projections nor the log know it. `creation`:
    /// the parent `session`'s creation names, when the caller has it.
    fn member(
        &mut self,
        runtime: &subagent_runtime::SubagentRuntime,
        root: SessionId,
        session: SessionId,
        mut creation: Option<Option<SessionId>>,
    ) -> Option<bool> {
        let mut unknown = Vec::new();
        let mut seen = HashSet::new();
        let mut current = session;
        let answer = loop {
            if let Some(known) = self.members.get(&current) {
                break *known;
            }
            if let Some(found) = runtime.root_of(current) {
                break found == root;
            }
            // Not folded by this host yet: its creation in the log.
            let parent = match creation.take() {
                Some(parent) => parent,
                None => created_under(runtime.log().as_ref(), current)?,
            };
            if !seen.insert(current) {
                // A cycle only a damaged log could hold: no tree's member.
                break false;
            }
            unknown.push(current);
            match parent {
                Some(parent) => current = parent,
                None => break current == root,
            }
        };
        self.members.insert(current, answer);
        for session in unknown {
            self.members.insert(session, answer);
        }
        Some(answer)
    }
}

/// The parent `session`'s creation in `log` names (`Some(None)` for a
/// root); `None` when the log holds no creation of it.
fn created_under(log: &dyn EventLog, session: SessionId) -> Option<Option<SessionId>> {
    match log
        .read_stream(StreamId::Session(session), 1)
        .next()?
        .ok()?
        .event
    {
        Event::SessionCreated { parent, .. } => Some(parent),
        _ => None,
    }
}
