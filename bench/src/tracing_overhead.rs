//! The cost of spans: `bench activations`' runtime figure with no
//! subscriber (spans disabled) against the same work with a subscriber
//! that builds every `info` span as OpenTelemetry does (real trace and
//! span ids, parents, attributes, the trace context kept on every event),
//! but exports nothing: the overhead a host pays for tracing before its
//! exporter's own cost. Runs alternate off and on, each on a fresh log and
//! a fresh async runtime whose threads have that subscriber as default.

use std::io::Write;
use std::sync::Arc;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use subagent_store::{Durability, EventLog, RocksLog, RocksOptions};
use tracing::Dispatch;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::Layer as _;

use super::stats::Summary;
use crate::BenchResult;

/// A subscriber that builds spans as an exporting host's would, minus the
/// exporter.
fn tracing_dispatch(provider: &SdkTracerProvider) -> Dispatch {
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("subagents-bench"))
        .with_filter(LevelFilter::INFO);
    Dispatch::new(tracing_subscriber::registry().with(layer))
}

/// A multi-threaded async runtime whose threads (and the caller's, inside
/// [`with_dispatch`]) use `dispatch`, or no subscriber at all.
fn runtime_with(dispatch: Option<Dispatch>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(dispatch) = dispatch {
        builder.on_thread_start(move || {
            // The worker's default for its whole life; the thread ends with
            // the runtime.
            std::mem::forget(tracing::dispatcher::set_default(&dispatch));
        });
    }
    builder.build()
}

fn with_dispatch<T>(dispatch: Option<&Dispatch>, work: impl FnOnce() -> T) -> T {
    match dispatch {
        Some(dispatch) => tracing::dispatcher::with_default(dispatch, work),
        None => work(),
    }
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
    let traced = tracing_dispatch(&provider);
    for (durability, starters, total) in [
        (Durability::Sync, 1, scaled(100.0)),
        (Durability::Buffered, 64, scaled(6400.0)),
    ] {
        eprintln!("… measuring tracing overhead, {durability:?} with {starters} starters");
        let mut off = Vec::new();
        let mut on = Vec::new();
        for _ in 0..runs {
            for (dispatch, rates) in [(None, &mut off), (Some(&traced), &mut on)] {
                let dir = tempfile::tempdir()?;
                let log: Arc<dyn EventLog> =
                    Arc::new(RocksLog::open(dir.path(), RocksOptions { durability })?);
                let tokio = runtime_with(dispatch.cloned())?;
                let (rate, _) = with_dispatch(dispatch, || {
                    tokio.block_on(super::activations::runtime_run(log, starters, total))
                })?;
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
