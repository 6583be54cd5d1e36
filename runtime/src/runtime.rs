//! [`SubagentRuntime`]: the `ctx.subagents` facade. It owns the engine, the
//! live provider registry, live agent handles and the driver tasks, and it
//! announces `subagent/start` and `subagent/end`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use subagent_core::{
    content::ContentBlock, AbandonReason, AgentOptions, Diagnostic, ErrorCode, Event, MessageId,
    SessionId, StreamId, SubagentActivationSpec, SubagentDescendantListEntry, SubagentError,
    SubagentListEntry, SubagentRunEndInfo, SubagentRunId, SubagentRunInfo,
};
use subagent_projections::{Command, StartChild};
use subagent_store::{EventLog, EventLogExt};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::activation::{DriverHandle, SubagentActivation};
use crate::capacity::{Capacity, CapacityLimits};
use crate::deployment::Deployment;
use crate::drivers::{ExternalDriver, LocalDriver};
use crate::engine::{internal_error, refuse_oversized_prompt, Engine};
use crate::seam::{AgentHost, ContinuableCreateRequest, ResolvedStartRequest, SubagentProvider};

/// An opaque live agent handle: the authority to delegate from a session.
/// Issued for host roots by [`SubagentRuntime::open_root`] and for published
/// local children by [`SubagentActivation::agent`](crate::SubagentActivation::agent);
/// refused once the root is closed or the child's activation is disposed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LiveAgent {
    session: SessionId,
}

impl LiveAgent {
    pub(crate) fn new(session: SessionId) -> Self {
        LiveAgent { session }
    }

    /// The session this handle speaks for.
    #[must_use]
    pub fn session(&self) -> SessionId {
        self.session
    }
}

/// A lifecycle notification.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    /// `subagent/start`, keyed by the delegating parent.
    Start {
        /// The delegating parent.
        parent: SessionId,
        /// The payload.
        info: SubagentRunInfo,
    },
    /// `subagent/end`, keyed by the delegating parent.
    End {
        /// The delegating parent.
        parent: SessionId,
        /// The payload.
        info: SubagentRunEndInfo,
    },
    /// `subagent/provider-added`.
    ProviderAdded(String),
    /// `subagent/provider-removed`.
    ProviderRemoved(String),
}

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

/// The disposer of one provider registration.
pub struct ProviderRegistration {
    runtime: SubagentRuntime,
    name: String,
}

impl ProviderRegistration {
    /// The registered name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Unregisters the provider: new starts are refused; runs already
    /// returned to their holders continue.
    ///
    /// # Errors
    /// `subagent/unknown-provider` if it was already removed.
    pub async fn remove(self) -> Result<(), SubagentError> {
        self.runtime.remove_provider(&self.name).await
    }
}

/// The runtime's admission gate: whether it is closed, and how many
/// materializations (starts and cold resumes between their admission and
/// their driver's registration) are in flight. One value behind one lock, so
/// no materialization can enter after `close` shut the gate and counted the
/// ones inside.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Gate {
    pub(crate) closed: bool,
    pub(crate) in_flight: usize,
}

/// Counts one materialization in flight for as long as it lives.
struct Materializing<'a>(&'a tokio::sync::watch::Sender<Gate>);

impl<'a> Materializing<'a> {
    /// Enters the gate.
    ///
    /// # Errors
    /// `subagent/closed` once the runtime is closing.
    fn enter(gate: &'a tokio::sync::watch::Sender<Gate>) -> Result<Self, SubagentError> {
        let entered = gate.send_if_modified(|gate| {
            if gate.closed {
                return false;
            }
            gate.in_flight += 1;
            true
        });
        if entered {
            Ok(Materializing(gate))
        } else {
            Err(SubagentError::Closed)
        }
    }
}

impl Drop for Materializing<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|gate| gate.in_flight -= 1);
    }
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

fn aggregate(failures: Vec<SubagentError>) -> Result<(), SubagentError> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(SubagentError::Aggregate(failures))
    }
}

