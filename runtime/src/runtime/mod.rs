//! [`SubagentRuntime`]: the `ctx.subagents` facade. It owns the engine, the
//! live provider registry, live agent handles and the driver tasks, and it
//! announces `subagent/start` and `subagent/end`.
//!
//! Layout, one file per concern (each adds an `impl SubagentRuntime` block):
//! - this file: the runtime's state ([`Inner`]), opening, closing and the
//!   admission gate;
//! - `roots`: live agent handles; opening, re-opening and closing roots;
//! - `registry`: the live provider registry;
//! - `notices`: `subagent/start` and `subagent/end` notices;
//! - `start`: starting a child, local or external;
//! - `messaging`: sends, wakes, cold resumes, interrupts and the inbox;
//! - `attachments`: a prompt's images into the blob store, and back out;
//! - `teardown`: drains, waits, disposal;
//! - `queries`: the catalog and descendant listings, the roots, the tree view;
//! - `shared_host`: a host of a shared log: its leases, takeovers, keeper.

mod attachments;
mod messaging;
mod notices;
mod queries;
mod registry;
mod roots;
mod shared_host;
mod start;
mod teardown;

pub(crate) use attachments::inline_attachments;
pub use messaging::{InboxMessage, InterruptAuthority};
pub use notices::Notice;
pub use queries::{RootEntry, RuntimeGauges};
pub use registry::ProviderRegistration;
pub use roots::LiveAgent;
pub use shared_host::SharedHost;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use subagent_core::{SessionId, SubagentError};
use subagent_projections::Command;
use subagent_store::EventLog;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::activation::DriverHandle;
use crate::agent::AgentHost;
use crate::capacity::{Capacity, CapacityLimits};
use crate::engine::Engine;
use crate::provider::SubagentProvider;
use crate::settings::Deployment;

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
pub(crate) struct Materializing<'a>(&'a tokio::sync::watch::Sender<Gate>);

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

pub(crate) fn aggregate(failures: Vec<SubagentError>) -> Result<(), SubagentError> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(SubagentError::Aggregate(subagent_core::Causes(failures)))
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
    /// Every task the runtime spawns that holds it or its log (drivers,
    /// inbox readers, notice forwarders): `close` waits for all of them, so
    /// once it returns nothing of the runtime keeps the log open and the
    /// directory can be opened again at once.
    pub(crate) tasks: TaskTracker,
    pub(crate) host: Arc<dyn AgentHost>,
    pub(crate) providers: Mutex<Vec<Arc<dyn SubagentProvider>>>,
    /// The roots this runtime holds open (`open_root`, `reopen_root`). Not a
    /// durable fact: a hold lasts as long as this runtime (ARCHITECTURE.md).
    pub(crate) roots: Mutex<HashSet<SessionId>>,
    pub(crate) drivers: Mutex<HashMap<SessionId, Arc<DriverHandle>>>,
    pub(crate) notices: broadcast::Sender<Notice>,
    /// For a host of a shared log: its options and the leases it holds.
    pub(crate) shared: Option<shared_host::SharedState>,
}

/// The fewest committed events between two periodic projections
/// checkpoints; a larger state waits for as many events as it has entries
/// ([`subagent_projections::CheckpointCadence`]).
pub(crate) const CHECKPOINT_EVERY: u64 = 10_000;

