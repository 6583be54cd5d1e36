//! What the log writers report of each group commit: a `subagents.group_commit`
//! span (debug level, so exporters at `info` leave it out) and the
//! `subagents_append_group_size` histogram. Without a subscriber or a
//! metrics recorder both are no-ops.

use subagent_core::telemetry::{attr, metric, span};

/// Opens the span of one group commit of `size` appends, and records the
/// size; the group is committed inside the returned span.
#[must_use]
pub fn group_commit(size: usize) -> tracing::Span {
    metrics::histogram!(metric::GROUP_SIZE).record(size as f64);
    tracing::debug_span!(span::GROUP_COMMIT, { attr::GROUP_SIZE } = size)
}
