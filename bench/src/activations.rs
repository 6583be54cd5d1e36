//! `bench activations`: one-shot activations per second, start → settle →
//! dispose, with an instant in-process external agent, 1 and 64 concurrent
//! starters, Sync and Buffered, with p50 and p99 latency.
//!
//! Baseline: the durable-append floor of the same work. Each activation
//! records four transitions (start, published, settled, disposed), each its
//! own durable append; the baseline performs four appends of the same events
//! per activation straight on the log, without the runtime.
//!
//! `--store postgres` (or a `postgres://` URL) runs the same on `PgLog`,
//! each run in a fresh schema, and adds a raw `INSERT` column: four
//! single-row transactions per activation on plain connections
//! (`bench append --store postgres`'s raw side). `--shared` runs the
//! runtime there as one host of a shared log (`SubagentRuntime::open_shared`:
//! a follower, fenced appends, one command at a time) instead of the
//! single-writer engine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::io::Write;

use clap::Args;
use subagent_core::{
    ContentBlock, Delivery, Event, NewEvent, SessionId, StreamId, SubagentActivationSpec,
    SubagentError, SubagentResult, SubagentRunId,
};
use subagent_runtime::providers::InstantProvider;
use subagent_runtime::{Script, ScriptedHost, SubagentRuntime};
use subagent_store::{Durability, EventLog, ExpectedVersion, RocksLog, RocksOptions};
use tokio_util::sync::CancellationToken;

use super::args;
use super::stats::{percentile_ms, Summary};
use crate::BenchResult;

/// Arguments of `bench activations`.
#[derive(Args)]
pub struct ActivationArgs {
    /// Runs per figure (the median is reported), 1 to 1000.
    #[arg(long, default_value_t = 5, value_parser = args::count(args::RUNS))]
    runs: usize,
    /// Multiplies the number of activations per run: a finite number from
    /// 0.01 to 100.
    #[arg(long, default_value_t = 1.0, value_parser = args::scale, allow_hyphen_values = true)]
    scale: f64,
    /// `rocksdb` (the default), `postgres` (a private PostgreSQL server
    /// with fsync on, started for the run) or a `postgres://` URL.
    #[arg(long, default_value = "rocksdb", value_parser = super::append::store)]
    store: super::append::Store,
    /// How the tracing-overhead table's "on" side collects spans: through
    /// an OpenTelemetry layer, `subagents` (the default: the layer the
    /// project installs, `subagent_runtime::otel::layer`), `activating`
    /// (the project's, with OpenTelemetry's context attached on every
    /// enter) or `defaults` (the layer's own defaults, as a host first runs
    /// it); or `registry` (no OpenTelemetry layer: `tracing-subscriber`'s
    /// registry alone, the runtime's own instrumentation).
    #[arg(long, value_enum, default_value_t = super::tracing_overhead::LayerSetup::Subagents)]
    tracing_layer: super::tracing_overhead::LayerSetup,
    /// Which sides of the tracing-overhead table to run: `both` (the
    /// default, alternating), or `off` or `on` alone (to profile one side,
    /// e.g. under callgrind).
    #[arg(long, value_enum, default_value_t = super::tracing_overhead::Sides::Both)]
    tracing_sides: super::tracing_overhead::Sides,
    /// Run only the tracing-overhead table (RocksDB only).
    #[arg(long)]
    tracing_only: bool,
    /// On PostgreSQL, run the runtime as a host of a shared log
    /// (`open_shared`) rather than as the log's only writer.
    #[arg(long)]
    shared: bool,
    /// Give each starter a root of its own (a tree per starter) instead of
    /// one root for all: a shared host runs one command per tree at a time.
    #[arg(long)]
    tree_per_starter: bool,
}

/// How a run is set up, beyond its log and size.
#[derive(Clone, Copy, Default)]
pub(super) struct RunShape {
    /// The runtime as a host of a shared log.
    pub(super) shared: bool,
    /// A root per starter.
    pub(super) tree_per_starter: bool,
}

/// Opens a fresh log for one run.
enum Logs {
    Rocks,
    Postgres(Box<super::append_pg::Server>),
}

