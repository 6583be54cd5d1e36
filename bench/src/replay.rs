//! `bench replay` and `bench startup`.
//!
//! - replay: events per second folded into every projection, against the
//!   raw iterate-and-decode of the same log (the fold's floor); in this
//!   process, and in fresh ones (`fold-once`, a hidden part), from a log
//!   closed as a runtime closes it (a checkpoint, and its maps' sizes
//!   beside it) and from one without the sizes;
//! - startup: opening the projections of a log from its checkpoint plus tail,
//!   against a full refold from position 1; in this process, and in fresh
//!   ones (`open-once`, a hidden part the startup runs as a child).

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use std::io::Write;

use clap::Args;
use subagent_projections::{MapSizes, Projections, MAP_SIZES_NAME};
use subagent_replay::Checkpointed;
use subagent_store::{EventLog, EventLogExt, RocksLog, RocksOptions};

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

/// Arguments of the hidden parts `bench startup` and `bench replay` run
/// in fresh processes: `open-once` and `fold-once`.
#[derive(Args)]
pub struct OnceArgs {
    /// The RocksDB log to open: holding a projections checkpoint for
    /// `open-once`, and at least one event for `fold-once`.
    #[arg(long)]
    data: PathBuf,
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
    // As a host's runtime leaves its log when it closes: a checkpoint at
    // the head, and beside it the sizes of its maps, which every later
    // fold from position 1 starts from.
    Checkpointed::open(log.clone(), 0)?.0.close()?;
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
    // The same fold in fresh processes, as `subagents replay` and `tree`
    // run it: no heap warmed by the folds above. The log is closed here so
    // a child can open it. Each run alternates the log as a runtime closes
    // it (its maps' sizes saved) with the same log without them (as a log
    // whose sizes were never saved, by an older build, or were lost: the
    // checkpoint stays, the sizes are overwritten with bytes that are
    // none, so each map grows), each side set by an untimed open before
    // its run. Whatever such an open leaves RocksDB to
    // do (the first replays the write-ahead log this process left, and any
    // flush or compaction after it) falls on both sides alike, not on the
    // first fold alone.
    let sizes = log
        .read_checkpoint(MAP_SIZES_NAME)?
        .ok_or("the runtime's close saved no map sizes")?
        .to_vec();
    let data = dir.path().to_path_buf();
    drop(workload);
    let save_sizes = |frame: &[u8]| -> BenchResult {
        RocksLog::open(&data, RocksOptions::default())?.write_checkpoint(MAP_SIZES_NAME, frame)?;
        Ok(())
    };
    let (mut fresh, mut growing) = (Vec::new(), Vec::new());
    let bar = progress::bar("replay, fresh processes", args.runs as u64, "runs");
    for _ in 0..args.runs {
        save_sizes(&sizes)?;
        fresh.push(in_a_fresh_process("fold-once", &data, 1)?[0]);
        save_sizes(b"")?;
        growing.push(in_a_fresh_process("fold-once", &data, 1)?[0]);
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
        "replay of {head} events, events/s: median (min–max) of {} runs",
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
        "    the same, in a fresh process          {}",
        Summary::of(&fresh)
    )?;
    writeln!(
        out,
        "    the same, no map sizes saved          {}",
        Summary::of(&growing)
    )?;
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
    // Its maps' sizes beside it, as a runtime saves them: the full refold
    // below starts from them.
    log.write_checkpoint(MAP_SIZES_NAME, &MapSizes::of(&state).encode())?;
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
    // The same open in fresh processes, as `subagents serve` starts: no
    // heap warmed by the runs above, no page of the log's files cached
    // by this process's RocksDB. The log is closed here so a child can
    // open it.
    let (data, head) = (dir.path().to_path_buf(), log.head());
    drop(log);
    // One open first, untimed: the first open after this process's close
    // replays the write-ahead log the close left unflushed (seconds,
    // once), which is recovery, not the start every later open makes.
    in_a_fresh_process("open-once", &data, 2)?;
    let (mut fresh_rocks, mut fresh_open) = (Vec::new(), Vec::new());
    let bar = progress::bar("startup, fresh processes", args.runs as u64, "runs");
    for _ in 0..args.runs {
        let figures = in_a_fresh_process("open-once", &data, 2)?;
        fresh_rocks.push(figures[0]);
        fresh_open.push(figures[1]);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (with_checkpoint, refold) = (Summary::of(&with_checkpoint), Summary::of(&refold));
    let (read, decode) = (Summary::of(&read), Summary::of(&decode));
    writeln!(
        out,
        "startup on a {head}-event log (checkpoint at {tail_from}), ms: median (min–max) of {} runs",
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
    writeln!(
        out,
        "  in a fresh process: checkpoint + tail  {}",
        Summary::of(&fresh_open)
    )?;
    writeln!(
        out,
        "    before it, opening the RocksDB log    {}",
        Summary::of(&fresh_rocks)
    )?;
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

/// Runs the hidden part `part` in a child process on the log in `data`
/// and returns the `count` figures it printed on its one line.
fn in_a_fresh_process(
    part: &str,
    data: &std::path::Path,
    count: usize,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let child = Command::new(std::env::current_exe()?)
        .arg(part)
        .arg("--data")
        .arg(data)
        .output()?;
    let stdout = String::from_utf8_lossy(&child.stdout);
    if !child.status.success() {
        return Err(format!(
            "{part} failed ({}): {}",
            child.status,
            String::from_utf8_lossy(&child.stderr).trim()
        )
        .into());
    }
    let figures: Result<Vec<f64>, _> = stdout.split_whitespace().map(str::parse).collect();
    match figures {
        Ok(figures) if figures.len() == count => Ok(figures),
        _ => Err(format!("{part} printed {stdout:?}, not {count} figures").into()),
    }
}

/// Runs `open-once`: opens the RocksDB log in `--data`, then its
/// projections from the checkpoint plus tail as a runtime's start does,
/// and prints the milliseconds of each on one line. The first thing this
/// process does, so nothing before it warmed its heap.
///
/// # Errors
/// Storage failures, and a log whose checkpoint was not used (none, or
/// one discarded): then this would time a refold, not an open.
pub(super) fn open_once(args: &OnceArgs, out: &mut dyn Write) -> BenchResult {
    let (rocks, log) = timed(|| Ok(RocksLog::open(&args.data, RocksOptions::default())?))?;
    let (open, (state, report)) = timed(|| Ok(Checkpointed::open(log, 0)?))?;
    if report.checkpoint_position.is_none() {
        return Err(match report.discarded {
            Some(reason) => format!("the checkpoint was discarded: {reason}"),
            None => "the log holds no checkpoint".to_owned(),
        }
        .into());
    }
    writeln!(out, "{:.3} {:.3}", rocks * 1000.0, open * 1000.0)?;
    // The state is not dropped: its drop is the process's exit, which no
    // open waits for.
    std::mem::forget(state);
    Ok(())
}

/// Runs `fold-once`: opens the RocksDB log in `--data` read-only, as
/// `subagents replay` does (so the open starts no flush or compaction
/// beside the fold), then folds the whole log into every projection as it
/// does ([`subagent_replay::state_at`]), and prints the events per second
/// of the fold. The first fold of this process, so nothing before it
/// warmed its heap.
///
/// # Errors
/// Storage failures, and a log without events (there is no rate to give).
pub(super) fn fold_once(args: &OnceArgs, out: &mut dyn Write) -> BenchResult {
    let log = RocksLog::open_read_only(&args.data)?;
    let head = log.head();
    if head == 0 {
        return Err("the log holds no events".into());
    }
    let (seconds, state) = timed(|| Ok(subagent_replay::state_at(&log, None)?))?;
    writeln!(out, "{:.0}", head as f64 / seconds)?;
    // As in `open-once`: the state's drop is the process's exit.
    std::mem::forget(state);
    Ok(())
}
