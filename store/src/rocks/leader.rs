//! Who commits a [`super::RocksLog`]'s appends, and when: the queue of
//! appends, the awaiting task that leads a commit, and the writer thread.
//!
//! Every append is queued, oldest first, and only a holder of the
//! [`Writer`]'s lock takes requests off the queue, so nothing is committed
//! ahead of a request queued before it, whoever commits.
//!
//! - **`Sync` mode**: a lone appender's awaiting task commits its own
//!   append, fsync included, inside [`tokio::task::block_in_place`], which
//!   first hands the worker's core (its queued tasks) to another thread:
//!   an fsync never stalls the worker's other tasks, and a lone appender
//!   pays no handoff to the writer thread and back, which were a fifth of
//!   its time (BENCHMARKS.md, "A lone Sync appender commits in place").
//!   The task itself waits for the fsync, with every future it polls
//!   alongside the ticket (a `select!`), where before only the ticket
//!   waited.
//!   Appenders in company (one of the last [`SYNC_COMPANY_ROUNDS`] groups
//!   held more than one request), and callers outside a multi-thread
//!   runtime (a current-thread runtime, a plain thread), where
//!   `block_in_place` is not used, get a ticket the writer thread
//!   answers: their append wakes it at once, and it takes everything
//!   queued (up to [`MAX_GROUP_REQUESTS`]) as one group with one fsync.
//! - **`Buffered` mode**: the task that awaits a ticket leads the commit
//!   itself, on the ticket's first poll (while appenders come together,
//!   one of the last [`COMPANY_ROUNDS`] groups holding more than one
//!   request, its second: the first yields once to the async
//!   runtime, so the other tasks ready to append queue theirs and join
//!   the group, as PostgreSQL's `commit_delay` waits only with
//!   `commit_siblings`): it takes everything queued and
//!   commits it as one group in its own thread, sparing a lone appender
//!   the two thread handoffs (to a writer thread and back) that were most
//!   of its time. The append is queued while the caller holds whatever it
//!   holds (a runtime's pipeline lock); the commit runs once it awaits,
//!   after releasing it, so the caller's next decisions overlap this
//!   write. A poll that finds the writer busy waits for its answer; a
//!   leader that finds requests queued behind it once done hands them to
//!   the thread (committing them too was measured no faster).
//!
//! In both modes the thread is also the **backstop** for tickets nobody
//! awaits: it looks at the queue every [`BACKSTOP`] while appends come,
//! and after [`IDLE_ROUNDS`] quiet rounds sleeps until the next append
//! wakes it. A dropped ticket hands its request to the thread at once.
//!
//! The log's close commits what is queued, then ends the thread.

use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError, Weak};
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;

use super::writer::{Transaction, TransactionResult, Writer};
use crate::error::StoreError;
use crate::log::{Durability, Lead, TransactionTicket};

/// The most requests folded into one group commit.
pub(crate) const MAX_GROUP_REQUESTS: usize = 1024;

/// Group commits of one request after a larger group before a leader
/// stops waiting for company (`Buffered` mode): appenders that come
/// together now and then (64 on two workers) keep yielding through a
/// lull, and a lone appender stops after eight.
pub(crate) const COMPANY_ROUNDS: u32 = 8;

/// [`COMPANY_ROUNDS`] for `Sync` mode, where a lone appender's task leads
/// in place only after this many groups of one in a row (about 50 ms of
/// one appender's fsyncs at 5k a second): a task leading in place while
/// others come costs their group a wake-up of the thread after its fsync,
/// and a runtime's 64 starters pass through many short lulls.
pub(crate) const SYNC_COMPANY_ROUNDS: u32 = 256;

/// How often the writer thread looks for requests no one leads, while
/// appends come.
pub(crate) const BACKSTOP: Duration = Duration::from_millis(2);

/// Backstop rounds with no append before the writer thread sleeps until
/// the next append wakes it: 100 ms of a quiet log.
pub(crate) const IDLE_ROUNDS: u32 = 50;

/// A queued transaction, and where its answer goes.
struct AppendRequest {
    transaction: Transaction,
    reply: Reply,
}

type Reply = oneshot::Sender<TransactionResult>;

/// What the writer thread is doing, which decides whether an append must
/// wake it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ThreadState {
    /// Committing, or about to look at the queue.
    Busy,
    /// Waiting at most [`BACKSTOP`].
    Backstop,
    /// Waiting until woken.
    Asleep,
}

struct Queue {
    /// Requests waiting for a commit, in the order they were appended.
    requests: VecDeque<AppendRequest>,
    /// Appends ever queued: the thread's measure of a quiet log.
    appended: u64,
    closed: bool,
    thread: ThreadState,
}

