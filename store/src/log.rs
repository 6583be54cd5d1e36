//! The [`EventLog`] trait every backend implements, and the value types of
//! its API: [`ExpectedVersion`], [`AppendOutcome`], [`AppendTicket`],
//! [`Durability`], and paged iteration ([`EventLogExt`]).
//!
//! Numbering: global positions and per-stream versions both start at 1 and
//! have no gaps. `head()` is the last position (0 for an empty log); a
//! stream's version is its event count (0 for a stream with no events).

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};
use subagent_core::{Attachment, AttachmentId, EventId, NewEvent, RecordedEvent, StreamId};
use tokio::sync::oneshot;

use crate::append_check::IdLocation;
use crate::error::StoreError;
use crate::indexes::{IndexEntries, LogIndex};
use crate::lease::Fence;
use crate::subscription::Subscription;

/// The optimistic-concurrency precondition of an append.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExpectedVersion {
    /// No precondition.
    Any,
    /// The stream must have no events.
    NoStream,
    /// The stream's version (event count) must be exactly this.
    Exact(u64),
}

impl ExpectedVersion {
    /// Whether a stream at `actual` satisfies this precondition.
    #[must_use]
    pub fn admits(self, actual: u64) -> bool {
        match self {
            ExpectedVersion::Any => true,
            ExpectedVersion::NoStream => actual == 0,
            ExpectedVersion::Exact(expected) => expected == actual,
        }
    }
}

impl fmt::Display for ExpectedVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpectedVersion::Any => f.write_str("any"),
            ExpectedVersion::NoStream => f.write_str("no stream"),
            ExpectedVersion::Exact(version) => write!(f, "version {version}"),
        }
    }
}

/// Where an append landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Position of the first event.
    pub first_position: u64,
    /// Position of the last event (events of one append are contiguous).
    pub last_position: u64,
    /// The stream's version after the last event.
    pub stream_version: u64,
    /// True when every event id was already in the stream: nothing was
    /// written and the original positions are returned.
    pub deduplicated: bool,
}

/// When an append is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Durability {
    /// After the write-ahead log is fsynced (one fsync per group commit).
    #[default]
    Sync,
    /// After the write reaches the OS; a machine crash may lose the tail,
    /// a process crash does not.
    Buffered,
    /// Nothing survives the process (the in-memory backend).
    Volatile,
}

/// One stream's part of an atomic append.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamAppend {
    /// The stream.
    pub stream: StreamId,
    /// Its precondition.
    pub expected: ExpectedVersion,
    /// Its events, in order.
    pub events: Vec<NewEvent>,
}

type TransactionResult = Result<Vec<AppendOutcome>, StoreError>;

/// The committer of a backend whose appends are committed by whoever
/// awaits them (a group-commit leader), not by a thread of its own.
///
/// Contract: every request a backend queues behind a [`Lead`] is committed
/// once any of its own or later tickets is awaited, waited on or dropped,
/// or, for a ticket left alone, by the backend's own backstop; a commit
/// answers every ticket it covers through its channel.
pub(crate) trait Lead: Send + Sync {
    /// Commits what is queued if no one else is committing, in the
    /// caller's thread. Returns whether it committed anything; `false`
    /// means someone else holds the commit, or has taken every queued
    /// request, or that this caller may not commit here and the queue was
    /// handed to the backend's own committer: either way they are answered.
    fn try_lead(&self) -> bool;

    /// As [`try_lead`](Self::try_lead), but waits for a commit in progress
    /// first. For a thread that may block.
    fn lead_blocking(&self) -> bool;

    /// Makes sure what is queued gets committed without this caller (a
    /// ticket dropped before its answer).
    fn hand_off(&self);

    /// For a ticket polled alongside other work ([`TransactionTicket::in_background`]):
    /// when this committer's lead would hold the polling task for an
    /// fsync, hands what is queued to its own committer now and returns
    /// `true`; else `false`, and the ticket leads as usual.
    fn hand_off_if_leading_blocks(&self) -> bool;

    /// Whether other appenders are likely to be ready at the same time
    /// (one of the last few group commits took more than one request). A
    /// leader then yields once before leading, so they join its group.
    fn has_company(&self) -> bool;
}

