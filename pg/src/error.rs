//! Driver and pool failures as [`StoreError`]s: a lost or unreachable
//! server is [`StoreError::Unavailable`]; any other database failure is
//! [`StoreError::Io`]. Every message names what was being done.

use std::error::Error as _;

use subagent_store::StoreError;

/// Whether `err` means the server is unreachable or the connection is gone
/// (rather than a statement the server refused).
fn is_connection_loss(err: &tokio_postgres::Error) -> bool {
    if err.is_closed() {
        return true;
    }
    if let Some(state) = err.code() {
        let code = state.code();
        // Class 08: connection exception; 57P0x: the server is shutting
        // down, crashed, starting up, or ended the session; 53300: no
        // connection slot free.
        return code.starts_with("08") || code.starts_with("57P") || code == "53300";
    }
    // No server error: the socket failed, or connecting did.
    let mut source = err.source();
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The driver's error with its server detail and cause chain.
fn describe(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} ({}: {})", err, db.code().code(), db.message()),
        None => {
            let mut text = err.to_string();
            let mut source = err.source();
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !text.contains(&cause_text) {
                    text.push_str(": ");
                    text.push_str(&cause_text);
                }
                source = cause.source();
            }
            text
        }
    }
}

/// `err`, met while `doing`, as a [`StoreError`].
pub(crate) fn db_error(doing: &str, err: &tokio_postgres::Error) -> StoreError {
    if is_connection_loss(err) {
        StoreError::Unavailable {
            reason: format!("{doing}: {}", describe(err)),
        }
    } else {
        StoreError::Io(format!("PostgreSQL, {doing}: {}", describe(err)))
    }
}

/// A failure to take a pooled connection as a [`StoreError`].
pub(crate) fn pool_error(doing: &str, err: deadpool_postgres::PoolError) -> StoreError {
    use deadpool_postgres::PoolError;
    match err {
        PoolError::Backend(err) => db_error(doing, &err),
        PoolError::Timeout(kind) => StoreError::Unavailable {
            reason: format!("{doing}: timed out ({kind:?}) taking a connection"),
        },
        PoolError::Closed => StoreError::Closed,
        PoolError::PostCreateHook(err) => StoreError::Unavailable {
            reason: format!("{doing}: {err}"),
        },
        PoolError::NoRuntimeSpecified => {
            StoreError::Io(format!("{doing}: the connection pool has no runtime"))
        }
    }
}

/// A number read from a column that must not be negative, as a `u64`.
///
/// # Errors
/// `damaged(value)` when it is negative.
pub(crate) fn unsigned(
    value: i64,
    damaged: impl FnOnce(i64) -> StoreError,
) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| damaged(value))
}

/// A position or version as the `bigint` PostgreSQL stores.
///
/// # Errors
/// [`StoreError::NumberingExhausted`] past `i64::MAX` (no log grows that far).
pub(crate) fn signed(what: &'static str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::NumberingExhausted { what, value })
}
