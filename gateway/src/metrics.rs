//! The gateway's Prometheus metrics: it owns the process's one Prometheus
//! recorder, the gauges a scrape of `GET /metrics` sets, and the count of
//! open event streams.
//!
//! The contract:
//! - The first gateway built in a process ([`Metrics::install`], called by
//!   [`crate::router`]) builds one Prometheus recorder and installs it as
//!   the process's global `metrics` recorder; every later gateway in the
//!   process shares it (a `OnceLock`), so the counters are process totals.
//! - The runtime's counters and histograms (starts by `mode`, settlements by
//!   `stop_reason`, refusals by `code`, append latency, and the log writers'
//!   group size) reach it through the `metrics` facade. Both histograms have
//!   fixed buckets, so they render as Prometheus histograms, not summaries.
//! - If the host installed another global recorder first, ours is not
//!   installed and nothing fails: the runtime's counters and histograms go
//!   to the host's recorder, and `/metrics` renders what ours holds, the
//!   gauges (which a scrape always writes to ours directly).
//! - Gauges are not kept between scrapes: [`Metrics::render`] sets them from
//!   [`SubagentRuntime::gauges`] and the open-stream count, then renders.
//!   Scrapes are serialised, so with two gateways in one process each scrape
//!   reports the gauges of the gateway scraped.
//! - A background thread drains the histograms every
//!   [`UPKEEP_EVERY`], so samples do not pile up when nobody scrapes.
//!
//! Metric names are only those of [`subagent_core::telemetry::metric`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use metrics_exporter_prometheus::{
    BuildError, Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
use subagent_core::telemetry::metric;
use subagent_runtime::SubagentRuntime;

/// The media type of a scrape's answer (the Prometheus text format).
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Upper bounds of the append-latency buckets, in seconds: 100 µs to 2 s.
const APPEND_SECONDS_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
];

/// Upper bounds of the group-size buckets, in appends per group commit.
const GROUP_SIZE_BUCKETS: [f64; 9] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// How often the upkeep thread drains the histograms.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's one recorder, built by the first gateway.
static EXPORTER: OnceLock<Exporter> = OnceLock::new();

/// The recorder and the handle that renders it.
struct Exporter {
    /// Ours, whether or not it is the global recorder: the gauges are
    /// written to it directly.
    recorder: Arc<PrometheusRecorder>,
    /// Renders what `recorder` holds.
    handle: PrometheusHandle,
    /// Held from setting the gauges to rendering them.
    scrape: Mutex<()>,
}

impl Exporter {
    /// The shared exporter, built and installed on first use.
    fn shared() -> &'static Exporter {
        EXPORTER.get_or_init(Exporter::install)
    }

    /// Builds the recorder, installs it globally unless another recorder
    /// is, describes every metric and starts the upkeep thread.
    fn install() -> Exporter {
        let builder = builder().unwrap_or_else(|err| {
            // Only an empty bucket list is refused, and neither is empty.
            tracing::warn!(error = %err, "histogram buckets refused; they render as summaries");
            PrometheusBuilder::new()
        });
        let recorder = Arc::new(builder.build_recorder());
        let handle = recorder.handle();
        if ::metrics::set_global_recorder(Arc::clone(&recorder)).is_err() {
            tracing::warn!(
                "another metrics recorder is installed: /metrics reports the gateway's gauges, \
                 the runtime's counters and histograms go to that recorder"
            );
        }
        ::metrics::with_local_recorder(&*recorder, describe);
        spawn_upkeep(handle.clone());
        Exporter {
            recorder,
            handle,
            scrape: Mutex::new(()),
        }
    }
}

/// The builder with the two histograms' buckets.
fn builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(metric::APPEND_SECONDS.to_owned()),
            &APPEND_SECONDS_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(metric::GROUP_SIZE.to_owned()),
            &GROUP_SIZE_BUCKETS,
        )
}

