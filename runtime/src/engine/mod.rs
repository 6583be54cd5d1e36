//! The engine: the one path every transition takes. A command is decided
//! against the projections, its events are enqueued as one atomic append and
//! folded in, and the caller is answered only once the append is durable.
//!
//! Decisions are pipelined ahead of durability, the raft-rs `Ready` shape:
//! under the state lock the engine decides, enqueues the append (the log's
//! writer keeps enqueue order) and applies the events at the positions they
//! will get; then, outside the lock, it awaits durability. Concurrent
//! commands therefore share group commits instead of paying one WAL sync
//! each. This is sound because the engine is the log's only appender (the
//! store's directory lock keeps other processes out), so positions are
//! predictable, and because the store is fail-stop: after a failed write it
//! refuses every later append, so nothing decided on top of a lost event can
//! become durable. On a failure, or a placement that differs from the
//! prediction, the engine stops accepting commands; reopening the runtime
//! rebuilds the projections from the log.
//!
//! A command can also be issued without waiting ([`Engine::issue_here`]):
//! decided, enqueued and folded in now, awaited for durability later
//! ([`Issued::durable`]), for what a driver only records.
//!
//! Public queries read through [`Engine::read_durable`], which answers only
//! once everything the answer reflects is durable.
//!
//! On a shared log (several hosts, [`shared`]) nothing is predicted: a
//! follower folds the log in position order and each command is answered
//! once it has folded past the command's append.
//!
//! Opening loads the newest usable projections checkpoint and folds only the
//! log's tail; a checkpoint is saved once the events since the last one
//! number at least its entries and at least `checkpoint_every`
//! ([`CheckpointCadence`]), by a background task (only once everything it
//! reflects is durable, so no command waits for it), and, awaited, when
//! the runtime is closed.

use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use foldhash::HashMap;

use crate::telemetry::{RecordedIn, TracedSpan};
use subagent_core::record::{encoded_body_len, json_len};
use subagent_core::telemetry::{attr, span};
use subagent_core::{
    Attachment, ContentBlock, Event, MessageId, NewEvent, RecordedEvent, SessionId, StreamId,
    SubagentError, MAX_CONTENT_BYTES, MAX_EVENT_BYTES,
};
use subagent_projections::{
    checkpoint, decide, CheckpointCadence, Command, MapSizes, Projections, MAP_SIZES_NAME,
};
use subagent_store::{EventLog, ExpectedVersion, StoreError, StreamAppend};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn, Instrument};

mod accepted;
#[cfg(test)]
mod checkpoint_tests;
mod shared;

pub(crate) struct Pipeline {
    state: Projections,
    /// The contents of messages accepted live and not yet claimed.
    accepted: accepted::AcceptedContents,
    /// Version of each stream, as the next append will find it (filled from
    /// the log on first use after opening from a checkpoint).
    versions: HashMap<StreamId, u64>,
    /// Events folded in since the last checkpoint, and whether the next
    /// is due.
    cadence: CheckpointCadence,
    /// Set by [`Engine::seal`] when the runtime closes: every later command
    /// is refused with `subagent/closed`, so nothing is recorded after the
    /// closing checkpoint.
    sealed: bool,
}

impl Pipeline {
    /// Folds in `record`, recorded since the engine opened, and keeps what
    /// a later claim will want of it ([`accepted`]). `counted`: the bytes
    /// its record was already counted as, if it was. Only a driver claims
    /// messages, and only a child's: a root's (replies, settlement
    /// notices) are read by its host from the log, so they are not kept.
    fn fold_live(&mut self, record: &RecordedEvent, counted: Option<usize>) {
        self.state.apply(record);
        if let Some(session) = record.stream.session() {
            let sessions = &self.state.sessions;
            self.accepted.note(session, &record.event, counted, || {
                sessions
                    .get(&session)
                    .is_some_and(|kept| kept.parent.is_some())
            });
        }
    }
}

/// How the projections were opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenStats {
    /// The position of the checkpoint resumed from.
    pub checkpoint_position: Option<u64>,
    /// Why a stored checkpoint was discarded.
    pub discarded_checkpoint: Option<String>,
    /// Events folded after the checkpoint (all of them without one).
    pub tail_events: u64,
}

/// Decides, appends, applies.
pub(crate) struct Engine {
    log: Arc<dyn EventLog>,
    pipeline: Arc<Mutex<Pipeline>>,
    /// Set for a host of a shared log: its identity and its follower.
    shared: Option<shared::Shared>,
    failed: AtomicBool,
    /// Why the log failed: kept so every later refusal names the cause.
    failure: OnceLock<SubagentError>,
    /// Cancelled when the log fails: whoever waits for durability (a
    /// durable read, a checkpoint) stops waiting for a head that will never
    /// come.
    broken: CancellationToken,
    /// Held while a checkpoint is written: one at a time, so the newest
    /// snapshot is always written last.
    checkpointing: Arc<tokio::sync::Mutex<()>>,
    /// The position of the newest checkpoint written or opened from (0:
    /// none): what checkpoint age is measured from.
    checkpointed: Arc<AtomicU64>,
}

