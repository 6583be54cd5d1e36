//! The cost of spans: `bench activations`' runtime figure with no
//! subscriber (spans disabled) against the same work with a subscriber
//! that builds every `info` span as OpenTelemetry does (real trace and
//! span ids, parents, attributes, the trace context kept on the events
//! that name a span),
//! but exports nothing: the overhead a host pays for tracing before its
//! exporter's own cost. `--tracing-layer registry` builds them in
//! `tracing-subscriber`'s registry with no OpenTelemetry layer instead:
//! the runtime's own instrumentation, apart from the layer's cost. Runs
//! alternate off and on, each on a fresh log and a fresh async runtime;
//! each checks that spans were built exactly when tracing was on (by the
//! trace context on its events, or by counting them in the registry).
//! Beside throughput, each side's
//! process CPU time per activation: on a shared machine, throughput moves
//! with what else runs, CPU time much less.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use subagent_store::{Durability, EventLog, EventLogExt, RocksLog, RocksOptions};
use tracing::Level;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::Layer as _;

use super::stats::{process_cpu_seconds, Summary};
use crate::BenchResult;

/// How the OpenTelemetry layer is set up (`--tracing-layer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LayerSetup {
    /// The layer the project installs and recommends,
    /// [`subagent_runtime::otel::layer`]: no code location, target or
    /// thread, no busy and idle times, no OpenTelemetry context attached on
    /// enter.
    Subagents,
    /// The project's layer with OpenTelemetry's context attached on every
    /// enter (`with_context_activation(true)`, the layer's default), so
    /// OpenTelemetry-native code inside a provider's step sees the span as
    /// `Context::current()`.
    Activating,
    /// `tracing_opentelemetry::layer()` as it comes: each span also carries
    /// its code location, target and thread, records its busy and idle
    /// time, and attaches its context on every enter.
    Defaults,
    /// No OpenTelemetry layer: every `info` span is built, entered and
    /// closed in `tracing-subscriber`'s registry alone, so no event keeps
    /// a trace context. What the runtime's own instrumentation costs a
    /// host that collects spans, before any exporter's layer.
    Registry,
}

/// Which sides of the table run (`--tracing-sides`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Sides {
    /// Both, alternating: the table's ratios.
    Both,
    /// Tracing off alone.
    Off,
    /// Tracing on alone.
    On,
}

impl Sides {
    /// The sides to run, in order: `false` is tracing off.
    fn traced(self) -> &'static [bool] {
        match self {
            Sides::Both => &[false, true],
            Sides::Off => &[false],
            Sides::On => &[true],
        }
    }
}

/// Whether the installed subscriber builds spans now.
static TRACING_ON: AtomicBool = AtomicBool::new(false);

/// Spans the registry built, counted by [`CountSpans`]: the registry-only
/// side's proof that it built them, as the events' trace context is the
/// OpenTelemetry sides'.
static SPANS_BUILT: AtomicU64 = AtomicU64::new(0);

/// Counts the spans the registry builds, and does nothing else.
struct CountSpans;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountSpans {
    fn on_new_span(
        &self,
        _: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        SPANS_BUILT.fetch_add(1, Ordering::Relaxed);
    }
}

/// Installs, as the process's default, a subscriber that builds every
/// `info` span as an exporting host's would, minus the exporter, while
/// [`TRACING_ON`] is set; while it is not, its filter disables every span
/// and event, which is what no subscriber costs plus one atomic load.
/// (A scoped default per run does not work: per-layer filters cache their
/// interest per callsite across dispatchers.)
fn install(provider: &SdkTracerProvider, setup: LayerSetup) -> BenchResult {
    let on = || {
        filter_fn(|metadata| TRACING_ON.load(Ordering::Relaxed) && *metadata.level() <= Level::INFO)
    };
    let tracer = || provider.tracer("subagents-bench");
    let registry = tracing_subscriber::registry();
    let installed = match setup {
        // A layer that only counts, filtered: the registry builds what it
        // lets through, and nothing else looks at it.
        LayerSetup::Registry => {
            tracing::subscriber::set_global_default(registry.with(CountSpans.with_filter(on())))
        }
        LayerSetup::Subagents => tracing::subscriber::set_global_default(
            registry.with(subagent_runtime::otel::layer(tracer()).with_filter(on())),
        ),
        LayerSetup::Defaults => tracing::subscriber::set_global_default(
            registry.with(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer())
                    .with_filter(on()),
            ),
        ),
        LayerSetup::Activating => tracing::subscriber::set_global_default(
            registry.with(
                subagent_runtime::otel::layer(tracer())
                    .with_context_activation(true)
                    .with_filter(on()),
            ),
        ),
    };
    installed.map_err(|err| format!("installing the tracing subscriber: {err}"))?;
    Ok(())
}

