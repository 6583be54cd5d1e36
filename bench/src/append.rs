//! `subagents bench append`: durable append throughput.
//!
//! For each durability mode and appender count, three systems append the
//! same number of single-event appends of the same payload:
//! - **engine**: `RocksLog::append` from N tokio tasks (one stream each);
//! - **raw**: N threads writing the engine's pre-encoded record bytes with one
//!   RocksDB `WriteBatch` per append and the same sync policy: the physical
//!   limit of the storage engine (RocksDB group-commits concurrent writers
//!   itself);
//! - **sqlite**: one transaction per append into an event table in WAL mode
//!   with `synchronous=FULL` (Sync) or `NORMAL` (Buffered), what a user would
//!   otherwise pick.
//!
//! Each figure is events per second, median (min–max) of `--runs` runs, each
//! on a fresh directory. Beside the engine's, `ev/commit` is the median of
//! its runs' events per group commit: how many events shared one write (and,
//! in `Sync` mode, one fsync), which is what the group-commit rows turn on.
//! (RocksDB only: the PostgreSQL table, `append_pg`, has no such column.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use std::io::Write;

use clap::Args;
use rocksdb::{Options, WriteBatch, WriteOptions, DB};
use subagent_core::{ContentBlock, Event, NewEvent, RecordedEvent, SessionId, StreamId, Usage};
use subagent_store::{Durability, EventLog, ExpectedVersion, RocksLog, RocksOptions};

use super::args;
use super::stats::Summary;
use crate::BenchResult;

/// Arguments of `bench append`.
#[derive(Args)]
pub struct AppendArgs {
    /// Runs per figure (the median is reported), 1 to 1000.
    #[arg(long, default_value_t = 5, value_parser = args::count(args::RUNS))]
    runs: usize,
    /// Multiplies the number of appends per run: a finite number from 0.01
    /// to 100.
    #[arg(long, default_value_t = 1.0, value_parser = args::scale, allow_hyphen_values = true)]
    scale: f64,
    /// Skip the SQLite peer.
    #[arg(long)]
    no_sqlite: bool,
    /// `rocksdb` (the default), `postgres` (a private PostgreSQL server
    /// with fsync on, started for the run) or a `postgres://` URL.
    #[arg(long, default_value = "rocksdb", value_parser = store)]
    store: Store,
    /// Only the rows of this durability mode (to profile one row).
    #[arg(long, value_enum)]
    only_mode: Option<Mode>,
    /// Only the rows with this many appenders: 1 or 64.
    #[arg(long, value_parser = row_size)]
    only_appenders: Option<usize>,
    /// Only the rows with this many events per append: 1 or 64.
    #[arg(long, value_parser = row_size)]
    only_batch: Option<usize>,
}

/// A row's appenders or events per append, as `--only-appenders` and
/// `--only-batch` name them: the table has rows of 1 and of 64.
fn row_size(text: &str) -> Result<usize, String> {
    match text {
        "1" => Ok(1),
        "64" => Ok(64),
        _ => Err("1 or 64: the table's rows".to_owned()),
    }
}

/// A durability mode, as `--only-mode` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    Sync,
    Buffered,
}

impl Mode {
    fn durability(self) -> Durability {
        match self {
            Mode::Sync => Durability::Sync,
            Mode::Buffered => Durability::Buffered,
        }
    }
}

impl AppendArgs {
    /// Whether `config`'s row passes the `--only-*` filters.
    fn selects(&self, config: &Config) -> bool {
        self.only_mode
            .is_none_or(|only| only.durability() == config.durability)
            && self
                .only_appenders
                .is_none_or(|only| only == config.appenders)
            && self.only_batch.is_none_or(|only| only == config.batch)
    }
}

/// The log the append figures are taken on.
#[derive(Clone, Debug)]
pub(crate) enum Store {
    /// The embedded RocksDB log, against raw RocksDB and SQLite.
    Rocks,
    /// PostgreSQL, against a raw INSERT: a private server, or a URL.
    Postgres(Option<String>),
}

pub(crate) fn store(text: &str) -> Result<Store, String> {
    match text {
        "rocksdb" => Ok(Store::Rocks),
        "postgres" => Ok(Store::Postgres(None)),
        url if subagent_pg::is_postgres_url(url) => Ok(Store::Postgres(Some(url.to_owned()))),
        _ => Err("rocksdb, postgres or a postgres:// URL".to_owned()),
    }
}

pub(crate) struct Config {
    pub(crate) durability: Durability,
    pub(crate) appenders: usize,
    /// Appends (transactions) per run, over all appenders.
    pub(crate) appends: usize,
    /// Events per append.
    pub(crate) batch: usize,
}

impl Config {
    pub(crate) fn events(&self) -> usize {
        self.appends / self.appenders * self.appenders * self.batch
    }
}

