//! `bench gateway`: the gateway's cost over the runtime it fronts, measured
//! over real HTTP on 127.0.0.1 against the same work in process.
//!
//! - **prompt**: `POST /v1/prompt` round trips (request to receipt, the
//!   message durably in the child's inbox) per second, with p50 and p99,
//!   against an in-process `send_message` to the same kind of child, 1 and
//!   16 concurrent clients (each with its own root and child), under `Sync`
//!   and `Buffered` durability. Both wake the child, whose echo agent runs a
//!   turn in the background either way.
//! - **SSE fan-out**: 1 and 100 subscribers to `GET /v1/events` against the
//!   same number of direct log subscriptions (`EventLog::subscribe`):
//!   catching up a log of `--events` events (events/s delivered to each
//!   subscriber, and in total), then live (the time from an append being
//!   acknowledged until every subscriber has it, p50 and p99).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use subagent_core::{ContentBlock, SubagentError};
use subagent_store::{Durability, EventLog, SubscriptionItem};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

use super::args;
use super::served::{Served, TOKEN};
use super::sse::Frames;
use super::stats::{percentile_ms, Summary};
use crate::BenchResult;

/// Arguments of `bench gateway`.
#[derive(Args)]
pub struct GatewayArgs {
    /// Runs per figure (the median is reported), 1 to 1000.
    #[arg(long, default_value_t = 3, value_parser = args::count(args::RUNS))]
    runs: usize,
    /// Prompts per client per run, 1 to 1,000,000.
    #[arg(long, default_value_t = 200, value_parser = args::count(args::ROUND_TRIPS))]
    prompts: usize,
    /// Events in the log the subscribers catch up on, 1,000 to 100,000,000.
    #[arg(long, default_value_t = 20_000, value_parser = args::count_u64(args::EVENTS))]
    events: u64,
}

/// How a prompt travels.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    Http,
    InProcess,
}

/// Runs `clients` concurrent clients of `prompts` prompts each; the rate
/// and every latency.
async fn prompt_run(
    durability: Durability,
    clients: usize,
    prompts: usize,
    path: Path,
) -> Result<(f64, Vec<Duration>), Box<dyn std::error::Error>> {
    let served = Served::start(durability).await?;
    let mut pairs = Vec::with_capacity(clients);
    for _ in 0..clients {
        pairs.push(served.pair().await?);
    }
    let started = Instant::now();
    let tasks: Vec<_> = pairs
        .into_iter()
        .map(|(root, child)| {
            let (runtime, http, base) = (served.runtime.clone(), served.http.clone(), served.base.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(prompts);
                for index in 0..prompts {
                    let began = Instant::now();
                    match path {
                        Path::Http => {
                            let body = json!({
                                "address": {"childSessionId": child, "parentSessionId": root.session(), "mode": "continuable"},
                                "delivery": "queue",
                                "requestId": format!("r-{index}"),
                                "content": [{"type": "text", "text": "ping"}],
                            });
                            let response = http
                                .post(format!("{base}/v1/prompt"))
                                .bearer_auth(TOKEN)
                                .json(&body)
                                .send()
                                .await
                                .map_err(SubagentError::internal_from)?;
                            if !response.status().is_success() {
                                let text = response.text().await.unwrap_or_default();
                                return Err(SubagentError::internal(format!("prompt refused: {text}")));
                            }
                            response
                                .bytes()
                                .await
                                .map_err(SubagentError::internal_from)?;
                        }
                        Path::InProcess => {
                            runtime
                                .send_message(
                                    &root,
                                    child,
                                    vec![ContentBlock::text("ping")],
                                    CancellationToken::new(),
                                )
                                .await?;
                        }
                    }
                    latencies.push(began.elapsed());
                }
                Ok::<_, SubagentError>(latencies)
            })
        })
        .collect();
    let latencies = super::stats::join_latencies(tasks).await?;
    let rate = (clients * prompts) as f64 / started.elapsed().as_secs_f64();
    served.stop().await?;
    Ok((rate, latencies))
}

