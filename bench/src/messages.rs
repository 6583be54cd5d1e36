//! `bench messages`: parent → child → parent round trips per second with an
//! echo agent, with p50 and p99 latency, 1 and 16 concurrent pairs.
//!
//! One round trip: the root sends a message to its child; the child's echo
//! agent answers in a turn; the child sends a message back to the root, which
//! reads it from its inbox. Baseline (**append floor**): the same five
//! durable appends per round trip (message in, claim and turn start, echo,
//! turn end, message out) straight on the log.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::io::Write;

use clap::Args;
use subagent_core::{
    ContentBlock, Delivery, Event, MessageDelivery, MessageId, MessageSource, NewEvent, SessionId,
    StreamId, SubagentActivationSpec, SubagentError, SubagentStopReason,
};
use subagent_runtime::agent::{Agent, AgentHost, AgentSpec, TranscriptItem, TurnEnd, TurnInput};
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::BoxFuture;
use subagent_runtime::SubagentRuntime;
use subagent_store::{Durability, EventLog, ExpectedVersion, RocksLog, RocksOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::args;
use super::stats::{percentile_ms, Summary};
use crate::BenchResult;

/// Arguments of `bench messages`.
#[derive(Args)]
pub struct MessageArgs {
    /// Runs per figure (the median is reported), 1 to 1000.
    #[arg(long, default_value_t = 5, value_parser = args::count(args::RUNS))]
    runs: usize,
    /// Round trips per pair, 1 to 1,000,000.
    #[arg(long, default_value_t = 100, value_parser = args::count(args::ROUND_TRIPS))]
    round_trips: usize,
}

/// Echoes every turn's input and reports the turn's end to the harness.
pub(super) struct EchoHost(pub(super) mpsc::UnboundedSender<SessionId>);
struct Echo {
    session: SessionId,
    done: mpsc::UnboundedSender<SessionId>,
}

impl AgentHost for EchoHost {
    fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        let agent = Echo {
            session: spec.session,
            done: self.0.clone(),
        };
        Box::pin(async move { Ok(Box::new(agent) as Box<dyn Agent>) })
    }
}

impl Agent for Echo {
    fn run_turn(&mut self, input: TurnInput) -> BoxFuture<'_, TurnEnd> {
        Box::pin(async move {
            let echo: Vec<ContentBlock> = input.messages.into_iter().flatten().collect();
            let _ = input.transcript.send(TranscriptItem::Assistant(echo)).await;
            let _ = self.done.send(self.session);
            TurnEnd {
                stop_reason: SubagentStopReason::Completed,
                diagnostic: None,
                structured: None,
            }
        })
    }
}

fn spec() -> SubagentActivationSpec {
    SubagentActivationSpec::with_text_prompt("spawn", "echo", "ready", Delivery::Caller)
}

async fn runtime_run(
    durability: Durability,
    pairs: usize,
    trips: usize,
) -> Result<(f64, Vec<Duration>), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log: Arc<dyn EventLog> = Arc::new(RocksLog::open(dir.path(), RocksOptions { durability })?);
    let (turns, mut turn_ends) = mpsc::unbounded_channel();
    let (runtime, _) = SubagentRuntime::open(log, Arc::new(EchoHost(turns))).await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    let mut waiters = std::collections::HashMap::new();
    let mut pairs_ready = Vec::new();
    for _ in 0..pairs {
        let root = runtime.open_root("bench").await?;
        let child = runtime
            .start_activation(&root, spec(), CancellationToken::new())
            .await?;
        child.result().await?;
        let (notify, wait) = mpsc::unbounded_channel::<()>();
        waiters.insert(child.child_id(), notify);
        pairs_ready.push((root, child, wait));
    }
    // Route each child's turn ends to its pair (the first turn is the prompt's).
    tokio::spawn(async move {
        while let Some(session) = turn_ends.recv().await {
            if let Some(waiter) = waiters.get(&session) {
                let _ = waiter.send(());
            }
        }
    });
    let started = Instant::now();
    let tasks: Vec<_> = pairs_ready
        .into_iter()
        .map(|(root, child, mut turn_done)| {
            let runtime = runtime.clone();
            tokio::spawn(async move {
                let _ = turn_done.recv().await; // the prompt's turn
                let mut inbox = runtime.inbox(&root)?;
                let mut latencies = Vec::with_capacity(trips);
                for _ in 0..trips {
                    let began = Instant::now();
                    runtime
                        .send_message(
                            &root,
                            child.child_id(),
                            vec![ContentBlock::text("ping")],
                            CancellationToken::new(),
                        )
                        .await?;
                    turn_done
                        .recv()
                        .await
                        .ok_or_else(|| SubagentError::internal("echo stopped"))?;
                    let reply = runtime
                        .send_message(
                            &child.agent(),
                            root.session(),
                            vec![ContentBlock::text("pong")],
                            CancellationToken::new(),
                        )
                        .await?;
                    while let Some(message) = inbox.recv().await {
                        if message.message_id == reply {
                            break;
                        }
                    }
                    latencies.push(began.elapsed());
                }
                child.dispose().await?;
                Ok::<_, SubagentError>(latencies)
            })
        })
        .collect();
    let latencies = super::stats::join_latencies(tasks).await?;
    Ok((
        (pairs * trips) as f64 / started.elapsed().as_secs_f64(),
        latencies,
    ))
}