/// How much wider the stored record can be than the one the engine counts:
/// the engine places records with `recordedAt` 0, and the log stamps the
/// wall clock, at most `u64::MAX` (20 digits rather than 1).
const RECORDED_AT_WIDTH_SLACK: usize = 19;

/// Refuses a decision any of whose records could be larger than
/// [`MAX_EVENT_BYTES`] once stored (counted with the widest timestamp, so
/// the store's own check can never refuse what passed this one); else
/// each record's bytes as counted, in order, for what else wants them.
///
/// # Errors
/// [`SubagentError::EventTooLarge`] naming the first oversized event.
fn refuse_oversized(records: &[RecordedEvent]) -> Result<Vec<usize>, SubagentError> {
    records
        .iter()
        .map(|record| {
            let bytes = encoded_body_len(record).map_err(SubagentError::internal_from)?
                + RECORDED_AT_WIDTH_SLACK;
            if bytes > MAX_EVENT_BYTES {
                return Err(SubagentError::EventTooLarge {
                    event_type: record.event.type_name(),
                    bytes,
                    limit: MAX_EVENT_BYTES,
                });
            }
            Ok(bytes)
        })
        .collect()
}

/// Refuses a start whose prompt is larger than [`MAX_CONTENT_BYTES`],
/// before anything is reserved: the prompt is recorded in a later step, and
/// refusing it there would leave the reservation behind.
///
/// # Errors
/// [`SubagentError::EventTooLarge`] for the prompt's `MessageAccepted`.
pub(crate) fn refuse_oversized_prompt(prompt: &[ContentBlock]) -> Result<(), SubagentError> {
    let bytes = json_len(&prompt).map_err(SubagentError::internal_from)?;
    if bytes > MAX_CONTENT_BYTES {
        return Err(SubagentError::EventTooLarge {
            event_type: "MessageAccepted",
            bytes,
            limit: MAX_CONTENT_BYTES,
        });
    }
    Ok(())
}

