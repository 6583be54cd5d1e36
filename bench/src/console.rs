//! `bench console`: the console page in a real headless Chromium against
//! the gateway on 127.0.0.1, with the page's own timestamps
//! (`window.subagentsConsole`, on the epoch clock the bench shares).
//!
//! - **first render**: a root whose tree holds `--sessions` sessions (and
//!   a 10-session one), from the page asking for the tree to the frame
//!   holding its rows being painted, against fetching and parsing the same
//!   tree answer in Rust (the data floor the page cannot beat).
//! - **live**: `--starts` children started below that root, one every
//!   `--interval-ms`; for every event they append, the time from the
//!   first moment a Rust reader had it (a direct subscription to the log
//!   on a thread of its own, or a reader of the SSE stream: the two wake a
//!   few ms apart either way) until the page has rendered a tree
//!   that covers it, against the same events read from the same SSE
//!   stream in Rust (the transport floor). The page's own receipt of each
//!   frame is shown too, so the page's share is the difference.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`make deps`).

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde_json::Value;
use subagent_browser::Browser;
use subagent_core::{Delivery, NewEvent, SessionId, SessionMode, SubagentActivationSpec};
use subagent_projections::testing::HistoryBuilder;
use subagent_store::{EventLog, ExpectedVersion, RocksLog, RocksOptions, SubscriptionItem};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

use super::args;
use super::served::{Served, TOKEN};
use super::sse::Frames;
use super::stats::{percentile_ms, Summary};
use crate::BenchResult;

/// Arguments of `bench console`.
#[derive(Args)]
pub struct ConsoleArgs {
    /// First renders per tree (the median is reported), 1 to 1000.
    #[arg(long, default_value_t = 3, value_parser = args::count(args::RUNS))]
    runs: usize,
    /// Sessions in the large tree, 10 to 100,000.
    #[arg(long, default_value_t = 10_000, value_parser = args::count_u64(args::TREE_SESSIONS))]
    sessions: u64,
    /// Children started live below each tree's root, 1 to 100.
    #[arg(long, default_value_t = 40, value_parser = args::count(args::LIVE_STARTS))]
    starts: usize,
    /// Milliseconds between two live starts, 10 to 10,000.
    #[arg(long, default_value_t = 250, value_parser = args::count_u64(args::INTERVAL_MS))]
    interval_ms: u64,
}

/// The small tree every run measures beside `--sessions`.
const SMALL_TREE: u64 = 10;

/// How long the page may take to show what the bench waits for.
const PAGE_WAIT: Duration = Duration::from_secs(60);

/// Milliseconds since the epoch, the clock the page's timestamps use.
fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64() * 1000.0)
}

/// A log in `dir` holding one root and `sessions - 1` sessions below it:
/// about √n continuable children, each with an equal share of one-shot
/// grandchildren. Returns the log and the root.
async fn tree_log(
    dir: &std::path::Path,
    sessions: u64,
) -> Result<(Arc<dyn EventLog>, SessionId), Box<dyn std::error::Error>> {
    let mut history = HistoryBuilder::new();
    let root = history.root("console bench");
    let below = sessions.saturating_sub(1);
    let children = (below as f64).sqrt().floor().max(1.0) as u64;
    let parents: Vec<SessionId> = (0..children.min(below))
        .map(|index| {
            history.child(
                root,
                1,
                &format!("c{index}"),
                SessionMode::Continuable,
                false,
            )
        })
        .collect();
    for index in 0..below.saturating_sub(parents.len() as u64) {
        let parent = parents[(index % parents.len() as u64) as usize];
        history.child(parent, 2, &format!("g{index}"), SessionMode::OneShot, false);
    }
    let log: Arc<dyn EventLog> = Arc::new(RocksLog::open(dir, RocksOptions::default())?);
    // One append per run of a stream, all in flight at once: group commit.
    let tickets: Vec<_> = history
        .records
        .chunk_by(|a, b| a.stream == b.stream)
        .map(|run| {
            let events = run.iter().map(|r| NewEvent::new(r.event.clone())).collect();
            log.append(run[0].stream, ExpectedVersion::Any, events)
        })
        .collect();
    for ticket in tickets {
        ticket.await?;
    }
    Ok((log, root))
}

