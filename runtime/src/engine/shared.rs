//! The engine's shared mode: one host of several on a shared log
//! (PostgreSQL). Other hosts append between this host's commands, so no
//! position can be predicted and nothing is folded ahead of durability.
//! Instead:
//! - a **follower** (a catch-up subscription of the whole log) folds every
//!   record, this host's and the others', into the projections in position
//!   order, so every host's listings see every tree;
//! - a command is decided on the folded state (`decide_as`, which refuses a
//!   tree this host does not hold), appended with the **fence** of every
//!   tree it touches, and answered once its records are folded: applied at
//!   once when they directly follow what is folded (the common case: no
//!   other host appended in between), else by the follower in order;
//! - **one command per tree at a time**, each decided on everything its
//!   predecessor in the tree recorded; commands of different trees run
//!   concurrently, and the host-level ones (registrations) alone. A
//!   decision about a tree reads only that tree's sessions, this host's
//!   registry and stream, and fresh ids, and other hosts cannot write to
//!   this host's trees (the store checks the fences), so a decision rests
//!   on its tree's whole history.
//!
//! A fenced append (this host lost the tree to a takeover) is refused with
//! `subagent/tree-elsewhere` and changes nothing; any other append failure
//! stops the engine, as in the single-writer mode.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use subagent_core::telemetry::{attr, span};
use subagent_core::{
    Attachment, HostId, NewEvent, RecordedEvent, SessionId, StreamId, SubagentError,
};
use subagent_projections::{decide_as, tree_fences, Command};
use subagent_store::{
    EventLog, ExpectedVersion, Fence, StoreError, StreamAppend, SubscriptionItem,
};
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::{debug, Instrument};

use super::{refuse_oversized, Committed, Engine, Pipeline};
use crate::telemetry::{RecordedIn, TracedSpan};

/// A host's part of a shared log: who it is, and the follower that folds
/// the log for it.
pub(crate) struct Shared {
    /// This host incarnation: the owner its trees' `TreeAcquired` name.
    pub(crate) host: HostId,
    /// Held shared by a tree's command, exclusively by a host-level one.
    host_level: tokio::sync::RwLock<()>,
    /// One command per tree at a time: the lock of each tree with a
    /// command in flight, by root (removed when the last holder leaves).
    trees: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// The last position folded, by the follower or by a command applying
    /// its own records.
    folded: Arc<watch::Sender<u64>>,
    /// Why the follower stopped, when it failed.
    failure: Arc<OnceLock<SubagentError>>,
    /// Cancelled once the follower has stopped, for whatever reason.
    stopped: CancellationToken,
    /// Stops the follower.
    stop: CancellationToken,
    follower: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Shared {
    /// Starts following `log` from `from` into `pipeline`.
    pub(super) fn start(
        host: HostId,
        log: &Arc<dyn EventLog>,
        pipeline: &Arc<Mutex<Pipeline>>,
        from: u64,
    ) -> Shared {
        let folded = Arc::new(watch::channel(from.saturating_sub(1)).0);
        let failure = Arc::new(OnceLock::new());
        let stop = CancellationToken::new();
        let stopped = CancellationToken::new();
        let follower = tokio::spawn(follow(
            log.subscribe(from),
            Arc::clone(pipeline),
            Arc::clone(&folded),
            Arc::clone(&failure),
            stop.clone(),
            stopped.clone(),
        ));
        Shared {
            host,
            host_level: tokio::sync::RwLock::new(()),
            trees: Mutex::new(HashMap::new()),
            folded,
            failure,
            stopped,
            stop,
            follower: Mutex::new(Some(follower)),
        }
    }

    /// Stops the follower and waits for it.
    pub(super) async fn stop(&self) {
        self.stop.cancel();
        let follower = super::lock(&self.follower).take();
        if let Some(follower) = follower {
            let _ = follower.await;
        }
    }

    /// Waits until the follower has folded `position`.
    ///
    /// # Errors
    /// `gateway/internal` when the follower stopped first, naming why.
    pub(super) async fn folded_through(&self, position: u64) -> Result<(), SubagentError> {
        let mut folded = self.folded.subscribe();
        tokio::select! {
            _ = folded.wait_for(|folded| *folded >= position) => return Ok(()),
            () = self.stopped.cancelled() => {}
        }
        // The follower may have folded it just before it stopped.
        if *self.folded.borrow() >= position {
            return Ok(());
        }
        Err(self.failure.get().cloned().unwrap_or_else(|| {
            SubagentError::internal("the log's follower stopped (the log closed)")
        }))
    }

    /// Completes with why the follower failed, once it has; never when it
    /// was stopped ([`stop`](Self::stop)) or the log ended.
    pub(super) async fn failed_with(&self) -> SubagentError {
        self.stopped.cancelled().await;
        match self.failure.get() {
            Some(cause) => cause.clone(),
            None => std::future::pending().await,
        }
    }

    /// The lock of `root`'s tree, created on first use.
    fn tree_lock(&self, root: SessionId) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(super::lock(&self.trees).entry(root).or_default())
    }