/// The writer, its queue, and who may commit: whoever holds `writer`.
pub(crate) struct WriterSlot {
    /// `None` once the log is dropped ([`release`](Self::release)).
    writer: Mutex<Option<Writer>>,
    queue: Mutex<Queue>,
    /// Wakes the writer thread.
    wake: Condvar,
    /// Whether a commit fsyncs (`Sync`): a task then leads it only alone,
    /// and only inside `block_in_place`.
    syncs: bool,
    /// Group commits made by appenders' tasks and threads.
    by_appenders: AtomicU64,
    /// Group commits made by the writer thread.
    by_thread: AtomicU64,
    /// The writer's event-id index reads.
    id_lookups: Arc<AtomicU64>,
    /// Group commits to come that still count as in company: reset to
    /// [`COMPANY_ROUNDS`] (`Sync`: [`SYNC_COMPANY_ROUNDS`]) by a group of
    /// more than one request, and counted down by each group of one.
    /// While above zero, appenders come together: a `Buffered` leader
    /// waits for them ([`Lead::has_company`]), and `Sync` appends go to
    /// the thread.
    company: AtomicU32,
    /// This slot, for the tickets it hands out (a ticket outliving the log
    /// keeps neither the writer nor the database alive).
    this: Weak<WriterSlot>,
}

impl WriterSlot {
    pub(crate) fn new(writer: Writer, durability: Durability) -> Arc<Self> {
        let id_lookups = writer.id_lookups();
        Arc::new_cyclic(|this| WriterSlot {
            writer: Mutex::new(Some(writer)),
            queue: Mutex::new(Queue {
                requests: VecDeque::new(),
                appended: 0,
                closed: false,
                thread: ThreadState::Busy,
            }),
            wake: Condvar::new(),
            syncs: durability == Durability::Sync,
            by_appenders: AtomicU64::new(0),
            by_thread: AtomicU64::new(0),
            id_lookups,
            company: AtomicU32::new(0),
            this: this.clone(),
        })
    }

    /// Queues `transaction`, and returns its ticket: one that leads the
    /// commit when awaited ([`Lead`]), or, in `Sync` mode for appenders in
    /// company and callers outside a multi-thread runtime, one the writer
    /// thread answers, woken now so the commit starts while the caller
    /// goes on.
    pub(crate) fn append(&self, transaction: Transaction) -> TransactionTicket {
        let to_thread = self.syncs && !self.alone_where_it_may_block();
        let mut queue = lock_queue(&self.queue);
        if queue.closed {
            return TransactionTicket::ready(Err(StoreError::Closed));
        }
        let (reply, ticket) = if to_thread {
            TransactionTicket::channel()
        } else {
            let this: Weak<dyn Lead> = self.this.clone();
            TransactionTicket::led(this)
        };
        queue
            .requests
            .push_back(AppendRequest { transaction, reply });
        queue.appended += 1;
        let wake = match queue.thread {
            ThreadState::Busy => false,
            ThreadState::Backstop => to_thread,
            ThreadState::Asleep => true,
        };
        drop(queue);
        if wake {
            self.wake.notify_one();
        }
        ticket
    }

    /// Commits up to [`MAX_GROUP_REQUESTS`] queued requests, oldest first,
    /// as one group under `writer`, and answers them, counting the group
    /// in `by` before its head is published. Returns whether there was
    /// anything to commit.
    fn commit_queued(&self, mut writer: WriterGuard<'_>, by: &AtomicU64) -> bool {
        let (transactions, replies): (Vec<Transaction>, Vec<Reply>) = {
            let mut queue = lock_queue(&self.queue);
            let take = queue.requests.len().min(MAX_GROUP_REQUESTS);
            queue
                .requests
                .drain(..take)
                .map(|request| (request.transaction, request.reply))
                .unzip()
        };
        if transactions.is_empty() {
            return false;
        }
        // Only a holder of the writer gets here, so this read and write
        // race with no other.
        let company = if transactions.len() > 1 {
            if self.syncs {
                SYNC_COMPANY_ROUNDS
            } else {
                COMPANY_ROUNDS
            }
        } else {
            self.company.load(Ordering::Relaxed).saturating_sub(1)
        };
        self.company.store(company, Ordering::Relaxed);
        let results = match writer.as_mut() {
            Some(writer) => {
                by.fetch_add(1, Ordering::Relaxed);
                writer.commit_group(transactions)
            }
            None => transactions
                .iter()
                .map(|_| Err(StoreError::Closed))
                .collect(),
        };
        drop(writer);
        for (reply, result) in replies.into_iter().zip(results) {
            // An appender that stopped waiting is not an error of the log.
            let _ = reply.send(result);
        }
        true
    }

