//! A turn's recorded entries whose appends are still becoming durable.
//!
//! A transcript entry (an assistant message, a report, a tool's result) is
//! only recorded: nothing the driver does next depends on it being durable.
//! So the driver issues it ([`Engine::issue_here`]) and goes on; the next
//! entries, and the turn's end, are decided on it and enqueued behind it,
//! and share its group commit. What the driver acts on (a tool call's
//! decision, a steering claim, the turn's end) is still awaited, and since
//! the log is fail-stop and keeps enqueue order, its being durable means
//! every entry issued before it is too.
//!
//! Nothing holds an entry back until the turn ends: the store writes what
//! is enqueued (in `Sync` mode its writer thread, to which each entry is
//! handed as it is issued, so no fsync holds the turn; in `Buffered` mode
//! the next leader or the writer's backstop). The driver polls the set
//! while the turn runs, which leads a `Buffered` commit at once and
//! notices a failed append, which ends the turn. It holds at most
//! [`MAX_IN_FLIGHT`] entries: past that, recording waits for them.
//!
//! On a shared log an issued command is decided only when awaited, so each
//! entry is awaited at once there, as before: the order of a tree's
//! commands is the order they are awaited in.
//!
//! [`Engine::issue_here`]: crate::engine::Engine::issue_here

use std::collections::VecDeque;

use subagent_core::SubagentError;

use crate::engine::{Committed, Issued};
use crate::BoxFuture;

/// The most entries in flight at once: an agent streaming faster than the
/// log writes waits for it.
pub(super) const MAX_IN_FLIGHT: usize = 64;

/// The entries a turn issued and has not seen durable, oldest first.
#[derive(Default)]
pub(super) struct InFlight<'a> {
    entries: VecDeque<BoxFuture<'a, Result<Committed, SubagentError>>>,
}

impl<'a> InFlight<'a> {
    /// Adds `issued`, refusing at once what was refused when it was
    /// decided. On a shared log, or when [`MAX_IN_FLIGHT`] entries are in
    /// flight, waits until they are durable first.
    ///
    /// # Errors
    /// The entry's refusal, or the failure of an append in flight.
    pub(super) async fn push(&mut self, issued: Issued<'a>) -> Result<(), SubagentError> {
        let issued = issued.refused_now()?;
        if issued.decided_when_awaited() {
            self.settle().await?;
            issued.durable().await?;
            return Ok(());
        }
        self.entries
            .push_back(Box::pin(issued.in_background().durable()));
        if self.entries.len() >= MAX_IN_FLIGHT {
            self.settle().await?;
        }
        Ok(())
    }

    /// Whether no entry is in flight.
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Waits until the oldest entry is durable, and takes it off. Cancel
    /// safe: the entry stays until its append has answered, so a
    /// `select!` may drop this future and call it again. Pending forever
    /// when none is in flight.
    ///
    /// # Errors
    /// The failure of its append.
    pub(super) async fn next_durable(&mut self) -> Result<(), SubagentError> {
        let Some(oldest) = self.entries.front_mut() else {
            return std::future::pending().await;
        };
        let answer = oldest.as_mut().await;
        self.entries.pop_front();
        answer.map(drop)
    }

    /// Waits until every entry in flight is durable.
    ///
    /// # Errors
    /// The first failure among their appends.
    pub(super) async fn settle(&mut self) -> Result<(), SubagentError> {
        while !self.entries.is_empty() {
            self.next_durable().await?;
        }
        Ok(())
    }
}
