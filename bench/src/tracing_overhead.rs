//! The cost of spans: `bench activations`' runtime figure with no
//! subscriber (spans disabled) against the same work with a subscriber
//! that builds every `info` span as OpenTelemetry does (real trace and
//! span ids, parents, attributes, the trace context kept on every event),
//! but exports nothing: the overhead a host pays for tracing before its
//! exporter's own cost. Runs alternate off and on, each on a fresh log and
//! a fresh async runtime; each checks that its events carry a trace
//! context exactly when tracing was on. Beside throughput, each side's
//! process CPU time per activation: on a shared machine, throughput moves
//! with what else runs, CPU time much less.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// `tracing_opentelemetry::layer()` as it comes: each span records its
    /// busy and idle time, and every enter attaches its OpenTelemetry
    /// context (so OpenTelemetry-instrumented code inside it sees the span).
    Default,
    /// Neither: `with_tracked_inactivity(false)` and
    /// `with_context_activation(false)`. Spans, parents, links and the
    /// events' trace context are the same.
    Lean,
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

/// Installs, as the process's default, a subscriber that builds every
/// `info` span as an exporting host's would, minus the exporter, while
/// [`TRACING_ON`] is set; while it is not, its filter disables every span
/// and event, which is what no subscriber costs plus one atomic load.
/// (A scoped default per run does not work: per-layer filters cache their
/// interest per callsite across dispatchers.)
fn install(provider: &SdkTracerProvider, setup: LayerSetup) -> BenchResult {
    let defaults = setup == LayerSetup::Default;
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("subagents-bench"))
        .with_tracked_inactivity(defaults)
        .with_context_activation(defaults)
        .with_filter(filter_fn(|metadata| {
            TRACING_ON.load(Ordering::Relaxed) && *metadata.level() <= Level::INFO
        }));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .map_err(|err| format!("installing the tracing subscriber: {err}"))?;
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
        LayerSetup::Default => "the layer's defaults",
        LayerSetup::Lean => "a lean layer: no timings, no context activation",
    };
    writeln!(
        out,
        "\ntracing overhead (spans built as OpenTelemetry does, {layer}, no exporter), activations/s: median (min–max) of {runs} runs, alternating"
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
                let cpu_before = process_cpu_seconds()?;
                let (rate, _) = tokio.block_on(super::activations::runtime_run(
                    Arc::clone(&log),
                    starters,
                    total,
                    super::activations::RunShape::default(),
                ))?;
                let cpu = process_cpu_seconds()? - cpu_before;
                // The two sides did what they say: spans were built (their
                // context is on the events) only with tracing on.
                let with_context = log
                    .read_all(1)
                    .filter(|record| record.as_ref().is_ok_and(|r| r.trace.is_some()))
                    .count();
                if (with_context > 0) != traced {
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
