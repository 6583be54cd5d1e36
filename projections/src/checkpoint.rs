//! Versioned checkpoint encoding of [`Projections`].
//!
//! A checkpoint is `{"checkpointVersion": N, "position": P, "state": {...}}`.
//! Decoding refuses any other version and anything that does not decode;
//! callers then discard it and rebuild from the log. A checkpoint is never
//! trusted beyond what it can prove about itself.

use serde::{Deserialize, Serialize};

use crate::state::Projections;

/// The checkpoint format this build writes and reads. Version 2 added the
/// prompt receipts of each inbox; a version-1 checkpoint is discarded and
/// the log refolded.
pub const CHECKPOINT_VERSION: u32 = 2;

/// The name projections checkpoints are stored under in the log.
pub const CHECKPOINT_NAME: &str = "projections";

/// Judges a stored checkpoint against a log whose head is `head`:
/// `Ok(None)` when there is none, `Ok(Some(state))` when it can be resumed
/// from, `Err(reason)` when it must be discarded (it does not decode, is of
/// another version, disagrees with itself, or claims a position past the head).
///
/// # Errors
/// The reason to discard it.
pub fn usable(stored: Option<&[u8]>, head: u64) -> Result<Option<Projections>, String> {
    let Some(bytes) = stored else {
        return Ok(None);
    };
    let state = decode(bytes).map_err(|rejected| rejected.to_string())?;
    if state.position > head {
        return Err(format!(
            "checkpoint at {} is past the head {head}",
            state.position
        ));
    }
    Ok(Some(state))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CheckpointOut<'a> {
    checkpoint_version: u32,
    position: u64,
    state: &'a Projections,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CheckpointIn {
    checkpoint_version: u32,
    position: u64,
    state: Projections,
}

/// Why a checkpoint was discarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointRejected {
    /// It does not decode.
    Malformed(String),
    /// It is of another format version.
    UnknownVersion(u32),
    /// Its header and state disagree on the position.
    Inconsistent,
}

impl std::fmt::Display for CheckpointRejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointRejected::Malformed(reason) => write!(f, "malformed checkpoint: {reason}"),
            CheckpointRejected::UnknownVersion(version) => {
                write!(f, "unknown checkpoint version {version}")
            }
            CheckpointRejected::Inconsistent => f.write_str("checkpoint header and state disagree"),
        }
    }
}

/// Encodes a checkpoint of `state`.
#[must_use]
pub fn encode(state: &Projections) -> Vec<u8> {
    // Serializing plain data structs into a Vec cannot fail.
    serde_json::to_vec(&CheckpointOut {
        checkpoint_version: CHECKPOINT_VERSION,
        position: state.position,
        state,
    })
    .unwrap_or_default()
}

/// Decodes a checkpoint.
///
/// # Errors
/// [`CheckpointRejected`] for anything but a well-formed checkpoint of this version.
pub fn decode(bytes: &[u8]) -> Result<Projections, CheckpointRejected> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Header {
        checkpoint_version: u32,
    }
    let header: Header = serde_json::from_slice(bytes)
        .map_err(|err| CheckpointRejected::Malformed(err.to_string()))?;
    if header.checkpoint_version != CHECKPOINT_VERSION {
        return Err(CheckpointRejected::UnknownVersion(
            header.checkpoint_version,
        ));
    }
    let checkpoint: CheckpointIn = serde_json::from_slice(bytes)
        .map_err(|err| CheckpointRejected::Malformed(err.to_string()))?;
    if checkpoint.position != checkpoint.state.position
        || checkpoint.checkpoint_version != CHECKPOINT_VERSION
    {
        return Err(CheckpointRejected::Inconsistent);
    }
    Ok(checkpoint.state)
}