/// The pending result of one atomic append: one outcome per part, in order.
/// Await it, or [`wait`](Self::wait) from a thread outside the async runtime.
///
/// The append is enqueued when `append_atomic` returns, so appends issued one
/// after another by one caller land in that order even before their tickets
/// are awaited. A backend that wrote the append before returning hands back
/// a ticket that is already complete (no channel, no allocation). A backend
/// that commits in the awaiting task (RocksDB: in `Buffered` mode, and in
/// `Sync` mode for a lone appender, inside `block_in_place`) does so on the
/// ticket's first poll (or its second, when `Buffered` appenders come
/// together: the first yields once, so those ready at the same time join
/// one group), after the caller released whatever it held while appending,
/// so the caller's next decisions and this write overlap.
#[derive(Debug)]
pub struct TransactionTicket(TicketState);

enum TicketState {
    /// Answered when the writer sends.
    Pending(oneshot::Receiver<TransactionResult>),
    /// Answered when the writer sends; committed by the awaiting task when
    /// no one else is committing.
    Led {
        answer: oneshot::Receiver<TransactionResult>,
        lead: Weak<dyn Lead>,
        /// Whether a poll yielded to the async runtime once already (see
        /// the [`Future`] impl).
        yielded: bool,
    },
    /// Answered already; `None` once taken by a poll.
    Ready(Option<TransactionResult>),
}

impl fmt::Debug for TicketState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TicketState::Pending(_) => f.write_str("Pending"),
            TicketState::Led { .. } => f.write_str("Led"),
            TicketState::Ready(result) => f.debug_tuple("Ready").field(result).finish(),
        }
    }
}

impl TransactionTicket {
    /// A ticket and the sender that completes it.
    #[must_use]
    pub fn channel() -> (oneshot::Sender<TransactionResult>, TransactionTicket) {
        let (sender, receiver) = oneshot::channel();
        (sender, TransactionTicket(TicketState::Pending(receiver)))
    }

    /// A ticket whose request `lead` commits when the ticket is awaited,
    /// and the sender that completes it. A ticket holds its committer
    /// weakly: once the log is gone, its close has committed or refused
    /// the request, and the ticket only reads the answer.
    pub(crate) fn led(
        lead: Weak<dyn Lead>,
    ) -> (oneshot::Sender<TransactionResult>, TransactionTicket) {
        let (sender, answer) = oneshot::channel();
        (
            sender,
            TransactionTicket(TicketState::Led {
                answer,
                lead,
                yielded: false,
            }),
        )
    }

    /// A ticket that is already complete.
    #[must_use]
    pub fn ready(result: TransactionResult) -> TransactionTicket {
        TransactionTicket(TicketState::Ready(Some(result)))
    }

    /// This ticket, for a caller that will poll it alongside other work
    /// (in a `select!`, or a set of appends in flight) rather than wait on
    /// it alone: a backend whose commit on the ticket's poll would hold
    /// the task for an fsync (RocksDB in `Sync` mode, where a lone
    /// appender commits in place) hands the append to its own committer
    /// now, so the task's other work goes on meanwhile. A commit that
    /// needs no fsync (`Buffered`) is still led by the poll.
    #[must_use]
    pub fn in_background(mut self) -> TransactionTicket {
        let hands_off = match &self.0 {
            TicketState::Led { lead, .. } => lead
                .upgrade()
                .is_some_and(|lead| lead.hand_off_if_leading_blocks()),
            _ => false,
        };
        if hands_off {
            if let TicketState::Led { answer, .. } =
                std::mem::replace(&mut self.0, TicketState::Ready(None))
            {
                self.0 = TicketState::Pending(answer);
            }
        }
        self
    }

    /// Blocks the current thread until the append is durable or refused.
    /// Must not be called from inside an async task (a ready ticket never
    /// blocks).
    ///
    /// # Errors
    /// The append's error, or [`StoreError::Closed`] if the log stopped first.
    pub fn wait(mut self) -> TransactionResult {
        let state = std::mem::replace(&mut self.0, TicketState::Ready(None));
        match state {
            TicketState::Pending(receiver) => {
                receiver.blocking_recv().unwrap_or(Err(StoreError::Closed))
            }
            TicketState::Led {
                mut answer, lead, ..
            } => loop {
                if let Some(result) = answered(&mut answer) {
                    return result;
                }
                if !lead.upgrade().is_some_and(|lead| lead.lead_blocking()) {
                    // Another committer took it and answers it.
                    return answer.blocking_recv().unwrap_or(Err(StoreError::Closed));
                }
            },
            TicketState::Ready(result) => result.unwrap_or(Err(StoreError::Closed)),
        }
    }
}

