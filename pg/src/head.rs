//! The durable head as a watch channel.
//!
//! Three things move it, and only forward: this log's writer after each
//! `COMMIT` returns; a follower task that reads the counter row whenever it
//! is woken and at least every poll interval; and a listener on a
//! dedicated connection (outside the pool) that wakes the follower on each
//! `NOTIFY` of the schema's channel, which every appending transaction, in
//! any process, sends at its commit. A notification is only a wake-up: the
//! head always comes from the counter row, so a lost notification, a
//! dropped listener or a reconnect delays a reader by at most one poll
//! interval and can never make it skip or repeat an event.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use subagent_store::StoreError;
use tokio::sync::{watch, Notify};
use tokio_postgres::{AsyncMessage, NoTls};
use tracing::{debug, warn};

use crate::error::{db_error, pool_error, unsigned};
use crate::log::Inner;

/// Moves `head` to `to` if that is further; never back.
pub(crate) fn advance(head: &watch::Sender<u64>, to: u64) {
    head.send_if_modified(|current| {
        if to > *current {
            *current = to;
            true
        } else {
            false
        }
    });
}

/// Reads the counter row through `client`.
///
/// # Errors
/// A database failure, or [`StoreError::Damaged`] for a negative head.
pub(crate) async fn read_head(
    client: &tokio_postgres::Client,
    sql: &str,
    schema: &str,
) -> Result<u64, StoreError> {
    let row = client
        .query_one(sql, &[])
        .await
        .map_err(|err| db_error("reading the head", &err))?;
    let head: i64 = row
        .try_get(0)
        .map_err(|err| db_error("reading the head", &err))?;
    unsigned(head, |value| StoreError::Damaged {
        path: format!("PostgreSQL schema {schema}"),
        reason: format!("the counter row says {value}"),
    })
}

pub(crate) async fn poll_head(inner: &Inner) -> Result<u64, StoreError> {
    let client = inner
        .pool
        .get()
        .await
        .map_err(|err| pool_error("reading the head", err))?;
    read_head(&client, &inner.sql.read_head, &inner.schema).await
}

/// Follows the counter row: on every wake-up and every `poll_interval`.
/// Runs until the log's runtime shuts down.
pub(crate) async fn follow(inner: Arc<Inner>, wake: Arc<Notify>) {
    loop {
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(inner.poll_interval) => {}
        }
        match poll_head(&inner).await {
            Ok(head) => advance(&inner.head, head),
            Err(err) => debug!(error = %err, "polling the head failed; retrying"),
        }
    }
}

/// Keeps a `LISTEN` connection open and turns each notification into a
/// wake-up of [`follow`]; reconnects with a growing pause (100 ms to 5 s)
/// when it fails. Runs until the log's runtime shuts down.
pub(crate) async fn listen(inner: Arc<Inner>, wake: Arc<Notify>) {
    let mut pause = Duration::from_millis(100);
    loop {
        let started = tokio::time::Instant::now();
        if let Err(err) = listen_once(&inner, &wake).await {
            debug!(error = %err, "the notification listener failed; reconnecting");
        }
        // Whatever was committed while no one listened.
        wake.notify_one();
        if started.elapsed() > Duration::from_secs(10) {
            pause = Duration::from_millis(100);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

async fn listen_once(inner: &Inner, wake: &Arc<Notify>) -> Result<(), StoreError> {
    let (client, mut connection) = inner
        .config
        .connect(NoTls)
        .await
        .map_err(|err| db_error("connecting the notification listener", &err))?;
    let notified = Arc::clone(wake);
    let driver = tokio::spawn(async move {
        loop {
            match poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(_))) => notified.notify_one(),
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    warn!(error = %err, "the notification listener's connection failed");
                    return;
                }
                None => return,
            }
        }
    });
    client
        .batch_execute(&inner.sql.listen)
        .await
        .map_err(|err| db_error("listening for appends", &err))?;
    // Appends committed before LISTEN took effect sent nothing we saw.
    wake.notify_one();
    // Until the connection ends (the client stays alive until then).
    let _ = driver.await;
    drop(client);
    Ok(())
}
