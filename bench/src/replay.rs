//! `bench replay` and `bench startup`.
//!
//! - replay: events per second folded into every projection, against the
//!   raw iterate-and-decode of the same log (the fold's floor);
//! - startup: opening the projections of a log from its checkpoint plus tail,
//!   against a full refold from position 1.

use std::ops::ControlFlow;
use std::time::Instant;

use std::io::Write;

use clap::Args;
use subagent_projections::Projections;
use subagent_replay::Checkpointed;
use subagent_store::{EventLog, EventLogExt};

use super::args;
use super::progress;
use super::stats::Summary;
use super::workload;
use crate::BenchResult;

/// Arguments of `bench replay` and `bench startup`.
#[derive(Args)]
pub struct ReplayArgs {
    /// Events in the generated log, 1,000 to 100,000,000.
    #[arg(long, default_value_t = 1_000_000, value_parser = args::count_u64(args::EVENTS))]
    events: u64,
    /// Runs per figure (the median is reported), 1 to 1000.
    #[arg(long, default_value_t = 5, value_parser = args::count(args::RUNS))]
    runs: usize,
}

fn timed<T>(
    work: impl FnOnce() -> Result<T, Box<dyn std::error::Error>>,
) -> Result<(f64, T), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let value = work()?;
    Ok((started.elapsed().as_secs_f64(), value))
}

/// Runs `bench replay`.
///
/// # Errors
/// Storage failures.
pub(super) fn replay(args: &ReplayArgs, out: &mut dyn Write) -> BenchResult {
    let dir = tempfile::tempdir()?;
    let workload = workload::build(dir.path(), args.events, 8, 0)?;
    let log = &workload.log;
    let head = log.head() as f64;
    let (mut raw, mut ahead, mut fold_one_thread, mut fold) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let bar = progress::bar("replay", args.runs as u64, "runs");
    for _ in 0..args.runs {
        let (seconds, _) = timed(|| {
            let mut count = 0u64;
            for record in log.read_all(1) {
                std::hint::black_box(record?);
                count += 1;
            }
            Ok(count)
        })?;
        raw.push(head / seconds);
        let (seconds, _) = timed(|| {
            let mut count = 0u64;
            subagent_store::read_ahead::scan(log, 1, |record| {
                std::hint::black_box(record);
                count += 1;
                Ok::<_, subagent_store::StoreError>(ControlFlow::Continue(()))
            })?;
            Ok(count)
        })?;
        ahead.push(head / seconds);
        let (seconds, state) = timed(|| {
            let mut state = Projections::new();
            for record in log.read_all(1) {
                state.apply(&record?);
            }
            Ok(state)
        })?;
        std::hint::black_box(&state);
        fold_one_thread.push(head / seconds);
        // What replay, verify and opening do: the fold beside reader threads.
        let (seconds, state) = timed(|| Ok(subagent_replay::state_at(log, None)?))?;
        std::hint::black_box(&state);
        fold.push(head / seconds);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (raw, ahead, fold_one_thread, fold) = (
        Summary::of(&raw),
        Summary::of(&ahead),
        Summary::of(&fold_one_thread),
        Summary::of(&fold),
    );
    writeln!(
        out,
        "replay of {} events, events/s: median (min–max) of {} runs",
        log.head(),
        args.runs
    )?;
    out.flush()?;
    writeln!(out, "  raw iterate + decode, one thread        {raw}")?;
    writeln!(
        out,
        "  read ahead + decode ({} readers)         {ahead}",
        subagent_store::read_ahead::READERS
    )?;
    writeln!(
        out,
        "  fold into all projections, one thread   {fold_one_thread}"
    )?;
    writeln!(out, "  fold into all projections (state_at)    {fold}")?;
    writeln!(
        out,
        "  fold / raw one-thread decode            {:.2}",
        fold.median / raw.median
    )?;
    out.flush()?;
    Ok(())
}

/// Runs `bench startup`.
///
/// # Errors
/// Storage failures.
pub(super) fn startup(args: &ReplayArgs, out: &mut dyn Write) -> BenchResult {
    let dir = tempfile::tempdir()?;
    let workload = workload::build(dir.path(), args.events, 8, 0)?;
    let log = workload.log;
    // Checkpoint the first 99% and leave a 1% tail, as after a crash between checkpoints.
    let tail_from = log.head() - log.head() / 100;
    let state = subagent_replay::state_at(&log, Some(tail_from))?;
    log.write_checkpoint(
        subagent_replay::CHECKPOINT_NAME,
        &subagent_projections::checkpoint::encode(&state),
    )?;
    drop(state);
    let (mut with_checkpoint, mut refold) = (Vec::new(), Vec::new());
    let (mut read, mut decode) = (Vec::new(), Vec::new());
    let mut size = 0;
    let bar = progress::bar("startup", args.runs as u64, "runs");
    for _ in 0..args.runs {
        let (seconds, opened) = timed(|| Ok(Checkpointed::open(log.clone(), 0)?))?;
        assert_eq!(
            opened.1.checkpoint_position,
            Some(tail_from),
            "the checkpoint was used"
        );
        with_checkpoint.push(seconds * 1000.0);
        // Its first two parts, after it (so the open meets the allocator
        // and caches as a fresh process would): reading the stored
        // checkpoint, and decoding it.
        let (seconds, bytes) = timed(|| {
            log.read_checkpoint(subagent_replay::CHECKPOINT_NAME)?
                .ok_or_else(|| "the checkpoint vanished".into())
        })?;
        read.push(seconds * 1000.0);
        size = bytes.len();
        let (seconds, state) = timed(|| {
            Ok(subagent_projections::checkpoint::decode(&bytes)
                .map_err(|rejected| rejected.to_string())?)
        })?;
        assert_eq!(state.position, tail_from, "the checkpoint decodes");
        decode.push(seconds * 1000.0);
        drop((bytes, state));
        let (seconds, _) = timed(|| Ok(subagent_replay::state_at(&log, None)?))?;
        refold.push(seconds * 1000.0);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (with_checkpoint, refold) = (Summary::of(&with_checkpoint), Summary::of(&refold));
    let (read, decode) = (Summary::of(&read), Summary::of(&decode));
    writeln!(
        out,
        "startup on a {}-event log (checkpoint at {tail_from}), ms: median (min–max) of {} runs",
        log.head(),
        args.runs
    )?;
    out.flush()?;
    writeln!(out, "  checkpoint + tail  {with_checkpoint}")?;
    writeln!(
        out,
        "    of which: reading the checkpoint ({size} bytes)  {read}"
    )?;
    writeln!(
        out,
        "    of which: decoding it                           {decode}"
    )?;
    out.flush()?;
    writeln!(out, "  full refold        {refold}")?;
    out.flush()?;
    writeln!(
        out,
        "  speed-up           {:.1}x",
        refold.median / with_checkpoint.median
    )?;
    out.flush()?;
    Ok(())
}