/// The refusal of every command after the log failed: names the first
/// failure, which it keeps as its source.
#[derive(Debug, thiserror::Error)]
#[error("the log failed earlier ({0}); the runtime must be reopened to recover (a supervising host reopens it once the store answers)")]
struct LogFailedEarlier(#[source] SubagentError);

/// What a failed append means to its caller: `store/unavailable` for a
/// failure that passes (a database server out of reach, a full disk, a
/// writer stopped by either), else an infrastructure fault.
pub(crate) fn append_failure(err: StoreError) -> SubagentError {
    use subagent_core::ErrorCode;
    match err.code() {
        ErrorCode::StoreUnavailable | ErrorCode::StoreIo | ErrorCode::StoreClosed => {
            SubagentError::unavailable_from(err)
        }
        _ => SubagentError::internal_from(err),
    }
}

impl Engine {
    /// Opens from the newest usable checkpoint plus the log's tail (a
    /// checkpoint that cannot be trusted is discarded and the log refolded),
    /// and saves a new checkpoint once the events committed since the last
    /// one number at least its entries and at least `checkpoint_every` (0:
    /// no periodic checkpoint; [`CheckpointCadence`]).
    pub(crate) fn open(
        log: Arc<dyn EventLog>,
        checkpoint_every: u64,
    ) -> Result<(Engine, OpenStats), SubagentError> {
        let stored = log
            .read_checkpoint(checkpoint::CHECKPOINT_NAME)
            .map_err(SubagentError::internal_from)?;
        let mut stats = OpenStats::default();
        let usable = checkpoint::usable(stored.as_deref(), log.head());
        // The stored bytes are let go before the tail is folded.
        drop(stored);
        let mut state = match usable {
            Ok(Some(stored)) => {
                stats.checkpoint_position = Some(stored.position);
                stored
            }
            Ok(None) => presized_refold(log.as_ref()),
            Err(reason) => {
                warn!(%reason, "discarding the projections checkpoint; refolding the log");
                stats.discarded_checkpoint = Some(reason.to_string());
                presized_refold(log.as_ref())
            }
        };
        let mut versions = HashMap::default();
        subagent_store::read_ahead::scan(log.as_ref(), state.position + 1, |record| {
            versions.insert(record.stream, record.version);
            state.apply(record);
            stats.tail_events += 1;
            Ok::<_, StoreError>(std::ops::ControlFlow::Continue(()))
        })
        .map_err(SubagentError::internal_from)?;
        let cadence = CheckpointCadence::new(checkpoint_every, &state);
        let engine = Engine {
            log,
            pipeline: Arc::new(Mutex::new(Pipeline {
                state,
                versions,
                accepted: accepted::AcceptedContents::default(),
                cadence,
                sealed: false,
            })),
            shared: None,
            failed: AtomicBool::new(false),
            failure: OnceLock::new(),
            broken: CancellationToken::new(),
            checkpointing: Arc::new(tokio::sync::Mutex::new(())),
            checkpointed: Arc::new(AtomicU64::new(stats.checkpoint_position.unwrap_or(0))),
        };
        Ok((engine, stats))
    }

    /// [`open`](Self::open) for `host`, one host of several on a shared
    /// log: a follower folds every record appended after the opening fold,
    /// and commands are decided as `host` ([`shared`]).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub(crate) fn open_shared(
        log: Arc<dyn EventLog>,
        checkpoint_every: u64,
        host: subagent_core::HostId,
    ) -> Result<(Engine, OpenStats), SubagentError> {
        let (mut engine, stats) = Self::open(log, checkpoint_every)?;
        let from = engine.pipeline().state.position + 1;
        engine.shared = Some(shared::Shared::start(
            host,
            &engine.log,
            &engine.pipeline,
            from,
        ));
        Ok((engine, stats))
    }

    /// The host incarnation this engine decides as on a shared log.
    pub(crate) fn host(&self) -> Option<subagent_core::HostId> {
        self.shared.as_ref().map(|shared| shared.host)
    }

    /// Waits until the projections have folded the log through
    /// `position` (at once for a single-writer engine, whose projections
    /// are ahead of the log).
    ///
    /// # Errors
    /// `gateway/internal` when the follower stopped first.
    pub(crate) async fn folded_through(&self, position: u64) -> Result<(), SubagentError> {
        match &self.shared {
            Some(shared) => shared.folded_through(position).await,
            None => Ok(()),
        }
    }

    /// Stops following the shared log (after the closing checkpoint).
    pub(crate) async fn stop_following(&self) {
        if let Some(shared) = &self.shared {
            shared.stop().await;
        }
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Saves a checkpoint of the projections, and the sizes of their maps
    /// beside it ([`MapSizes`]; a failed write of those is only a warning),
    /// once everything it reflects is durable.
    ///
    /// # Errors
    /// `gateway/internal` on storage failure.
    pub(crate) async fn checkpoint(&self) -> Result<(), SubagentError> {
        if self.failed.load(Ordering::Acquire) {
            // The projections hold decisions that never became durable.
            return Err(self.refusal());
        }
        let _writing = self.checkpointing.lock().await;
        save_checkpoint(
            Arc::clone(&self.log),
            self.snapshot_for_checkpoint(),
            self.broken.clone(),
            Arc::clone(&self.checkpointed),
        )
        .await
        .map_err(|err| {
            if self.failed.load(Ordering::Acquire) {
                self.refusal()
            } else {
                err
            }
        })
    }

    /// The periodic checkpoint: written by a background task, so no command
    /// waits for the encoding and the write. Skipped while one is being
    /// written; the next commit tries again.
    fn checkpoint_in_background(&self) {
        let Ok(writing) = Arc::clone(&self.checkpointing).try_lock_owned() else {
            return;
        };
        let snapshot = self.snapshot_for_checkpoint();
        let log = Arc::clone(&self.log);
        let broken = self.broken.clone();
        let checkpointed = Arc::clone(&self.checkpointed);
        tokio::spawn(async move {
            let _writing = writing;
            // A failed checkpoint only costs a longer refold at the next open.
            if let Err(err) = save_checkpoint(log, snapshot, broken, checkpointed).await {
                warn!(error = %err, "saving the projections checkpoint failed");
            }
        });
    }

    fn snapshot_for_checkpoint(&self) -> Projections {
        let mut pipeline = self.pipeline();
        let Pipeline { state, cadence, .. } = &mut *pipeline;
        cadence.restart(state);
        state.clone()
    }

    fn pipeline(&self) -> MutexGuard<'_, Pipeline> {
        lock(&self.pipeline)
    }

    /// The position of the newest checkpoint written or opened from (0:
    /// none).
    pub(crate) fn checkpoint_position(&self) -> u64 {
        self.checkpointed.load(Ordering::Acquire)
    }

    /// The log.
    pub(crate) fn log(&self) -> &Arc<dyn EventLog> {
        &self.log
    }

    /// Reads the projections as decided so far, including transitions still
    /// becoming durable. For the drivers' own bookkeeping; never hold it
    /// across an await.
    pub(crate) fn state(&self) -> StateGuard<'_> {
        StateGuard(self.pipeline())
    }

    /// Answers `query` from the projections once every transition it can
    /// reflect is durable.
    ///
    /// # Errors
    /// `gateway/internal` if the log closed or failed first (naming the
    /// failure: the answer may reflect a transition that never became
    /// durable).
    pub(crate) async fn read_durable<T>(
        &self,
        query: impl FnOnce(&Projections) -> T,
    ) -> Result<T, SubagentError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(self.refusal());
        }
        let (answer, position) = {
            let pipeline = self.pipeline();
            (query(&pipeline.state), pipeline.state.position)
        };
        let mut durable = self.log.watch_head();
        tokio::select! {
            reached = durable.wait_for(|head| *head >= position) => {
                reached.map_err(|_| SubagentError::internal("the log closed"))?;
            }
            () = self.broken.cancelled() => return Err(self.refusal()),
        }
        Ok(answer)
    }

    /// Decides `command`, appends its events atomically, folds them in, and
    /// returns them once they are durable. A rejection appends nothing.
    ///
    /// # Errors
    /// The rejection, or `gateway/internal` when the append fails (after
    /// which the engine refuses further commands).
    pub(crate) async fn commit(
        &self,
        command: Command,
    ) -> Result<Vec<RecordedEvent>, SubagentError> {
        self.commit_with(command, Vec::new()).await
    }

    /// As [`commit`](Self::commit), storing `attachments` in the blob store
    /// in the same atomic write as the events: both become durable, or
    /// neither. A rejection, or a decision that records nothing (a
    /// retry), stores nothing.
    ///
    /// # Errors
    /// As [`commit`](Self::commit).
    pub(crate) async fn commit_with(
        &self,
        command: Command,
        attachments: Vec<Attachment>,
    ) -> Result<Vec<RecordedEvent>, SubagentError> {
        self.commit_opening(command, attachments)
            .await
            .map(|committed| committed.records)
    }

    /// As [`commit_with`](Self::commit_with), also returning the span of
    /// the activation or run the command requested (a start, or a message
    /// that cold-resumes its target), which the events were recorded in
    /// and the new activation's driver runs in. Its parent is decided on
    /// the same projections as the command
    /// ([`requested_activation_span`](crate::telemetry::requested_activation_span)).
    ///
    /// # Errors
    /// As [`commit`](Self::commit).
    pub(crate) async fn commit_opening(
        &self,
        command: Command,
        attachments: Vec<Attachment>,
    ) -> Result<Committed, SubagentError> {
        self.commit_issued(command, attachments, None).await
    }

    /// As [`commit`](Self::commit), issued in `within`, a driver's span:
    /// the events are recorded in its trace context and the command's span
    /// is its child, whatever span the calling task is in.
    ///
    /// # Errors
    /// As [`commit`](Self::commit).
    pub(crate) async fn commit_in(
        &self,
        command: Command,
        within: &TracedSpan,
    ) -> Result<Vec<RecordedEvent>, SubagentError> {
        self.commit_issued(command, Vec::new(), Some(within))
            .await
            .map(|committed| committed.records)
    }

    /// [`commit_opening`](Self::commit_opening) issued in `within`, or in
    /// the caller's current span when `None`.
    async fn commit_issued(
        &self,
        command: Command,
        attachments: Vec<Attachment>,
        within: Option<&TracedSpan>,
    ) -> Result<Committed, SubagentError> {
        self.issue(command, attachments, within).durable().await
    }

    /// Decides `command` and, on a single-writer log, enqueues its append
    /// and folds its events in now, without waiting for durability: the
    /// returned [`Issued`] answers once the append is durable. A command
    /// issued later is decided on this one's events, and its append is
    /// enqueued behind this one's, so it shares this one's group commit and
    /// becomes durable only after it (the store is fail-stop: a later append
    /// never lands after an earlier one failed). A driver issues the
    /// entries it only records (its transcript) this way, and awaits them
    /// before anything it acts on.
    ///
    /// On a shared log nothing is decided before [`Issued::durable`] is
    /// awaited (its commands take their tree's turn there), so issued
    /// commands must be awaited in the order they were issued.
    ///
    /// Issued in the caller's current span, as [`commit`](Self::commit).
    pub(crate) fn issue_here(&self, command: Command) -> Issued<'_> {
        self.issue(command, Vec::new(), None)
    }

    /// [`issue_here`](Self::issue_here) with `attachments`, in `within` or
    /// the caller's current span.
    fn issue(
        &self,
        command: Command,
        attachments: Vec<Attachment>,
        within: Option<&TracedSpan>,
    ) -> Issued<'_> {
        // The span the events are recorded in, before the command's own is
        // entered.
        let caller = match within {
            Some(within) => within.recorded_in,
            None => RecordedIn::span(crate::telemetry::current_trace()),
        };
        let name = command.name();
        // The parent is read only when the span is enabled.
        let span = tracing::debug_span!(
            parent: within.map_or_else(|| tracing::Span::current().id(), |within| within.span.id()),
            span::COMMAND,
            { attr::COMMAND } = name,
            { attr::EVENTS } = tracing::field::Empty,
            { attr::ERROR_TYPE } = tracing::field::Empty,
        );
        let step = match &self.shared {
            Some(shared) => Step::Shared {
                shared,
                command: Box::new(command),
                attachments,
                caller,
            },
            None => span.in_scope(|| self.enqueue(command, attachments, caller)),
        };
        Issued {
            engine: self,
            span,
            step,
        }
    }

    /// The single-writer half of a command that runs under the pipeline
    /// lock: decides it, opens the span of the activation it requests (its
    /// events are recorded in that span, else in `caller`, and keep its
    /// trace context as [`recorded_events`](crate::telemetry::recorded_events)
    /// says), enqueues the append and folds the events in at the positions
    /// they will get.
    fn enqueue(
        &self,
        command: Command,
        attachments: Vec<Attachment>,
        caller: RecordedIn,
    ) -> Step<'static> {
        if self.failed.load(Ordering::Acquire) {
            return Step::Answered(Err(self.refusal()));
        }
        // Declared before the lock's guard, so a refusal after the span was
        // opened drops (ends, exports) it only once the lock is released.
        let opened: Option<TracedSpan>;
        let mut pipeline = self.pipeline();
        if pipeline.sealed {
            return Step::Answered(Err(SubagentError::Closed));
        }
        let decision = match decide(&pipeline.state, command) {
            Ok(decision) => decision,
            Err(refused) => return Step::Answered(Err(refused)),
        };
        if decision.is_empty() {
            return Step::Answered(Ok(Committed::default()));
        }
        opened =
            crate::telemetry::requested_activation_span(&pipeline.state, &decision, caller.trace);
        let within = opened.as_ref().map_or(caller, |opened| opened.recorded_in);
        let mut parts = Vec::with_capacity(decision.len());
        let mut records = Vec::with_capacity(decision.iter().map(|(_, events)| events.len()).sum());
        let mut next_versions = Vec::with_capacity(decision.len());
        let mut position = pipeline.state.position;
        for (stream, events) in decision {
            let events = crate::telemetry::recorded_events(&pipeline.state, stream, events, within);
            // A stream untouched since opening has nothing in flight, so
            // its durable version is the current one. A session's stream
            // that this decision creates has none (`decide` refused an id
            // already used): nothing to read, and the store is told to
            // check just that, which costs it a point lookup, not a seek.
            let creates = creates_stream(stream, &events);
            debug_assert!(
                !creates
                    || stream
                        .session()
                        .is_some_and(|id| !pipeline.state.sessions.contains_key(&id)),
                "a decision creates {stream}, which the projections already know"
            );
            let mut version = match pipeline.versions.entry(stream) {
                Entry::Occupied(entry) => *entry.get(),
                Entry::Vacant(entry) if creates => *entry.insert(0),
                Entry::Vacant(entry) => match self.log.stream_version(&stream) {
                    Ok(version) => *entry.insert(version),
                    Err(err) => return Step::Answered(Err(Self::store_error(err))),
                },
            };
            let expected = if creates && version == 0 {
                ExpectedVersion::NoStream
            } else {
                ExpectedVersion::Any
            };
            for new in &events {
                position += 1;
                version += 1;
                records.push(new.clone().into_record(position, stream, version, 0));
            }
            next_versions.push((stream, version));
            parts.push(StreamAppend {
                stream,
                expected,
                events,
            });
        }
        // Refused here, not by the store: a store refusal would come after
        // the events were folded in and later commands decided on them.
        let counted = match refuse_oversized(&records) {
            Ok(counted) => counted,
            Err(oversized) => return Step::Answered(Err(oversized)),
        };
        pipeline.versions.extend(next_versions);
        let ticket = self.log.append_with_attachments(parts, attachments);
        for (record, bytes) in records.iter().zip(counted) {
            pipeline.fold_live(record, Some(bytes));
        }
        pipeline.cadence.count(records.len() as u64);
        let checkpoint_due = pipeline.cadence.due();
        Step::Enqueued(Enqueued {
            ticket,
            records,
            opened,
            checkpoint_due,
            at: std::time::Instant::now(),
        })
    }

    /// The half of a single-writer command after the lock: waits until its
    /// append is durable and checks it landed where it was predicted.
    async fn await_durable(&self, enqueued: Enqueued) -> Result<Committed, SubagentError> {
        let Enqueued {
            ticket,
            records,
            opened,
            checkpoint_due,
            at,
        } = enqueued;
        let append = tracing::debug_span!(span::APPEND, { attr::EVENTS } = records.len());
        let outcomes = match ticket.instrument(append).await {
            Ok(outcomes) => outcomes,
            Err(err) => return Err(self.fail(append_failure(err))),
        };
        let expected_first = records.first().map(|record| record.position);
        if outcomes.first().map(|outcome| outcome.first_position) != expected_first {
            return Err(self.fail(SubagentError::internal(format!(
                "events landed at {:?}, expected {expected_first:?}",
                outcomes.first()
            ))));
        }
        crate::metrics::appended(at.elapsed());
        debug!(events = records.len(), "committed");
        if checkpoint_due {
            self.checkpoint_in_background();
        }
        Ok(Committed { records, opened })
    }

    /// Stops the engine after the log failed with `fault` (an append, or a
    /// store call that found it out of reach), which every later refusal
    /// names (and keeps as its cause).
    fn fail(&self, fault: SubagentError) -> SubagentError {
        // The first failure is the cause; later ones follow from it.
        let _ = self.failure.set(fault.clone());
        self.failed.store(true, Ordering::Release);
        self.broken.cancel();
        error!(reason = %fault, "the log failed; the engine stops accepting commands");
        fault
    }

    /// What a failed store call other than an append (a read, a lease)
    /// means to its caller: `store/unavailable` for a lost database
    /// connection ([`StoreError::Unavailable`]), else an infrastructure
    /// fault. The engine goes on: one failed read is that call's alone
    /// (a pool briefly out of connections is one too).
    pub(crate) fn store_error(err: StoreError) -> SubagentError {
        match err {
            StoreError::Unavailable { .. } => SubagentError::unavailable_from(err),
            other => SubagentError::internal_from(other),
        }
    }

    /// Stops the engine because the store is out of reach (`err`), as a
    /// failed append does, so a supervising host reopens it once the store
    /// answers; the refusal naming it.
    pub(crate) fn store_lost(&self, err: StoreError) -> SubagentError {
        self.fail(append_failure(err))
    }

    /// The refusal of a command after the log failed, naming the cause:
    /// `store/unavailable` when the cause was, else `gateway/internal`.
    fn refusal(&self) -> SubagentError {
        let cause = self
            .failure
            .get()
            .cloned()
            .unwrap_or_else(|| SubagentError::internal("unknown cause"));
        let passing = matches!(cause, SubagentError::StoreUnavailable(_));
        let earlier = LogFailedEarlier(cause);
        if passing {
            SubagentError::unavailable_from(earlier)
        } else {
            SubagentError::internal_from(earlier)
        }
    }

    /// Completes with the cause once the log has failed under this engine:
    /// an append (the engine then refuses every command), or on a shared
    /// log its follower (commands then never fold). Never completes while
    /// the log serves, nor when the follower is stopped by a close.
    pub(crate) async fn failed_with(&self) -> SubagentError {
        let follower = async {
            match &self.shared {
                Some(shared) => shared.failed_with().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = self.broken.cancelled() => self.refusal(),
            cause = follower => cause,
        }
    }

    /// The contents of `session`'s messages `ids`, in their order, when
    /// this engine recorded their acceptance and still keeps every one
    /// ([`accepted`]): what a claim that names them took. Taken once;
    /// `None` leaves the caller to read them from the log.
    pub(crate) fn take_accepted(
        &self,
        session: SessionId,
        ids: &[MessageId],
    ) -> Option<Vec<Vec<ContentBlock>>> {
        self.pipeline().accepted.take(session, ids)
    }

    /// Refuses every later command with `subagent/closed`: nothing can be
    /// recorded after this, so a checkpoint written next is final.
    pub(crate) fn seal(&self) {
        self.pipeline().sealed = true;
    }
}

