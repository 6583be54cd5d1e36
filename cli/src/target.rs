//! The log a command names: a RocksDB directory, or a PostgreSQL schema by
//! URL (`postgres://USER@HOST:PORT/DB?schema=NAME`). `log`, `tree`,
//! `children`, `replay`, `diff`, `verify`, `export` and `import` take either
//! as their log argument; `demo` and `serve` take the URL as `--store`
//! beside `--data` (`salvage` takes directories only). A URL is never echoed
//! with its password, not even in a parse error ([`LogParser`]).

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

/// `url` with any password replaced by `***`: the user-info part's and a
/// `password=` query parameter's.
pub(crate) fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) if user_info.contains(':') => {
            let user = user_info.split(':').next().unwrap_or("");
            format!("{user}:***@{host}")
        }
        _ => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("password", _)) => "password=***".to_owned(),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", pairs.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// Whether `url` carries a password (so a command printed with it redacted
/// needs the password put back to run).
pub(crate) fn has_password(url: &str) -> bool {
    redact_password(url) != url
}

/// clap's parser of a log argument. A refused value is reported with its
/// password redacted (clap's own error would echo the value as typed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LogParser {
    /// Only a PostgreSQL URL (`--store`), not a directory.
    postgres_only: bool,
}

impl LogParser {
    /// A directory or a URL.
    pub(crate) fn any() -> LogParser {
        LogParser {
            postgres_only: false,
        }
    }
    /// A URL only.
    pub(crate) fn postgres_only() -> LogParser {
        LogParser {
            postgres_only: true,
        }
    }
}

impl clap::builder::TypedValueParser for LogParser {
    type Value = LogTarget;

    fn parse_ref(
        &self,
        _command: &clap::Command,
        argument: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<LogTarget, clap::Error> {
        // A path is kept as the OS's bytes: only a URL must be text, and
        // a value that is not UTF-8 is no URL.
        let Some(text) = value.to_str() else {
            if self.postgres_only {
                return Err(clap::Error::raw(
                    clap::error::ErrorKind::InvalidValue,
                    "invalid value for '--store': a postgres:// URL is UTF-8 text\n",
                ));
            }
            return Ok(LogTarget::Dir(PathBuf::from(value)));
        };
        let parsed = if self.postgres_only {
            parse_store(text)
        } else {
            parse(text)
        };
        parsed.map_err(|reason| {
            let name = argument.map_or_else(|| "LOG".to_owned(), ToString::to_string);
            clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!(
                    "invalid value '{}' for '{name}': {reason}\n",
                    redact_password(text)
                ),
            )
        })
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
                .map(|log| Box::new(say_torn_write(log)) as Box<dyn EventLog>)
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
            LogTarget::Dir(dir) => Ok(std::sync::Arc::new(say_torn_write(RocksLog::open(
                dir,
                RocksOptions { durability },
            )?))),
            LogTarget::Postgres(options, _) => Ok(std::sync::Arc::new(PgLog::connect(
                (**options).clone().with_durability(durability),
            )?)),
        }
    }
}

/// Tells the user, on stderr, of an incomplete write the open of `log`
/// dropped (`RocksLog::torn_write`): RocksDB's own warnings go to
/// `tracing`, which a command does not print.
fn say_torn_write(log: RocksLog) -> RocksLog {
    if let Some(torn) = log.torn_write() {
        eprintln!("note: {torn}");
    }
    log
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
    fn a_refused_url_is_reported_without_its_password() {
        use clap::builder::TypedValueParser;
        let command = clap::Command::new("t");
        let error = LogParser::any()
            .parse_ref(
                &command,
                None,
                std::ffi::OsStr::new("postgres://u:secret@h/db?schema=Bad"),
            )
            .unwrap_err()
            .to_string();
        assert!(
            !error.contains("secret") && error.contains("u:***@h"),
            "{error}"
        );
        let error = LogParser::postgres_only()
            .parse_ref(&command, None, std::ffi::OsStr::new("./dir"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("--store takes a postgres:// URL"), "{error}");
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
        assert_eq!(
            redact_password("postgres://u@h/db?password=secret&schema=s"),
            "postgres://u@h/db?password=***&schema=s"
        );
        assert!(has_password("postgres://u:p@h/db") && !has_password("postgres://u@h/db"));
    }
}
