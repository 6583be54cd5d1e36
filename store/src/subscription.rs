//! Catch-up-then-live subscriptions, shared by every backend.
//!
//! A subscription reads the log from its start position page by page up to
//! the current head, yields [`SubscriptionItem::CaughtUp`] once, then follows
//! the head as appends become durable. Because it always reads by position
//! from the log itself (the head watch only says *that* something changed),
//! it can neither skip nor repeat an event, whatever the timing.

use std::pin::Pin;
use std::task::{Context, Poll};

use subagent_core::RecordedEvent;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;

use crate::error::StoreError;
use crate::log::{EventLog, READ_PAGE};

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
/// the log is closed. Dropping it stops the background reader.
pub struct Subscription(ReceiverStream<Result<SubscriptionItem, StoreError>>);

impl Stream for Subscription {
    type Item = Result<SubscriptionItem, StoreError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.0).poll_next(cx)
    }
}

/// Starts a subscription over `log` from `from_position`, woken by `head`.
/// Must be called inside a tokio runtime.
pub fn spawn<L: EventLog + Clone>(
    log: L,
    mut head: watch::Receiver<u64>,
    from_position: u64,
) -> Subscription {
    let (sender, receiver) = mpsc::channel(READ_PAGE);
    tokio::spawn(async move {
        let mut next = from_position.max(1);
        let mut caught_up = false;
        loop {
            let target = *head.borrow_and_update();
            while next <= target {
                let page = match log.read_all_page(next, READ_PAGE) {
                    Ok(page) if page.is_empty() => Err(StoreError::Corrupt {
                        position: next,
                        reason: "record missing below the head".into(),
                    }),
                    other => other,
                };
                let page = match page {
                    Ok(page) => page,
                    Err(err) => {
                        let _ = sender.send(Err(err)).await;
                        return;
                    }
                };
                for record in page {
                    let Some(after) = record.position.checked_add(1) else {
                        // Only a damaged log has a record at u64::MAX.
                        let _ = sender.send(Ok(SubscriptionItem::Event(record))).await;
                        let _ = sender
                            .send(Err(StoreError::NumberingExhausted {
                                what: "position",
                                value: u64::MAX,
                            }))
                            .await;
                        return;
                    };
                    next = after;
                    if sender
                        .send(Ok(SubscriptionItem::Event(record)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
            if !caught_up {
                caught_up = true;
                if sender
                    .send(Ok(SubscriptionItem::CaughtUp { head: next - 1 }))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            tokio::select! {
                changed = head.changed() => if changed.is_err() { return },
                () = sender.closed() => return,
            }
        }
    });
    Subscription(ReceiverStream::new(receiver))
}