/// What the page measured of one first render, in ms.
struct FirstRender {
    /// From asking for the tree to the rows in a painted frame.
    total: f64,
}

/// Waits for the page's first render of `root` newer than `after` (epoch
/// ms) with `sessions` sessions, and reads it.
async fn first_render(
    browser: &Browser,
    root: SessionId,
    sessions: u64,
    after: f64,
) -> Result<FirstRender, Box<dyn std::error::Error>> {
    let entry = "window.subagentsConsole && window.subagentsConsole.firstRender";
    browser
        .until_within(
            &format!(
                "!!({entry}) && {entry}.rootId === '{root}' && {entry}.paintedAt !== null \
                 && {entry}.startedAt > {after} && {entry}.sessions === {sessions}"
            ),
            "the first render of the tree",
            PAGE_WAIT,
        )
        .await?;
    let read = browser.eval(entry).await?;
    let field = |name: &str| {
        read.get(name)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("the page's firstRender has no {name}: {read}"))
    };
    Ok(FirstRender {
        total: field("paintedAt")? - field("startedAt")?,
    })
}

/// Fetches and parses `root`'s tree answer in Rust; the time it took.
async fn fetch_floor(
    served: &Served,
    root: SessionId,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let began = Instant::now();
    let body = served
        .http
        .get(format!("{}/v1/sessions/{root}/tree", served.base))
        .bearer_auth(TOKEN)
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    let answer: Value = serde_json::from_slice(&body)?;
    let elapsed = began.elapsed();
    if answer.get("nodes").and_then(Value::as_array).is_none() {
        return Err(format!("the tree answer has no nodes: {answer}").into());
    }
    Ok(elapsed)
}

/// When each position from `from` on reached a direct subscriber of the
/// log: the moment it was durable and readable, as any subscriber (the
/// gateway's SSE stream among them) first can have it.
fn watch_appends(
    log: &Arc<dyn EventLog>,
    from: u64,
    stop: CancellationToken,
) -> Arc<Mutex<HashMap<u64, f64>>> {
    let appended = Arc::new(Mutex::new(HashMap::new()));
    let record = Arc::clone(&appended);
    let log = Arc::clone(log);
    // On a thread and runtime of its own, so no task of the served runtime
    // (the gateway's SSE writers among them) delays the timestamp.
    std::thread::spawn(move || {
        let Ok(watcher) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        watcher.block_on(async move {
            let mut subscription = log.subscribe(from);
            loop {
                let item = tokio::select! {
                    item = subscription.next() => item,
                    () = stop.cancelled() => return,
                };
                let at = epoch_ms();
                match item {
                    Some(Ok(SubscriptionItem::Event(event))) => {
                        if let Ok(mut appended) = record.lock() {
                            appended.insert(event.position, at);
                        }
                    }
                    Some(Ok(SubscriptionItem::CaughtUp { .. })) => {}
                    Some(Err(_)) | None => return,
                }
            }
        });
    });
    appended
}

/// When each position's frame reached a Rust reader of `root`'s stream
/// after `after`.
async fn watch_stream(
    served: &Served,
    root: SessionId,
    after: u64,
    stop: CancellationToken,
) -> Result<Arc<Mutex<HashMap<u64, f64>>>, Box<dyn std::error::Error>> {
    let mut frames = Frames::open(
        &served.http,
        &served.base,
        &format!("root={root}&after={after}"),
        TOKEN,
    )
    .await?;
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let frame = tokio::select! {
                frame = frames.next() => frame,
                () = stop.cancelled() => return,
            };
            let Ok(Some(frame)) = frame else { return };
            if let (Some(position), Ok(mut seen)) = (frame.id, record.lock()) {
                seen.insert(position, epoch_ms());
            }
        }
    });
    Ok(seen)
}