/// Whether `events`, a decision's part for `stream`, create it: the
/// session's own stream opening with its `SessionCreated`.
fn creates_stream(stream: StreamId, events: &[NewEvent]) -> bool {
    matches!(
        events.first().map(|new| &new.event),
        Some(Event::SessionCreated { session, .. }) if stream == StreamId::Session(*session)
    )
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a durable command recorded.
#[derive(Default)]
pub(crate) struct Committed {
    /// Its events, in log order; empty when it recorded nothing (a retry).
    pub(crate) records: Vec<RecordedEvent>,
    /// The span of the activation or run it requested, if any, with the
    /// trace context its events were recorded in.
    pub(crate) opened: Option<TracedSpan>,
}

/// A command issued to the engine ([`Engine::issue_here`]): decided and
/// enqueued on a single-writer log, to be decided when awaited on a shared
/// one. Dropping it unawaited does not undo it: its events are folded in
/// and the store still writes them, but nothing checks where they landed,
/// a failed append does not stop the engine until the next command awaited
/// meets the store's refusal, and its metrics, span and due checkpoint are
/// skipped. Await it.
#[must_use = "an issued command is durable, or failed, only once awaited"]
pub(crate) struct Issued<'a> {
    engine: &'a Engine,
    /// The command's span (`subagents.command`).
    span: tracing::Span,
    step: Step<'a>,
}

