//! A host of a shared log (PostgreSQL, several hosts on one history):
//! opening one, the leases of the trees it holds, taking a tree over, and
//! the keeper task that renews its leases and takes over the trees of
//! hosts that died.
//!
//! Each root's tree is held by one host incarnation at a time. Holding it
//! takes two facts: the store's lease (its fencing token checked by every
//! append for the tree) and the log's `TreeAcquired` (naming the host and
//! the token, so the projections and `verify` know whose registry the
//! tree's starts resolve in). A new root records both in its first append;
//! a takeover records the claim and the recovery of the tree's live work
//! in one append, after folding everything the previous holder committed.
//!
//! A host whose lease on a tree was taken (it paused past its term) learns
//! it at its next renewal or append: the store refuses the append, and the
//! keeper stops the tree's drivers and forgets the root.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use subagent_core::{HostId, SessionId, SubagentError};
use subagent_projections::{Command, TreeClaim};
use subagent_store::lease::check_lease_request;
use subagent_store::{EventLog, Lease, StoreError};
use tracing::{debug, info, warn};

use super::{lock, SubagentRuntime};

/// How a host runs on a shared log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedHost {
    /// The name its leases are held under: stable across restarts, so a
    /// restarted host takes its own trees back at once (fencing out its
    /// earlier incarnation). Unique per host.
    pub holder: String,
    /// How long a lease lasts without renewal: how soon after a host dies
    /// another takes its trees over. Renewed every third of it.
    pub lease_term: Duration,
}

impl SharedHost {
    /// A host named `holder` with leases of `lease_term`.
    #[must_use]
    pub fn new(holder: impl Into<String>, lease_term: Duration) -> Self {
        SharedHost {
            holder: holder.into(),
            lease_term,
        }
    }
}

/// What a runtime on a shared log keeps beside its engine.
pub(crate) struct SharedState {
    pub(crate) options: SharedHost,
    /// The lease of every tree this host holds, by root.
    pub(crate) leases: std::sync::Mutex<HashMap<SessionId, Lease>>,
    /// The roots of the trees this host gave up because another host took
    /// them (its renewal or an append was fenced).
    pub(crate) lost: std::sync::Mutex<std::collections::HashSet<SessionId>>,
    /// Renewal rounds in a row that found the store out of reach.
    pub(crate) renewals_failed: std::sync::atomic::AtomicU32,
}

/// Runs blocking lease work off the async workers.
async fn blocking<T: Send + 'static>(
    log: &Arc<dyn EventLog>,
    work: impl FnOnce(&dyn subagent_store::TreeLeases) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let log = Arc::clone(log);
    tokio::task::spawn_blocking(move || match log.tree_leases() {
        Some(leases) => work(leases),
        None => Err(StoreError::InvalidLease {
            reason: "the log is not shared",
        }),
    })
    .await
    .unwrap_or_else(|err| Err(StoreError::Io(format!("a lease task failed: {err}"))))
}

/// Refuses a host that cannot run on `log`.
///
/// # Errors
/// `gateway/bad-request` for a log without leases (a single-writer
/// backend), a bad holder name or term.
pub(crate) fn check_shared(log: &dyn EventLog, options: &SharedHost) -> Result<(), SubagentError> {
    if log.tree_leases().is_none() {
        return Err(SubagentError::BadRequest(
            "a shared host needs a log several hosts share (PostgreSQL); this one has a single writer"
                .into(),
        ));
    }
    check_lease_request(&options.holder, options.lease_term)
        .map_err(|err| SubagentError::BadRequest(err.to_string()))
}

impl SubagentRuntime {
    /// The shared part, for a host of a shared log.
    pub(crate) fn shared(&self) -> Option<&SharedState> {
        self.inner.shared.as_ref()
    }

    /// The host incarnation this runtime decides as, on a shared log.
    #[must_use]
    pub fn host_id(&self) -> Option<HostId> {
        self.inner.engine.host()
    }

    /// The roots of the trees this host holds, in id order (empty for a
    /// single-writer runtime, which holds every tree of its log).
    #[must_use]
    pub fn held_trees(&self) -> Vec<SessionId> {
        let mut roots: Vec<SessionId> = self
            .shared()
            .map(|shared| lock(&shared.leases).keys().copied().collect())
            .unwrap_or_default();
        roots.sort_unstable();
        roots
    }

