//! [`OutOfOrder`]: which precondition of the state machine an
//! out-of-order command broke ([`SubagentError::OutOfOrder`](crate::SubagentError::OutOfOrder)).

use thiserror::Error;

/// Which precondition an out-of-order command broke
/// ([`SubagentError::OutOfOrder`](crate::SubagentError::OutOfOrder)).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OutOfOrder {
    /// The activation at this epoch is not live.
    #[error("activation {epoch} is not live")]
    NotLive {
        /// The epoch the command named.
        epoch: u64,
    },
    /// The activation was already prepared.
    #[error("prepared twice")]
    PreparedTwice,
    /// The activation was already published.
    #[error("published twice")]
    PublishedTwice,
    /// A published activation is released, not abandoned.
    #[error("a published activation is released, not abandoned")]
    AbandonPublished,
    /// The epoch already settled; a result is never overwritten.
    #[error("a settled result is never overwritten")]
    AlreadySettled,
    /// The session has no published activation.
    #[error("no published activation")]
    NotPublished,
    /// A turn is already running.
    #[error("a turn is already running")]
    TurnRunning,
    /// No turn is running.
    #[error("no turn is running")]
    NoTurnRunning,
    /// A transcript entry names another turn than the running one.
    #[error("transcript entry names turn {entry}, but turn {running} is running")]
    OtherTurn {
        /// The turn the entry names.
        entry: u64,
        /// The running turn.
        running: u64,
    },
    /// The session has no external run.
    #[error("no external run")]
    NoRun,
    /// A start names a call that is not an unanswered call of the running
    /// turn (none was recorded under that id, or it already returned).
    #[error("call {call_id} is not an open call of the running turn")]
    CallNotOpen {
        /// The call id the start named.
        call_id: String,
    },
    /// The external run is not in a phase the command accepts.
    #[error("the external run is {phase}; {accepted}")]
    RunPhase {
        /// The run's phase (`requested`, `started`, `settled`, `disposed`).
        phase: &'static str,
        /// What the command needs.
        accepted: &'static str,
    },
    /// A counter reached `u64::MAX` (turns or epochs of one session).
    #[error("{0} numbers are exhausted")]
    Exhausted(&'static str),
}