    /// The writer thread: commits whatever is queued, group by group, until
    /// the log is closed and the queue is empty.
    pub(crate) fn run(&self) {
        let _refuse_if_unwinding = RefuseIfUnwinding(self);
        let mut idle_rounds = 0;
        loop {
            {
                let mut queue = lock_queue(&self.queue);
                loop {
                    if !queue.requests.is_empty() {
                        break;
                    }
                    if queue.closed {
                        return;
                    }
                    let appended = queue.appended;
                    if idle_rounds < IDLE_ROUNDS {
                        queue.thread = ThreadState::Backstop;
                        queue = self
                            .wake
                            .wait_timeout(queue, BACKSTOP)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                        if queue.appended == appended {
                            idle_rounds += 1;
                        } else {
                            idle_rounds = 0;
                        }
                    } else {
                        queue.thread = ThreadState::Asleep;
                        queue = self
                            .wake
                            .wait(queue)
                            .unwrap_or_else(PoisonError::into_inner);
                        idle_rounds = 0;
                    }
                    queue.thread = ThreadState::Busy;
                }
            }
            let writer = self.writer.lock().unwrap_or_else(fail_stopped);
            self.commit_queued(writer, &self.by_thread);
        }
    }

    /// How many group commits each committer made so far.
    pub(crate) fn counts(&self) -> CommitCounts {
        CommitCounts {
            by_appenders: self.by_appenders.load(Ordering::Relaxed),
            by_thread: self.by_thread.load(Ordering::Relaxed),
            id_lookups: self.id_lookups.load(Ordering::Relaxed),
        }
    }

    /// Refuses later appends and lets the thread end once the queue is
    /// committed.
    pub(crate) fn close(&self) {
        lock_queue(&self.queue).closed = true;
        self.wake.notify_all();
    }

    /// Drops the writer, and with it its handle on the database, once any
    /// commit in progress is done: called after the thread ended, so the
    /// queue is closed and empty, and a ticket still awaited after this
    /// only reads its answer.
    pub(crate) fn release(&self) {
        self.writer.lock().unwrap_or_else(fail_stopped).take();
    }

    /// Wakes the thread to commit what is queued.
    fn wake_thread(&self) {
        let asleep = lock_queue(&self.queue).thread != ThreadState::Busy;
        if asleep {
            self.wake.notify_one();
        }
    }

    /// A leader's commit, holding `writer`: what is queued. What was
    /// queued meanwhile found the writer held, and its tickets wait for
    /// their answers rather than polling again, so it goes to the thread
    /// (which looks at the queue again after each of its own commits).
    /// Returns whether it committed anything.
    fn lead(&self, writer: WriterGuard<'_>) -> bool {
        let committed = self.commit_queued(writer, &self.by_appenders);
        if !lock_queue(&self.queue).requests.is_empty() {
            self.wake_thread();
        }
        committed
    }

    /// `Sync` mode: whether the caller may lead in place: alone (no group
    /// of more than one request in the last [`SYNC_COMPANY_ROUNDS`]), on
    /// a multi-thread runtime, on a thread where `block_in_place` has not
    /// refused before, and in a build that can catch that refusal.
    fn alone_where_it_may_block(&self) -> bool {
        CAN_CATCH_REFUSAL
            && self.company.load(Ordering::Relaxed) == 0
            && !REFUSED_HERE.get()
            && Handle::try_current()
                .is_ok_and(|handle| handle.runtime_flavor() == RuntimeFlavor::MultiThread)
    }

    /// Leads a commit in this thread if no one else is committing.
    fn lead_if_free(&self) -> bool {
        let writer = match self.writer.try_lock() {
            Ok(writer) => writer,
            Err(TryLockError::WouldBlock) => return false,
            Err(TryLockError::Poisoned(poisoned)) => fail_stopped(poisoned),
        };
        self.lead(writer)
    }

