//! # subagent-replay
//!
//! How a user debugs a delegation: any past state reproduced from the log
//! alone, without running an agent.
//!
//! - [`state_at`]: every projection as it was at a position.
//! - [`Checkpointed`]: projections kept current from a checkpoint plus the
//!   log's tail, saving a new checkpoint every N events and on close.
//! - [`verify`]: the history against the state machine's rules, the indexes
//!   against the records, and rebuilt-from-zero against checkpointed-plus-tail.
//! - [`diff`]: what changed between two states.
//! - [`export`] / [`import`]: the log as JSON lines, and back, exactly;
//!   [`import_directory`]: the same into a new directory, all or nothing.
//! - [`salvage`]: the longest trustworthy prefix of a damaged log, copied
//!   into a new directory, and what was left behind.
//! - [`spans`]: the tree of spans a run exported, rebuilt from the trace
//!   contexts its events keep.
//! - [`Progress`]: how far [`verify_with_progress`],
//!   [`state_at_with_progress`] and [`export_with_progress`] have got, for a
//!   caller that shows it.

mod checkpointed;
mod diff;
mod error;
mod indexes;
mod lines;
mod progress;
mod salvage;
mod spans;
mod transfer;
mod verify;

pub use checkpointed::{Checkpointed, OpenReport, CHECKPOINT_NAME};
pub use diff::{diff, structural_diff, Change};
pub use error::ReplayError;
pub use progress::Progress;
pub use salvage::{
    longest_prefix, salvage, DroppedRecord, Prefix, PrefixEnd, SalvageReport, DROPPED_LISTED,
};
pub use spans::{spans, RebuiltSpan, SpanKind};
pub use transfer::{export, export_with_progress, import, import_directory};
pub use verify::{verify, verify_with_progress, VerifyReport};

use std::ops::ControlFlow;
use subagent_projections::Projections;
use subagent_store::EventLog;

/// Every projection as it was right after position `at` (the head when
/// `None`), folded from position 1, into maps reserved from the sizes saved
/// beside the last checkpoint, when there are any
/// ([`subagent_projections::map_sizes`]: a hint, never an error).
///
/// # Example
///
/// A root at position 1, its first child cataloged at position 2:
///
/// ```
/// use subagent_core::{Event, NewEvent, SessionId, SessionMode, StreamId};
/// use subagent_store::{EventLog, ExpectedVersion, MemoryLog};
///
/// let log = MemoryLog::new();
/// let root = SessionId::new();
/// let stream = StreamId::Session(root);
/// log.append(stream, ExpectedVersion::NoStream, vec![NewEvent::new(Event::root_created(root, "host"))]).wait()?;
/// let cataloged = Event::ChildCataloged {
///     child: SessionId::new(),
///     label: "scout".into(),
///     provider: "spawn".into(),
///     mode: SessionMode::Continuable,
///     external: false,
/// };
/// log.append(stream, ExpectedVersion::Exact(1), vec![NewEvent::new(cataloged)]).wait()?;
///
/// let then = subagent_replay::state_at(&log, Some(1))?;
/// let now = subagent_replay::state_at(&log, None)?;
/// assert!(then.list_children(root).is_empty());
/// assert_eq!(now.list_children(root)[0].entry.label, "scout");
/// assert!(subagent_replay::state_at(&log, Some(3)).is_err(), "past the head");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`ReplayError::PositionPastHead`], or a read failure.
pub fn state_at<L: EventLog + ?Sized>(
    log: &L,
    at: Option<u64>,
) -> Result<Projections, ReplayError> {
    state_at_with_progress(log, at, &())
}

/// [`state_at`], telling `progress` how many records it has folded of the
/// `at` (or head) it folds to.
///
/// # Errors
/// As [`state_at`]; a position past the head is refused before `progress`
/// hears anything.
pub fn state_at_with_progress<L: EventLog + ?Sized, P: Progress + ?Sized>(
    log: &L,
    at: Option<u64>,
    progress: &P,
) -> Result<Projections, ReplayError> {
    let head = log.head();
    let at = at.unwrap_or(head);
    if at > head {
        return Err(ReplayError::PositionPastHead { at, head });
    }
    progress.set_total(at);
    let mut state = checkpointed::presized_state(log, at);
    let mut done = 0;
    subagent_store::read_ahead::scan(log, 1, |record| {
        if record.position > at {
            return Ok::<_, ReplayError>(ControlFlow::Break(()));
        }
        state.apply(record);
        done += 1;
        progress.reached(done);
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(state)
}
