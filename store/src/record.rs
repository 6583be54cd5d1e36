//! The on-disk record codec, as the store reports it: the codec itself is
//! pure and lives in [`subagent_core::record`]; this module maps its errors
//! into [`StoreError`]s.

use subagent_core::record::{self as codec, RecordError};
use subagent_core::RecordedEvent;

use crate::error::StoreError;

pub use subagent_core::record::RECORD_FORMAT;

impl From<RecordError> for StoreError {
    fn from(err: RecordError) -> Self {
        match err {
            RecordError::Corrupt { position, reason } => StoreError::Corrupt { position, reason },
            RecordError::UnsupportedSchema { position, reason } => {
                StoreError::UnsupportedSchema { position, reason }
            }
            RecordError::Encode(reason) => StoreError::Io(format!("encoding record: {reason}")),
        }
    }
}

/// Encodes a record ([`codec::encode`]).
///
/// # Errors
/// As [`codec::encode`], as a [`StoreError`].
pub fn encode(record: &RecordedEvent) -> Result<Vec<u8>, StoreError> {
    Ok(codec::encode(record)?)
}

/// Decodes the record stored at `position` ([`codec::decode`]).
///
/// # Errors
/// As [`codec::decode`], as a [`StoreError`].
pub fn decode(position: u64, bytes: &[u8]) -> Result<RecordedEvent, StoreError> {
    Ok(codec::decode(position, bytes)?)
}

/// Decodes a record body ([`codec::decode_body`]).
///
/// # Errors
/// As [`codec::decode_body`], as a [`StoreError`].
pub fn decode_body(body: &[u8]) -> Result<RecordedEvent, StoreError> {
    Ok(codec::decode_body(body)?)
}