    /// Forgets `root`'s lock once no command holds or waits for it.
    fn release_tree(&self, root: SessionId, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut trees = super::lock(&self.trees);
        drop(lock);
        if trees
            .get(&root)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            trees.remove(&root);
        }
    }
}

/// What a command holds while it is decided, appended and folded.
enum Turn<'a> {
    /// A tree's command: the host-level lock shared, and the tree's own
    /// (taken out only when the turn ends).
    Tree {
        _shared: tokio::sync::RwLockReadGuard<'a, ()>,
        guard: Option<tokio::sync::OwnedMutexGuard<()>>,
        root: SessionId,
        shared: &'a Shared,
    },
    /// A host-level command: the host-level lock alone.
    Host(#[allow(dead_code)] tokio::sync::RwLockWriteGuard<'a, ()>),
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Turn::Tree {
            guard,
            root,
            shared,
            ..
        } = self
        {
            if let Some(guard) = guard.take() {
                let lock = Arc::clone(tokio::sync::OwnedMutexGuard::mutex(&guard));
                drop(guard);
                shared.release_tree(*root, lock);
            }
        }
    }
}

/// Folds every record of `records` into `pipeline` (skipping those a
/// command already applied), publishing each position folded, until `stop`
/// fires or the log ends; then cancels `stopped`.
async fn follow(
    mut records: subagent_store::Subscription,
    pipeline: Arc<Mutex<Pipeline>>,
    folded: Arc<watch::Sender<u64>>,
    failure: Arc<OnceLock<SubagentError>>,
    stop: CancellationToken,
    stopped: CancellationToken,
) {
    let _stopped = stopped.drop_guard();
    loop {
        let item = tokio::select! {
            () = stop.cancelled() => return,
            item = records.next() => item,
        };
        match item {
            Some(Ok(SubscriptionItem::Event(record))) => {
                let mut pipeline = super::lock(&pipeline);
                if record.position > pipeline.state.position {
                    pipeline.fold_live(&record, None);
                    pipeline.cadence.count(1);
                    folded.send_replace(pipeline.state.position);
                }
            }
            Some(Ok(SubscriptionItem::CaughtUp { .. })) => {}
            Some(Err(err)) => {
                let _ = failure.set(super::append_failure(err));
                return;
            }
            None => return,
        }
    }
}

/// Applies `records` (one append's, contiguous) at once when they directly
/// follow what `pipeline` folded; the follower skips them when it reads
/// them. Otherwise (another host appended in between) leaves them to the
/// follower. Whether it applied them.
fn apply_own(
    pipeline: &Mutex<Pipeline>,
    folded: &watch::Sender<u64>,
    records: &[RecordedEvent],
) -> bool {
    let Some(first) = records.first() else {
        return true;
    };
    let mut pipeline = super::lock(pipeline);
    if pipeline.state.position.checked_add(1) != Some(first.position) {
        return false;
    }
    for record in records {
        pipeline.fold_live(record, None);
    }
    pipeline.cadence.count(records.len() as u64);
    folded.send_replace(pipeline.state.position);
    true
}

