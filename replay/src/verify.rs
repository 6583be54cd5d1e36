//! `verify`: the projections rebuilt from position 0 must equal the stored
//! checkpoint (at its position) and the checkpoint plus the tail (at the head).

use subagent_projections::{checkpoint, Projections};
use subagent_store::{EventLog, EventLogExt};

use crate::checkpointed::CHECKPOINT_NAME;
use crate::diff::structural_diff;
use crate::error::ReplayError;

/// The outcome of [`verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// The head verified.
    pub head: u64,
    /// Events folded.
    pub events: u64,
    /// The checkpoint position compared, if a checkpoint exists.
    pub checkpoint_position: Option<u64>,
    /// Why the stored checkpoint could not be used, if it could not.
    pub checkpoint_problem: Option<String>,
    /// Readable differences; empty when everything agrees.
    pub differences: Vec<String>,
}

impl VerifyReport {
    /// Whether everything agrees (a missing checkpoint is fine; a stored one
    /// that cannot be used is not).
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.differences.is_empty() && self.checkpoint_problem.is_none()
    }
}

const MAX_DIFFERENCES: usize = 20;

/// Verifies the log's projections (see the module doc). Every record must
/// decode, so a corrupt record fails verification with its position.
///
/// # Errors
/// A read failure, including a corrupt record.
pub fn verify<L: EventLog + ?Sized>(log: &L) -> Result<VerifyReport, ReplayError> {
    let mut report = VerifyReport {
        head: log.head(),
        ..VerifyReport::default()
    };
    let stored = match checkpoint::usable(
        log.read_checkpoint(CHECKPOINT_NAME)?.as_deref(),
        report.head,
    ) {
        Ok(stored) => stored,
        Err(reason) => {
            report.checkpoint_problem = Some(reason);
            None
        }
    };
    report.checkpoint_position = stored.as_ref().map(|state| state.position);
    let mut rebuilt = Projections::new();
    let mut resumed = stored.clone();
    for record in log.read_all(1) {
        let record = record?;
        if let Some(stored) = &stored {
            if record.position == stored.position + 1
                || (stored.position == 0 && record.position == 1)
            {
                compare_at(&rebuilt, stored, "checkpoint", &mut report);
            }
        }
        rebuilt.apply(&record);
        if let Some(resumed) = resumed.as_mut() {
            resumed.apply(&record);
        }
        report.events += 1;
    }
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
