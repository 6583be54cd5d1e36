//! `bench delegation`: children started per second by a running agent
//! through the runtime's own `subagent` tool, against the same starts made
//! by host code calling `SubagentRuntime::start_activation` directly, with
//! 1 starter (sequential starts) and 16 concurrent starters, on RocksDB with
//! `Sync` durability, and p50 and p99 latency of one start.
//!
//! Both sides start the same children: on the `spawn` provider, label
//! `leaf`, prompt `go`, delivery `parent`, each answering at once
//! (`Script::reply`), under the same parents: "boss" children of one root,
//! one boss per starter, each in the middle of its first turn for the whole
//! measurement (so the children's completion notices wait in its inbox on
//! both sides, and no boss turn runs during it). **Via the tool** each
//! boss's agent calls `subagent` through its turn's tool port, one call
//! after the other (the runtime records `ToolCalled`, starts the child as
//! the boss, records `ToolReturned`); **direct** (the baseline) a host task
//! per boss calls `start_activation` as the boss, one start after the other.
//!
//! A run is timed from the first start to the last child's settlement: the
//! last `subagent/end` notice of a boss's child (announced once the child's
//! settlement is durable, when its handle's `result()` resolves). A start's
//! latency is its call, until the handle (direct) or the call's result
//! (via the tool) is back. `ev/child` is the log's events appended in that
//! window, per child. Each side of each run has a fresh log directory and
//! runtime; the sides alternate run by run (direct, tool, direct, tool, …).

use std::collections::HashSet;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use subagent_core::{
    content::plain_text, Delivery, SessionId, SubagentActivationSpec, SubagentError,
    SubagentStopReason,
};
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::{
    Agent, AgentHost, AgentSpec, BoxFuture, Notice, Script, ScriptedHost, SubagentActivation,
    SubagentRuntime, ToolCall, TurnEnd, TurnInput,
};
use subagent_store::{Durability, EventLog, RocksLog, RocksOptions};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::args;
use super::stats::{percentile_ms, Summary};
use crate::BenchResult;

/// Arguments of `bench delegation`.
#[derive(Args)]
pub struct DelegationArgs {
    /// Runs per figure (the median is reported), 1 to 1000.
    #[arg(long, default_value_t = 5, value_parser = args::count(args::RUNS))]
    runs: usize,
    /// Multiplies the number of children per run: a finite number from
    /// 0.01 to 100.
    #[arg(long, default_value_t = 1.0, value_parser = args::scale, allow_hyphen_values = true)]
    scale: f64,
}

/// The bosses' label: the host builds a [`Boss`] for it, a scripted agent
/// for every other.
const BOSS: &str = "boss";

/// What a boss does in its first turn, sent once its turn is running.
struct Job {
    /// `subagent` calls to make, one after the other (0 on the direct side).
    calls: usize,
    /// Each call's latency, or the first failed call's output.
    done: oneshot::Sender<Result<Vec<Duration>, String>>,
    /// The turn ends when this fires (or is dropped).
    release: oneshot::Receiver<()>,
}

/// A boss whose first turn is running: its session, and where its job goes.
type Ready = (SessionId, oneshot::Sender<Job>);

/// Builds a [`Boss`] for each boss, and a scripted agent answering "ok" at
/// once for every other session (the children).
struct BenchHost {
    scripts: ScriptedHost,
    ready: mpsc::UnboundedSender<Ready>,
}

impl AgentHost for BenchHost {
    fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        if spec.label == BOSS {
            let boss = Boss {
                session: spec.session,
                ready: Some(self.ready.clone()),
            };
            return Box::pin(async move { Ok(Box::new(boss) as Box<dyn Agent>) });
        }
        self.scripts.create(spec)
    }
}

/// A boss: its first turn takes a [`Job`], makes its calls, and holds until
/// released; its later turns (the children's completion notices) end at
/// once.
struct Boss {
    session: SessionId,
    /// Taken by the first turn.
    ready: Option<mpsc::UnboundedSender<Ready>>,
}

impl Agent for Boss {
    fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd> {
        Box::pin(async move {
            if let Some(ready) = self.ready.take() {
                let (job, orders) = oneshot::channel();
                if ready.send((self.session, job)).is_ok() {
                    if let Ok(job) = orders.await {
                        let _ = job.done.send(call_subagent(&input, job.calls).await);
                        let _ = job.release.await;
                    }
                }
            }
            TurnEnd {
                stop_reason: SubagentStopReason::Completed,
                diagnostic: None,
                structured: None,
            }
        })
    }
}

