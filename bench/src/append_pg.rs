//! `subagents bench append --store postgres`: durable append throughput of
//! `PgLog` against a raw `INSERT` of the same rows, in the same run, on one
//! PostgreSQL server (a private one with `fsync` on, started here, or the
//! one a `postgres://` URL names).
//!
//! - **engine**: `PgLog::append` from N tokio tasks (one stream each), each
//!   append its own durable transaction as far as the caller sees (the log
//!   groups concurrent ones into one transaction);
//! - **raw**: N connections, each committing one transaction per append
//!   that inserts the same pre-encoded record bytes into a plain table with
//!   a `bigint` key and the same `synchronous_commit`: no counter row, no
//!   indexes beyond the key, no checks. The server's own limit for this
//!   work (PostgreSQL group-commits concurrent WAL flushes itself).
//!
//! Each run uses a fresh schema.

use std::io::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use subagent_pg::testing::{unique_schema, TestServer};
use subagent_pg::{PgLog, PgOptions};
use subagent_store::Durability;

use super::append::{encoded_payload, Config};
use super::stats::Summary;
use crate::BenchResult;

/// Which server the PostgreSQL figures run on.
pub(crate) enum Server {
    /// A private server started for the benchmark (fsync on).
    Private(TestServer),
    /// A server the caller named.
    Url(PgOptions),
}

impl Server {
    /// Starts a private server, or uses `url`.
    ///
    /// # Errors
    /// The server's start failure, or a bad URL.
    pub(crate) fn new(url: Option<&str>) -> Result<Server, Box<dyn std::error::Error>> {
        Ok(match url {
            Some(url) => Server::Url(PgOptions::from_url(url)?),
            None => Server::Private(TestServer::start_durable()?),
        })
    }

    /// Options for a fresh schema on this server, and the guard that drops
    /// it when the run ends, whether it succeeded or not (on a server the
    /// caller named, runs would otherwise pile up schemas).
    pub(crate) fn scratch(&self, durability: Durability) -> (PgOptions, Scratch) {
        let schema = unique_schema("bench");
        let options = match self {
            Server::Private(server) => server.options(&schema),
            Server::Url(options) => options.clone().with_schema(schema),
        }
        .with_durability(durability);
        (options.clone(), Scratch(Some(options)))
    }
}

/// Drops its schema when dropped (best effort: a failure to drop is not a
/// benchmark failure).
pub(crate) struct Scratch(Option<PgOptions>);

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(options) = self.0.take() {
            let _ = subagent_pg::drop_schema(&options, &options.schema);
        }
    }
}

fn engine_run(
    server: &Server,
    config: &Config,
    runtime: &tokio::runtime::Runtime,
) -> Result<f64, Box<dyn std::error::Error>> {
    let (mut options, _scratch) = server.scratch(config.durability);
    options.pool_size = 4;
    let log = PgLog::connect(options)?;
    super::append::drive_appenders(&log, config, runtime)
}

/// The raw side: `config.appenders` plain connections, one transaction
/// per append; events per second.
///
/// # Errors
/// Server failures.
pub(crate) fn raw_run(
    server: &Server,
    config: &Config,
    bytes: &Arc<Vec<u8>>,
    runtime: &tokio::runtime::Runtime,
) -> Result<f64, Box<dyn std::error::Error>> {
    let (options, _scratch) = server.scratch(config.durability);
    let schema = options.schema.clone();
    let synchronous = if config.durability == Durability::Sync {
        "on"
    } else {
        "off"
    };
    let per_connection = config.appends / config.appenders;
    let batch = config.batch;
    runtime.block_on(async {
        let connect = || async {
            let (client, connection) = options.config.connect(tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            client
                .batch_execute(&format!("SET synchronous_commit = {synchronous}"))
                .await?;
            Ok::<_, tokio_postgres::Error>(client)
        };
        let setup = connect().await?;
        setup
            .batch_execute(&format!(
                "CREATE SCHEMA \"{schema}\"; CREATE TABLE \"{schema}\".raw (position bigint PRIMARY KEY, record bytea NOT NULL)"
            ))
            .await?;
        let mut clients = Vec::with_capacity(config.appenders);
        for _ in 0..config.appenders {
            clients.push(connect().await?);
        }
        let next = Arc::new(AtomicI64::new(1));
        let insert = format!("INSERT INTO \"{schema}\".raw (position, record) VALUES ($1, $2)");
        let started = Instant::now();
        let tasks: Vec<_> = clients
            .into_iter()
            .map(|mut client| {
                let (next, bytes, insert) = (Arc::clone(&next), Arc::clone(bytes), insert.clone());
                tokio::spawn(async move {
                    let statement = client.prepare(&insert).await?;
                    for _ in 0..per_connection {
                        let transaction = client.transaction().await?;
                        for _ in 0..batch {
                            let position = next.fetch_add(1, Ordering::Relaxed);
                            transaction.execute(&statement, &[&position, &bytes.as_slice()]).await?;
                        }
                        transaction.commit().await?;
                    }
                    Ok::<_, tokio_postgres::Error>(())
                })
            })
            .collect();
        for task in tasks {
            task.await??;
        }
        let rate = config.events() as f64 / started.elapsed().as_secs_f64();
        Ok::<_, Box<dyn std::error::Error>>(rate)
    })
}

/// Runs the PostgreSQL append table.
///
/// # Errors
/// Server and storage failures.
pub(super) fn run(
    url: Option<&str>,
    runs: usize,
    configs: &[Config],
    out: &mut dyn Write,
) -> BenchResult {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let server = Server::new(url)?;
    let bytes = Arc::new(encoded_payload()?);
    writeln!(
        out,
        "durable append on PostgreSQL ({}), events/s: median (min–max) of {runs} runs; payload {} bytes/record",
        match &server {
            Server::Private(_) => "a private server, fsync on",
            Server::Url(_) => "the server of --store",
        },
        bytes.len()
    )?;
    writeln!(
        out,
        "{:<9} {:>9} {:>5} {:>7}  {:>27} {:>27} {:>10}",
        "mode", "appenders", "batch", "events", "engine", "raw insert", "eng/raw"
    )?;
    out.flush()?;
    for config in configs {
        eprintln!(
            "… measuring {:?} with {} appenders on PostgreSQL",
            config.durability, config.appenders
        );
        let measure = |once: &dyn Fn() -> Result<f64, Box<dyn std::error::Error>>| {
            (0..runs)
                .map(|_| once())
                .collect::<Result<Vec<_>, _>>()
                .map(|samples| Summary::of(&samples))
        };
        let engine = measure(&|| engine_run(&server, config, &runtime))?;
        let raw = measure(&|| raw_run(&server, config, &bytes, &runtime))?;
        writeln!(
            out,
            "{:<9} {:>9} {:>5} {:>7}  {:>27} {:>27} {:>10.2}",
            format!("{:?}", config.durability),
            config.appenders,
            config.batch,
            config.events(),
            engine.to_string(),
            raw.to_string(),
            engine.median / raw.median,
        )?;
        out.flush()?;
    }
    Ok(())
}
