//! [`PgOptions`]: how a [`crate::PgLog`] connects (the driver's
//! [`tokio_postgres::Config`]), which schema holds its tables, its pool,
//! its durability and how often it polls the head; and the rule for schema
//! names ([`validate_schema_name`]).

use std::time::Duration;

use subagent_store::{Durability, StoreError};

/// The schema a log's tables live in unless [`PgOptions::schema`] says
/// otherwise.
pub const DEFAULT_SCHEMA: &str = "subagents";

/// The longest schema name accepted, in bytes. PostgreSQL's identifiers
/// hold 63; the notification channel appends `_head` to the name.
pub const MAX_SCHEMA_NAME: usize = 48;

/// Options of a [`crate::PgLog`].
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// Where the server is and who connects (host, port, user, password,
    /// database). TLS is not supported yet: connections use `NoTls`, so
    /// use a local socket, loopback or a trusted network.
    pub config: tokio_postgres::Config,
    /// The schema holding the log's tables (created when absent). Several
    /// logs can share one database under different schemas. Must pass
    /// [`validate_schema_name`].
    pub schema: String,
    /// The most pooled connections (reads, the writer, polling). At least 1;
    /// one more, outside the pool, listens for notifications.
    pub pool_size: usize,
    /// When appends are acknowledged. [`Durability::Sync`]: after the commit
    /// is flushed to the server's write-ahead log (`synchronous_commit =
    /// on`, set in every append transaction whatever the server's default).
    /// [`Durability::Buffered`]: `synchronous_commit = off` in every append
    /// transaction: the commit is acknowledged before its WAL flush, so a
    /// crash of the *server* (not of this process) can lose the appends
    /// acknowledged in about the last `3 × wal_writer_delay` (600 ms by
    /// default); what survives is still a gap-free prefix, never a torn
    /// transaction. [`Durability::Volatile`] is refused.
    pub durability: Durability,
    /// How often the head is read from the counter row even without a
    /// notification, so a lost notification or a reconnect never stalls a
    /// reader for longer than this.
    pub poll_interval: Duration,
    /// The limit on establishing one connection; a server that does not
    /// answer in time is [`StoreError::Unavailable`].
    pub connect_timeout: Duration,
    /// Open only a log that exists: a schema without the log's tables is
    /// [`StoreError::NotALog`] and nothing is created (what the inspection
    /// commands want). False by default: connecting creates the schema.
    pub must_exist: bool,
}

impl PgOptions {
    /// Options for `config` with the defaults: schema [`DEFAULT_SCHEMA`],
    /// 4 pooled connections, [`Durability::Sync`], a 200 ms poll and a
    /// 10 s connect timeout.
    #[must_use]
    pub fn new(config: tokio_postgres::Config) -> PgOptions {
        PgOptions {
            config,
            schema: DEFAULT_SCHEMA.to_owned(),
            pool_size: 4,
            durability: Durability::Sync,
            poll_interval: Duration::from_millis(200),
            connect_timeout: Duration::from_secs(10),
            must_exist: false,
        }
    }

    /// Options for a `postgres://` or `postgresql://` URL, whose query may
    /// name the schema (`?schema=NAME`, default [`DEFAULT_SCHEMA`]) beside
    /// the driver's own parameters (`connect_timeout`, `application_name`,
    /// ...), with the other defaults of [`PgOptions::new`].
    ///
    /// # Errors
    /// [`StoreError::NotALog`] when the text is not such a URL, the driver
    /// refuses it, or the schema name is invalid.
    pub fn from_url(url: &str) -> Result<PgOptions, StoreError> {
        if !is_postgres_url(url) {
            return Err(StoreError::NotALog {
                path: "the PostgreSQL URL".to_owned(),
                reason: "it must start with postgres:// or postgresql://".to_owned(),
            });
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut schema = DEFAULT_SCHEMA.to_owned();
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some(("schema", name)) => name.clone_into(&mut schema),
                _ => kept.push(pair),
            }
        }
        validate_schema_name(&schema)?;
        let driver_url = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok(PgOptions::from_connection_string(&driver_url)?.with_schema(schema))
    }

    /// Options for a libpq-style connection string (`host=... port=...
    /// user=... dbname=...` or a `postgresql://` URL), with the defaults of
    /// [`PgOptions::new`].
    ///
    /// # Errors
    /// [`StoreError::NotALog`] when the string does not parse.
    pub fn from_connection_string(text: &str) -> Result<PgOptions, StoreError> {
        text.parse::<tokio_postgres::Config>()
            .map(PgOptions::new)
            .map_err(|err| StoreError::NotALog {
                path: "the PostgreSQL connection string".to_owned(),
                // The driver's message names the option, never its value.
                reason: err.to_string(),
            })
    }

    /// The same options with the tables in `schema`.
    #[must_use]
    pub fn with_schema(mut self, schema: impl Into<String>) -> PgOptions {
        self.schema = schema.into();
        self
    }

    /// The same options with `durability`.
    #[must_use]
    pub fn with_durability(mut self, durability: Durability) -> PgOptions {
        self.durability = durability;
        self
    }
}