/// How opening went: the checkpoint used and what recovery had to settle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Events the recovery appended (0 after a clean shutdown).
    pub events: usize,
    /// Checkpoint use and tail length.
    pub opened: crate::engine::OpenStats,
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    /// Persona variables, model selection, depth setting, tools, redaction.
    pub(crate) deployment: Deployment,
    pub(crate) capacity: Capacity,
    /// Whether the runtime is closed, and the starts and cold resumes
    /// between their admission and their driver's registration (a drain or
    /// `close` waits for them to land before releasing).
    pub(crate) gate: tokio::sync::watch::Sender<Gate>,
    /// Serializes `close` calls: a second one waits for the first.
    closing: tokio::sync::Mutex<()>,
    /// Cancelled once `close` is done: inbox readers and scoped notice
    /// forwarders end, and with them their hold on the log.
    shutdown: CancellationToken,
    pub(crate) host: Arc<dyn AgentHost>,
    pub(crate) providers: Mutex<Vec<Arc<dyn SubagentProvider>>>,
    /// The roots this runtime holds open (`open_root`, `reopen_root`). Not a
    /// durable fact: a hold lasts as long as this runtime (ARCHITECTURE.md).
    pub(crate) roots: Mutex<HashSet<SessionId>>,
    pub(crate) drivers: Mutex<HashMap<SessionId, Arc<DriverHandle>>>,
    pub(crate) notices: broadcast::Sender<Notice>,
}

