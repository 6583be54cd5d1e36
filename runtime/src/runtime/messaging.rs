//! Messages between agents and to the host: sends (waking an idle child or
//! cold-resuming an absent one), interrupts, and a root's inbox.

use std::sync::Arc;

use subagent_core::telemetry::attr;
use subagent_core::{
    content::ContentBlock, Attachment, Event, InterruptReceipt, InterruptRequest, MessageId,
    PromptReceipt, PromptRequest, SessionId, StreamId, SubagentError,
};
use subagent_projections::machine::{cold_resumes, prompt_receipt};
use subagent_projections::prompt_digest;
use subagent_projections::Command;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::activation::DriverHandle;
use crate::drivers::LocalDriver;

use super::attachments::admit_images;
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

/// Whether `zone` names a time zone of the IANA database bundled in this
/// build (the same answer on every machine).
fn is_time_zone(zone: &str) -> bool {
    jiff::tz::db().get(zone).is_ok()
}

/// What a delivery did (its span's `subagents.message.delivery`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delivered {
    /// The target had no live activation: the message resumed it.
    ColdResumed,
    /// The target's live driver was told of the message.
    Woken,
    /// Nothing was recorded (a prompt's retry).
    Nothing,
}

impl Delivered {
    fn as_str(self) -> &'static str {
        match self {
            Delivered::ColdResumed => "cold_resume",
            Delivered::Woken => "wake",
            Delivered::Nothing => "retry",
        }
    }
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
        let message_id = MessageId::new();
        self.deliver(
            sender.session,
            target,
            Command::SendMessage {
                sender: sender.session,
                target,
                message_id,
                content,
                delivery: subagent_core::MessageDelivery::Queue,
            },
            Vec::new(),
        )
        .await?;
        Ok(message_id)
    }

    /// The spec's `prompt`: one browser-authored message to a continuable
    /// child through its exact live direct parent, keeping the request id
    /// and time zone on the accepted message. A running child takes it at
    /// its next turn (`queue`) or nearest step (`steer`); an idle child
    /// wakes; an absent child is cold-resumed. `signal` owns the call only
    /// until the inbox accepts the message.
    ///
    /// A retry with the same request id and body returns the first receipt
    /// and records nothing, whatever changed since.
    ///
    /// # Errors
    /// `gateway/bad-request` (malformed, or the request id reused for
    /// another body), `subagent/invalid-time-zone`,
    /// `subagent/attachment-invalid` (an image part that is malformed, over
    /// a cap, not the type it declares, or for a child whose route takes no
    /// images; see `attachments`), `subagent/tree-elsewhere` (the parent's tree
    /// is another host's, on a shared log), `subagent/parent-unavailable`
    /// (the parent is not live), `subagent/unauthorized` (not the direct parent),
    /// `subagent/not-resumable`, `subagent/delivery-unavailable` (a cold
    /// resume at capacity, or structured capture closed the input),
    /// `subagent/admission-closed`, `gateway/cancelled`, `subagent/closed`,
    /// `gateway/internal`.
    pub async fn prompt(
        &self,
        request: PromptRequest,
        signal: CancellationToken,
    ) -> Result<PromptReceipt, SubagentError> {
        self.ensure_open()?;
        request.validate(is_time_zone)?;
        if signal.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        let PromptRequest {
            address,
            delivery,
            request_id,
            content,
            time_zone,
        } = request;
        let admitted = admit_images(content, self.attachment_limits(), self.log().as_ref())?;
        let (parent, child) = (address.parent_session_id, address.child_session_id);
        // Recorded content names images by id, so a retry that sends the
        // same bytes inline again digests the same.
        let digest = prompt_digest(delivery, time_zone.as_deref(), &admitted.content);
        let receipt = |this: &Self| {
            prompt_receipt(
                &this.inner.engine.state(),
                parent,
                child,
                &request_id,
                &digest,
            )
            .map(|found| found.map(|message_id| PromptReceipt { message_id }))
        };
        if let Some(first) = receipt(self)? {
            return Ok(first);
        }
        if !self.is_live(parent) {
            // Another host's tree: say whose, so the caller can go there.
            self.refuse_tree_elsewhere(parent)?;
            return Err(SubagentError::ParentUnavailable(format!(
                "{parent} has no live agent"
            )));
        }
        if admitted.has_images() {
            self.check_image_route(child)?;
        }
        let message_id = MessageId::new();
        let command = Command::Prompt {
            parent,
            child,
            request_id: request_id.clone(),
            zone: time_zone,
            message_id,
            content: admitted.content,
            delivery,
        };
        if !self
            .deliver(parent, child, command, admitted.attachments)
            .await?
        {
            // A concurrent retry of the same request was accepted first.
            return receipt(self)?.ok_or_else(|| {
                SubagentError::internal("a prompt recorded nothing and has no receipt")
            });
        }
        Ok(PromptReceipt { message_id })
    }

    /// Commits `command`, a message from `sender` to `target`, and sets it
    /// travelling: a message to an absent child cold-resumes it, which needs
    /// room now (reserved before the commit, so a refusal records nothing);
    /// any other wakes the target's driver. False when the command recorded
    /// nothing (a prompt's retry).
    async fn deliver(
        &self,
        sender: SessionId,
        target: SessionId,
        command: Command,
        attachments: Vec<Attachment>,
    ) -> Result<bool, SubagentError> {
        // One hold of the engine's lock for both reads; the span is built
        // after it.
        let (resumes, parents) = {
            let state = self.inner.engine.state();
            (
                cold_resumes(&state, sender, target),
                crate::telemetry::DeliveryParents::of(&state, sender),
            )
        };
        let span = crate::telemetry::deliver_message_span(parents, target);
        let delivered = self
            .deliver_traced(sender, target, resumes, command, attachments)
            .instrument(span.clone())
            .await;
        match &delivered {
            Ok(how) => {
                span.record(attr::DELIVERY, how.as_str());
            }
            Err(err) => crate::telemetry::record_error(&span, err.code().as_str()),
        }
        delivered.map(|how| how != Delivered::Nothing)
    }

    /// [`deliver`](Self::deliver) inside its span; `resumes` is whether the
    /// message cold-resumes `target` ([`cold_resumes`]).
    async fn deliver_traced(
        &self,
        sender: SessionId,
        target: SessionId,
        resumes: bool,
        command: Command,
        attachments: Vec<Attachment>,
    ) -> Result<Delivered, SubagentError> {
        let permits = if resumes {
            Some(self.inner.capacity.try_admit(sender)?)
        } else {
            None
        };
        let _materializing = Materializing::enter(&self.inner.gate)?;
        // A message that resumes its target is recorded in the resumed
        // activation's span, which the engine opens as it decides.
        let committed = self
            .inner
            .engine
            .commit_opening(command, attachments)
            .await?;
        let resumed = committed
            .records
            .iter()
            .any(|record| matches!(record.event, Event::ActivationRequested { .. }));
        Ok(if resumed {
            let span = committed
                .opened
                .map_or_else(tracing::Span::none, |opened| opened.span);
            self.cold_resume(target, permits, span);
            Delivered::ColdResumed
        } else if !committed.records.is_empty() {
            self.wake(target);
            Delivered::Woken
        } else {
            Delivered::Nothing
        })
    }

    /// Tells `session`'s live driver, if any, that its inbox gained a
    /// message: an idle agent starts a turn, a parked one resumes its queue.
    pub(crate) fn wake(&self, session: SessionId) {
        if let Some(driver) = lock(&self.inner.drivers).get(&session) {
            driver.wake.send_modify(|wakes| *wakes += 1);
        }
    }

    pub(crate) fn cold_resume(
        &self,
        child: SessionId,
        permits: Option<crate::capacity::Permits>,
        span: tracing::Span,
    ) {
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
            span,
        };
        *lock(&handle.task) = Some(self.inner.tasks.spawn(driver.run()));
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
        self.interrupt_live_work(target, authority).await.map(drop)
    }

    /// The spec's `interruptByParent`: [`interrupt`](Self::interrupt) under
    /// the durable direct-parent address, authorised against the live
    /// activation alone (no catalog, history or parent-agent lookup, so a
    /// live child stays interruptible while its parent agent is offline).
    ///
    /// # Errors
    /// `subagent/unauthorized` when `parentSessionId` is not the target's
    /// direct parent; `subagent/closed`; `gateway/internal`.
    pub async fn interrupt_by_parent(
        &self,
        request: InterruptRequest,
    ) -> Result<InterruptReceipt, SubagentError> {
        let authority = InterruptAuthority::User {
            parent_session_id: request.parent_session_id,
        };
        let interrupted = self
            .interrupt_live_work(request.child_session_id, authority)
            .await?;
        Ok(InterruptReceipt { interrupted })
    }

    /// Records and signals an interrupt; whether there was live work to stop.
    pub(crate) async fn interrupt_live_work(
        &self,
        target: SessionId,
        authority: InterruptAuthority<'_>,
    ) -> Result<bool, SubagentError> {
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
            return Ok(false);
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
        Ok(true)
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
        // The session's own stream, history then live: it reads and
        // decodes only this session's events, whatever else is appended.
        let mut subscription = self
            .log()
            .subscribe_stream(StreamId::Session(agent.session), 1);
        let shutdown = self.inner.shutdown.clone();
        let (sender, receiver) = mpsc::channel(256);
        self.inner
            .tasks
            .spawn(shutdown.run_until_cancelled_owned(async move {
                use tokio_stream::StreamExt;
                while let Some(Ok(item)) = subscription.next().await {
                    let subagent_store::SubscriptionItem::Event(record) = item else {
                        continue;
                    };
                    if !forward_message(&sender, record.event).await {
                        return;
                    }
                }
            }));
        Ok(receiver)
    }
}