/// `schema` as a quoted SQL identifier, so a valid name that is also a
/// keyword (`user`, `select`) works. Only for names that passed
/// [`validate_schema_name`] (no `"` to escape).
pub(crate) fn quoted(schema: &str) -> String {
    format!("\"{schema}\"")
}

/// Whether `text` is a PostgreSQL URL (`postgres://` or `postgresql://`),
/// as opposed to a log directory.
#[must_use]
pub fn is_postgres_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

/// Checks a schema name: 1 to [`MAX_SCHEMA_NAME`] bytes of lowercase ASCII
/// letters, digits and `_`, not starting with a digit, and not starting
/// with `pg_` (reserved by PostgreSQL). Such a name holds no `"` and folds
/// to itself, so it is spliced into SQL, always double-quoted (a keyword
/// such as `user` works), only after this check.
///
/// # Errors
/// [`StoreError::NotALog`] naming the schema and the rule it breaks.
pub fn validate_schema_name(name: &str) -> Result<(), StoreError> {
    let refuse = |reason: &str| {
        Err(StoreError::NotALog {
            path: format!("PostgreSQL schema {name:?}"),
            reason: format!("not a valid schema name: {reason}"),
        })
    };
    if name.is_empty() {
        return refuse("it is empty");
    }
    if name.len() > MAX_SCHEMA_NAME {
        return refuse("it is longer than 48 bytes");
    }
    if !name
        .bytes()
        .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_')
    {
        return refuse("only lowercase ASCII letters, digits and '_' are allowed");
    }
    if name.as_bytes()[0].is_ascii_digit() {
        return refuse("it starts with a digit");
    }
    if name.starts_with("pg_") {
        return refuse("the prefix pg_ is reserved for system schemas");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_its_schema_and_keeps_the_drivers_parameters() {
        let options = PgOptions::from_url(
            "postgres://u@127.0.0.1:5433/db?schema=tenant_1&application_name=x",
        )
        .unwrap();
        assert_eq!(options.schema, "tenant_1");
        assert_eq!(options.config.get_application_name(), Some("x"));
        assert_eq!(options.config.get_dbname(), Some("db"));
        assert_eq!(
            PgOptions::from_url("postgresql://u@h/db").unwrap().schema,
            DEFAULT_SCHEMA
        );
        for bad in [
            "./data",
            "postgres://u@h/db?schema=Bad-Name",
            "postgres://u@h/db?bogus=1",
            "mysql://h/db",
        ] {
            assert!(
                matches!(PgOptions::from_url(bad), Err(StoreError::NotALog { .. })),
                "{bad}"
            );
        }
        assert!(is_postgres_url("postgres://h") && !is_postgres_url("/tmp/postgres://"));
    }

    #[test]
    fn schema_names_are_plain_identifiers() {
        let (longest, too_long) = ("a".repeat(MAX_SCHEMA_NAME), "a".repeat(MAX_SCHEMA_NAME + 1));
        for good in ["subagents", "_t1", "tenant_42", longest.as_str()] {
            assert_eq!(validate_schema_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "1abc",
            "Upper",
            "with space",
            "quote\"",
            "semi;colon",
            "dash-ed",
            "pg_catalog",
            "é",
            too_long.as_str(),
        ] {
            assert!(
                matches!(validate_schema_name(bad), Err(StoreError::NotALog { .. })),
                "{bad:?}"
            );
        }
    }
}