    /// `Sync` mode's lead from an async task: alone, on a multi-thread
    /// runtime, inside `block_in_place`; in company, or where the task may
    /// not block its thread, the append goes to the writer thread.
    ///
    /// `block_in_place` hands the worker's core (its queued tasks) to
    /// another thread, so other tasks go on; this task itself waits for
    /// the fsync, as it would for its answer. It refuses, by panicking,
    /// where the runtime context forbids blocking, which the flavor check
    /// does not see: a `LocalSet` run on a multi-thread runtime, or such a
    /// runtime's handle entered inside a current-thread runtime. The
    /// refusal comes before the closure runs, so nothing is locked: it is
    /// caught, remembered for the thread ([`REFUSED_HERE`]), and the
    /// append goes to the writer thread. The panic hook still sees that
    /// one panic. A build with `panic = "abort"` could not catch it, so
    /// there the thread commits every `Sync` append ([`CAN_CATCH_REFUSAL`]).
    /// A panic inside the commit itself is not caught.
    fn try_lead_in_place(&self) -> bool {
        // Asked again: company may have come since the append.
        if !self.alone_where_it_may_block() {
            self.wake_thread();
            return false;
        }
        // A commit in progress answers this request, or hands it to the
        // thread when done: not worth handing the worker's core away for.
        // (Only looked at here: a guard held across `block_in_place` would
        // be dropped by its refusal's unwinding, which poisons the lock.)
        if matches!(self.writer.try_lock(), Err(TryLockError::WouldBlock)) {
            return false;
        }
        let entered = Cell::new(false);
        let led = std::panic::catch_unwind(AssertUnwindSafe(|| {
            tokio::task::block_in_place(|| {
                entered.set(true);
                self.lead_if_free()
            })
        }));
        match led {
            Ok(led) => led,
            Err(panic) if entered.get() => std::panic::resume_unwind(panic),
            Err(_) => {
                REFUSED_HERE.set(true);
                self.wake_thread();
                false
            }
        }
    }
}

/// Whether this build unwinds, so that `block_in_place`'s refusal can be
/// caught (under `panic = "abort"` it would end the process).
const CAN_CATCH_REFUSAL: bool = cfg!(panic = "unwind");

thread_local! {
    /// Set once `block_in_place` refused on this thread: its `Sync`
    /// appends go to the writer thread from then on, so a host that
    /// appends from a `LocalSet` sees one caught refusal per thread, not
    /// one per append.
    static REFUSED_HERE: Cell<bool> = const { Cell::new(false) };
}

impl Lead for WriterSlot {
    fn try_lead(&self) -> bool {
        if self.syncs {
            self.try_lead_in_place()
        } else {
            self.lead_if_free()
        }
    }

    fn lead_blocking(&self) -> bool {
        self.lead(self.writer.lock().unwrap_or_else(fail_stopped))
    }

    fn hand_off(&self) {
        self.wake_thread();
    }

    fn hand_off_if_leading_blocks(&self) -> bool {
        if self.syncs {
            self.wake_thread();
        }
        self.syncs
    }

    /// Only in `Buffered` mode: in `Sync` mode appenders in company hand
    /// their appends to the thread rather than wait for each other.
    fn has_company(&self) -> bool {
        !self.syncs && self.company.load(Ordering::Relaxed) > 0
    }
}

/// How many group commits a read-write [`super::RocksLog`] made, by who
/// made them: a diagnostic of who leads (awaiting appenders, or the
/// writer thread for appenders in `Sync` company, callers that may not
/// block, and the backstop); and how many event-id index reads their
/// checks made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitCounts {
    /// Commits led by an appender awaiting (or waiting on) its ticket.
    pub by_appenders: u64,
    /// Commits made by the writer thread.
    pub by_thread: u64,
    /// Event ids looked up in the index to check appends: only ids that
    /// do not sort above every indexed one (retries, imported ids) are.
    pub id_lookups: u64,
}

/// Should the writer thread panic, closes the queue and refuses what is
/// queued, so no appender waits for a thread that is gone.
struct RefuseIfUnwinding<'a>(&'a WriterSlot);

impl Drop for RefuseIfUnwinding<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut queue = lock_queue(&self.0.queue);
        queue.closed = true;
        for request in queue.requests.drain(..) {
            let _ = request.reply.send(Err(StoreError::Io(
                "the log's writer thread panicked; reopen the log".to_owned(),
            )));
        }
    }
}

type WriterGuard<'a> = MutexGuard<'a, Option<Writer>>;

/// The queue holds plain data that is never left half-changed, so a panic
/// elsewhere while it was locked leaves it usable.
fn lock_queue(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The writer after a panic mid-commit: its state may be half-updated, so
/// it refuses every later append (fail-stop, as after a failed write).
fn fail_stopped(poisoned: PoisonError<WriterGuard<'_>>) -> WriterGuard<'_> {
    let mut writer = poisoned.into_inner();
    if let Some(writer) = writer.as_mut() {
        writer.failed.get_or_insert_with(|| {
            StoreError::Io("the log's writer panicked; reopen the log".to_owned())
        });
    }
    writer
}
