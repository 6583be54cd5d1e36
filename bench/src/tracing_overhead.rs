//! The cost of spans: `bench activations`' runtime figure with no
//! subscriber (spans disabled) against the same work with a subscriber
//! that builds every `info` span as OpenTelemetry does (real trace and
//! span ids, parents, attributes, the trace context kept on every event),
//! but exports nothing: the overhead a host pays for tracing before its
//! exporter's own cost. Runs alternate off and on, each on a fresh log and
//! a fresh async runtime; each checks that its events carry a trace
//! context exactly when tracing was on.

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

use super::stats::Summary;
use crate::BenchResult;

/// Whether the installed subscriber builds spans now.
static TRACING_ON: AtomicBool = AtomicBool::new(false);

/// Installs, as the process's default, a subscriber that builds every
/// `info` span as an exporting host's would, minus the exporter, while
/// [`TRACING_ON`] is set; while it is not, its filter disables every span
/// and event, which is what no subscriber costs plus one atomic load.
/// (A scoped default per run does not work: per-layer filters cache their
/// interest per callsite across dispatchers.)
fn install(provider: &SdkTracerProvider) -> BenchResult {
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("subagents-bench"))
        .with_filter(filter_fn(|metadata| {
            TRACING_ON.load(Ordering::Relaxed) && *metadata.level() <= Level::INFO
        }));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .map_err(|err| format!("installing the tracing subscriber: {err}"))?;
    Ok(())
}

/// Prints the overhead table: Sync with 1 starter, Buffered with 64.
pub(super) fn run(runs: usize, scaled: impl Fn(f64) -> usize, out: &mut dyn Write) -> BenchResult {
    writeln!(
        out,
        "\ntracing overhead (spans built as OpenTelemetry does, no exporter), activations/s: median (min–max) of {runs} runs, alternating"
    )?;
    writeln!(
        out,
        "{:<9} {:>8} {:>6}  {:>24} {:>24} {:>9}",
        "mode", "starters", "count", "tracing off", "tracing on", "on/off"
    )?;
    out.flush()?;
    let provider = SdkTracerProvider::builder().build();
    install(&provider)?;
    for (durability, starters, total) in [
        (Durability::Sync, 1, scaled(100.0)),
        (Durability::Buffered, 64, scaled(6400.0)),
    ] {
        eprintln!("… measuring tracing overhead, {durability:?} with {starters} starters");
        let mut off = Vec::new();
        let mut on = Vec::new();
        for _ in 0..runs {
            for (traced, rates) in [(false, &mut off), (true, &mut on)] {
                TRACING_ON.store(traced, Ordering::Relaxed);
                tracing::callsite::rebuild_interest_cache();
                let dir = tempfile::tempdir()?;
                let log: Arc<dyn EventLog> =
                    Arc::new(RocksLog::open(dir.path(), RocksOptions { durability })?);
                let tokio = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()?;
                let (rate, _) = tokio.block_on(super::activations::runtime_run(
                    Arc::clone(&log),
                    starters,
                    total,
                ))?;
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
                rates.push(rate);
            }
        }
        let (off, on) = (Summary::of(&off), Summary::of(&on));
        writeln!(
            out,
            "{:<9} {:>8} {:>6}  {:>24} {:>24} {:>9.3}",
            format!("{durability:?}"),
            starters,
            total / starters * starters,
            off.to_string(),
            on.to_string(),
            on.median / off.median,
        )?;
        out.flush()?;
    }
    Ok(())
}
