//! The runtime's metrics, through the `metrics` facade: counted from the
//! events the engine records, so a start or a settlement is counted once,
//! where it becomes durable. Without an installed recorder (the gateway
//! installs a Prometheus one) every call is a no-op.
//!
//! Gauges (live activations, the log's head, checkpoint age) are not kept
//! here: they are read from the projections when scraped
//! ([`SubagentRuntime::gauges`](crate::SubagentRuntime::gauges)).

use std::time::Duration;

use subagent_core::telemetry::metric;
use subagent_core::{ErrorCode, Event, RecordedEvent};

/// Counts the starts and settlements among a command's durable events.
pub(crate) fn recorded(records: &[RecordedEvent]) {
    for record in records {
        match &record.event {
            Event::ActivationRequested { epoch: 1, .. } => {
                metrics::counter!(metric::STARTS, metric::LABEL_MODE => "continuable").increment(1);
            }
            Event::RunRequested { .. } => {
                metrics::counter!(metric::STARTS, metric::LABEL_MODE => "external").increment(1);
            }
            Event::ActivationSettled { result, .. } | Event::RunSettled { result, .. } => {
                metrics::counter!(
                    metric::SETTLES,
                    metric::LABEL_STOP_REASON => result.stop_reason.as_str().to_owned()
                )
                .increment(1);
            }
            _ => {}
        }
    }
}

/// Counts a refused (or failed) command by its error code.
pub(crate) fn refused(code: ErrorCode) {
    metrics::counter!(metric::REFUSALS, metric::LABEL_CODE => code.as_str()).increment(1);
}

/// Records how long a command's append took to become durable.
pub(crate) fn appended(latency: Duration) {
    metrics::histogram!(metric::APPEND_SECONDS).record(latency.as_secs_f64());
}
