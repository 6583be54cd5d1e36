//! Catch-up-then-live subscriptions, shared by every backend.
//!
//! A subscription reads the log from its start position page by page up to
//! the current head, yields [`SubscriptionItem::CaughtUp`] once, then follows
//! the head as appends become durable. Because it always reads by position
//! from the log itself (the head watch only says *that* something changed),
//! it can neither skip nor repeat an event, whatever the timing.
//!
//! A stream subscription ([`follow_stream`]) reads one stream by version
//! from the stream index instead, up to the same head: a subscriber that
//! wants one session's events reads and decodes only those, where a whole-
//! log subscriber would decode every event of every stream to filter it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use subagent_core::{RecordedEvent, StreamId};
use tokio::sync::watch;
use tokio_stream::Stream;
use tokio_util::sync::ReusableBoxFuture;

use crate::error::StoreError;
use crate::log::{EventLog, READ_PAGE};

/// Publishes `head` on a backend's head watch, waking its receivers only
/// if there are any: a send through tokio's watch takes eight locks to
/// notify, on every commit, for a log nobody follows.
///
/// No receiver misses a head it has not seen. The head is stored, and the
/// receivers counted, under the watch's lock. A receiver counts itself when
/// it subscribes, before it can read the head, and every read takes that
/// lock. So a receiver this count missed reads the head only after the
/// store, and sees it. A receiver that read the head before the store was
/// counted, and is woken.
pub(crate) fn publish_head(watch: &watch::Sender<u64>, head: u64) {
    watch.send_if_modified(|current| {
        *current = head;
        watch.receiver_count() > 0
    });
}

/// One item of a subscription.
#[derive(Clone, Debug, PartialEq)]
// Nearly every item is an event; boxing it would cost an allocation per event
// to shrink the one `CaughtUp` marker.
#[allow(clippy::large_enum_variant)]
pub enum SubscriptionItem {
    /// The next event, in position order.
    Event(RecordedEvent),
    /// Every event up to `head` has been delivered (at least everything that
    /// was durable when the subscription started); live events follow. Sent
    /// exactly once.
    CaughtUp {
        /// The head at the moment of catching up.
        head: u64,
    },
}

/// A stream of [`SubscriptionItem`]s. Ends after yielding an error, or when
/// the log is closed.
///
/// It reads the log itself, a page at a time as it is polled: there is no
/// background task, so a slow consumer only lags (the log never waits for
/// it), and dropping the subscription drops its log handle at once (a
/// runtime that closed and dropped its handles leaves the directory free to
/// open again).
pub struct Subscription {
    log: Box<dyn EventLog>,
    /// What it reads: the whole log, or one stream.
    scope: Scope,
    /// The next position (whole log) or stream version (one stream) to
    /// deliver.
    next: u64,
    /// Every event up to this position is delivered (or, for a stream, is
    /// known not to be in it).
    covered: u64,
    /// The head the reads go up to.
    target: u64,
    /// Read and not yet delivered.
    page: VecDeque<RecordedEvent>,
    /// Delivered after `page` drains, then the subscription ends.
    failure: Option<StoreError>,
    caught_up: bool,
    ended: bool,
    /// The next change of the durable head (owning its receiver).
    changes: ReusableBoxFuture<'static, HeadChange>,
}

type HeadChange = (Result<(), watch::error::RecvError>, watch::Receiver<u64>);

async fn head_change(mut head: watch::Receiver<u64>) -> HeadChange {
    let changed = head.changed().await;
    (changed, head)
}

/// What a subscription reads.
enum Scope {
    /// Every event, by position.
    All,
    /// One stream's events, by version.
    Stream(StreamId),
}

impl Subscription {
    /// Reads the next page up to `target` into `page`, or notes the failure.
    fn read_page(&mut self) {
        if let Scope::Stream(stream) = self.scope {
            self.read_stream_page(stream);
            return;
        }
        match self.log.read_all_page(self.next, READ_PAGE) {
            Ok(records) if records.is_empty() => {
                self.failure = Some(StoreError::Corrupt {
                    position: self.next,
                    reason: "record missing below the head".into(),
                });
            }
            Ok(records) => {
                for record in records {
                    let position = record.position;
                    self.page.push_back(record);
                    self.covered = position;
                    match position.checked_add(1) {
                        Some(after) => self.next = after,
                        None => {
                            // Only a damaged log has a record at u64::MAX.
                            self.failure = Some(StoreError::NumberingExhausted {
                                what: "position",
                                value: u64::MAX,
                            });
                            return;
                        }
                    }
                }
            }
            Err(err) => self.failure = Some(err),
        }
    }