/// The runtime. Cheap to clone.
///
/// # Example
///
/// A root delegates one task to a spawned child on the deterministic
/// scripted agent, takes its result and disposes of it (`examples/embed.rs`
/// does the same with an agent of the host's own, on RocksDB):
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use subagent_core::{content::plain_text, Delivery, SubagentActivationSpec, SubagentStopReason};
/// use subagent_runtime::{providers::SpawnProvider, Script, ScriptedHost, SubagentRuntime};
/// use subagent_store::MemoryLog;
/// use tokio_util::sync::CancellationToken;
///
/// let host = Arc::new(ScriptedHost::new(Script::reply("the answer")));
/// let (runtime, _recovery) = SubagentRuntime::open(Arc::new(MemoryLog::new()), host).await?;
/// runtime.register_provider(Arc::new(SpawnProvider)).await?;
/// let root = runtime.open_root("host").await?;
/// let task = SubagentActivationSpec::with_text_prompt("spawn", "helper", "the question", Delivery::Caller);
/// let child = runtime.start_activation(&root, task, CancellationToken::new()).await?;
/// let result = child.result().await?;
/// assert_eq!(result.stop_reason, SubagentStopReason::Completed);
/// assert_eq!(plain_text(&result.output), "the answer");
/// child.dispose().await?;
/// assert_eq!(runtime.list_children(root.session()).await?.len(), 1);
/// runtime.close().await?;
/// # Ok(()) }
/// ```
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
    /// `gateway/internal` when the log cannot be read or appended;
    /// `gateway/bad-request`, before the log is touched, when the host
    /// offers a tool named like one of the runtime's delegation tools
    /// (which would hide it).
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
        crate::delegation::refuse_shadowed(&host.tools())?;
        let (engine, opened) = Engine::open(log, CHECKPOINT_EVERY)?;
        let recovered = engine.commit(Command::Recover).await?;
        let runtime = Self::assemble(engine, host, limits, None);
        Ok((
            runtime,
            RecoveryReport {
                events: recovered.len(),
                opened,
            },
        ))
    }

    /// Opens the runtime as one host of several on a shared log
    /// (PostgreSQL): a new host incarnation, following every host's
    /// appends, holding the trees it opens or takes through their leases
    /// (ARCHITECTURE.md, "Several hosts on one log"). Instead of a
    /// restart's recovery of the whole log, it takes over the trees with
    /// live work whose leases lapsed (or are its holder's own, from an
    /// earlier incarnation), and then keeps doing so every third of the
    /// lease term, while renewing its own.
    ///
    /// # Errors
    /// `gateway/bad-request` for a single-writer log, a bad holder name or
    /// term, or a host tool named like a delegation tool (as
    /// [`open`](Self::open)); `gateway/internal` when the log cannot be
    /// read or appended.
    pub async fn open_shared(
        log: Arc<dyn EventLog>,
        host: Arc<dyn AgentHost>,
        limits: CapacityLimits,
        options: SharedHost,
    ) -> Result<(SubagentRuntime, RecoveryReport), SubagentError> {
        crate::delegation::refuse_shadowed(&host.tools())?;
        shared_host::check_shared(log.as_ref(), &options)?;
        let before = log.head();
        let (engine, opened) =
            Engine::open_shared(log, CHECKPOINT_EVERY, subagent_core::HostId::new())?;
        let shared = shared_host::SharedState {
            options,
            leases: Mutex::new(HashMap::new()),
            lost: Mutex::new(std::collections::HashSet::new()),
            renewals_failed: std::sync::atomic::AtomicU32::new(0),
        };
        let runtime = Self::assemble(engine, host, limits, Some(shared));
        let taken = runtime.take_over_lapsed().await;
        runtime.spawn_keeper();
        let events = usize::try_from(runtime.log().head().saturating_sub(before)).unwrap_or(0);
        tracing::info!(taken, "opened as a host of a shared log");
        Ok((runtime, RecoveryReport { events, opened }))
    }

    fn assemble(
        engine: Engine,
        host: Arc<dyn AgentHost>,
        limits: CapacityLimits,
        shared: Option<shared_host::SharedState>,
    ) -> SubagentRuntime {
        SubagentRuntime {
            inner: Arc::new(Inner {
                engine,
                capacity: Capacity::new(limits),
                deployment: Deployment::new(host.tools()),
                gate: tokio::sync::watch::channel(Gate::default()).0,
                closing: tokio::sync::Mutex::new(()),
                shutdown: CancellationToken::new(),
                tasks: TaskTracker::new(),
                host,
                providers: Mutex::new(Vec::new()),
                roots: Mutex::new(HashSet::new()),
                drivers: Mutex::new(HashMap::new()),
                notices: broadcast::channel(1024).0,
                shared,
            }),
        }
    }

    /// Clean shutdown. From the moment it is called every public operation
    /// of the runtime and of its handles is refused with `subagent/closed`
    /// (see `ensure_open` for the few accessors that
    /// stay). Starts and cold resumes already admitted land first; then every
    /// live activation is released child-first, every held root is closed
    /// (ending a drain's cutoff below it), the provider registrations end,
    /// the engine is sealed so nothing more can be recorded, and a
    /// projections checkpoint is saved, so the next open has nothing to
    /// recover and no tail to fold. Inbox readers and scoped notice streams
    /// end, and `close` returns only once every task the runtime spawned
    /// has finished: a log handle the host then drops is the last one, so
    /// the directory can be opened again at once.
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
        // Another host may take this host's trees at once.
        failures.extend(self.release_leases().await);
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        self.inner.engine.stop_following().await;
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

    /// Completes with the cause once the log has failed under this
    /// runtime: an append failed (every later command is refused, with
    /// `store/unavailable` when the failure passes, such as a database
    /// server out of reach or a full disk), or on a shared log the
    /// follower of the other hosts' appends stopped. The runtime recovers
    /// only by being reopened: a supervising host closes it and opens a
    /// new one once the store answers (as `subagent_gateway::serve_supervised`
    /// does). Never completes while the log serves.
    pub async fn failed(&self) -> SubagentError {
        self.inner.engine.failed_with().await
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
}