/// Sends an accepted message on to an inbox reader; false once the reader
/// is gone.
async fn forward_message(sender: &mpsc::Sender<InboxMessage>, event: Event) -> bool {
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

/// Committed events between projections checkpoints.
pub const CHECKPOINT_EVERY: u64 = 10_000;

/// The runtime. Cheap to clone.
#[derive(Clone)]
pub struct SubagentRuntime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SubagentRuntime {
    /// Opens the runtime over `log`. Anything the previous host left live is
    /// settled explicitly first (`ActivationAbandoned { HostRestart }`, runs
    /// settled `error`, `HostRecovered`).
    ///
    /// # Errors
    /// `gateway/internal` when the log cannot be read or appended.
    pub async fn open(
        log: Arc<dyn EventLog>,
        host: Arc<dyn AgentHost>,
    ) -> Result<(SubagentRuntime, RecoveryReport), SubagentError> {
        Self::open_with(log, host, CapacityLimits::default()).await
    }

    /// [`open`](Self::open) with capacity limits on live activations.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub async fn open_with(
        log: Arc<dyn EventLog>,
        host: Arc<dyn AgentHost>,
        limits: CapacityLimits,
    ) -> Result<(SubagentRuntime, RecoveryReport), SubagentError> {
        let (engine, opened) = Engine::open(log, CHECKPOINT_EVERY)?;
        let recovered = engine.commit(Command::Recover).await?;
        let runtime = SubagentRuntime {
            inner: Arc::new(Inner {
                engine,
                capacity: Capacity::new(limits),
                deployment: Deployment::new(host.tools()),
                gate: tokio::sync::watch::channel(Gate::default()).0,
                closing: tokio::sync::Mutex::new(()),
                shutdown: CancellationToken::new(),
                host,
                providers: Mutex::new(Vec::new()),
                roots: Mutex::new(HashSet::new()),
                drivers: Mutex::new(HashMap::new()),
                notices: broadcast::channel(1024).0,
            }),
        };
        Ok((
            runtime,
            RecoveryReport {
                events: recovered.len(),
                opened,
            },
        ))
    }

    /// Clean shutdown. From the moment it is called every public operation
    /// of the runtime and of its handles is refused with `subagent/closed`
    /// (see [`ensure_open`](Self::ensure_open) for the few accessors that
    /// stay). Starts and cold resumes already admitted land first; then every
    /// live activation is released child-first, every held root is closed
    /// (ending a drain's cutoff below it), the provider registrations end,
    /// the engine is sealed so nothing more can be recorded, and a
    /// projections checkpoint is saved, so the next open has nothing to
    /// recover and no tail to fold. Inbox readers and scoped notice streams
    /// end.
    ///
    /// Idempotent: closing a closed runtime waits for the first close to
    /// finish and returns `Ok`.
    ///
    /// # Errors
    /// One `subagent/aggregate` naming every release, removal or storage
    /// step that failed; the runtime is closed regardless.
    pub async fn close(&self) -> Result<(), SubagentError> {
        let _closing = self.inner.closing.lock().await;
        let first = self.inner.gate.send_if_modified(|gate| {
            if gate.closed {
                return false;
            }
            gate.closed = true;
            true
        });
        if !first {
            return Ok(());
        }
        // Starts and cold resumes admitted before the gate shut register
        // their drivers first, so they are released too.
        let _ = self
            .inner
            .gate
            .subscribe()
            .wait_for(|gate| gate.in_flight == 0)
            .await;
        let live: Vec<Arc<DriverHandle>> = lock(&self.inner.drivers).values().cloned().collect();
        let mut failures = Vec::new();
        for driver in live {
            if let Err(err) = self.dispose_driver(&driver).await {
                failures.push(err);
            }
        }
        // Whatever could not be released is stopped and forgotten; the next
        // open settles what the log still shows live.
        let stranded: Vec<Arc<DriverHandle>> =
            lock(&self.inner.drivers).drain().map(|(_, d)| d).collect();
        for driver in stranded {
            driver.stop_and_join().await;
        }
        // Held roots leave the registry with the host: a drain's cutoff
        // below them ends (a reopened root admits children again).
        let roots: Vec<SessionId> = lock(&self.inner.roots).drain().collect();
        for root in roots {
            if let Err(err) = self
                .inner
                .engine
                .commit(Command::ReopenAdmission { parent: root })
                .await
            {
                failures.push(err);
            }
        }
        // Registrations end with the host: record it now rather than at the next open.
        for name in self.provider_names() {
            if let Err(err) = self.unregister(&name).await {
                failures.push(err);
            }
        }
        self.inner.engine.seal();
        if let Err(err) = self.inner.engine.checkpoint().await {
            failures.push(err);
        }
        self.inner.shutdown.cancel();
        aggregate(failures)
    }

    /// Refuses every call once [`close`](Self::close) has begun.
    ///
    /// Every public operation starts here, except what can neither act nor
    /// observe anything live: [`projections`](Self::projections) and
    /// [`log`](Self::log), the audit face (a closed runtime's final state and
    /// its log stay readable), [`is_closed`](Self::is_closed), and `close`
    /// itself, which is idempotent.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub(crate) fn ensure_open(&self) -> Result<(), SubagentError> {
        if self.inner.gate.borrow().closed {
            Err(SubagentError::Closed)
        } else {
            Ok(())
        }
    }

    /// Whether [`close`](Self::close) has begun.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.inner.gate.borrow().closed
    }

    /// A snapshot of every projection as of the last acknowledged command,
    /// for audits and tests: it must equal a fold of the log from the start.
    #[must_use]
    pub fn projections(&self) -> subagent_projections::Projections {
        self.inner.engine.state().clone()
    }

    /// The log.
    #[must_use]
    pub fn log(&self) -> &Arc<dyn EventLog> {
        self.inner.engine.log()
    }

    /// Lifecycle notifications (`subagent/start`, `subagent/end`, provider
    /// added/removed). Filter `Start`/`End` by `parent` for a scoped audience.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn notices(&self) -> Result<broadcast::Receiver<Notice>, SubagentError> {
        self.ensure_open()?;
        Ok(self.inner.notices.subscribe())
    }

    /// `subagent/start` and `subagent/end` of `parent`'s own delegations
    /// only: the scoped audience of one delegating parent. Ends when the
    /// runtime is closed or dropped; a subscriber that falls more than 1024
    /// notices behind skips the oldest.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn notices_for(&self, parent: SessionId) -> Result<mpsc::Receiver<Notice>, SubagentError> {
        let mut all = self.notices()?;
        let shutdown = self.inner.shutdown.clone();
        let (sender, receiver) = mpsc::channel(256);
        tokio::spawn(async move {
            loop {
                let received = tokio::select! {
                    received = all.recv() => received,
                    () = shutdown.cancelled() => return,
                };
                let notice = match received {
                    Ok(notice) => notice,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let scoped = match &notice {
                    Notice::Start { parent: owner, .. } | Notice::End { parent: owner, .. } => {
                        *owner == parent
                    }
                    Notice::ProviderAdded(_) | Notice::ProviderRemoved(_) => false,
                };
                if scoped && sender.send(notice).await.is_err() {
                    return;
                }
            }
        });
        Ok(receiver)
    }

    pub(crate) fn notify(&self, notice: Notice) {
        // No subscriber is not an error.
        let _ = self.inner.notices.send(notice);
    }

    /// Records a new host root session and returns its live handle. To take
    /// an existing root back (after a restart), use
    /// [`reopen_root`](Self::reopen_root).
    ///
    /// # Errors
    /// `subagent/closed`; `gateway/internal` on storage failure.
    pub async fn open_root(&self, label: &str) -> Result<LiveAgent, SubagentError> {
        self.open_root_with(label, None).await
    }

    /// [`open_root`](Self::open_root) for a root agent running with
    /// `agent_options`, which its local children inherit (a start's own
    /// options and a provider's route defaults merge over them).
    ///
    /// # Errors
    /// `subagent/closed`; `gateway/bad-request` for malformed options;
    /// `gateway/internal` on storage failure.
    pub async fn open_root_with(
        &self,
        label: &str,
        agent_options: Option<AgentOptions>,
    ) -> Result<LiveAgent, SubagentError> {
        self.ensure_open()?;
        let session = SessionId::new();
        self.inner
            .engine
            .commit(Command::OpenRoot {
                session,
                label: label.to_owned(),
                agent_options,
            })
            .await?;
        lock(&self.inner.roots).insert(session);
        Ok(LiveAgent { session })
    }

    /// Takes an existing root session back: after a restart, the host
    /// re-opens the root it had and, through the returned handle, messages,
    /// drains, lists and waits for the children that root delegated to
    /// (an inactive child is cold-resumed by a message, as always).
    ///
    /// The log is the authority: `session` must be recorded as a root. Its
    /// options and catalog are the durable ones. A root is held by one
    /// handle holder at a time: within this runtime, a root already held
    /// (opened or reopened, and not closed since) is refused; across
    /// processes, the log's directory lock already keeps a second runtime
    /// off the same log. Holding is not recorded (ARCHITECTURE.md says why).
    ///
    /// # Errors
    /// `subagent/closed`; `subagent/parent-unavailable` for a session the log
    /// does not know; `subagent/unauthorized` for a child session (its
    /// authority comes from its own activation); `subagent/root-held` when
    /// this runtime already holds it.
    pub async fn reopen_root(&self, session: SessionId) -> Result<LiveAgent, SubagentError> {
        self.ensure_open()?;
        self.inner
            .engine
            .commit(Command::ReopenRoot { session })
            .await?;
        if !lock(&self.inner.roots).insert(session) {
            return Err(SubagentError::RootHeld(session.to_string()));
        }
        Ok(LiveAgent { session })
    }

    /// Closes a root: its handle is refused from now on, and a drain's
    /// admission cutoff below it ends. It can be taken back with
    /// [`reopen_root`](Self::reopen_root).
    ///
    /// # Errors
    /// `subagent/unauthorized` when `root` is not a root this runtime holds
    /// (a child's handle, or a root already closed); `subagent/closed`;
    /// `gateway/internal` on storage failure.
    pub async fn close_root(&self, root: &LiveAgent) -> Result<(), SubagentError> {
        self.ensure_open()?;
        if !lock(&self.inner.roots).remove(&root.session) {
            return Err(SubagentError::Unauthorized(format!(
                "{} is not a root this runtime holds",
                root.session
            )));
        }
        self.inner
            .engine
            .commit(Command::ReopenAdmission {
                parent: root.session,
            })
            .await?;
        Ok(())
    }

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
        let resumes = {
            let state = self.inner.engine.state();
            state
                .sessions
                .get(&target)
                .is_some_and(|record| record.parent == Some(sender.session))
                && state
                    .activations
                    .get(&target)
                    .is_none_or(|activation| activation.live.is_none())
        };
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

    fn cold_resume(&self, child: SessionId, permits: Option<crate::capacity::Permits>) {
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

    /// Releases the selected resident direct children of `parent`; other
    /// children stay. Absent targets are no-ops.
    ///
    /// # Errors
    /// `subagent/unauthorized` when the parent is stale or a resident target
    /// belongs to another parent (nothing is released then);
    /// `subagent/closed`.
    pub async fn drain_children(
        &self,
        parent: &LiveAgent,
        child_ids: &[SessionId],
    ) -> Result<(), SubagentError> {
        self.authorize(parent)?;
        let mut selected = Vec::new();
        for id in child_ids {
            let driver = lock(&self.inner.drivers).get(id).cloned();
            match driver {
                Some(driver) if driver.parent != parent.session => {
                    return Err(SubagentError::Unauthorized(format!(
                        "{id} is not a child of {}",
                        parent.session
                    )));
                }
                Some(driver) => selected.push(driver),
                None => {}
            }
        }
        let mut failures = Vec::new();
        for driver in selected {
            if let Err(err) = self.dispose_driver(&driver).await {
                failures.push(err);
            }
        }
        aggregate(failures)
    }

    /// Closes admission below each exact live parent, stops their visible
    /// descendant activations at once, then releases those forests
    /// child-first. The cutoff lasts until the parent leaves the registry
    /// (its root is closed or its activation disposed); unrelated trees stay
    /// live.
    ///
    /// # Errors
    /// `subagent/unauthorized` for a stale parent; `subagent/closed`;
    /// otherwise one aggregate error after every branch settled, if any
    /// failed.
    pub async fn drain_descendants(&self, parents: &[LiveAgent]) -> Result<(), SubagentError> {
        self.ensure_open()?;
        for parent in parents {
            self.authorize(parent)?;
        }
        for parent in parents {
            self.inner
                .engine
                .commit(Command::CloseAdmission {
                    parent: parent.session,
                })
                .await?;
        }
        // Starts admitted before the cutoff land first, so they are drained too.
        let mut gate = self.inner.gate.subscribe();
        let _ = gate.wait_for(|gate| gate.in_flight == 0).await;
        let forests: Vec<Arc<DriverHandle>> = {
            let drivers = lock(&self.inner.drivers);
            let below = |driver: &DriverHandle| {
                parents
                    .iter()
                    .any(|parent| self.is_below(driver.child, parent.session))
            };
            let all: Vec<_> = drivers
                .values()
                .filter(|driver| below(driver))
                .cloned()
                .collect();
            for driver in &all {
                if let Some(turn) = lock(&driver.turn).as_ref() {
                    turn.cancel();
                }
            }
            all.into_iter()
                .filter(|driver| parents.iter().any(|parent| driver.parent == parent.session))
                .collect()
        };
        let mut failures = Vec::new();
        for driver in forests {
            if let Err(err) = self.dispose_driver(&driver).await {
                failures.push(err);
            }
        }
        aggregate(failures)
    }

    fn is_below(&self, session: SessionId, ancestor: SessionId) -> bool {
        self.inner
            .engine
            .state()
            .ancestors(session)
            .any(|record| record.id == ancestor)
    }

    /// Waits for the parent's currently owned child work to settle, without
    /// cancelling it. Returns whether any work was observed.
    ///
    /// # Errors
    /// `subagent/unauthorized` for a stale parent; `subagent/closed`.
    pub async fn wait_for_children(&self, parent: &LiveAgent) -> Result<bool, SubagentError> {
        self.authorize(parent)?;
        let children: Vec<Arc<DriverHandle>> = lock(&self.inner.drivers)
            .values()
            .filter(|driver| driver.parent == parent.session)
            .cloned()
            .collect();
        for child in &children {
            let mut result = child.result.subscribe();
            let _ = result.wait_for(Option::is_some).await;
        }
        Ok(!children.is_empty())
    }

    fn authorize(&self, agent: &LiveAgent) -> Result<(), SubagentError> {
        self.ensure_open()?;
        let live_root = lock(&self.inner.roots).contains(&agent.session);
        let live_child = lock(&self.inner.drivers)
            .get(&agent.session)
            .is_some_and(|driver| !driver.stop.is_cancelled());
        if live_root || live_child {
            Ok(())
        } else {
            Err(SubagentError::Unauthorized(format!(
                "no live agent {}",
                agent.session
            )))
        }
    }

    /// Registers a provider; it is recorded in the log and announced.
    ///
    /// # Errors
    /// `subagent/duplicate-provider`, `gateway/bad-request` for an empty name,
    /// `subagent/closed`.
    /// The returned [`ProviderRegistration`] is the disposer: `remove()` it
    /// to unregister. Dropping it leaves the provider registered.
    pub async fn register_provider(
        &self,
        provider: Arc<dyn SubagentProvider>,
    ) -> Result<ProviderRegistration, SubagentError> {
        self.ensure_open()?;
        let registration = Event::ProviderRegistered {
            name: provider.name().to_owned(),
            capabilities: provider.capabilities(),
            inherits_parent_context: provider.inherits_parent_context(),
            route_defaults: provider.agent_route_defaults(),
            continuable: provider.is_continuable(),
            one_shot: !provider.is_continuable(),
        };
        self.inner
            .engine
            .commit(Command::RegisterProvider { registration })
            .await?;
        let name = provider.name().to_owned();
        lock(&self.inner.providers).push(provider);
        self.notify(Notice::ProviderAdded(name.clone()));
        Ok(ProviderRegistration {
            runtime: self.clone(),
            name,
        })
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

    /// Removes a provider: new starts are refused; accepted runs continue.
    ///
    /// # Errors
    /// `subagent/unknown-provider`, `subagent/closed`.
    pub async fn remove_provider(&self, name: &str) -> Result<(), SubagentError> {
        self.ensure_open()?;
        self.unregister(name).await
    }

    /// Records a provider's removal (also on `close`, past the gate).
    async fn unregister(&self, name: &str) -> Result<(), SubagentError> {
        self.inner
            .engine
            .commit(Command::RemoveProvider {
                name: name.to_owned(),
            })
            .await?;
        lock(&self.inner.providers).retain(|provider| provider.name() != name);
        self.notify(Notice::ProviderRemoved(name.to_owned()));
        Ok(())
    }

    /// The provider registered as `name` (`None` when absent).
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn get_provider(
        &self,
        name: &str,
    ) -> Result<Option<Arc<dyn SubagentProvider>>, SubagentError> {
        self.ensure_open()?;
        Ok(self.provider(name))
    }

    fn provider(&self, name: &str) -> Option<Arc<dyn SubagentProvider>> {
        lock(&self.inner.providers)
            .iter()
            .find(|provider| provider.name() == name)
            .cloned()
    }

    /// Registered provider names in insertion order.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn list(&self) -> Result<Vec<String>, SubagentError> {
        self.ensure_open()?;
        Ok(self.provider_names())
    }

    fn provider_names(&self) -> Vec<String> {
        lock(&self.inner.providers)
            .iter()
            .map(|provider| provider.name().to_owned())
            .collect()
    }

    /// The parent's durable catalog, in parent event order.
    ///
    /// # Errors
    /// `subagent/closed`; `gateway/internal` when the log failed (naming
    /// the cause), so an answer that cannot be made durable is never given.
    pub async fn list_children(
        &self,
        parent: SessionId,
    ) -> Result<Vec<SubagentListEntry>, SubagentError> {
        self.ensure_open()?;
        self.inner
            .engine
            .read_durable(|state| state.list_children(parent))
            .await
    }

    /// The root's complete subtree, stable pre-order.
    ///
    /// # Errors
    /// As [`list_children`](Self::list_children).
    pub async fn list_descendants(
        &self,
        root: SessionId,
    ) -> Result<Vec<SubagentDescendantListEntry>, SubagentError> {
        self.ensure_open()?;
        self.inner
            .engine
            .read_durable(|state| state.list_descendants(root))
            .await
    }

    /// Starts a local continuable child (provider with `prepare_continuable`)
    /// or an external one-shot run. Every requested option is checked against
    /// the provider's capabilities before anything is recorded.
    ///
    /// For a local child this returns once the prompt is durable in the
    /// child's inbox; for an external child once the provider published the
    /// run. A `signal` fired before that point abandons the start (recorded)
    /// and returns `gateway/cancelled`.
    ///
    /// A local child whose agent then fails (cannot be built, or its model
    /// or transport fails) is not a start failure: it settles through
    /// [`SubagentActivation::result`] with stop reason `error`.
    ///
    /// # Errors
    /// `subagent/unauthorized` for a stale parent, the start rejections of
    /// the state machine, `gateway/cancelled`, `subagent/closed`, or the
    /// provider's failure.
    pub async fn start_activation(
        &self,
        parent: &LiveAgent,
        spec: SubagentActivationSpec,
        signal: CancellationToken,
    ) -> Result<SubagentActivation, SubagentError> {
        self.authorize(parent)?;
        let provider = self
            .provider(&spec.provider)
            .ok_or_else(|| SubagentError::UnknownProvider(spec.provider.clone()))?;
        refuse_oversized_prompt(&spec.request.prompt)?;
        let child = match (spec.child_id, provider.is_continuable()) {
            (Some(reserved), true) => reserved,
            _ => SessionId::new(),
        };
        let run_id = SubagentRunId::from_uuid(*child.as_uuid());
        // Capacity may delay the start; the signal owns the wait.
        let permits = self.inner.capacity.admit(parent.session, &signal).await?;
        self.authorize(parent)?;
        let materializing = Materializing::enter(&self.inner.gate)?;
        let settings = self.inner.deployment.snapshot();
        self.inner
            .engine
            .commit(Command::StartChild(StartChild {
                parent: parent.session,
                child,
                provider: spec.provider.clone(),
                label: spec.label.clone(),
                options: spec.request.options.clone(),
                delivery: spec.delivery,
                run_id,
                settings,
            }))
            .await?;
        // A new child's first activation is epoch 1.
        let handle = DriverHandle::new(child, parent.session, 1);
        *lock(&handle.permits) = Some(permits);
        lock(&self.inner.drivers).insert(child, Arc::clone(&handle));
        // Registered: a drain from now on finds and releases it.
        drop(materializing);
        let started = if provider.is_continuable() {
            self.start_local(&provider, &handle, spec, signal).await
        } else {
            self.start_external(&provider, &handle, spec, run_id, signal)
                .await
        };
        match started {
            Ok(message_id) => Ok(SubagentActivation {
                child_id: child,
                message_id,
                handle,
                runtime: self.clone(),
            }),
            Err(err) => {
                self.unregister_driver(&handle);
                Err(err)
            }
        }
    }

    pub(crate) async fn session_history(
        &self,
        parent: SessionId,
    ) -> Result<Vec<Value>, SubagentError> {
        let mut history = Vec::new();
        for record in self.log().read_stream(StreamId::Session(parent), 1) {
            history.push(
                serde_json::to_value(&record.map_err(internal_error)?.event)
                    .map_err(internal_error)?,
            );
        }
        Ok(history)
    }

    async fn start_local(
        &self,
        provider: &Arc<dyn SubagentProvider>,
        handle: &Arc<DriverHandle>,
        spec: SubagentActivationSpec,
        signal: CancellationToken,
    ) -> Result<Option<MessageId>, SubagentError> {
        let child = handle.child;
        let request = ContinuableCreateRequest {
            session_id: child,
            parent: handle.parent,
            parent_history: if provider.inherits_parent_context() {
                self.session_history(handle.parent).await?
            } else {
                Vec::new()
            },
            signal: signal.clone(),
        };
        let prepared = tokio::select! {
            prepared = provider.prepare_continuable(request) => prepared,
            () = signal.cancelled() => Err(SubagentError::Cancelled),
            // A drain or dispose released the reservation meanwhile.
            () = handle.stop.cancelled() => return Err(SubagentError::Cancelled),
        };
        let created = match prepared {
            Ok(created) if !signal.is_cancelled() => created,
            outcome => {
                let (reason, error) = match outcome {
                    Err(SubagentError::Cancelled) | Ok(_) => {
                        (AbandonReason::Cancelled, SubagentError::Cancelled)
                    }
                    Err(err) => {
                        let err = self.clean_error(child, err);
                        (
                            AbandonReason::PreparationFailed {
                                diagnostic: Diagnostic::new(err.to_string()),
                            },
                            err,
                        )
                    }
                };
                self.inner
                    .engine
                    .commit(Command::AbandonActivation {
                        child,
                        epoch: 1,
                        reason,
                    })
                    .await?;
                return Err(error);
            }
        };
        let message_id = MessageId::new();
        let seed_source = created
            .seed
            .as_ref()
            .map(|seed| (handle.parent, seed.len() as u64));
        let prepared = self
            .inner
            .engine
            .commit(Command::PrepareActivation {
                child,
                epoch: 1,
                prompt: Some((message_id, spec.request.prompt.clone())),
                seed: created.seed,
                seed_source,
            })
            .await;
        if let Err(refused) = prepared {
            // Refused, not failed (a fork's seed too large, say): the
            // reservation is abandoned rather than left live.
            if refused.code() != ErrorCode::Internal {
                self.inner
                    .engine
                    .commit(Command::AbandonActivation {
                        child,
                        epoch: 1,
                        reason: AbandonReason::PreparationFailed {
                            diagnostic: Diagnostic::new(refused.to_string()),
                        },
                    })
                    .await?;
            }
            return Err(refused);
        }
        let driver = LocalDriver {
            runtime: self.clone(),
            handle: Arc::clone(handle),
            provider: spec.provider,
            label: spec.label,
            signal,
            resumed: false,
            epoch: 1,
        };
        let task = tokio::spawn(driver.run());
        *lock(&handle.task) = Some(task);
        Ok(Some(message_id))
    }

    async fn start_external(
        &self,
        provider: &Arc<dyn SubagentProvider>,
        handle: &Arc<DriverHandle>,
        spec: SubagentActivationSpec,
        run_id: SubagentRunId,
        signal: CancellationToken,
    ) -> Result<Option<MessageId>, SubagentError> {
        let child = handle.child;
        let descriptor = self
            .inner
            .engine
            .state()
            .sessions
            .get(&child)
            .and_then(|record| record.descriptor.clone())
            .ok_or_else(|| SubagentError::Internal("external child has no descriptor".into()))?;
        let request = ResolvedStartRequest {
            run_id: child,
            parent: handle.parent,
            request: spec.request,
            descriptor,
            signal: signal.clone(),
        };
        let run = match provider.start(request).await {
            Ok(run) if !signal.is_cancelled() => run,
            outcome => {
                let error = match outcome {
                    Ok(mut run) => {
                        let _ = run.dispose().await;
                        SubagentError::Cancelled
                    }
                    Err(err) if signal.is_cancelled() => {
                        let _ = err;
                        SubagentError::Cancelled
                    }
                    Err(err) => self.clean_error(child, err),
                };
                self.inner
                    .engine
                    .commit(Command::FailRunStart {
                        child,
                        diagnostic: Diagnostic::new(error.to_string()),
                    })
                    .await?;
                return Err(error);
            }
        };
        self.inner
            .engine
            .commit(Command::StartRun { child })
            .await?;
        self.notify(Notice::Start {
            parent: handle.parent,
            info: SubagentRunInfo {
                run_id,
                provider: spec.provider.clone(),
                id: child,
                local: false,
            },
        });
        let driver = ExternalDriver {
            runtime: self.clone(),
            handle: Arc::clone(handle),
            run,
            run_id,
            provider: spec.provider,
            signal,
        };
        let task = tokio::spawn(driver.run());
        *lock(&handle.task) = Some(task);
        Ok(None)
    }

    /// Disposes one driver: its live descendants first (child-first), then
    /// itself, then records the release. Idempotent.
    pub(crate) async fn dispose_driver(
        &self,
        handle: &Arc<DriverHandle>,
    ) -> Result<(), SubagentError> {
        let mut disposed = handle.disposal.lock().await;
        if *disposed {
            return Ok(());
        }
        let children: Vec<Arc<DriverHandle>> = lock(&self.inner.drivers)
            .values()
            .filter(|other| other.parent == handle.child)
            .cloned()
            .collect();
        let mut failures = Vec::new();
        for child in children {
            if let Err(err) = Box::pin(self.dispose_driver(&child)).await {
                failures.push(err);
            }
        }
        handle.stop_and_join().await;
        // Only this handle's epoch: a later one (a cold resume after this
        // activation ended) is not this handle's to release.
        let live = self
            .inner
            .engine
            .state()
            .activations
            .get(&handle.child)
            .and_then(|a| a.live.as_ref())
            .is_some_and(|live| live.epoch == handle.epoch);
        if live {
            self.inner
                .engine
                .commit(Command::ReleaseActivation {
                    child: handle.child,
                    epoch: handle.epoch,
                    cleanup_error: None,
                })
                .await?;
        }
        let settled = self
            .inner
            .engine
            .state()
            .activations
            .get(&handle.child)
            .and_then(|a| a.last_result.clone())
            .filter(|(epoch, _)| *epoch == handle.epoch);
        if let Some((_, result)) = settled {
            handle.settle(Ok(result));
        }
        self.unregister_driver(handle);
        // The disposed child leaves the registry: a drain's cutoff below it ends.
        self.inner
            .engine
            .commit(Command::ReopenAdmission {
                parent: handle.child,
            })
            .await?;
        *disposed = true;
        aggregate(failures)
    }

    /// Takes `handle` out of the registry (if it is still the one registered
    /// for its child: a cold resume may have registered a newer one) and
    /// returns its capacity.
    pub(crate) fn unregister_driver(&self, handle: &Arc<DriverHandle>) {
        let mut drivers = lock(&self.inner.drivers);
        if drivers
            .get(&handle.child)
            .is_some_and(|registered| Arc::ptr_eq(registered, handle))
        {
            drivers.remove(&handle.child);
        }
        drop(drivers);
        lock(&handle.permits).take();
    }
}