/// Fills a served log to at least `events` events with parent → child
/// messages (each wakes the child's echo turn).
async fn fill(served: &Served, events: u64) -> Result<(), Box<dyn std::error::Error>> {
    let (root, child) = served.pair().await?;
    while served.log.head() < events {
        let sends: Vec<_> = (0..64)
            .map(|_| {
                let (runtime, root) = (served.runtime.clone(), root.clone());
                tokio::spawn(async move {
                    runtime
                        .send_message(
                            &root,
                            child,
                            vec![ContentBlock::text("filler")],
                            CancellationToken::new(),
                        )
                        .await
                })
            })
            .collect();
        for sent in sends {
            sent.await??;
        }
    }
    // Let the child's last turn land, so the head holds still.
    let mut head = served.log.head();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = served.log.head();
        if now == head {
            return Ok(());
        }
        head = now;
    }
}

/// One SSE subscriber: reads frames and reports the last position seen.
/// Returns once the stream ends or `stop` fires.
async fn sse_subscriber(
    http: reqwest::Client,
    base: String,
    seen: tokio::sync::watch::Sender<u64>,
    caught_up: mpsc::UnboundedSender<()>,
    stop: CancellationToken,
) -> Result<(), SubagentError> {
    let mut frames = Frames::open(&http, &base, "after=0", TOKEN).await?;
    loop {
        let frame = tokio::select! {
            frame = frames.next() => frame?,
            () = stop.cancelled() => return Ok(()),
        };
        let Some(frame) = frame else { return Ok(()) };
        if let Some(position) = frame.id {
            seen.send_replace(position);
        } else if frame.event == "caught-up" {
            let _ = caught_up.send(());
        }
    }
}

/// One direct subscriber: the same, on `EventLog::subscribe`.
async fn log_subscriber(
    log: Arc<dyn EventLog>,
    seen: tokio::sync::watch::Sender<u64>,
    caught_up: mpsc::UnboundedSender<()>,
    stop: CancellationToken,
) -> Result<(), SubagentError> {
    let mut subscription = log.subscribe(1);
    loop {
        let item = tokio::select! {
            item = subscription.next() => item,
            () = stop.cancelled() => return Ok(()),
        };
        match item {
            None => return Ok(()),
            Some(Ok(SubscriptionItem::Event(record))) => {
                seen.send_replace(record.position);
            }
            Some(Ok(SubscriptionItem::CaughtUp { .. })) => {
                let _ = caught_up.send(());
            }
            Some(Err(err)) => return Err(SubagentError::internal_from(err)),
        }
    }
}

/// What one fan-out run measured.
struct FanOut {
    /// Events delivered per second to each subscriber while catching up.
    catch_up_per_subscriber: f64,
    /// Time from an acknowledged append until every subscriber had it.
    live: Vec<Duration>,
}

/// `subscribers` subscribers catch up on `served`'s log and then follow
/// `live_sends` appends.
async fn fan_out_run(
    served: &Served,
    subscribers: usize,
    path: Path,
    live_sends: usize,
) -> Result<FanOut, Box<dyn std::error::Error>> {
    let stop = CancellationToken::new();
    let (caught_up, mut caught_up_signals) = mpsc::unbounded_channel();
    let head = served.log.head();
    let started = Instant::now();
    let mut watches = Vec::with_capacity(subscribers);
    let mut tasks = Vec::with_capacity(subscribers);
    for _ in 0..subscribers {
        let (seen, watch) = tokio::sync::watch::channel(0u64);
        watches.push(watch);
        let (caught_up, stop) = (caught_up.clone(), stop.clone());
        tasks.push(match path {
            Path::Http => tokio::spawn(sse_subscriber(
                served.http.clone(),
                served.base.clone(),
                seen,
                caught_up,
                stop,
            )),
            Path::InProcess => tokio::spawn(log_subscriber(
                Arc::clone(&served.log),
                seen,
                caught_up,
                stop,
            )),
        });
    }
    for _ in 0..subscribers {
        caught_up_signals
            .recv()
            .await
            .ok_or_else(|| SubagentError::internal("a subscriber ended before catching up"))?;
    }
    let catch_up = started.elapsed();
    let (root, child) = served.pair().await?;
    let mut live = Vec::with_capacity(live_sends);
    for _ in 0..live_sends {
        served
            .runtime
            .send_message(
                &root,
                child,
                vec![ContentBlock::text("live")],
                CancellationToken::new(),
            )
            .await?;
        let acknowledged = Instant::now();
        let target = served.log.head();
        for watch in &mut watches {
            watch.wait_for(|seen| *seen >= target).await?;
        }
        live.push(acknowledged.elapsed());
    }
    stop.cancel();
    for task in tasks {
        task.await??;
    }
    Ok(FanOut {
        catch_up_per_subscriber: head as f64 / catch_up.as_secs_f64(),
        live,
    })
}

