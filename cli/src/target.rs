//! The log a command names: a RocksDB directory, or a PostgreSQL schema by
//! URL (`postgres://USER@HOST:PORT/DB?schema=NAME`). Every command that
//! takes a log directory takes either in its place; `demo` and `serve`
//! take the URL as `--store` beside `--data`.

use std::fmt;
use std::path::PathBuf;

use subagent_pg::{is_postgres_url, PgLog, PgOptions};
use subagent_store::{Durability, EventLog, RocksLog, RocksOptions, StoreError};

use crate::error::CliError;

/// Where a log is.
#[derive(Clone, Debug)]
pub(crate) enum LogTarget {
    /// A RocksDB log directory.
    Dir(PathBuf),
    /// A PostgreSQL log: its options (from the URL) and the URL as typed.
    Postgres(Box<PgOptions>, String),
}

/// Parses a command-line log argument: a `postgres://` or `postgresql://`
/// URL, else a directory path.
///
/// # Errors
/// The URL's problem (bad syntax, an unknown parameter, a bad schema name).
pub(crate) fn parse(text: &str) -> Result<LogTarget, String> {
    if is_postgres_url(text) {
        let options = PgOptions::from_url(text).map_err(|err| err.to_string())?;
        Ok(LogTarget::Postgres(Box::new(options), text.to_owned()))
    } else {
        Ok(LogTarget::Dir(PathBuf::from(text)))
    }
}

/// Parses `--store`: a PostgreSQL URL only.
///
/// # Errors
/// Anything but a valid PostgreSQL URL.
pub(crate) fn parse_store(text: &str) -> Result<LogTarget, String> {
    if !is_postgres_url(text) {
        return Err("--store takes a postgres:// URL (a directory is --data)".to_owned());
    }
    parse(text)
}

impl fmt::Display for LogTarget {
    /// The directory, or the URL with any password replaced by `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogTarget::Dir(dir) => write!(f, "{}", dir.display()),
            LogTarget::Postgres(_, url) => f.write_str(&redact_password(url)),
        }
    }
}

/// `url` with the password of its user-info part, if any, replaced by `***`.
fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) if user_info.contains(':') => {
            let user = user_info.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        _ => url.to_owned(),
    }
}

impl LogTarget {
    /// Opens an existing log for reading: a RocksDB directory read-only; a
    /// PostgreSQL schema only if it holds a log (nothing is created).
    ///
    /// # Errors
    /// The store's open failure (`store/not-a-log`, `store/damaged`,
    /// `store/io` for an unreachable server, ...).
    pub(crate) fn open_existing(&self) -> Result<Box<dyn EventLog>, Box<dyn std::error::Error>> {
        match self {
            LogTarget::Dir(dir) => RocksLog::open_read_only(dir)
                .map(|log| Box::new(log) as Box<dyn EventLog>)
                .map_err(|err| match err {
                    damaged @ StoreError::Damaged { .. } => CliError::Damaged {
                        dir: dir.clone(),
                        source: damaged,
                    }
                    .into(),
                    other => other.into(),
                }),
            LogTarget::Postgres(options, _) => {
                let mut options = (**options).clone();
                options.must_exist = true;
                Ok(Box::new(PgLog::connect(options)?))
            }
        }
    }

    /// Opens the log for writing, creating it when absent.
    ///
    /// # Errors
    /// The store's open failure.
    pub(crate) fn open_writable(
        &self,
        durability: Durability,
    ) -> Result<std::sync::Arc<dyn EventLog>, StoreError> {
        match self {
            LogTarget::Dir(dir) => Ok(std::sync::Arc::new(RocksLog::open(
                dir,
                RocksOptions { durability },
            )?)),
            LogTarget::Postgres(options, _) => Ok(std::sync::Arc::new(PgLog::connect(
                (**options).clone().with_durability(durability),
            )?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_postgres_and_anything_else_a_directory() {
        assert!(matches!(parse("./data"), Ok(LogTarget::Dir(_))));
        assert!(matches!(
            parse("postgres://u@h/db?schema=s"),
            Ok(LogTarget::Postgres(..))
        ));
        assert!(parse("postgres://u@h/db?schema=Bad").is_err());
        assert!(parse_store("./data").is_err());
    }

    #[test]
    fn a_password_is_never_shown() {
        assert_eq!(
            redact_password("postgres://u:secret@h:5432/db?schema=s"),
            "postgres://u:***@h:5432/db?schema=s"
        );
        assert_eq!(redact_password("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact_password("postgres://h/db?user=a@b"),
            "postgres://h/db?user=a@b"
        );
    }
}
