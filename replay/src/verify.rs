//! `verify`: everything the log's readers rely on, rebuilt from position 1.
//! - The history is one the state machine could have produced: every record
//!   passes [`admit`] (the first that does not is reported with its position
//!   and the rule it breaks).
//! - Every index agrees with the records ([`crate::indexes`]).
//! - The projections rebuilt from position 1 equal the stored checkpoint (at
//!   its position) and the checkpoint plus the tail (at the head).

use std::ops::ControlFlow;
use subagent_projections::{
    admit, admit_end, checkpoint, Expectation, HistoryViolation, Projections,
};
use subagent_store::EventLog;

use crate::checkpointed::CHECKPOINT_NAME;
use crate::diff::structural_diff;
use crate::error::ReplayError;
use crate::indexes::IndexAudit;
use crate::progress::Progress;

/// The outcome of [`verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// The head verified.
    pub head: u64,
    /// Events folded.
    pub events: u64,
    /// The checkpoint position compared, if a checkpoint exists.
    pub checkpoint_position: Option<u64>,
    /// Why the stored checkpoint could not be used, if it could not
    /// (other than [`checkpoint_other_version`](Self::checkpoint_other_version)).
    pub checkpoint_problem: Option<String>,
    /// The format version of a stored checkpoint this build does not
    /// read: not compared, and not a problem (see [`notes`](Self::notes)).
    pub checkpoint_other_version: Option<u32>,
    /// Readable differences; empty when everything agrees.
    pub differences: Vec<String>,
    /// The first record the state machine could not have produced.
    pub impossible_history: Option<HistoryViolation>,
    /// Index entries missing, pointing elsewhere, or pointing at nothing.
    pub index_problems: Vec<String>,
    /// Attachments a record names that the blob store does not hold, or
    /// holds damaged.
    pub attachment_problems: Vec<String>,
}

impl VerifyReport {
    /// Whether everything agrees (a missing checkpoint is fine, and so is
    /// one of another format version; any other that cannot be used is not).
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.differences.is_empty()
            && self.checkpoint_problem.is_none()
            && self.impossible_history.is_none()
            && self.index_problems.is_empty()
            && self.attachment_problems.is_empty()
    }

    /// What is worth saying that is no problem, one sentence each: a
    /// stored checkpoint of another format version, which an upgrade (or a
    /// newer build) leaves behind.
    #[must_use]
    pub fn notes(&self) -> Vec<String> {
        self.checkpoint_other_version
            .map(|version| {
                format!(
                    "the checkpoint is of format {version}, which this build does not read, so it was not compared; a runtime on this log folds the whole log instead, and saves a checkpoint of format {} at its next save",
                    checkpoint::CHECKPOINT_VERSION
                )
            })
            .into_iter()
            .collect()
    }
}

const MAX_DIFFERENCES: usize = 20;

/// Verifies the log (see the module doc). Every record must decode, so a
/// corrupt record fails verification with its position. The rebuilt state's
/// maps are reserved from the sizes saved beside the last checkpoint, as
/// [`state_at`](crate::state_at)'s are; they are not verified (a hint).
///
/// # Errors
/// A read failure, including a corrupt record.
pub fn verify<L: EventLog + ?Sized>(log: &L) -> Result<VerifyReport, ReplayError> {
    verify_with_progress(log, &())
}

/// [`verify`], telling `progress` how many records it has folded of the
/// head's. The audits after the last record (the indexes' remaining
/// entries, the checkpoint comparisons) report nothing.
///
/// # Errors
/// As [`verify`].
pub fn verify_with_progress<L: EventLog + ?Sized, P: Progress + ?Sized>(
    log: &L,
    progress: &P,
) -> Result<VerifyReport, ReplayError> {
    let mut report = VerifyReport {
        head: log.head(),
        ..VerifyReport::default()
    };
    progress.set_total(report.head);
    let stored = match checkpoint::usable(
        log.read_checkpoint(CHECKPOINT_NAME)?.as_deref(),
        report.head,
    ) {
        Ok(stored) => stored,
        Err(unusable) => {
            match unusable.other_version() {
                Some(version) => report.checkpoint_other_version = Some(version),
                None => report.checkpoint_problem = Some(unusable.to_string()),
            }
            None
        }
    };
    report.checkpoint_position = stored.as_ref().map(|state| state.position);
    let mut rebuilt = crate::checkpointed::presized_state(log, report.head);
    let mut resumed = stored.clone();
    let mut expected = Expectation::None;
    let mut indexes = IndexAudit::default();
    let mut checked = std::collections::HashSet::new();
    subagent_store::read_ahead::scan(log, 1, |record| {
        if let Some(stored) = &stored {
            if stored.position.checked_add(1) == Some(record.position)
                || (stored.position == 0 && record.position == 1)
            {
                compare_at(&rebuilt, stored, "checkpoint", &mut report);
            }
        }
        // After the first impossible record, the state is one the state
        // machine never held, so later records are not judged against it.
        if report.impossible_history.is_none() {
            match admit(&rebuilt, expected, record) {
                Ok(next) => expected = next,
                Err(violation) => report.impossible_history = Some(violation),
            }
        }
        indexes.record(log, record)?;
        audit_attachments(log, record, &mut checked, &mut report.attachment_problems);
        rebuilt.apply(record);
        if let Some(resumed) = resumed.as_mut() {
            resumed.apply(record);
        }
        report.events += 1;
        progress.reached(report.events);
        Ok::<_, ReplayError>(ControlFlow::Continue(()))
    })?;
    if report.impossible_history.is_none() {
        report.impossible_history = admit_end(&rebuilt, expected).err();
    }
    report.index_problems = indexes.finish(log)?;
    if let Some(stored) = &stored {
        if stored.position == report.head {
            compare_at(&rebuilt, stored, "checkpoint", &mut report);
        }
    }
    if let Some(resumed) = &resumed {
        compare_at(&rebuilt, resumed, "checkpoint + tail", &mut report);
    }
    Ok(report)
}

/// Notes each attachment `record` names (the first time it is named) that
/// the blob store does not hold or that no longer hashes to its id.
fn audit_attachments<L: EventLog + ?Sized>(
    log: &L,
    record: &subagent_core::RecordedEvent,
    checked: &mut std::collections::HashSet<subagent_core::AttachmentId>,
    problems: &mut Vec<String>,
) {
    for id in subagent_core::attachment::stored_attachments(&record.event) {
        if !checked.insert(id) {
            continue;
        }
        let problem = match log.attachment(&id) {
            Ok(Some(_)) => continue,
            Ok(None) => "is not in the blob store".to_owned(),
            Err(err) => err.to_string(),
        };
        problems.push(format!(
            "attachment {id}, named at position {}, {problem}",
            record.position
        ));
    }
}

fn compare_at(rebuilt: &Projections, other: &Projections, what: &str, report: &mut VerifyReport) {
    if rebuilt != other {
        report.differences.push(format!(
            "{what} at position {} differs from the rebuilt state:",
            other.position
        ));
        report.differences.extend(
            structural_diff(rebuilt, other, MAX_DIFFERENCES)
                .into_iter()
                .map(|line| format!("  {line}")),
        );
    }
}
