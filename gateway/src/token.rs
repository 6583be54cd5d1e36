//! The gateway's bearer token: where it comes from (the environment, or a
//! file created once in the data directory with mode 0600), and the one
//! comparison every request goes through.
//!
//! The comparison is constant-time in the presented token's content and
//! length: both sides are hashed with SHA-256 and the digests compared with
//! `subtle`. The token's text is never logged, printed or kept after
//! loading; `Debug` shows only where it came from.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;

/// The environment variable whose value, when set, is the token.
pub const TOKEN_ENV: &str = "SUBAGENTS_GATEWAY_TOKEN";

/// The token file's name in the data directory.
pub const TOKEN_FILE: &str = "gateway.token";

/// The shortest token accepted, in bytes (a generated one has 64).
pub const MIN_TOKEN_BYTES: usize = 32;

/// The longest token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 512;

/// Where the token came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// [`TOKEN_ENV`].
    Environment,
    /// A token file (created by this call when it says so).
    File {
        /// The file.
        path: PathBuf,
        /// Whether this call created it.
        created: bool,
    },
    /// Given by the host in code.
    Given,
}

/// Why no token could be had.
#[derive(Debug, Error)]
pub enum TokenError {
    /// The token is shorter than [`MIN_TOKEN_BYTES`], longer than
    /// [`MAX_TOKEN_BYTES`], or holds anything but visible ASCII.
    #[error("the gateway token from {0} must be {MIN_TOKEN_BYTES} to {MAX_TOKEN_BYTES} visible ASCII characters")]
    Malformed(String),
    /// The token file can be read by other users.
    #[error("{} is readable by other users (mode {mode:o}); run chmod 600 on it", path.display())]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Reading or creating the token file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The secret every request must present as `Authorization: Bearer ...`.
/// Only its SHA-256 digest is kept.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
    source: TokenSource,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Token {
    /// A token from its text.
    ///
    /// # Errors
    /// [`TokenError::Malformed`] for a token outside the accepted shape.
    pub fn new(secret: &str, source: TokenSource) -> Result<Token, TokenError> {
        let shaped = (MIN_TOKEN_BYTES..=MAX_TOKEN_BYTES).contains(&secret.len())
            && secret.bytes().all(|byte| byte.is_ascii_graphic());
        if !shaped {
            let from = match &source {
                TokenSource::Environment => TOKEN_ENV.to_owned(),
                TokenSource::File { path, .. } => path.display().to_string(),
                TokenSource::Given => "the host".to_owned(),
            };
            return Err(TokenError::Malformed(from));
        }
        Ok(Token {
            digest: Sha256::digest(secret.as_bytes()).into(),
            source,
        })
    }

    /// The token `serve` uses: [`TOKEN_ENV`] when set, else the
    /// [`TOKEN_FILE`] in `data_dir`, created with 64 random hex characters
    /// and mode 0600 when missing. A token file readable by other users is
    /// refused rather than trusted. Returns the token and, when the file was
    /// just created, its text (for the caller to hand to its user once).
    ///
    /// # Errors
    /// [`TokenError`].
    pub fn load_or_create(data_dir: &Path) -> Result<(Token, Option<String>), TokenError> {
        if let Ok(secret) = std::env::var(TOKEN_ENV) {
            return Ok((Token::new(&secret, TokenSource::Environment)?, None));
        }
        let path = data_dir.join(TOKEN_FILE);
        let io = |source| TokenError::Io {
            path: path.clone(),
            source,
        };
        match fs::metadata(&path) {
            Ok(metadata) => {
                let mode = metadata.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(TokenError::Exposed { path, mode });
                }
                let mut secret = String::new();
                fs::File::open(&path)
                    .and_then(|file| {
                        file.take(MAX_TOKEN_BYTES as u64 + 2)
                            .read_to_string(&mut secret)
                    })
                    .map_err(io)?;
                let source = TokenSource::File {
                    path: path.clone(),
                    created: false,
                };
                Ok((Token::new(secret.trim_end(), source)?, None))
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let secret = random_hex(32).map_err(io)?;
                let mut file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(io)?;
                file.write_all(format!("{secret}\n").as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(io)?;
                let source = TokenSource::File {
                    path: path.clone(),
                    created: true,
                };
                Ok((Token::new(&secret, source)?, Some(secret)))
            }
            Err(err) => Err(io(err)),
        }
    }

    /// Where the token came from.
    #[must_use]
    pub fn source(&self) -> &TokenSource {
        &self.source
    }

    /// Whether `presented` is the token, in time independent of where or
    /// whether they differ.
    #[must_use]
    pub fn matches(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        digest[..].ct_eq(&self.digest[..]).into()
    }
}

/// `bytes` random bytes from the kernel, as lowercase hex.
fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buffer = vec![0u8; bytes];
    fs::File::open("/dev/urandom")?.read_exact(&mut buffer)?;
    Ok(buffer.iter().map(|byte| format!("{byte:02x}")).collect())
}

#[cfg(test)]
#[path = "token_tests.rs"]
mod tests;