    /// Why `root`'s tree is not this host's to act in, when another host
    /// holds it: the holder the log names, or `None` when this host gave
    /// the tree up to a taker the log does not name yet. `None` also for
    /// a tree no other host holds (or a single-writer runtime).
    pub(crate) fn tree_elsewhere(
        &self,
        root: SessionId,
        logged_holder: Option<&str>,
    ) -> Option<SubagentError> {
        let shared = self.shared()?;
        if lock(&shared.leases).contains_key(&root) {
            return None;
        }
        match logged_holder {
            Some(holder) if holder != shared.options.holder => Some(SubagentError::TreeElsewhere {
                root,
                holder: Some(holder.to_owned()),
            }),
            _ if lock(&shared.lost).contains(&root) => {
                Some(SubagentError::TreeElsewhere { root, holder: None })
            }
            _ => None,
        }
    }

    /// Takes the lease of a new root's tree and returns the claim its
    /// `OpenRoot` records (`None` for a single-writer runtime).
    pub(crate) async fn claim_new_root(
        &self,
        root: SessionId,
    ) -> Result<Option<TreeClaim>, SubagentError> {
        let Some(shared) = self.shared() else {
            return Ok(None);
        };
        let lease = self.acquire(shared, root).await?;
        let claim = self.claim_of(&lease)?;
        lock(&shared.leases).insert(root, lease);
        Ok(Some(claim))
    }

    /// Takes `root`'s tree for this host, unless it holds it already:
    /// takes its lease, folds everything the previous holder committed,
    /// then records the claim and settles the tree's live work.
    ///
    /// # Errors
    /// `subagent/tree-elsewhere` while another host's lease has not
    /// lapsed; `gateway/internal` on storage failure.
    pub(crate) async fn take_tree(&self, root: SessionId) -> Result<(), SubagentError> {
        let Some(shared) = self.shared() else {
            return Ok(());
        };
        if lock(&shared.leases).contains_key(&root) {
            return Ok(());
        }
        let lease = self.acquire(shared, root).await?;
        let head = blocking(self.log(), |leases| leases.committed_head())
            .await
            .map_err(crate::engine::Engine::store_error)?;
        self.inner.engine.folded_through(head).await?;
        let claim = self.claim_of(&lease)?;
        let recorded = self
            .inner
            .engine
            .commit(Command::TakeTree { root, claim })
            .await?;
        info!(%root, events = recorded.len(), "took the tree over");
        lock(&shared.leases).insert(root, lease);
        Ok(())
    }

    async fn acquire(&self, shared: &SharedState, root: SessionId) -> Result<Lease, SubagentError> {
        let holder = shared.options.holder.clone();
        let term = shared.options.lease_term;
        blocking(self.log(), move |leases| {
            leases.acquire_lease(root, &holder, term)
        })
        .await
        .map_err(|err| match err {
            StoreError::LeaseHeld { root, holder, .. } => SubagentError::TreeElsewhere {
                root,
                holder: Some(holder),
            },
            other => crate::engine::Engine::store_error(other),
        })
    }

    fn claim_of(&self, lease: &Lease) -> Result<TreeClaim, SubagentError> {
        let host = self
            .host_id()
            .ok_or_else(|| SubagentError::internal("a claim by a single-writer runtime"))?;
        Ok(TreeClaim {
            host,
            holder: lease.holder.clone(),
            fence: lease.token,
        })
    }

    /// Takes over every tree with live work that this host does not hold
    /// and whose lease it can take (lapsed, never taken, or this holder's
    /// own from an earlier incarnation): one listing of the leases, then a
    /// take of each such tree. Returns how many it took.
    pub(crate) async fn take_over_lapsed(&self) -> usize {
        let Some(shared) = self.shared() else {
            return 0;
        };
        let leases = match blocking(self.log(), |leases| leases.list_leases()).await {
            Ok(leases) => leases,
            Err(err) => {
                warn!(error = %err, "listing the leases failed");
                return 0;
            }
        };
        let holder = &shared.options.holder;
        let live_elsewhere: std::collections::HashSet<SessionId> = leases
            .into_iter()
            .filter(|lease| !lease.remaining.is_zero() && lease.holder != *holder)
            .map(|lease| lease.root)
            .collect();
        let candidates: Vec<SessionId> = {
            let state = self.inner.engine.state();
            let held = lock(&shared.leases);
            let mut roots: Vec<SessionId> = state
                .live_activations()
                .into_iter()
                .map(|(session, _)| session)
                .chain(
                    state
                        .runs
                        .iter()
                        .filter(|(_, run)| run.is_live())
                        .map(|(session, _)| *session),
                )
                .filter_map(|session| state.root_of(session))
                .filter(|root| !held.contains_key(root) && !live_elsewhere.contains(root))
                .collect();
            roots.sort_unstable();
            roots.dedup();
            roots
        };
        let mut taken = 0;
        for root in candidates {
            match self.take_tree(root).await {
                Ok(()) => taken += 1,
                Err(SubagentError::TreeElsewhere { .. }) => {}
                Err(err) => warn!(%root, error = %err, "taking a tree over failed"),
            }
        }
        taken
    }