async fn floor_run(
    durability: Durability,
    pairs: usize,
    trips: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log = RocksLog::open(dir.path(), RocksOptions { durability })?;
    let started = Instant::now();
    let tasks: Vec<_> = (0..pairs)
        .map(|_| {
            let log = log.clone();
            tokio::spawn(async move {
                let (root, child) = (SessionId::new(), SessionId::new());
                for turn in 1..=trips as u64 {
                    let inbound = MessageId::new();
                    let steps: [(SessionId, Vec<Event>); 5] = [
                        (
                            child,
                            vec![Event::MessageAccepted {
                                message_id: inbound,
                                source: MessageSource::AgentMessage {
                                    sender_session_id: root,
                                },
                                delivery: MessageDelivery::Queue,
                                content: vec![ContentBlock::text("ping")],
                            }],
                        ),
                        (
                            child,
                            vec![
                                Event::MessagesClaimed {
                                    ids: vec![inbound],
                                    turn,
                                },
                                Event::TurnStarted { turn, epoch: 1 },
                            ],
                        ),
                        (
                            child,
                            vec![Event::AssistantMessage {
                                turn,
                                content: vec![ContentBlock::text("ping")],
                                usage: None,
                            }],
                        ),
                        (
                            child,
                            vec![Event::TurnEnded {
                                turn,
                                stop_reason: SubagentStopReason::Completed,
                            }],
                        ),
                        (
                            root,
                            vec![Event::MessageAccepted {
                                message_id: MessageId::new(),
                                source: MessageSource::AgentMessage {
                                    sender_session_id: child,
                                },
                                delivery: MessageDelivery::Queue,
                                content: vec![ContentBlock::text("pong")],
                            }],
                        ),
                    ];
                    for (session, events) in steps {
                        log.append(
                            StreamId::Session(session),
                            ExpectedVersion::Any,
                            events.into_iter().map(NewEvent::new).collect(),
                        )
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
    Ok((pairs * trips) as f64 / started.elapsed().as_secs_f64())
}

/// Runs `bench messages`.
///
/// # Errors
/// Storage or runtime failures.
pub(super) fn run(args: &MessageArgs, out: &mut dyn Write) -> BenchResult {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    writeln!(out, "parent → child → parent round trips/s: median (min–max) of {} runs, {} round trips per pair", args.runs, args.round_trips)?;
    out.flush()?;
    writeln!(
        out,
        "{:<9} {:>6}  {:>24} {:>9} {:>9}  {:>24} {:>10}",
        "mode", "pairs", "runtime", "p50 ms", "p99 ms", "append floor", "rt/floor"
    )?;
    out.flush()?;
    for (durability, pairs) in [
        (Durability::Sync, 1),
        (Durability::Sync, 16),
        (Durability::Buffered, 1),
        (Durability::Buffered, 16),
    ] {
        eprintln!("… measuring {durability:?} with {pairs} pairs");
        let (mut rates, mut floors, mut latencies) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let (rate, mut run) =
                tokio.block_on(runtime_run(durability, pairs, args.round_trips))?;
            rates.push(rate);
            latencies.append(&mut run);
            floors.push(tokio.block_on(floor_run(durability, pairs, args.round_trips))?);
        }
        latencies.sort();
        let (rates, floors) = (Summary::of(&rates), Summary::of(&floors));
        writeln!(
            out,
            "{:<9} {:>6}  {:>24} {:>9.2} {:>9.2}  {:>24} {:>10.2}",
            format!("{durability:?}"),
            pairs,
            rates.to_string(),
            percentile_ms(&latencies, 0.5),
            percentile_ms(&latencies, 0.99),
            floors.to_string(),
            rates.median / floors.median
        )?;
        out.flush()?;
    }
    Ok(())
}