/// Makes `calls` `subagent` calls through the turn's tool port, one after
/// the other: each call's latency, or the first error result's text.
async fn call_subagent(input: &TurnInput, calls: usize) -> Result<Vec<Duration>, String> {
    let mut latencies = Vec::with_capacity(calls);
    for call in 0..calls {
        let began = Instant::now();
        let output = input
            .tools
            .call(ToolCall {
                call_id: format!("call-{call}"),
                name: "subagent".into(),
                input: json!({"provider": "spawn", "label": "leaf", "prompt": "go"}),
            })
            .await;
        latencies.push(began.elapsed());
        if output.is_error {
            return Err(format!("subagent: {}", plain_text(&output.output)));
        }
    }
    Ok(latencies)
}

/// Who starts the children.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    /// Host tasks calling `start_activation` as the bosses.
    Direct,
    /// The bosses' agents calling `subagent`.
    Tool,
}

/// One side's run.
struct Run {
    /// Children started and settled a second.
    rate: f64,
    /// Each start's latency.
    latencies: Vec<Duration>,
    /// Events appended in the timed window, per child.
    events_per_child: f64,
}

/// The moment the `total`-th child of a boss in `bosses` settled: its
/// `subagent/end` notice.
async fn settled(
    mut notices: broadcast::Receiver<Notice>,
    bosses: HashSet<SessionId>,
    total: usize,
) -> Result<Instant, String> {
    let mut ended = 0;
    while ended < total {
        match notices.recv().await {
            Ok(Notice::End { parent, .. }) if bosses.contains(&parent) => ended += 1,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                return Err(format!(
                    "the settlement count fell {missed} notices behind the runtime"
                ))
            }
            Err(broadcast::error::RecvError::Closed) => {
                return Err(format!("the runtime closed after {ended} of {total} ends"))
            }
        }
    }
    Ok(Instant::now())
}

/// The child spec both sides start (the tool's call says the same).
fn leaf() -> SubagentActivationSpec {
    SubagentActivationSpec::with_text_prompt("spawn", "leaf", "go", Delivery::Parent)
}

/// One run of `side`: `starters` bosses, each starting `total / starters`
/// children one after the other, on a fresh RocksDB log (`Sync`).
async fn side_run(
    side: Side,
    starters: usize,
    total: usize,
) -> Result<Run, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log: Arc<dyn EventLog> = Arc::new(RocksLog::open(
        dir.path(),
        RocksOptions {
            durability: Durability::Sync,
        },
    )?);
    let (ready, mut readied) = mpsc::unbounded_channel();
    let host = BenchHost {
        scripts: ScriptedHost::new(Script::reply("ok")),
        ready,
    };
    let (runtime, _) = SubagentRuntime::open(log, Arc::new(host)).await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    let root = runtime.open_root("bench").await?;
    let mut bosses: Vec<SubagentActivation> = Vec::with_capacity(starters);
    for _ in 0..starters {
        let spec =
            SubagentActivationSpec::with_text_prompt("spawn", BOSS, "lead", Delivery::Caller);
        bosses.push(
            runtime
                .start_activation(&root, spec, CancellationToken::new())
                .await?,
        );
    }
    // Every boss in its first turn before the first start.
    let mut jobs = Vec::with_capacity(starters);
    while jobs.len() < starters {
        jobs.push(readied.recv().await.ok_or("a boss's agent was dropped")?);
    }
    let per_starter = total / starters;
    let total = per_starter * starters;
    let parents: HashSet<SessionId> = jobs.iter().map(|(session, _)| *session).collect();
    let ends = tokio::spawn(settled(runtime.notices()?, parents, total));
    let mut releases = Vec::with_capacity(starters);
    let mut answers = Vec::with_capacity(starters);
    let head = runtime.log().head();
    let began = Instant::now();
    for (session, job) in jobs {
        let (release, held) = oneshot::channel();
        let (done, answer) = oneshot::channel();
        releases.push(release);
        let calls = if side == Side::Tool { per_starter } else { 0 };
        job.send(Job {
            calls,
            done,
            release: held,
        })
        .map_err(|_| "a boss's turn ended before its job")?;
        answers.push(match side {
            Side::Tool => tokio::spawn(async move {
                answer
                    .await
                    .map_err(|_| "a boss's turn ended before its calls".to_owned())?
            }),
            Side::Direct => {
                let runtime = runtime.clone();
                let boss = bosses
                    .iter()
                    .find(|boss| boss.child_id() == session)
                    .ok_or("a boss the runtime did not start")?
                    .agent();
                tokio::spawn(async move {
                    let mut latencies = Vec::with_capacity(per_starter);
                    for _ in 0..per_starter {
                        let began = Instant::now();
                        // The handle is let go, as the tool does: the child
                        // lives on, and its result reaches the boss.
                        runtime
                            .start_activation(&boss, leaf(), CancellationToken::new())
                            .await
                            .map_err(|err| format!("start_activation: {err}"))?;
                        latencies.push(began.elapsed());
                    }
                    Ok(latencies)
                })
            }
        });
    }
    let mut latencies = Vec::with_capacity(total);
    for answer in answers {
        match answer.await? {
            Ok(mut starts) => latencies.append(&mut starts),
            Err(err) => {
                ends.abort();
                return Err(err.into());
            }
        }
    }
    let finished = ends.await??;
    let elapsed = finished.duration_since(began).as_secs_f64();
    let events = runtime.log().head() - head;
    drop(releases);
    runtime.close().await?;
    Ok(Run {
        rate: total as f64 / elapsed,
        latencies,
        events_per_child: events as f64 / total as f64,
    })
}