pub(crate) fn payload() -> Event {
    Event::AssistantMessage {
        turn: 1,
        content: vec![ContentBlock::text("x".repeat(200))],
        usage: Some(Usage {
            input_tokens: 1200,
            output_tokens: 80,
        }),
    }
}

pub(crate) fn encoded_payload() -> Result<Vec<u8>, subagent_store::StoreError> {
    subagent_store::record::encode(&RecordedEvent {
        position: 1,
        stream: StreamId::Session(SessionId::new()),
        version: 1,
        event_id: subagent_core::EventId::new(),
        recorded_at: 0,
        schema_version: subagent_core::CURRENT_SCHEMA_VERSION,
        correlation_id: None,
        causation_id: None,
        trace: None,
        event: payload(),
    })
}

/// One run of the engine: its events per second, and how many events
/// each of its group commits held on average (events ÷ commits, whoever
/// made them: [`subagent_store::CommitCounts`]).
struct EngineRun {
    events_per_second: f64,
    events_per_commit: f64,
}

/// One run of the engine's side of `config`'s row on a fresh `RocksLog`,
/// its appenders driven on `runtime`.
///
/// # Errors
/// The log's open or the first failed append; and a run whose log counted
/// no commit, which only counts that are not wired up would give.
fn engine_run(
    config: &Config,
    runtime: &tokio::runtime::Runtime,
) -> Result<EngineRun, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log = RocksLog::open(
        dir.path(),
        RocksOptions {
            durability: config.durability,
        },
    )?;
    let events_per_second = drive_appenders(&log, config, runtime)?;
    let counts = log.commit_counts();
    let commits = counts.by_appenders + counts.by_thread;
    if commits == 0 {
        return Err("the log counted no group commit for a run that appended".into());
    }
    Ok(EngineRun {
        events_per_second,
        events_per_commit: config.events() as f64 / commits as f64,
    })
}

/// `config.appenders` tokio tasks appending `config.appends` appends of
/// `config.batch` events in all, one stream each, on `log`; events per
/// second. The engine side of every append table (RocksDB and PostgreSQL).
///
/// # Errors
/// The first failed append.
pub(crate) fn drive_appenders<L: EventLog + Clone>(
    log: &L,
    config: &Config,
    runtime: &tokio::runtime::Runtime,
) -> Result<f64, Box<dyn std::error::Error>> {
    let per_task = config.appends / config.appenders;
    let batch = config.batch;
    let started = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..config.appenders)
            .map(|_| {
                let log = log.clone();
                tokio::spawn(async move {
                    let stream = StreamId::Session(SessionId::new());
                    for _ in 0..per_task {
                        let events = (0..batch).map(|_| NewEvent::new(payload())).collect();
                        log.append(stream, ExpectedVersion::Any, events).await?;
                    }
                    Ok::<_, subagent_store::StoreError>(())
                })
            })
            .collect();
        for task in tasks {
            task.await??;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    Ok(config.events() as f64 / started.elapsed().as_secs_f64())
}

