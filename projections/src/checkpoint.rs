//! Versioned checkpoint encoding of [`Projections`].
//!
//! A checkpoint is `{"checkpointVersion": N, "position": P, "state": {...}}`.
//! Decoding refuses any other version and anything that does not decode;
//! callers then discard it and rebuild from the log. A checkpoint is never
//! trusted beyond what it can prove about itself.

use std::cell::Cell;

use serde::de::{Error as _, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer as _, Serialize};
use serde_json::value::RawValue;

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

/// Decodes a checkpoint, in one pass over its bytes: the version (which
/// [`encode`] writes first) is checked as soon as it is read, and the state
/// is decoded straight into [`Projections`]. A state that comes before the
/// version (not written by this crate, but valid JSON all the same) is kept
/// raw and decoded once the version is known.
///
/// # Errors
/// [`CheckpointRejected`] for anything but a well-formed checkpoint of this version.
pub fn decode(bytes: &[u8]) -> Result<Projections, CheckpointRejected> {
    let found = Cell::new(None);
    let mut input = serde_json::Deserializer::from_slice(bytes);
    let decoded = input
        .deserialize_map(CheckpointVisitor { found: &found })
        .and_then(|checkpoint| input.end().map(|()| checkpoint));
    let (position, state) = match decoded {
        Ok(checkpoint) => checkpoint,
        Err(err) => {
            return Err(match found.get() {
                Some(version) if version != CHECKPOINT_VERSION => {
                    CheckpointRejected::UnknownVersion(version)
                }
                _ => CheckpointRejected::Malformed(err.to_string()),
            })
        }
    };
    if position != state.position {
        return Err(CheckpointRejected::Inconsistent);
    }
    Ok(state)
}

/// The fields of a checkpoint.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum Field {
    CheckpointVersion,
    Position,
    State,
    #[serde(other)]
    Other,
}

/// Reads a checkpoint's fields in any order; tells `found` the version as
/// soon as it is read, so a checkpoint of another version stops there.
struct CheckpointVisitor<'a> {
    found: &'a Cell<Option<u32>>,
}

impl<'de> Visitor<'de> for CheckpointVisitor<'_> {
    type Value = (u64, Projections);

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a projections checkpoint")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut position, mut state, mut early_state) = (None, None, None::<Box<RawValue>>);
        let mut version_seen = false;
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::CheckpointVersion if version_seen => {
                    return Err(A::Error::duplicate_field("checkpointVersion"))
                }
                Field::CheckpointVersion => {
                    let version: u32 = map.next_value()?;
                    self.found.set(Some(version));
                    version_seen = true;
                    if version != CHECKPOINT_VERSION {
                        return Err(A::Error::custom(format!("checkpoint version {version}")));
                    }
                }
                Field::Position if position.is_some() => {
                    return Err(A::Error::duplicate_field("position"))
                }
                Field::Position => position = Some(map.next_value::<u64>()?),
                Field::State if state.is_some() || early_state.is_some() => {
                    return Err(A::Error::duplicate_field("state"))
                }
                Field::State if version_seen => state = Some(map.next_value::<Projections>()?),
                Field::State => early_state = Some(map.next_value()?),
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !version_seen {
            return Err(A::Error::missing_field("checkpointVersion"));
        }
        let position = position.ok_or_else(|| A::Error::missing_field("position"))?;
        let state = match (state, early_state) {
            (Some(state), _) => state,
            (None, Some(raw)) => serde_json::from_str(raw.get()).map_err(A::Error::custom)?,
            (None, None) => return Err(A::Error::missing_field("state")),
        };
        Ok((position, state))
    }
}