/// Where an issued command stands.
enum Step<'a> {
    /// Answered without an append: refused, or nothing to record.
    Answered(Result<Committed, SubagentError>),
    /// Decided and enqueued; durable once its ticket resolves.
    Enqueued(Enqueued),
    /// A shared log's command, decided when awaited (boxed: a command is
    /// several times the size of the other steps).
    Shared {
        shared: &'a shared::Shared,
        command: Box<Command>,
        attachments: Vec<Attachment>,
        caller: RecordedIn,
    },
}

/// A decided command's append, in flight.
struct Enqueued {
    ticket: subagent_store::TransactionTicket,
    records: Vec<RecordedEvent>,
    opened: Option<TracedSpan>,
    checkpoint_due: bool,
    /// When the append was enqueued (the append-latency metric).
    at: std::time::Instant,
}

impl Issued<'_> {
    /// The command's refusal, when it was refused as it was decided (on a
    /// single-writer log); else the command, still to be awaited.
    ///
    /// # Errors
    /// The refusal.
    pub(crate) fn refused_now(self) -> Result<Self, SubagentError> {
        match self.step {
            Step::Answered(Err(refused)) => {
                note_answer(&self.span, Err(&refused));
                Err(refused)
            }
            step => Ok(Issued { step, ..self }),
        }
    }

    /// The command, to be awaited alongside other work (a turn's entries in
    /// flight): its append is committed without holding the awaiting task
    /// for an fsync ([`subagent_store::TransactionTicket::in_background`]).
    pub(crate) fn in_background(self) -> Self {
        match self.step {
            Step::Enqueued(enqueued) => Issued {
                step: Step::Enqueued(Enqueued {
                    ticket: enqueued.ticket.in_background(),
                    ..enqueued
                }),
                ..self
            },
            step => Issued { step, ..self },
        }
    }

    /// What the command recorded, when it was decided as it was issued (on
    /// a single-writer log); `None` for a refusal, and for a shared log's
    /// command until it is awaited.
    pub(crate) fn decided(&self) -> Option<&[RecordedEvent]> {
        match &self.step {
            Step::Answered(Ok(committed)) => Some(&committed.records),
            Step::Enqueued(enqueued) => Some(&enqueued.records),
            Step::Answered(Err(_)) | Step::Shared { .. } => None,
        }
    }

    /// Whether the command is decided only when awaited (a shared log's):
    /// commands issued one after another are then recorded in the order
    /// they are awaited, not issued.
    pub(crate) fn decided_when_awaited(&self) -> bool {
        matches!(self.step, Step::Shared { .. })
    }

    /// Waits until the command's events are durable, and returns them (or
    /// its refusal).
    ///
    /// # Errors
    /// As [`Engine::commit`].
    pub(crate) async fn durable(self) -> Result<Committed, SubagentError> {
        let Issued { engine, span, step } = self;
        let outcome = match step {
            Step::Answered(answer) => answer,
            Step::Enqueued(enqueued) => {
                engine
                    .await_durable(enqueued)
                    .instrument(span.clone())
                    .await
            }
            Step::Shared {
                shared,
                command,
                attachments,
                caller,
            } => {
                engine
                    .commit_shared(shared, *command, attachments, caller)
                    .instrument(span.clone())
                    .await
            }
        };
        note_answer(&span, outcome.as_ref());
        outcome
    }
}