/// The answer on `answer` if one came (the log's `Closed` if its sender
/// went without one), without waiting and without spending the task's
/// cooperative budget; `None` while it is still to come.
fn answered(answer: &mut oneshot::Receiver<TransactionResult>) -> Option<TransactionResult> {
    match answer.try_recv() {
        Ok(result) => Some(result),
        Err(oneshot::error::TryRecvError::Closed) => Some(Err(StoreError::Closed)),
        Err(oneshot::error::TryRecvError::Empty) => None,
    }
}

impl Future for TransactionTicket {
    type Output = TransactionResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answered = match &mut self.0 {
            TicketState::Pending(receiver) => {
                return Pin::new(receiver)
                    .poll(cx)
                    .map(|received| received.unwrap_or(Err(StoreError::Closed)));
            }
            // Leads at most once per poll: a task whose cooperative budget
            // is spent sees its receiver pending even once answered, and
            // must not go on committing others' appends meanwhile.
            TicketState::Led {
                answer,
                lead,
                yielded,
            } => {
                // While appenders come together (a recent group held more
                // than one), the first poll yields once, as
                // `tokio::task::yield_now` does (woken at once, polled again
                // after the tasks already scheduled): the others ready to
                // append queue theirs first, and the group this ticket leads
                // takes them too (64 appenders of one event: 1.2× the
                // appends, BENCHMARKS.md "Appenders that come together"). A
                // lone appender's groups hold one request, so it leads at
                // once: yielding always cost it a third of its appends.
                if !*yielded {
                    *yielded = true;
                    if lead.upgrade().is_some_and(|lead| lead.has_company()) {
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                }
                let mut led = false;
                loop {
                    if let Poll::Ready(received) = Pin::new(&mut *answer).poll(cx) {
                        break received.unwrap_or(Err(StoreError::Closed));
                    }
                    if let Some(result) = answered(answer) {
                        break result;
                    }
                    if led || !lead.upgrade().is_some_and(|lead| lead.try_lead()) {
                        // The receiver's poll arranged the wake-up.
                        return Poll::Pending;
                    }
                    led = true;
                }
            }
            TicketState::Ready(result) => {
                return Poll::Ready(result.take().unwrap_or(Err(StoreError::Closed)));
            }
        };
        self.0 = TicketState::Ready(None);
        Poll::Ready(answered)
    }
}

impl Drop for TransactionTicket {
    fn drop(&mut self) {
        // A ticket given up before its answer must not leave its request
        // waiting for a leader that will never come.
        if let TicketState::Led { answer, lead, .. } = &mut self.0 {
            if answered(answer).is_none() {
                if let Some(lead) = lead.upgrade() {
                    lead.hand_off();
                }
            }
        }
    }
}

/// The pending result of a single-stream append (a one-part
/// [`TransactionTicket`]).
#[derive(Debug)]
pub struct AppendTicket(TransactionTicket);

fn single(result: TransactionResult) -> Result<AppendOutcome, StoreError> {
    result?.into_iter().next().ok_or(StoreError::Closed)
}

impl AppendTicket {
    /// Blocks the current thread until the append is durable or refused.
    /// Must not be called from inside an async task.
    ///
    /// # Errors
    /// The append's error, or [`StoreError::Closed`] if the log stopped first.
    pub fn wait(self) -> Result<AppendOutcome, StoreError> {
        single(self.0.wait())
    }
}

/// The ticket of a one-part transaction (its first outcome is the answer).
impl From<TransactionTicket> for AppendTicket {
    fn from(ticket: TransactionTicket) -> Self {
        AppendTicket(ticket)
    }
}

impl Future for AppendTicket {
    type Output = Result<AppendOutcome, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(single)
    }
}

/// A stored checkpoint's bytes, as the backend hands them over: borrowed
/// from the backend where it can (RocksDB pins the value it read, so a
/// checkpoint of tens of megabytes is not copied once more into a fresh
/// allocation before it is decoded), owned otherwise. Dereferences to the
/// bytes; valid while the log handle it was read from is.
pub struct CheckpointBytes<'a>(Box<dyn std::ops::Deref<Target = [u8]> + Send + Sync + 'a>);