fn raw_run(config: &Config, bytes: &Arc<Vec<u8>>) -> Result<f64, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut options = Options::default();
    options.create_if_missing(true);
    options.set_compression_type(rocksdb::DBCompressionType::Lz4);
    let db = Arc::new(DB::open(&options, dir.path())?);
    let next = Arc::new(AtomicU64::new(1));
    let per_thread = config.appends / config.appenders;
    let sync = config.durability == Durability::Sync;
    let batch_size = config.batch;
    let started = Instant::now();
    let threads: Vec<_> = (0..config.appenders)
        .map(|_| {
            let (db, next, bytes) = (Arc::clone(&db), Arc::clone(&next), Arc::clone(bytes));
            std::thread::spawn(move || -> Result<(), rocksdb::Error> {
                let mut write_options = WriteOptions::default();
                write_options.set_sync(sync);
                for _ in 0..per_thread {
                    let mut batch = WriteBatch::default();
                    for _ in 0..batch_size {
                        batch.put(
                            next.fetch_add(1, Ordering::Relaxed).to_be_bytes(),
                            bytes.as_slice(),
                        );
                    }
                    db.write_opt(batch, &write_options)?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| "raw appender panicked")??;
    }
    Ok(config.events() as f64 / started.elapsed().as_secs_f64())
}

fn sqlite_run(config: &Config, bytes: &Arc<Vec<u8>>) -> Result<f64, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let connection = rusqlite::Connection::open(dir.path().join("events.db"))?;
    let synchronous = if config.durability == Durability::Sync {
        "FULL"
    } else {
        "NORMAL"
    };
    connection.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous={synchronous};
         CREATE TABLE events (position INTEGER PRIMARY KEY AUTOINCREMENT, stream TEXT NOT NULL,
                              version INTEGER NOT NULL, payload BLOB NOT NULL, UNIQUE(stream, version));"
    ))?;
    let connection = Arc::new(Mutex::new(connection));
    let per_thread = config.appends / config.appenders;
    let batch = config.batch;
    let started = Instant::now();
    let threads: Vec<_> = (0..config.appenders)
        .map(|_| {
            let (connection, bytes) = (Arc::clone(&connection), Arc::clone(bytes));
            std::thread::spawn(move || -> Result<(), String> {
                let stream = format!("session-{}", SessionId::new());
                let mut version = 0i64;
                for _ in 0..per_thread {
                    let mut guard = connection.lock().map_err(|_| "poisoned")?;
                    let transaction = guard.transaction().map_err(|e| e.to_string())?;
                    for _ in 0..batch {
                        version += 1;
                        transaction
                            .execute(
                                "INSERT INTO events (stream, version, payload) VALUES (?1, ?2, ?3)",
                                rusqlite::params![stream, version, bytes.as_slice()],
                            )
                            .map_err(|e| e.to_string())?;
                    }
                    transaction.commit().map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| "sqlite appender panicked")??;
    }
    Ok(config.events() as f64 / started.elapsed().as_secs_f64())
}

fn measure(
    runs: usize,
    mut once: impl FnMut() -> Result<f64, Box<dyn std::error::Error>>,
) -> Result<Summary, Box<dyn std::error::Error>> {
    let samples = (0..runs).map(|_| once()).collect::<Result<Vec<_>, _>>()?;
    Ok(Summary::of(&samples))
}

/// Runs the append benchmark and prints the table.
///
/// # Errors
/// Storage failures.
pub(super) fn run(args: &AppendArgs, out: &mut dyn Write) -> BenchResult {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let bytes = Arc::new(encoded_payload()?);
    let scaled = |count: f64| ((count * args.scale).max(64.0)) as usize;
    let config = |durability, appenders, appends: f64, batch| Config {
        durability,
        appenders,
        appends: scaled(appends),
        batch,
    };
    let configs = [
        config(Durability::Sync, 1, 500.0, 1),
        config(Durability::Sync, 64, 6400.0, 1),
        config(Durability::Sync, 1, 200.0, 64),
        config(Durability::Buffered, 1, 20_000.0, 1),
        config(Durability::Buffered, 64, 64_000.0, 1),
        config(Durability::Buffered, 1, 1000.0, 64),
    ];
    let configs: Vec<Config> = configs
        .into_iter()
        .filter(|config| args.selects(config))
        .collect();
    if configs.is_empty() {
        return Err("no row of the table matches the --only-* filters: the rows with 64 appenders append one event at a time".into());
    }
    if let Store::Postgres(url) = &args.store {
        return super::append_pg::run(url.as_deref(), args.runs, &configs, out);
    }
    writeln!(
        out,
        "durable append, events/s: median (min–max) of {} runs; payload {} bytes/record",
        args.runs,
        bytes.len()
    )?;
    out.flush()?;
    writeln!(
        out,
        "{:<9} {:>9} {:>5} {:>7}  {:>27} {:>9} {:>27} {:>10} {:>27} {:>13}",
        "mode",
        "appenders",
        "batch",
        "events",
        "engine",
        "ev/commit",
        "raw rocksdb",
        "eng/raw",
        "sqlite",
        "eng/sqlite"
    )?;
    out.flush()?;
    for config in &configs {
        eprintln!(
            "… measuring {:?} with {} appenders",
            config.durability, config.appenders
        );
        let mut events_per_commit_runs = Vec::with_capacity(args.runs);
        let engine = measure(args.runs, || {
            let run = engine_run(config, &runtime)?;
            events_per_commit_runs.push(run.events_per_commit);
            Ok(run.events_per_second)
        })?;
        let events_per_commit_median = Summary::of(&events_per_commit_runs).median;
        let raw = measure(args.runs, || raw_run(config, &bytes))?;
        let sqlite = if args.no_sqlite {
            None
        } else {
            Some(measure(args.runs, || sqlite_run(config, &bytes))?)
        };
        writeln!(
            out,
            "{:<9} {:>9} {:>5} {:>7}  {:>27} {:>9.1} {:>27} {:>10.2} {:>27} {:>13}",
            format!("{:?}", config.durability),
            config.appenders,
            config.batch,
            config.events(),
            engine.to_string(),
            events_per_commit_median,
            raw.to_string(),
            engine.median / raw.median,
            sqlite.map_or_else(|| "-".to_owned(), |s| s.to_string()),
            sqlite.map_or_else(
                || "-".to_owned(),
                |s| format!("{:.2}", engine.median / s.median)
            ),
        )?;
        out.flush()?;
    }
    Ok(())
}