/// What one tree measured.
struct TreeFigures {
    sessions: u64,
    renders: Vec<f64>,
    floors: Vec<f64>,
    /// Events appended while live.
    events: usize,
    /// Of those, the ones a rendered tree covered.
    shown: usize,
    /// Append → rendered, append → the page's frame, append → Rust's frame.
    page: Vec<Duration>,
    frame: Vec<Duration>,
    sse: Vec<Duration>,
}

/// The page's `applied` entries: position → (frame received, rendered).
async fn page_applied(
    browser: &Browser,
) -> Result<HashMap<u64, (f64, f64)>, Box<dyn std::error::Error>> {
    let applied = browser.eval("window.subagentsConsole.applied").await?;
    let mut by_position = HashMap::new();
    for item in applied.as_array().into_iter().flatten() {
        let (Some(position), Some(received), Some(rendered)) = (
            item.get("position").and_then(Value::as_u64),
            item.get("receivedAt").and_then(Value::as_f64),
            item.get("appliedAt").and_then(Value::as_f64),
        ) else {
            return Err(format!("a malformed applied entry: {item}").into());
        };
        by_position.insert(position, (received, rendered));
    }
    Ok(by_position)
}

/// A latency from `from` to `to` (epoch ms). The browser's clock is
/// another process's reading of the same clock: a page time more than
/// [`CLOCK_SLACK_MS`] before the append is refused as a disagreement, not
/// reported.
fn latency(from: f64, to: f64, what: &str) -> Result<Duration, Box<dyn std::error::Error>> {
    let ms = to - from;
    if ms < -CLOCK_SLACK_MS {
        return Err(format!(
            "{what} {ms:.1} ms before its append: the page's clock and the bench's disagree"
        )
        .into());
    }
    Ok(Duration::from_secs_f64(ms.max(0.0) / 1000.0))
}

/// How far before the append a page time may read before it counts as a
/// clock disagreement (two readers of the log wake a few ms apart).
const CLOCK_SLACK_MS: f64 = 10.0;