/// One help line per metric, from the doc comments of its name.
fn describe() {
    ::metrics::describe_gauge!(
        metric::LIVE_ACTIVATIONS,
        "Live activations, by mode (continuable, external)."
    );
    ::metrics::describe_counter!(metric::STARTS, "Activations and runs started, by mode.");
    ::metrics::describe_counter!(
        metric::SETTLES,
        "Activations and runs settled, by stop_reason."
    );
    ::metrics::describe_counter!(metric::REFUSALS, "Commands refused, by error code.");
    ::metrics::describe_histogram!(
        metric::APPEND_SECONDS,
        "Seconds from a command's append to its durability."
    );
    ::metrics::describe_histogram!(metric::GROUP_SIZE, "Appends per group commit.");
    ::metrics::describe_gauge!(metric::LOG_HEAD, "The log's head position.");
    ::metrics::describe_gauge!(
        metric::CHECKPOINT_AGE_EVENTS,
        "Events since the newest projections checkpoint."
    );
    ::metrics::describe_gauge!(
        metric::SSE_SUBSCRIBERS,
        "Open SSE event subscriptions of the gateway."
    );
    ::metrics::describe_gauge!(
        metric::STORE_AVAILABLE,
        "1 while the runtime serves, 0 while it is being reopened after its log failed."
    );
}

/// Drains `handle`'s histograms every [`UPKEEP_EVERY`] for the life of the
/// process. Without the thread (it could not be spawned) only scrapes drain
/// them.
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("subagents-metrics-upkeep".to_owned())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_EVERY);
            handle.run_upkeep();
        });
    if let Err(err) = spawned {
        tracing::warn!(
            error = %err,
            "the metrics upkeep thread did not start; scrapes drain the histograms"
        );
    }
}

/// One gateway's view of the metrics: the shared recorder and this
/// gateway's count of open event streams.
pub(crate) struct Metrics {
    exporter: &'static Exporter,
    /// Open `GET /v1/events` streams of this gateway.
    subscribers: Arc<AtomicU64>,
}

impl Metrics {
    /// This gateway's metrics over the process's recorder (built and
    /// installed on the first call).
    pub(crate) fn install() -> Metrics {
        Metrics {
            exporter: Exporter::shared(),
            subscribers: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Counts one open event stream until the returned guard drops.
    pub(crate) fn subscriber(&self) -> Subscriber {
        self.subscribers.fetch_add(1, Ordering::Relaxed);
        Subscriber(Arc::clone(&self.subscribers))
    }

    /// Sets the gauges from `runtime` (the serving one; `None` while it is
    /// being reopened, when its gauges keep their last values and
    /// [`metric::STORE_AVAILABLE`] is 0) and the open streams, then renders
    /// every metric in the Prometheus text format.
    pub(crate) fn render(&self, runtime: Option<&SubagentRuntime>) -> String {
        let exporter = self.exporter;
        let _scrape = exporter
            .scrape
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let gauges = runtime.map(SubagentRuntime::gauges);
        let subscribers = self.subscribers.load(Ordering::Relaxed);
        ::metrics::with_local_recorder(&*exporter.recorder, || {
            if let Some(gauges) = &gauges {
                ::metrics::gauge!(metric::LIVE_ACTIVATIONS, metric::LABEL_MODE => "continuable")
                    .set(gauges.live_continuable as f64);
                ::metrics::gauge!(metric::LIVE_ACTIVATIONS, metric::LABEL_MODE => "external")
                    .set(gauges.live_external as f64);
                ::metrics::gauge!(metric::LOG_HEAD).set(gauges.log_head as f64);
                ::metrics::gauge!(metric::CHECKPOINT_AGE_EVENTS)
                    .set(gauges.checkpoint_age_events() as f64);
            }
            ::metrics::gauge!(metric::STORE_AVAILABLE).set(if gauges.is_some() {
                1.0
            } else {
                0.0
            });
            ::metrics::gauge!(metric::SSE_SUBSCRIBERS).set(subscribers as f64);
        });
        exporter.handle.render()
    }
}

/// An open event stream, counted while it lives: it sits inside the stream,
/// so a client that goes away (the stream is dropped) is no longer counted.
pub(crate) struct Subscriber(Arc<AtomicU64>);

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
