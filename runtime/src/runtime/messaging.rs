//! Messages between agents and to the host: sends (waking an idle child or
//! cold-resuming an absent one), interrupts, and a root's inbox.

use std::sync::Arc;

use subagent_core::{content::ContentBlock, Event, MessageId, SessionId, StreamId, SubagentError};
use subagent_projections::machine::cold_resumes;
use subagent_projections::Command;
use subagent_store::EventLogExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::activation::DriverHandle;
use crate::drivers::LocalDriver;

use super::{lock, LiveAgent, Materializing, SubagentRuntime};

/// A message accepted into an inbox, as [`SubagentRuntime::inbox`] yields it.
#[derive(Clone, Debug, PartialEq)]
pub struct InboxMessage {
    /// Its inbox id.
    pub message_id: MessageId,
    /// Durable attribution.
    pub source: subagent_core::MessageSource,
    /// The content.
    pub content: Vec<ContentBlock>,
}

/// Sends an accepted message on to an inbox reader; false once the reader
/// is gone.
pub(crate) async fn forward_message(sender: &mpsc::Sender<InboxMessage>, event: Event) -> bool {
    let Event::MessageAccepted {
        message_id,
        source,
        content,
        ..
    } = event
    else {
        return true;
    };
    sender
        .send(InboxMessage {
            message_id,
            source,
            content,
        })
        .await
        .is_ok()
}

/// The authority of one interrupt: a human client presenting the durable
/// direct-parent address, or an exact live ancestor agent.
#[derive(Clone, Copy, Debug)]
pub enum InterruptAuthority<'a> {
    /// The direct parent's durable address.
    User {
        /// The claimed direct parent.
        parent_session_id: SessionId,
    },
    /// A live ancestor.
    Ancestor(&'a LiveAgent),
}

impl SubagentRuntime {
    /// Steers one model-authored message from `sender` to its direct parent
    /// or direct continuable child. A running target takes it at its next
    /// turn; an idle target wakes; an absent child is cold-resumed from its
    /// durable history. `signal` owns the call only until the inbox accepts
    /// the message; the returned id is durable.
    ///
    /// # Errors
    /// `subagent/unauthorized` (stale sender, not adjacent),
    /// `subagent/not-resumable` (external or uninterpretable target),
    /// `subagent/delivery-unavailable` (structured capture closed its input),
    /// `subagent/admission-closed`, `gateway/cancelled`, `subagent/closed`.
    pub async fn send_message(
        &self,
        sender: &LiveAgent,
        target: SessionId,
        content: Vec<ContentBlock>,
        signal: CancellationToken,
    ) -> Result<MessageId, SubagentError> {
        self.authorize(sender)?;
        if signal.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        // A message to an absent child cold-resumes it: that needs room now.
        let resumes = cold_resumes(&self.inner.engine.state(), sender.session, target);
        let permits = if resumes {
            Some(self.inner.capacity.try_admit(sender.session)?)
        } else {
            None
        };
        let _materializing = Materializing::enter(&self.inner.gate)?;
        let message_id = MessageId::new();
        let records = self
            .inner
            .engine
            .commit(Command::SendMessage {
                sender: sender.session,
                target,
                message_id,
                content,
                delivery: subagent_core::MessageDelivery::Queue,
            })
            .await?;
        let resumed = records
            .iter()
            .any(|record| matches!(record.event, Event::ActivationRequested { .. }));
        if resumed {
            self.cold_resume(target, permits);
        } else {
            self.wake(target);
        }
        Ok(message_id)
    }

    /// Tells `session`'s live driver, if any, that its inbox gained a
    /// message: an idle agent starts a turn, a parked one resumes its queue.
    pub(crate) fn wake(&self, session: SessionId) {
        if let Some(driver) = lock(&self.inner.drivers).get(&session) {
            driver.wake.send_modify(|wakes| *wakes += 1);
        }
    }