impl Engine {
    /// Waits for `command`'s turn: its tree's lock (and the host-level lock
    /// shared), or the host-level lock alone for a host-level command.
    async fn turn<'a>(&self, shared: &'a Shared, command: &Command) -> Turn<'a> {
        let Some(subject) = command.subject() else {
            return Turn::Host(shared.host_level.write().await);
        };
        // A session's tree never changes; an unknown one (a new root, or a
        // command the state machine will refuse) is its own.
        let root = self.pipeline().state.root_of(subject).unwrap_or(subject);
        let host_level = shared.host_level.read().await;
        let guard = shared.tree_lock(root).lock_owned().await;
        Turn::Tree {
            _shared: host_level,
            guard: Some(guard),
            root,
            shared,
        }
    }

    /// [`Issued::durable`](super::Issued::durable) for a host of a shared log
    /// (see the module docs).
    pub(super) async fn commit_shared(
        &self,
        shared: &Shared,
        command: Command,
        attachments: Vec<Attachment>,
        caller: RecordedIn,
    ) -> Result<Committed, SubagentError> {
        let _turn = self.turn(shared, &command).await;
        if self.failed() {
            return Err(self.refusal());
        }
        let opened: Option<TracedSpan>;
        let (ticket, layout) = {
            let pipeline = self.pipeline();
            if pipeline.sealed {
                return Err(SubagentError::Closed);
            }
            let decision = decide_as(&pipeline.state, Some(shared.host), command)?;
            if decision.is_empty() {
                return Ok(Committed::default());
            }
            opened = crate::telemetry::requested_activation_span(
                &pipeline.state,
                &decision,
                caller.trace,
            );
            let within = opened.as_ref().map_or(caller, |opened| opened.recorded_in);
            let fences: Vec<Fence> = tree_fences(&pipeline.state, &decision)
                .into_iter()
                .map(|(root, token)| Fence { root, token })
                .collect();
            let layout: Vec<(StreamId, Vec<NewEvent>)> = decision
                .into_iter()
                .map(|(stream, events)| {
                    let events =
                        crate::telemetry::recorded_events(&pipeline.state, stream, events, within);
                    (stream, events)
                })
                .collect();
            // Counted at the widest numbering: the positions are not known
            // until the append lands.
            let widest: Vec<RecordedEvent> = layout
                .iter()
                .flat_map(|(stream, events)| {
                    events
                        .iter()
                        .map(|new| new.clone().into_record(u64::MAX, *stream, u64::MAX, 0))
                })
                .collect();
            refuse_oversized(&widest)?;
            let parts = layout
                .iter()
                .map(|(stream, events)| StreamAppend {
                    stream: *stream,
                    expected: ExpectedVersion::Any,
                    events: events.clone(),
                })
                .collect();
            (self.log.append_fenced(parts, attachments, fences), layout)
        };
        let enqueued = std::time::Instant::now();
        let events = layout.iter().map(|(_, events)| events.len()).sum::<usize>();
        let append = tracing::debug_span!(span::APPEND, { attr::EVENTS } = events);
        let outcomes = match ticket.instrument(append).await {
            Ok(outcomes) => outcomes,
            // This host lost the tree; nothing was written.
            Err(StoreError::Fenced { root, .. }) => {
                return Err(SubagentError::TreeElsewhere { root, holder: None })
            }
            Err(err) => return Err(self.fail(super::append_failure(err))),
        };
        if outcomes.len() != layout.len() {
            return Err(self.fail(SubagentError::internal(format!(
                "an append of {} parts answered {} outcomes",
                layout.len(),
                outcomes.len()
            ))));
        }
        let mut records = Vec::with_capacity(events);
        for ((stream, events), outcome) in layout.into_iter().zip(&outcomes) {
            let first_version = (outcome.stream_version + 1).saturating_sub(events.len() as u64);
            for (offset, new) in (0u64..).zip(events) {
                records.push(new.into_record(
                    outcome.first_position + offset,
                    stream,
                    first_version + offset,
                    0,
                ));
            }
        }
        let last = records.last().map_or(0, |record| record.position);
        if !apply_own(&self.pipeline, &shared.folded, &records) {
            tokio::select! {
                folded = shared.folded_through(last) => {
                    if let Err(err) = folded {
                        return Err(self.fail(err));
                    }
                }
                () = self.broken.cancelled() => return Err(self.refusal()),
            }
        }
        crate::metrics::appended(enqueued.elapsed());
        debug!(events = records.len(), "committed to the shared log");
        if self.pipeline().cadence.due() {
            self.checkpoint_in_background();
        }
        Ok(Committed { records, opened })
    }
}
