//! [`FailureWatch`]: the runtime's and the store's reported failures, caught
//! for the demo. A driver that fails on a cold resume, or the log's writer
//! failing (disk full), is reported only as a `tracing` event, with no handle
//! for the caller to await. The demo installs a [`FailureRecorder`] so its
//! waits end with that cause (the failing file and the OS error, as the
//! store words it) instead of timing out. Every warning and error event is
//! also printed to stderr as `warning: ...`.

use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::Arc;

use tokio::sync::watch;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// The first failure reported since the watch was made. Cheap to clone.
#[derive(Clone)]
pub(super) struct FailureWatch {
    first: Arc<watch::Sender<Option<String>>>,
}

impl Default for FailureWatch {
    fn default() -> Self {
        FailureWatch {
            first: Arc::new(watch::channel(None).0),
        }
    }
}

impl FailureWatch {
    /// The first reported failure, if any.
    #[must_use]
    pub(super) fn first(&self) -> Option<String> {
        self.first.borrow().clone()
    }

    /// Records `failure` unless an earlier one is already held.
    pub(super) fn report(&self, failure: String) {
        self.first.send_if_modified(|first| {
            if first.is_some() {
                return false;
            }
            *first = Some(failure);
            true
        });
    }

    /// Resolves with the first failure once one is reported (at once if one
    /// already was).
    pub(super) async fn reported(&self) -> String {
        let mut receiver = self.first.subscribe();
        // The sender lives in `self`, so the wait cannot see it closed.
        let first = receiver
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|first| first.clone());
        match first {
            Some(failure) => failure,
            None => std::future::pending().await,
        }
    }
}

/// A `tracing` layer that turns warning and error events into
/// `warning:` lines on stderr, and reports as a failure every error event
/// of this project's crates and every such warning that carries an `error`
/// field (a driver that failed, a commit or a checkpoint that could not be
/// written). A warning without one (e.g. a checkpoint discarded and
/// refolded) is not a failure, and neither is anything a library logs (the
/// protocol library's "Sending error response" for a file request the
/// runtime rightly refused): what such an event means for a child is
/// settled in the log by the runtime, which reports its own failures.
pub(super) struct FailureRecorder {
    watch: FailureWatch,
}

impl FailureRecorder {
    /// A recorder reporting into `watch`.
    #[must_use]
    pub(super) fn new(watch: FailureWatch) -> Self {
        FailureRecorder { watch }
    }
}

/// Collects an event's message and fields into one line.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
    has_error: bool,
}

impl Line {
    fn add(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        match field.name() {
            "message" => {
                let _ = self.message.write_fmt(value);
            }
            name => {
                self.has_error |= name == "error";
                let separator = if self.fields.is_empty() { "" } else { ", " };
                let _ = write!(self.fields, "{separator}{name}: {value}");
            }
        }
    }
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.add(field, format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.add(field, format_args!("{value:?}"));
    }
}

impl<S: Subscriber> Layer<S> for FailureRecorder {
    // Filters by level here rather than in `enabled`, which would filter
    // the whole subscriber (and so the spans an exporter layer wants).
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() > Level::WARN {
            return;
        }
        let mut line = Line::default();
        event.record(&mut line);
        let text = if line.fields.is_empty() {
            line.message
        } else {
            format!("{} ({})", line.message, line.fields)
        };
        let _ = writeln!(std::io::stderr(), "warning: {text}");
        let ours = is_ours(event.metadata().target());
        if ours && (line.has_error || *event.metadata().level() == Level::ERROR) {
            self.watch.report(text);
        }
    }
}

/// Whether `target` (a module path) is one of this project's crates
/// (`subagent_core`, `subagent_runtime`, …, and the `subagents` binary).
fn is_ours(target: &str) -> bool {
    let krate = target.split("::").next().unwrap_or(target);
    krate.starts_with("subagent_") || krate == "subagents"
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    fn recording(watch: &FailureWatch) -> impl Subscriber {
        tracing_subscriber::registry().with(FailureRecorder::new(watch.clone()))
    }

    #[test]
    fn a_warning_with_an_error_and_any_error_event_are_failures() {
        let watch = FailureWatch::default();
        tracing::subscriber::with_default(recording(&watch), || {
            tracing::info!(error = "ignored", "below the warning level");
            tracing::warn!(reason = "stale", "discarding the projections checkpoint");
        });
        assert_eq!(watch.first(), None);
        tracing::subscriber::with_default(recording(&watch), || {
            tracing::warn!(
                error = %"storage failure: IO error: No space left on device: While appending to file: /d/000004.log",
                "local driver failed"
            );
            tracing::error!(reason = "later", "append failed");
        });
        let first = watch.first().expect("the driver failure is reported");
        assert!(
            first.starts_with("local driver failed (error: storage failure"),
            "{first}"
        );
        assert!(first.contains("No space left on device"), "{first}");
        assert!(first.contains("/d/000004.log"), "{first}");
    }

    #[test]
    fn a_library_event_is_printed_but_is_no_failure() {
        let watch = FailureWatch::default();
        tracing::subscriber::with_default(recording(&watch), || {
            tracing::warn!(
                target: "agent_client_protocol::jsonrpc::outgoing_actor",
                error = "Internal error",
                "Sending error response"
            );
            tracing::error!(target: "hyper::proto", "connection error");
        });
        assert_eq!(watch.first(), None);
        tracing::subscriber::with_default(recording(&watch), || {
            tracing::error!(target: "subagent_store::rocks", "append failed");
        });
        assert_eq!(watch.first().as_deref(), Some("append failed"));
        assert!(is_ours("subagents") && is_ours("subagent_runtime::drivers"));
        assert!(!is_ours("subagentsx") && !is_ours("tokio"));
    }

    #[test]
    fn an_error_event_without_an_error_field_is_a_failure() {
        let watch = FailureWatch::default();
        tracing::subscriber::with_default(recording(&watch), || {
            tracing::error!(reason = "disk full", "append failed; the engine stops");
        });
        assert_eq!(
            watch.first().as_deref(),
            Some("append failed; the engine stops (reason: disk full)")
        );
    }
}