/// What a run's log leaves behind, removed when the run ends.
enum Cleanup {
    /// The RocksDB directory.
    Dir(#[allow(dead_code)] tempfile::TempDir),
    /// The PostgreSQL schema.
    Schema(#[allow(dead_code)] Box<super::append_pg::Scratch>),
}

/// A run's log, and what removes it.
type RunLog = (Arc<dyn EventLog>, Cleanup);

impl Logs {
    fn open(&self, durability: Durability) -> Result<RunLog, Box<dyn std::error::Error>> {
        Ok(match self {
            Logs::Rocks => {
                let dir = tempfile::tempdir()?;
                let log = RocksLog::open(dir.path(), RocksOptions { durability })?;
                (Arc::new(log), Cleanup::Dir(dir))
            }
            Logs::Postgres(server) => {
                let (options, scratch) = server.scratch(durability);
                (
                    Arc::new(subagent_pg::PgLog::connect(options)?),
                    Cleanup::Schema(Box::new(scratch)),
                )
            }
        })
    }
}

fn spec() -> SubagentActivationSpec {
    SubagentActivationSpec::with_text_prompt("instant", "task", "go", Delivery::Caller)
}

/// One run: (activations per second, latencies).
pub(super) async fn runtime_run(
    log: Arc<dyn EventLog>,
    starters: usize,
    total: usize,
    shape: RunShape,
) -> Result<(f64, Vec<Duration>), Box<dyn std::error::Error>> {
    let agents = Arc::new(ScriptedHost::new(Script::reply("ok")));
    let (runtime, _) = if shape.shared {
        SubagentRuntime::open_shared(
            log,
            agents,
            subagent_runtime::CapacityLimits::default(),
            subagent_runtime::SharedHost::new("bench", Duration::from_secs(10)),
        )
        .await?
    } else {
        SubagentRuntime::open(log, agents).await?
    };
    runtime.register_provider(Arc::new(InstantProvider)).await?;
    let shared_root = runtime.open_root("bench").await?;
    let mut roots = Vec::with_capacity(starters);
    for _ in 0..starters {
        roots.push(if shape.tree_per_starter {
            runtime.open_root("bench").await?
        } else {
            shared_root.clone()
        });
    }
    let per_starter = total / starters;
    let started = Instant::now();
    let tasks: Vec<_> = roots
        .into_iter()
        .map(|root| {
            let runtime = runtime.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_starter);
                for _ in 0..per_starter {
                    let began = Instant::now();
                    let activation = runtime
                        .start_activation(&root, spec(), CancellationToken::new())
                        .await?;
                    activation.result().await?;
                    activation.dispose().await?;
                    latencies.push(began.elapsed());
                }
                Ok::<_, SubagentError>(latencies)
            })
        })
        .collect();
    let latencies = super::stats::join_latencies(tasks).await?;
    Ok((
        (per_starter * starters) as f64 / started.elapsed().as_secs_f64(),
        latencies,
    ))
}

