//! Whole-schema operations outside a [`crate::PgLog`] handle: moving a log
//! from one schema to another ([`rename_schema`]) and removing one
//! ([`drop_schema`]). An import into PostgreSQL uses both to be all or
//! nothing: it fills a staging schema, then renames it into place in one
//! statement, or drops it.

use tokio_postgres::NoTls;

use crate::bridge::{wait, OwnedRuntime};
use crate::error::db_error;
use crate::options::{quoted, validate_schema_name, PgOptions};
use subagent_store::StoreError;

/// Runs `work` on a connection of its own, on a runtime of its own (so it
/// may be called inside or outside another runtime).
fn on_connection<F>(options: &PgOptions, work: F) -> Result<(), StoreError>
where
    F: FnOnce(
            tokio_postgres::Client,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<(), StoreError>> + Send>,
        > + Send
        + 'static,
{
    let runtime = OwnedRuntime::new()?;
    let mut config = options.config.clone();
    config.connect_timeout(options.connect_timeout);
    wait(runtime.handle(), async move {
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|err| db_error("connecting", &err))?;
        let driver = tokio::spawn(connection);
        let result = work(client).await;
        driver.abort();
        result
    })
}

/// Renames schema `from` (a complete log no handle is open on) to
/// `options.schema`, in one statement, so the log appears there whole or
/// not at all.
///
/// # Errors
/// [`StoreError::NotALog`] for an invalid name, or when `options.schema`
/// already exists (nothing is changed); [`StoreError::Unavailable`] or
/// [`StoreError::Io`] when the database fails.
pub fn rename_schema(options: &PgOptions, from: &str) -> Result<(), StoreError> {
    validate_schema_name(from)?;
    validate_schema_name(&options.schema)?;
    let (from, to) = (from.to_owned(), options.schema.clone());
    on_connection(options, move |mut client| {
        Box::pin(async move {
            let fail = |err: tokio_postgres::Error| db_error("renaming the schema", &err);
            let transaction = client.transaction().await.map_err(fail)?;
            let taken: bool = transaction
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                    &[&to],
                )
                .await
                .and_then(|row| row.try_get(0))
                .map_err(fail)?;
            if taken {
                return Err(StoreError::NotALog {
                    path: format!("PostgreSQL schema {to}"),
                    reason: "it already exists; an import goes only into a new schema".to_owned(),
                });
            }
            transaction
                .batch_execute(&format!(
                    "ALTER SCHEMA {} RENAME TO {}",
                    quoted(&from),
                    quoted(&to)
                ))
                .await
                .map_err(fail)?;
            transaction.commit().await.map_err(fail)
        })
    })
}

/// Drops schema `name` and everything in it, if it exists.
///
/// # Errors
/// [`StoreError::NotALog`] for an invalid name; [`StoreError::Unavailable`]
/// or [`StoreError::Io`] when the database fails.
pub fn drop_schema(options: &PgOptions, name: &str) -> Result<(), StoreError> {
    validate_schema_name(name)?;
    let name = name.to_owned();
    on_connection(options, move |client| {
        Box::pin(async move {
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", quoted(&name)))
                .await
                .map_err(|err| db_error("dropping the schema", &err))
        })
    })
}