    /// Renews every lease this host holds; a tree whose lease another host
    /// took is given up.
    async fn renew_leases(&self) {
        let Some(shared) = self.shared() else {
            return;
        };
        let held: Vec<Lease> = lock(&shared.leases).values().cloned().collect();
        let mut unreachable: Option<StoreError> = None;
        for lease in held {
            let root = lease.root;
            match blocking(self.log(), move |leases| leases.renew_lease(&lease)).await {
                Ok(_) => {}
                Err(StoreError::Fenced { .. }) => self.give_up(root).await,
                Err(err) => {
                    warn!(%root, error = %err, "renewing a lease failed");
                    if matches!(err, StoreError::Unavailable { .. }) {
                        unreachable = Some(err);
                    }
                }
            }
        }
        // Two rounds in a row with the store out of reach: the leases
        // lapse before the next, so the store counts as lost and the engine
        // stops (a supervising host reopens it and takes its trees back).
        // One round may be a pool briefly out of connections.
        match unreachable {
            None => shared.renewals_failed.store(0, Ordering::Release),
            Some(err) => {
                if shared.renewals_failed.fetch_add(1, Ordering::AcqRel) + 1 >= 2 {
                    let _ = self.inner.engine.store_lost(err);
                }
            }
        }
    }

    /// Forgets a tree another host took: its drivers stop (their appends
    /// would be refused) and its root is no longer held.
    async fn give_up(&self, root: SessionId) {
        warn!(%root, "another host took the tree over; giving it up");
        if let Some(shared) = self.shared() {
            lock(&shared.leases).remove(&root);
            lock(&shared.lost).insert(root);
        }
        lock(&self.inner.roots).remove(&root);
        let stopped: Vec<_> = {
            let state = self.inner.engine.state();
            let mut drivers = lock(&self.inner.drivers);
            let in_tree: Vec<SessionId> = drivers
                .keys()
                .copied()
                .filter(|session| state.root_of(*session) == Some(root))
                .collect();
            in_tree
                .into_iter()
                .filter_map(|session| drivers.remove(&session))
                .collect()
        };
        for driver in stopped {
            driver.stop_and_join().await;
        }
    }

    /// Lets every lease this host holds lapse now, so another host can take
    /// its trees at once (after the closing checkpoint).
    pub(crate) async fn release_leases(&self) -> Vec<SubagentError> {
        let Some(shared) = self.shared() else {
            return Vec::new();
        };
        let held: Vec<Lease> = lock(&shared.leases)
            .drain()
            .map(|(_, lease)| lease)
            .collect();
        let mut failures = Vec::new();
        for lease in held {
            if let Err(err) = blocking(self.log(), move |leases| leases.release_lease(&lease)).await
            {
                failures.push(SubagentError::internal_from(err));
            }
        }
        failures
    }

    /// The keeper: every third of the lease term, renews this host's
    /// leases and takes over the trees of hosts whose leases lapsed. Ends
    /// when the runtime closes.
    pub(crate) fn spawn_keeper(&self) {
        let Some(shared) = self.shared() else {
            return;
        };
        let every = (shared.options.lease_term / 3).max(Duration::from_millis(1));
        let runtime = self.clone();
        let shutdown = self.inner.shutdown.clone();
        let closing = self.inner.gate.subscribe();
        self.inner.tasks.spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                runtime.renew_leases().await;
                if closing.borrow().closed {
                    continue;
                }
                let taken = runtime.take_over_lapsed().await;
                if taken > 0 {
                    debug!(taken, "took trees over from lapsed hosts");
                }
            }
        });
    }
}