/// The append floor: four durable appends per activation, same events.
async fn floor_run(
    log: Arc<dyn EventLog>,
    starters: usize,
    total: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let per_starter = total / starters;
    let started = Instant::now();
    let tasks: Vec<_> = (0..starters)
        .map(|_| {
            let log = log.clone();
            tokio::spawn(async move {
                for _ in 0..per_starter {
                    let child = SessionId::new();
                    let run_id = SubagentRunId::from_uuid(*child.as_uuid());
                    let stream = StreamId::Session(child);
                    for event in [
                        Event::RunRequested {
                            run_id,
                            provider: "instant".into(),
                            delivery: Delivery::Caller,
                            requested_by: None,
                        },
                        Event::RunStarted { run_id },
                        Event::RunSettled {
                            run_id,
                            result: SubagentResult::completed(vec![ContentBlock::text("ok")]),
                        },
                        Event::RunDisposed {
                            run_id,
                            cleanup_error: None,
                        },
                    ] {
                        log.append(stream, ExpectedVersion::Any, vec![NewEvent::new(event)])
                            .await?;
                    }
                }
                Ok::<_, subagent_store::StoreError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok((per_starter * starters) as f64 / started.elapsed().as_secs_f64())
}

/// Runs `bench activations`.
///
/// # Errors
/// Storage or runtime failures.
pub(super) fn run(args: &ActivationArgs, out: &mut dyn Write) -> BenchResult {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let scaled = |count: f64| ((count * args.scale).max(64.0)) as usize;
    if args.shared && matches!(args.store, super::append::Store::Rocks) {
        return Err("--shared needs --store postgres: a RocksDB log has a single writer".into());
    }
    if args.tracing_only {
        if !matches!(args.store, super::append::Store::Rocks) {
            return Err("--tracing-only runs on RocksDB: the tracing table has no --store".into());
        }
        return super::tracing_overhead::run(
            args.runs,
            args.tracing_layer,
            args.tracing_sides,
            scaled,
            out,
        );
    }
    let logs = match &args.store {
        super::append::Store::Rocks => Logs::Rocks,
        super::append::Store::Postgres(url) => {
            Logs::Postgres(Box::new(super::append_pg::Server::new(url.as_deref())?))
        }
    };
    let bytes = Arc::new(super::append::encoded_payload()?);
    let on = match &logs {
        Logs::Rocks => "RocksDB",
        Logs::Postgres(_) if args.shared => "PostgreSQL, fsync on, the runtime as a shared host",
        Logs::Postgres(_) => "PostgreSQL, fsync on",
    };
    let trees = if args.tree_per_starter {
        ", a tree per starter"
    } else {
        ", one tree"
    };
    writeln!(out, "one-shot activations (start → settle → dispose) on {on}{trees}, activations/s: median (min–max) of {} runs", args.runs)?;
    out.flush()?;
    writeln!(
        out,
        "{:<9} {:>8} {:>6}  {:>24} {:>9} {:>9}  {:>24} {:>10}  {:>24} {:>8}",
        "mode",
        "starters",
        "count",
        "runtime",
        "p50 ms",
        "p99 ms",
        "append floor",
        "rt/floor",
        "raw insert ×4",
        "rt/raw"
    )?;
    out.flush()?;
    for (durability, starters, total) in [
        (Durability::Sync, 1, scaled(100.0)),
        (Durability::Sync, 64, scaled(640.0)),
        (Durability::Buffered, 1, scaled(2000.0)),
        (Durability::Buffered, 64, scaled(6400.0)),
    ] {
        eprintln!("… measuring {durability:?} with {starters} starters");
        let mut rates = Vec::new();
        let mut latencies = Vec::new();
        let mut floors = Vec::new();
        let mut raws = Vec::new();
        for _ in 0..args.runs {
            let (log, _dir) = logs.open(durability)?;
            let (rate, mut run_latencies) = tokio.block_on(runtime_run(
                log,
                starters,
                total,
                RunShape {
                    shared: args.shared,
                    tree_per_starter: args.tree_per_starter,
                },
            ))?;
            rates.push(rate);
            latencies.append(&mut run_latencies);
            let (log, _dir) = logs.open(durability)?;
            floors.push(tokio.block_on(floor_run(log, starters, total))?);
            if let Logs::Postgres(server) = &logs {
                let config = super::append::Config {
                    durability,
                    appenders: starters,
                    appends: total / starters * starters * 4,
                    batch: 1,
                };
                raws.push(super::append_pg::raw_run(server, &config, &bytes, &tokio)? / 4.0);
            }
        }
        latencies.sort();
        let (rates, floors) = (Summary::of(&rates), Summary::of(&floors));
        let raw = (!raws.is_empty()).then(|| Summary::of(&raws));
        writeln!(
            out,
            "{:<9} {:>8} {:>6}  {:>24} {:>9.2} {:>9.2}  {:>24} {:>10.2}  {:>24} {:>8}",
            format!("{durability:?}"),
            starters,
            total / starters * starters,
            rates.to_string(),
            percentile_ms(&latencies, 0.5),
            percentile_ms(&latencies, 0.99),
            floors.to_string(),
            rates.median / floors.median,
            raw.map_or_else(|| "-".to_owned(), |raw| raw.to_string()),
            raw.map_or_else(
                || "-".to_owned(),
                |raw| format!("{:.2}", rates.median / raw.median)
            ),
        )?;
        out.flush()?;
    }
    if matches!(logs, Logs::Rocks) {
        super::tracing_overhead::run(
            args.runs,
            args.tracing_layer,
            args.tracing_sides,
            scaled,
            out,
        )?;
    }
    Ok(())
}