/// Measures one tree of `sessions` sessions.
async fn measure_tree(
    args: &ConsoleArgs,
    sessions: u64,
) -> Result<TreeFigures, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    eprintln!("… building a {sessions}-session tree");
    let (log, root_id) = tree_log(dir.path(), sessions).await?;
    let served = Served::over(dir, log).await?;
    let root = served.runtime.reopen_root(root_id).await?;
    let shots = tempfile::tempdir()?;
    let browser = Browser::start(shots.path(), 1280, 900).await?;
    let mut figures = TreeFigures {
        sessions,
        renders: Vec::new(),
        floors: Vec::new(),
        events: 0,
        shown: 0,
        page: Vec::new(),
        frame: Vec::new(),
        sse: Vec::new(),
    };

    eprintln!("… first renders of the {sessions}-session tree");
    let mut after = epoch_ms();
    browser.goto(&format!("{}/", served.base)).await?;
    // The page's module has run once it marks itself not ready.
    browser
        .until(
            "document.body.dataset.ready === 'false'",
            "the page's script",
        )
        .await?;
    browser.fill("#token", TOKEN).await?;
    browser.click("#connect").await?;
    for run in 0..args.runs {
        if run > 0 {
            after = epoch_ms();
            // The tab keeps the token, so the reloaded page connects itself.
            browser.run("location.reload()").await?;
        }
        figures.renders.push(
            first_render(&browser, root_id, sessions, after)
                .await?
                .total,
        );
        figures
            .floors
            .push(fetch_floor(&served, root_id).await?.as_secs_f64() * 1000.0);
    }

    eprintln!(
        "… {} live starts below the {sessions}-session tree",
        args.starts
    );
    let stop = CancellationToken::new();
    let head = served.log.head();
    let appended = watch_appends(&served.log, head + 1, stop.clone());
    let streamed = watch_stream(&served, root_id, head, stop.clone()).await?;
    for index in 0..args.starts {
        let spec = SubagentActivationSpec::with_text_prompt(
            "spawn",
            &format!("live-{index}"),
            "hello",
            Delivery::Parent,
        );
        served
            .runtime
            .start_activation(&root, spec, CancellationToken::new())
            .await?;
        tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
    }
    // Let the last turns land, then let the page catch up with the head.
    let mut last = served.log.head();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = served.log.head();
        if now == last {
            break;
        }
        last = now;
    }
    browser
        .until_within(
            &format!("window.subagentsConsole.lastApplied.position >= {last}"),
            "the page to show the log's head",
            PAGE_WAIT,
        )
        .await?;
    let deadline = Instant::now() + PAGE_WAIT;
    while streamed.lock().map_or(0, |seen| seen.len()) < (last - head) as usize {
        if Instant::now() > deadline {
            return Err("the Rust SSE reader never saw every live event".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    let shown = page_applied(&browser).await?;
    let (appended, streamed) = (
        appended.lock().map_err(|_| "poisoned")?.clone(),
        streamed.lock().map_err(|_| "poisoned")?.clone(),
    );
    for position in head + 1..=last {
        let Some(&direct) = appended.get(&position) else {
            return Err(format!("position {position} was never seen durable").into());
        };
        // Two readers of the log (the direct one, the gateway's stream)
        // wake a few ms apart either way: the append time is the first
        // moment any Rust reader had the event.
        let seen = streamed.get(&position).copied();
        let at = seen.map_or(direct, |seen| seen.min(direct));
        figures.events += 1;
        if let Some(seen) = seen {
            figures.sse.push(latency(at, seen, "a Rust SSE frame")?);
        }
        if let Some(&(received, rendered)) = shown.get(&position) {
            figures.shown += 1;
            figures.frame.push(latency(at, received, "a page frame")?);
            figures.page.push(latency(at, rendered, "a render")?);
        }
    }
    figures.page.sort();
    figures.frame.sort();
    figures.sse.sort();
    drop(browser);
    served.stop().await?;
    Ok(figures)
}

/// Runs `bench console`.
///
/// # Errors
/// No Chromium, storage, runtime, HTTP or page failures.
pub(super) fn run(args: &ConsoleArgs, out: &mut dyn Write) -> BenchResult {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut trees = Vec::new();
    for sessions in [SMALL_TREE, args.sessions] {
        trees.push(tokio.block_on(measure_tree(args, sessions))?);
    }
    writeln!(
        out,
        "console first render in headless Chromium: from asking for the tree to its rows painted, vs fetching and parsing the same answer in Rust; ms, median (min–max) of {} runs",
        args.runs
    )?;
    writeln!(
        out,
        "{:>8}  {:>22}  {:>22}  {:>12}",
        "sessions", "page first render", "fetch + parse in Rust", "page/floor"
    )?;
    for tree in &trees {
        let (render, floor) = (Summary::of(&tree.renders), Summary::of(&tree.floors));
        writeln!(
            out,
            "{:>8}  {:>22}  {:>22}  {:>12.1}",
            tree.sessions,
            render.to_string(),
            floor.to_string(),
            render.median / floor.median
        )?;
    }
    writeln!(
        out,
        "\nconsole live: {} child starts, one every {} ms; ms from the first moment a Rust reader of the log had an event (a direct subscription, or a reader of the SSE stream) to the tree rendered in the page, to the page receiving the frame, and to the Rust reader of the same SSE stream",
        args.starts, args.interval_ms
    )?;
    writeln!(
        out,
        "{:>8} {:>7} {:>7}  {:>9} {:>9}  {:>10} {:>10}  {:>8} {:>8}",
        "sessions",
        "events",
        "shown",
        "page p50",
        "page p99",
        "frame p50",
        "frame p99",
        "SSE p50",
        "SSE p99"
    )?;
    for tree in &trees {
        writeln!(
            out,
            "{:>8} {:>7} {:>7}  {:>9.1} {:>9.1}  {:>10.1} {:>10.1}  {:>8.1} {:>8.1}",
            tree.sessions,
            tree.events,
            tree.shown,
            percentile_ms(&tree.page, 0.5),
            percentile_ms(&tree.page, 0.99),
            percentile_ms(&tree.frame, 0.5),
            percentile_ms(&tree.frame, 0.99),
            percentile_ms(&tree.sse, 0.5),
            percentile_ms(&tree.sse, 0.99),
        )?;
    }
    out.flush()?;
    Ok(())
}