/// A side's runs: the rates, every latency (sorted), the events per child.
#[derive(Default)]
struct Tally {
    rates: Vec<f64>,
    latencies: Vec<Duration>,
    events: Vec<f64>,
}

impl Tally {
    fn add(&mut self, run: Run) {
        self.rates.push(run.rate);
        self.latencies.extend(run.latencies);
        self.events.push(run.events_per_child);
    }
}

/// Runs `bench delegation`.
///
/// # Errors
/// Storage or runtime failures, a start refused.
pub(super) fn run(args: &DelegationArgs, out: &mut dyn Write) -> BenchResult {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let scaled = |count: f64, starters: usize| {
        let count = ((count * args.scale).round() as usize).max(starters);
        count / starters * starters
    };
    writeln!(out, "children started through the `subagent` tool vs `start_activation` by the host, as live boss sessions, on RocksDB, Sync, children/s (first start → last child settled): median (min–max) of {} runs; latency of one start", args.runs)?;
    out.flush()?;
    writeln!(
        out,
        "{:>8} {:>8}  {:>24} {:>8} {:>8} {:>9}  {:>24} {:>8} {:>8} {:>9}  {:>11}",
        "starters",
        "children",
        "direct /s",
        "p50 ms",
        "p99 ms",
        "ev/child",
        "via tool /s",
        "p50 ms",
        "p99 ms",
        "ev/child",
        "tool/direct"
    )?;
    out.flush()?;
    for (starters, total) in [(1, scaled(500.0, 1)), (16, scaled(3200.0, 16))] {
        eprintln!("… measuring {starters} starters, {total} children");
        let (mut direct, mut tool) = (Tally::default(), Tally::default());
        for _ in 0..args.runs {
            direct.add(tokio.block_on(side_run(Side::Direct, starters, total))?);
            tool.add(tokio.block_on(side_run(Side::Tool, starters, total))?);
        }
        direct.latencies.sort();
        tool.latencies.sort();
        let (direct_rates, tool_rates) = (Summary::of(&direct.rates), Summary::of(&tool.rates));
        writeln!(
            out,
            "{:>8} {:>8}  {:>24} {:>8.2} {:>8.2} {:>9.1}  {:>24} {:>8.2} {:>8.2} {:>9.1}  {:>11.2}",
            starters,
            total,
            direct_rates.to_string(),
            percentile_ms(&direct.latencies, 0.5),
            percentile_ms(&direct.latencies, 0.99),
            Summary::of(&direct.events).median,
            tool_rates.to_string(),
            percentile_ms(&tool.latencies, 0.5),
            percentile_ms(&tool.latencies, 0.99),
            Summary::of(&tool.events).median,
            tool_rates.median / direct_rates.median,
        )?;
        out.flush()?;
    }
    Ok(())
}