/// Runs `bench gateway`.
///
/// # Errors
/// Storage, runtime or HTTP failures.
pub(super) fn run(args: &GatewayArgs, out: &mut dyn Write) -> BenchResult {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    writeln!(
        out,
        "prompt round trips/s over HTTP vs in-process send_message: median (min–max) of {} runs, {} prompts per client",
        args.runs, args.prompts
    )?;
    writeln!(
        out,
        "{:<9} {:>7}  {:>22} {:>7} {:>7}  {:>22} {:>7} {:>7}  {:>9}",
        "mode",
        "clients",
        "HTTP prompt",
        "p50 ms",
        "p99 ms",
        "in-process",
        "p50 ms",
        "p99 ms",
        "HTTP/in"
    )?;
    out.flush()?;
    for (durability, clients) in [
        (Durability::Sync, 1),
        (Durability::Sync, 16),
        (Durability::Buffered, 1),
        (Durability::Buffered, 16),
    ] {
        eprintln!("… measuring prompts, {durability:?}, {clients} clients");
        let (mut http, mut inproc) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
        for _ in 0..args.runs {
            let (rate, mut latencies) =
                tokio.block_on(prompt_run(durability, clients, args.prompts, Path::Http))?;
            http.0.push(rate);
            http.1.append(&mut latencies);
            let (rate, mut latencies) = tokio.block_on(prompt_run(
                durability,
                clients,
                args.prompts,
                Path::InProcess,
            ))?;
            inproc.0.push(rate);
            inproc.1.append(&mut latencies);
        }
        http.1.sort();
        inproc.1.sort();
        let (http_rate, inproc_rate) = (Summary::of(&http.0), Summary::of(&inproc.0));
        writeln!(
            out,
            "{:<9} {:>7}  {:>22} {:>7.2} {:>7.2}  {:>22} {:>7.2} {:>7.2}  {:>9.2}",
            format!("{durability:?}"),
            clients,
            http_rate.to_string(),
            percentile_ms(&http.1, 0.5),
            percentile_ms(&http.1, 0.99),
            inproc_rate.to_string(),
            percentile_ms(&inproc.1, 0.5),
            percentile_ms(&inproc.1, 0.99),
            http_rate.median / inproc_rate.median
        )?;
        out.flush()?;
    }

    writeln!(
        out,
        "\nevent fan-out, SSE vs direct log subscriptions: catch-up of a {}-event log (events/s to each subscriber, median of {} runs), then 50 live appends (ms from acknowledgement until every subscriber has it)",
        args.events, args.runs
    )?;
    writeln!(
        out,
        "{:>11}  {:>20} {:>9} {:>9}  {:>20} {:>9} {:>9}  {:>9}",
        "subscribers",
        "SSE catch-up",
        "live p50",
        "live p99",
        "direct catch-up",
        "live p50",
        "live p99",
        "SSE/direct"
    )?;
    out.flush()?;
    tokio.block_on(async {
        let served = Served::start(Durability::Buffered).await?;
        eprintln!("… filling a log to {} events", args.events);
        fill(&served, args.events).await?;
        for subscribers in [1, 100] {
            eprintln!("… measuring fan-out to {subscribers} subscribers");
            let (mut sse, mut direct) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
            for _ in 0..args.runs {
                let mut run = fan_out_run(&served, subscribers, Path::Http, 50).await?;
                sse.0.push(run.catch_up_per_subscriber);
                sse.1.append(&mut run.live);
                let mut run = fan_out_run(&served, subscribers, Path::InProcess, 50).await?;
                direct.0.push(run.catch_up_per_subscriber);
                direct.1.append(&mut run.live);
            }
            sse.1.sort();
            direct.1.sort();
            let (sse_rate, direct_rate) = (Summary::of(&sse.0), Summary::of(&direct.0));
            writeln!(
                out,
                "{:>11}  {:>20} {:>9.2} {:>9.2}  {:>20} {:>9.2} {:>9.2}  {:>9.2}",
                subscribers,
                sse_rate.to_string(),
                percentile_ms(&sse.1, 0.5),
                percentile_ms(&sse.1, 0.99),
                direct_rate.to_string(),
                percentile_ms(&direct.1, 0.5),
                percentile_ms(&direct.1, 0.99),
                sse_rate.median / direct_rate.median
            )?;
            out.flush()?;
        }
        served.stop().await
    })?;
    Ok(())
}