/// One side's runs: activations per second, and process CPU microseconds
/// per activation.
#[derive(Default)]
struct Side {
    rates: Vec<f64>,
    cpu_micros: Vec<f64>,
}

/// Prints the overhead table: Sync with 1 starter, Buffered with 64.
pub(super) fn run(
    runs: usize,
    setup: LayerSetup,
    sides: Sides,
    scaled: impl Fn(f64) -> usize,
    out: &mut dyn Write,
) -> BenchResult {
    let layer = match setup {
        LayerSetup::Subagents => {
            "spans built as OpenTelemetry does, the project's layer (subagent_runtime::otel), no exporter"
        }
        LayerSetup::Defaults => {
            "spans built as OpenTelemetry does, the layer's defaults, no exporter"
        }
        LayerSetup::Activating => {
            "spans built as OpenTelemetry does, the project's layer with context activation, no exporter"
        }
        LayerSetup::Registry => "spans built in tracing-subscriber's registry, no OpenTelemetry layer",
    };
    writeln!(
        out,
        "\ntracing overhead ({layer}), activations/s: median (min–max) of {runs} runs, alternating"
    )?;
    writeln!(
        out,
        "{:<9} {:>8} {:>6}  {:>24} {:>24} {:>9}  {:>20} {:>20} {:>9}",
        "mode",
        "starters",
        "count",
        "tracing off",
        "tracing on",
        "on/off",
        "CPU µs/act off",
        "CPU µs/act on",
        "on/off"
    )?;
    out.flush()?;
    let provider = SdkTracerProvider::builder().build();
    install(&provider, setup)?;
    for (durability, starters, total) in [
        // Runs of a second or more: shorter ones spread by a third.
        (Durability::Sync, 1, scaled(200.0)),
        (Durability::Buffered, 64, scaled(25600.0)),
    ] {
        eprintln!("… measuring tracing overhead, {durability:?} with {starters} starters");
        let (mut off, mut on) = (Side::default(), Side::default());
        for _ in 0..runs {
            for &traced in sides.traced() {
                let side = if traced { &mut on } else { &mut off };
                TRACING_ON.store(traced, Ordering::Relaxed);
                tracing::callsite::rebuild_interest_cache();
                let dir = tempfile::tempdir()?;
                let log: Arc<dyn EventLog> =
                    Arc::new(RocksLog::open(dir.path(), RocksOptions { durability })?);
                let tokio = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()?;
                let spans_before = SPANS_BUILT.load(Ordering::Relaxed);
                let cpu_before = process_cpu_seconds()?;
                let (rate, _) = tokio.block_on(super::activations::runtime_run(
                    Arc::clone(&log),
                    starters,
                    total,
                    super::activations::RunShape::default(),
                ))?;
                let cpu = process_cpu_seconds()? - cpu_before;
                // The two sides did what they say: spans were built only
                // with tracing on (counted in the registry without an
                // OpenTelemetry layer, and with one, their context is on
                // the events), and no event keeps a context without one.
                let spans = SPANS_BUILT.load(Ordering::Relaxed) - spans_before;
                if setup == LayerSetup::Registry && (spans > 0) != traced {
                    return Err(format!(
                        "tracing {} built {spans} spans in the registry",
                        if traced { "on" } else { "off" }
                    )
                    .into());
                }
                let with_context = log
                    .read_all(1)
                    .filter(|record| record.as_ref().is_ok_and(|r| r.trace.is_some()))
                    .count();
                if (with_context > 0) != (traced && setup != LayerSetup::Registry) {
                    return Err(format!(
                        "tracing {} recorded {with_context} events with a trace context",
                        if traced { "on" } else { "off" }
                    )
                    .into());
                }
                side.rates.push(rate);
                side.cpu_micros
                    .push(cpu * 1e6 / (total / starters * starters) as f64);
            }
        }
        let cell = |samples: &[f64]| {
            if samples.is_empty() {
                "-".to_owned()
            } else {
                Summary::of(samples).to_string()
            }
        };
        // The ratio of on to off, when both sides ran.
        let ratio = |off: &[f64], on: &[f64]| {
            if off.is_empty() || on.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.3}", Summary::of(on).median / Summary::of(off).median)
            }
        };
        writeln!(
            out,
            "{:<9} {:>8} {:>6}  {:>24} {:>24} {:>9}  {:>20} {:>20} {:>9}",
            format!("{durability:?}"),
            starters,
            total / starters * starters,
            cell(&off.rates),
            cell(&on.rates),
            ratio(&off.rates, &on.rates),
            cell(&off.cpu_micros),
            cell(&on.cpu_micros),
            ratio(&off.cpu_micros, &on.cpu_micros),
        )?;
        out.flush()?;
    }
    Ok(())
}