impl<'a> CheckpointBytes<'a> {
    /// Bytes held by `holder`, which dereferences to them.
    pub fn held(
        holder: impl std::ops::Deref<Target = [u8]> + Send + Sync + 'a,
    ) -> CheckpointBytes<'a> {
        CheckpointBytes(Box::new(holder))
    }
}

impl From<Vec<u8>> for CheckpointBytes<'_> {
    fn from(bytes: Vec<u8>) -> Self {
        CheckpointBytes::held(bytes)
    }
}

impl std::ops::Deref for CheckpointBytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for CheckpointBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CheckpointBytes({} bytes)", self.len())
    }
}

/// An append-only, durable, totally ordered log of typed events, split into
/// streams. Implementations are cheap to clone handles over shared state.
///
/// # Example
///
/// Appends return a ticket: await it, or `wait()` outside an async runtime.
///
/// ```
/// use subagent_core::{Event, NewEvent, SessionId, StreamId};
/// use subagent_store::{EventLog, EventLogExt, ExpectedVersion, MemoryLog, StoreError};
///
/// let log = MemoryLog::new();
/// let stream = StreamId::Session(SessionId::new());
/// let events = vec![NewEvent::new(Event::TurnStarted { turn: 1, epoch: 1 })];
/// let outcome = log.append(stream, ExpectedVersion::NoStream, events.clone()).wait()?;
/// assert_eq!((outcome.first_position, outcome.stream_version), (1, 1));
///
/// // The same event ids again: idempotent, the original positions, nothing written.
/// let retry = log.append(stream, ExpectedVersion::NoStream, events).wait()?;
/// assert!(retry.deduplicated && retry.first_position == 1);
///
/// // A failed precondition writes nothing.
/// let late = vec![NewEvent::new(Event::TurnStarted { turn: 2, epoch: 1 })];
/// let refused = log.append(stream, ExpectedVersion::NoStream, late).wait();
/// assert!(matches!(refused, Err(StoreError::Conflict { actual: 1, .. })));
/// assert_eq!(log.head(), 1);
///
/// let read: Vec<_> = log.read_stream(stream, 1).collect::<Result<_, _>>()?;
/// assert_eq!(read.len(), 1);
/// # Ok::<(), StoreError>(())
/// ```
pub trait EventLog: Send + Sync + 'static {
    /// Appends to several streams atomically: every part is written, or none.
    /// Positions of the whole append are contiguous, in part order. Each part
    /// is checked like a single append; if every part's event ids are already
    /// in its stream, the original outcomes are returned.
    ///
    /// # Errors (through the ticket)
    /// As [`append`](Self::append), for the first part that fails, plus
    /// [`StoreError::RepeatedStream`] when two parts name one stream. Nothing
    /// of a failed append is written.
    fn append_atomic(&self, parts: Vec<StreamAppend>) -> TransactionTicket {
        self.append_with_attachments(parts, Vec::new())
    }

    /// As [`append_atomic`](Self::append_atomic), storing `attachments` in
    /// the blob store in the same atomic write: the events and the bytes
    /// they refer to become durable together, and a refused append stores
    /// neither. An attachment already stored is stored again unchanged (the
    /// key is its content's hash). A deduplicated retry writes nothing.
    fn append_with_attachments(
        &self,
        parts: Vec<StreamAppend>,
        attachments: Vec<Attachment>,
    ) -> TransactionTicket;

    /// As [`append_with_attachments`](Self::append_with_attachments), by a
    /// writer that holds the leases of the trees it appends to
    /// ([`crate::lease`]). A backend several hosts share checks every fence
    /// against its tree's lease inside the append's transaction and
    /// refuses the append, writing nothing, when a token is stale.
    ///
    /// The default appends it as a plain append: a single-writer backend
    /// (RocksDB's directory lock, an in-memory log) has no other holder to
    /// fence out.
    ///
    /// # Errors (through the ticket)
    /// As [`append_atomic`](Self::append_atomic), plus
    /// [`StoreError::Fenced`] from a shared backend.
    fn append_fenced(
        &self,
        parts: Vec<StreamAppend>,
        attachments: Vec<Attachment>,
        fences: Vec<Fence>,
    ) -> TransactionTicket {
        drop(fences);
        self.append_with_attachments(parts, attachments)
    }

    /// The tree leases of a backend several hosts share (PostgreSQL), which
    /// a host of a shared log runs on; `None` (the default) for a
    /// single-writer backend.
    fn tree_leases(&self) -> Option<&dyn crate::TreeLeases> {
        None
    }

    /// The bytes stored under `id`, checked against it; `None` when the blob
    /// store has no such attachment.
    ///
    /// # Errors
    /// [`StoreError::Damaged`] when the stored bytes no longer hash to `id`,
    /// or IO failure.
    fn attachment(&self, id: &AttachmentId) -> Result<Option<Vec<u8>>, StoreError>;

    /// The id of every stored attachment, in digest order (for export and
    /// verification).
    ///
    /// # Errors
    /// [`StoreError::Damaged`] for a key that is not a digest, or IO failure.
    fn attachment_ids(&self) -> Result<Vec<AttachmentId>, StoreError>;

    /// Appends `events` to `stream` atomically, if `expected` holds.
    ///
    /// The ticket resolves once the events are durable under the log's
    /// [`Durability`]; nothing is acknowledged earlier. Re-appending event ids
    /// that are all already in `stream` is idempotent and resolves to the
    /// original positions, whatever `expected` says.
    ///
    /// # Errors (through the ticket)
    /// [`StoreError::EmptyAppend`], [`StoreError::MisplacedEvent`],
    /// [`StoreError::DuplicateEventId`], [`StoreError::Conflict`]; each leaves
    /// the log untouched. [`StoreError::Io`] or [`StoreError::Closed`] on
    /// storage failure, in which case nothing of this append is durable.
    fn append(
        &self,
        stream: StreamId,
        expected: ExpectedVersion,
        events: Vec<NewEvent>,
    ) -> AppendTicket {
        AppendTicket(self.append_atomic(vec![StreamAppend {
            stream,
            expected,
            events,
        }]))
    }

    /// Up to `limit` events with positions `>= from_position`, in order.
    /// A page ends before the first record that cannot be read, so every good
    /// record before a bad one is still delivered; the next page, which starts
    /// at the bad record, is the error.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the record at `from_position` is bad, or IO failure.
    fn read_all_page(
        &self,
        from_position: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError>;

    /// Up to `limit` events of `stream` with versions `>= from_version`, in
    /// order, ending before a bad record as [`read_all_page`](Self::read_all_page) does.
    ///
    /// # Errors
    /// As [`read_all_page`](Self::read_all_page).
    fn read_stream_page(
        &self,
        stream: &StreamId,
        from_version: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError>;

    /// The current version (event count) of `stream`.
    ///
    /// # Errors
    /// IO failure.
    fn stream_version(&self, stream: &StreamId) -> Result<u64, StoreError>;

    /// The position of the last durable event; 0 when empty.
    fn head(&self) -> u64;

    /// Watches the durable head: the value changes only after events up to
    /// it are durable and readable.
    fn watch_head(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Catch-up-then-live subscription from `from_position` (see
    /// [`Subscription`]).
    fn subscribe(&self, from_position: u64) -> Subscription;

    /// Catch-up-then-live subscription to `stream` alone, from
    /// `from_version` (see [`crate::subscription::follow_stream`]): it
    /// reads and decodes only that stream's events.
    fn subscribe_stream(&self, stream: StreamId, from_version: u64) -> Subscription;

    /// Whether `stream` can have a durable record at a position after
    /// `position`, as far as this handle knows without reading: `false`
    /// only when it knows none was written, so a stream subscription can
    /// skip reading the stream index after a head change that brought only
    /// other streams' events. The default, for a log that keeps no such
    /// account, answers `true`.
    fn may_have_written_after(&self, stream: &StreamId, position: u64) -> bool {
        let _ = (stream, position);
        true
    }

    /// The log's durability setting.
    fn durability(&self) -> Durability;

    /// The stored projection checkpoint called `name`, if any, read in
    /// place where the backend can ([`CheckpointBytes`]). Checkpoints are
    /// derived data: losing or refusing one only costs a refold.
    ///
    /// # Errors
    /// IO failure.
    fn read_checkpoint(&self, name: &str) -> Result<Option<CheckpointBytes<'_>>, StoreError>;

    /// Replaces the checkpoint called `name`, durably under the log's setting.
    ///
    /// # Errors
    /// IO failure.
    fn write_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError>;

    /// Every stored entry of `index`, in the backend's key order, for
    /// verification against the records (see [`crate::indexes`]).
    fn index_entries(&self, index: LogIndex) -> IndexEntries<'_>;

    /// Where the event-id index says `event_id` is, if it has an entry.
    ///
    /// # Errors
    /// [`StoreError::CorruptIndex`] for an entry that does not decode, or IO failure.
    fn locate_event(&self, event_id: &EventId) -> Result<Option<IdLocation>, StoreError>;

    /// The position the stream index gives for `version` of `stream`, if it
    /// has an entry.
    ///
    /// # Errors
    /// [`StoreError::CorruptIndex`] for an entry that does not decode, or IO failure.
    fn indexed_position(&self, stream: &StreamId, version: u64) -> Result<Option<u64>, StoreError>;
}

/// `bytes` when they still hash to `id`, the blob store's read check.
///
/// # Errors
/// [`StoreError::Damaged`] naming `path` when they do not.
pub fn check_attachment(
    id: &AttachmentId,
    bytes: Vec<u8>,
    path: &str,
) -> Result<Vec<u8>, StoreError> {
    if AttachmentId::of(&bytes) == *id {
        Ok(bytes)
    } else {
        Err(StoreError::Damaged {
            path: path.to_string(),
            reason: format!("the stored attachment {id} no longer hashes to its id"),
        })
    }
}

/// Page size of [`EventLogExt`] iterators.
pub const READ_PAGE: usize = 1024;

/// Collects decoded records up to the first failure: the good prefix if there
/// is one, else the failure. The shared page rule of every backend.
pub fn good_prefix<I>(records: I) -> Result<Vec<RecordedEvent>, StoreError>
where
    I: IntoIterator<Item = Result<RecordedEvent, StoreError>>,
{
    let mut page = Vec::new();
    for record in records {
        match record {
            Ok(record) => page.push(record),
            Err(err) if page.is_empty() => return Err(err),
            Err(_) => break,
        }
    }
    Ok(page)
}

/// Iteration helpers over any [`EventLog`].
pub trait EventLogExt: EventLog {
    /// Every event from `from_position` on, paged.
    fn read_all(&self, from_position: u64) -> RecordIter<'_, Self> {
        RecordIter::new(self, Cursor::All(from_position.max(1)))
    }

    /// Every event of `stream` from `from_version` on, paged.
    fn read_stream(&self, stream: StreamId, from_version: u64) -> RecordIter<'_, Self> {
        RecordIter::new(self, Cursor::Stream(stream, from_version.max(1)))
    }
}

impl<L: EventLog + ?Sized> EventLogExt for L {}

enum Cursor {
    All(u64),
    Stream(StreamId, u64),
}

/// A paged iterator over a log. Yields `Err` once and then ends on a read
/// failure (for example a corrupt record).
pub struct RecordIter<'a, L: ?Sized> {
    log: &'a L,
    cursor: Cursor,
    buffer: VecDeque<RecordedEvent>,
    finished: bool,
}