    /// Reads the next page of `stream` up to `target` into `page`: once a
    /// page ends short, or passes `target` (a record written but not yet
    /// durable), everything up to `target` is covered.
    fn read_stream_page(&mut self, stream: StreamId) {
        // Nothing of the stream written after what is covered: the read
        // would find nothing up to `target` either.
        if !self.log.may_have_written_after(&stream, self.covered) {
            self.covered = self.target;
            return;
        }
        let records = match self.log.read_stream_page(&stream, self.next, READ_PAGE) {
            Ok(records) => records,
            Err(err) => {
                self.failure = Some(err);
                return;
            }
        };
        let full = records.len() >= READ_PAGE;
        for record in records {
            if record.position > self.target {
                self.covered = self.target;
                return;
            }
            if record.stream != stream || record.version != self.next {
                self.failure = Some(StoreError::CorruptIndex {
                    index: "streams",
                    reason: format!(
                        "{stream} version {} read back as {} version {} at position {}",
                        self.next, record.stream, record.version, record.position
                    ),
                });
                return;
            }
            let Some(after) = record.version.checked_add(1) else {
                self.failure = Some(StoreError::NumberingExhausted {
                    what: "stream version",
                    value: u64::MAX,
                });
                return;
            };
            self.next = after;
            self.covered = record.position;
            self.page.push_back(record);
        }
        if !full {
            self.covered = self.target;
        }
    }
}

impl Stream for Subscription {
    type Item = Result<SubscriptionItem, StoreError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(record) = this.page.pop_front() {
                return Poll::Ready(Some(Ok(SubscriptionItem::Event(record))));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            if let Some(failure) = this.failure.take() {
                this.ended = true;
                return Poll::Ready(Some(Err(failure)));
            }
            if this.covered < this.target {
                this.read_page();
                continue;
            }
            if !this.caught_up {
                this.caught_up = true;
                return Poll::Ready(Some(Ok(SubscriptionItem::CaughtUp { head: this.covered })));
            }
            let (changed, mut head) = ready!(this.changes.poll(cx));
            if changed.is_err() {
                // The log is gone.
                this.ended = true;
                return Poll::Ready(None);
            }
            this.target = *head.borrow_and_update();
            this.changes.set(head_change(head));
        }
    }
}

/// A subscription over `log` from `from_position`, following `head`.
pub fn follow<L: EventLog>(log: L, head: watch::Receiver<u64>, from_position: u64) -> Subscription {
    let next = from_position.max(1);
    Subscription::start(Box::new(log), head, Scope::All, next, next - 1)
}

/// A subscription over `stream` of `log` from `from_version`, following
/// `head`: the stream's events in version order, [`SubscriptionItem::CaughtUp`]
/// once every event durable at the start is delivered, then the stream's
/// later events as they become durable. Each head change costs one read
/// of the stream index, however many events of other streams it brought,
/// unless the log knows the stream did not grow
/// ([`EventLog::may_have_written_after`]).
pub fn follow_stream<L: EventLog>(
    log: L,
    head: watch::Receiver<u64>,
    stream: StreamId,
    from_version: u64,
) -> Subscription {
    let next = from_version.max(1);
    Subscription::start(Box::new(log), head, Scope::Stream(stream), next, 0)
}

impl Subscription {
    /// A subscription of `scope` that delivers from `next` on, with
    /// everything up to position `covered` already accounted for.
    fn start(
        log: Box<dyn EventLog>,
        mut head: watch::Receiver<u64>,
        scope: Scope,
        next: u64,
        covered: u64,
    ) -> Subscription {
        let target = *head.borrow_and_update();
        Subscription {
            log,
            scope,
            next,
            covered,
            target,
            page: VecDeque::new(),
            failure: None,
            caught_up: false,
            ended: false,
            changes: ReusableBoxFuture::new(head_change(head)),
        }
    }
}
