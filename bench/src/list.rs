//! `bench list`: the listing queries.
//!
//! - `list_descendants` on a 100,000-session tree;
//! - `list_children` of one parent on logs of 10,000 and 1,000,000 events,
//!   against a scan of the log for that parent's catalog entries (what a
//!   store without projections would do). The projection's time must not
//!   grow with the log; the scan's does.

use std::time::Instant;

use std::io::Write;

use clap::Args;
use subagent_core::{Event, StreamId};
use subagent_replay::state_at;
use subagent_store::{EventLog, EventLogExt};

use super::args;
use super::stats::Summary;
use super::workload;
use crate::BenchResult;

/// Arguments of `bench list`.
#[derive(Args)]
pub struct ListArgs {
    /// Sessions in the descendant tree, 1 to 10,000,000.
    #[arg(long, default_value_t = 100_000, value_parser = args::count_u64(args::SESSIONS))]
    sessions: u64,
    /// Runs per figure (the median is reported), 1 to 1000.
    #[arg(long, default_value_t = 5, value_parser = args::count(args::RUNS))]
    runs: usize,
}

fn micros(runs: usize, mut work: impl FnMut() -> usize) -> Summary {
    let samples: Vec<f64> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(work());
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    Summary::of(&samples)
}

/// Runs `bench list`.
///
/// # Errors
/// Storage failures.
pub(super) fn run(args: &ListArgs, out: &mut dyn Write) -> BenchResult {
    writeln!(out, "listing, µs: median (min–max) of {} runs", args.runs)?;
    out.flush()?;
    {
        let dir = tempfile::tempdir()?;
        let events = args.sessions * workload::EVENTS_PER_CHILD;
        let workload = workload::build(dir.path(), events, 10, 0)?;
        let state = state_at(&workload.log, None)?;
        let listed = state.list_descendants(workload.root).len();
        let time = micros(args.runs, || state.list_descendants(workload.root).len());
        writeln!(
            out,
            "  list_descendants, {listed} sessions          {time}  ({:.0} ns/entry)",
            time.median * 1000.0 / listed as f64
        )?;
        out.flush()?;
    }
    for events in [10_000u64, 1_000_000] {
        let dir = tempfile::tempdir()?;
        let workload = workload::build(dir.path(), events, 8, 20)?;
        let state = state_at(&workload.log, None)?;
        let parent = workload.probe_parent;
        let children = state.list_children(parent).len();
        let projection = micros(args.runs, || state.list_children(parent).len());
        let log = &workload.log;
        let scan = micros(args.runs.min(3), || {
            log.read_all(1)
                .filter_map(Result::ok)
                .filter(|r| {
                    r.stream == StreamId::Session(parent)
                        && matches!(r.event, Event::ChildCataloged { .. })
                })
                .count()
        });
        writeln!(
                out,
            "  list_children ({children} children), log of {:>9} events: projection {projection}   log scan {scan}   scan/projection {:.0}x",
            log.head(),
            scan.median / projection.median
        )?;
        out.flush()?;
    }
    Ok(())
}