impl<'a, L: EventLog + ?Sized> RecordIter<'a, L> {
    fn new(log: &'a L, cursor: Cursor) -> Self {
        RecordIter {
            log,
            cursor,
            buffer: VecDeque::new(),
            finished: false,
        }
    }

    fn refill(&mut self) -> Result<(), StoreError> {
        let page = match &self.cursor {
            Cursor::All(from) => self.log.read_all_page(*from, READ_PAGE)?,
            Cursor::Stream(stream, from) => self.log.read_stream_page(stream, *from, READ_PAGE)?,
        };
        if page.is_empty() {
            self.finished = true;
        }
        if let Some(last) = page.last() {
            let next = match &mut self.cursor {
                Cursor::All(from) => (from, last.position.checked_add(1)),
                Cursor::Stream(_, from) => (from, last.version.checked_add(1)),
            };
            match next {
                (from, Some(after)) => *from = after,
                // Nothing follows u64::MAX (only a damaged log gets there).
                (_, None) => self.finished = true,
            }
        }
        self.buffer.extend(page);
        Ok(())
    }
}

impl<L: EventLog + ?Sized> Iterator for RecordIter<'_, L> {
    type Item = Result<RecordedEvent, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buffer.is_empty() && !self.finished {
            if let Err(err) = self.refill() {
                self.finished = true;
                return Some(Err(err));
            }
        }
        self.buffer.pop_front().map(Ok)
    }
}