    pub(crate) fn cold_resume(&self, child: SessionId, permits: Option<crate::capacity::Permits>) {
        let (parent, label, provider, epoch) = {
            let state = self.inner.engine.state();
            let Some(record) = state.sessions.get(&child) else {
                return;
            };
            (
                record.parent.unwrap_or(child),
                record.label.clone(),
                record.provider.clone().unwrap_or_default(),
                state.activations.get(&child).map_or(0, |a| a.epoch),
            )
        };
        let handle = DriverHandle::new(child, parent, epoch);
        *lock(&handle.permits) = permits;
        lock(&self.inner.drivers).insert(child, Arc::clone(&handle));
        let driver = LocalDriver {
            runtime: self.clone(),
            handle: Arc::clone(&handle),
            provider,
            label,
            signal: CancellationToken::new(),
            resumed: true,
            epoch,
        };
        *lock(&handle.task) = Some(tokio::spawn(driver.run()));
    }

    /// Interrupts `target`'s current execution. The cancel is issued before
    /// this returns (after the interrupt is durable); the target may run
    /// until it observes it. Unclaimed messages, the activation and its
    /// descendants are kept; claimed work is not requeued; the next waking
    /// send resumes the parked queue. An external target stops its one
    /// execution. An absent or idle target is an accepted no-op.
    ///
    /// # Errors
    /// `subagent/unauthorized` when the authority does not own the target;
    /// `subagent/closed`.
    pub async fn interrupt(
        &self,
        target: SessionId,
        authority: InterruptAuthority<'_>,
    ) -> Result<(), SubagentError> {
        self.ensure_open()?;
        let durable = match authority {
            InterruptAuthority::User { parent_session_id } => {
                subagent_core::InterruptAuthority::User { parent_session_id }
            }
            InterruptAuthority::Ancestor(agent) => {
                self.authorize(agent)?;
                subagent_core::InterruptAuthority::Ancestor {
                    agent_session_id: agent.session,
                }
            }
        };
        let records = self
            .inner
            .engine
            .commit(Command::Interrupt {
                target,
                authority: durable,
            })
            .await?;
        if records.is_empty() {
            return Ok(());
        }
        let driver = lock(&self.inner.drivers).get(&target).cloned();
        if let Some(driver) = driver {
            let external = self.inner.engine.state().runs.contains_key(&target);
            if external {
                driver.stop.cancel();
            } else if let Some(turn) = lock(&driver.turn).as_ref() {
                *lock(&driver.interrupted_at) = Some(*driver.wake.borrow());
                turn.cancel();
            }
        }
        Ok(())
    }

    /// The accepted messages of `agent`'s inbox, from the first on, then live
    /// (a root reads settlement notices and external reports here). The
    /// history is read from the session's own stream, so its cost does not
    /// grow with the rest of the log; live messages follow without a gap.
    ///
    /// The stream ends when the runtime is closed (or the receiver dropped).
    ///
    /// # Errors
    /// `subagent/unauthorized` for a stale handle; `subagent/closed`.
    pub fn inbox(&self, agent: &LiveAgent) -> Result<mpsc::Receiver<InboxMessage>, SubagentError> {
        self.authorize(agent)?;
        let stream = StreamId::Session(agent.session);
        // Subscribe first: everything after `head` arrives live, everything
        // up to it is read from the stream.
        let head = self.log().head();
        let mut subscription = self.log().subscribe(head + 1);
        let log = Arc::clone(self.log());
        let shutdown = self.inner.shutdown.clone();
        let (sender, receiver) = mpsc::channel(256);
        tokio::spawn(shutdown.run_until_cancelled_owned(async move {
            use tokio_stream::StreamExt;
            for record in log.read_stream(stream, 1) {
                let Ok(record) = record else { return };
                if record.position > head {
                    break;
                }
                if !forward_message(&sender, record.event).await {
                    return;
                }
            }
            while let Some(Ok(item)) = subscription.next().await {
                let subagent_store::SubscriptionItem::Event(record) = item else {
                    continue;
                };
                if record.stream == stream && !forward_message(&sender, record.event).await {
                    return;
                }
            }
        }));
        Ok(receiver)
    }
}