/// Records a command's answer on its span and in the metrics.
fn note_answer(span: &tracing::Span, outcome: Result<&Committed, &SubagentError>) {
    match outcome {
        Ok(committed) => {
            span.record(attr::EVENTS, committed.records.len());
            crate::metrics::recorded(&committed.records);
        }
        Err(err) => {
            let code = err.code();
            span.record(attr::ERROR_TYPE, code.as_str());
            crate::metrics::refused(code);
        }
    }
}

/// A short-lived read of the projections.
pub(crate) struct StateGuard<'a>(MutexGuard<'a, Pipeline>);

impl std::ops::Deref for StateGuard<'_> {
    type Target = Projections;

    fn deref(&self) -> &Projections {
        &self.0.state
    }
}

/// The empty state a refold of the whole log starts from: its maps sized
/// as the sizes saved beside the last checkpoint suggest
/// ([`Projections::presized`]), so the fold does not grow them; without
/// them, an empty state.
fn presized_refold(log: &dyn EventLog) -> Projections {
    Projections::presized(
        MapSizes::from_stored(log.read_checkpoint(MAP_SIZES_NAME)),
        log.head(),
    )
}

/// Writes `snapshot` as the projections checkpoint once everything it
/// reflects is durable; the encoding and the write run off the async workers.
/// Gives up when `broken` fires first: the snapshot holds decisions that
/// will never be durable, so it must never be written.
async fn save_checkpoint(
    log: Arc<dyn EventLog>,
    snapshot: Projections,
    broken: CancellationToken,
    checkpointed: Arc<AtomicU64>,
) -> Result<(), SubagentError> {
    let mut durable = log.watch_head();
    tokio::select! {
        reached = durable.wait_for(|head| *head >= snapshot.position) => {
            reached.map_err(|_| SubagentError::internal("the log closed"))?;
        }
        () = broken.cancelled() => {
            return Err(SubagentError::internal("the log failed before the checkpoint's events became durable"));
        }
    }
    let position = snapshot.position;
    let sizes = MapSizes::of(&snapshot);
    let sizes_written = tokio::task::spawn_blocking(move || {
        log.write_checkpoint(checkpoint::CHECKPOINT_NAME, &checkpoint::encode(&snapshot))
            .map_err(SubagentError::internal_from)?;
        Ok::<_, SubagentError>(log.write_checkpoint(MAP_SIZES_NAME, &sizes.encode()))
    })
    .await
    .map_err(SubagentError::internal_from)??;
    checkpointed.fetch_max(position, Ordering::AcqRel);
    // The sizes are a hint for the next refold: without them it grows its
    // maps, so a failed write of them is no failed checkpoint.
    if let Err(err) = sizes_written {
        warn!(error = %err, "saving the projections' map sizes failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use subagent_core::SessionMode;
    use subagent_projections::testing::HistoryBuilder;

    #[test]
    fn only_a_childs_accepted_messages_are_kept_for_its_claims() {
        let mut history = HistoryBuilder::new();
        let root = history.root("root");
        let child = history.child(root, 1, "worker", SessionMode::OneShot, false);
        let to_child = history.message(child, root);
        let to_root = history.message(root, child);
        let mut pipeline = Pipeline {
            state: Projections::new(),
            accepted: accepted::AcceptedContents::default(),
            versions: Default::default(),
            cadence: CheckpointCadence::new(0, &Projections::new()),
            sealed: false,
        };
        for record in &history.records {
            pipeline.fold_live(record, None);
        }
        assert_eq!(
            pipeline.accepted.take(root, &[to_root]),
            None,
            "no driver claims a root's messages"
        );
        let kept = pipeline.accepted.take(child, &[to_child]);
        assert_eq!(kept.map(|contents| contents.len()), Some(1));
    }

    /// An open with no usable checkpoint refolds the log into maps sized
    /// from the sizes saved beside the last one; without them, or with
    /// bytes that are none, the maps grow from empty.
    #[test]
    fn an_open_that_refolds_sizes_its_maps_from_the_saved_sizes() {
        let mut history = HistoryBuilder::new();
        let root = history.root("root");
        history.children_with_one_activation(root, 3);
        let log = Arc::new(subagent_store::MemoryLog::new());
        for record in &history.records {
            log.append(
                record.stream,
                ExpectedVersion::Any,
                vec![subagent_core::NewEvent::new(record.event.clone())],
            )
            .wait()
            .unwrap();
        }
        let head = log.head();
        let events = usize::try_from(head).unwrap();
        let capacity_after_open = |log: &Arc<subagent_store::MemoryLog>| {
            let (engine, stats) = Engine::open(log.clone(), 0).unwrap();
            assert_eq!(stats.checkpoint_position, None);
            assert_eq!(stats.tail_events, head);
            let state = &engine.pipeline().state;
            assert_eq!(state.sessions.len(), 4);
            (state.sessions.capacity(), state.activations.capacity())
        };
        let (sessions, activations) = capacity_after_open(&log);
        assert!(
            sessions < events && activations < events,
            "{sessions} {activations}"
        );

        let one_an_event = MapSizes::every_map(head, head);
        log.write_checkpoint(MAP_SIZES_NAME, &one_an_event.encode())
            .unwrap();
        let (sessions, activations) = capacity_after_open(&log);
        assert!(
            sessions >= events && activations >= events,
            "{sessions} {activations}"
        );
        // So does an open that discards its checkpoint.
        log.write_checkpoint(checkpoint::CHECKPOINT_NAME, b"not a checkpoint")
            .unwrap();
        let (engine, stats) = Engine::open(log.clone(), 0).unwrap();
        assert!(stats.discarded_checkpoint.is_some());
        assert!(engine.pipeline().state.sessions.capacity() >= events);

        log.write_checkpoint(MAP_SIZES_NAME, b"").unwrap();
        log.write_checkpoint(checkpoint::CHECKPOINT_NAME, b"")
            .unwrap();
        let (engine, _) = Engine::open(log.clone(), 0).unwrap();
        assert!(engine.pipeline().state.sessions.capacity() < events);
    }
}
