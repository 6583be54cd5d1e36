//! The on-disk record codec: one [`RecordedEvent`] as bytes. Pure, so the
//! store's backends, `import` and the fuzz targets share one definition.
//!
//! Layout: `[format: u8 = 1][crc32c(body): u32 LE][body]`, where `body` is the
//! JSON envelope `{position, stream, version, eventId, recordedAt,
//! schemaVersion, correlationId?, causationId?, traceparent?, event: {type, data}}`.
//! The checksum covers the whole body, so a flipped bit anywhere is caught
//! before JSON parsing; decoding never panics on any input (fuzzed).

use serde::Deserialize;
use serde_json::value::RawValue;
use thiserror::Error;
use uuid::Uuid;

use crate::event::{RecordedEvent, StreamId};
use crate::ids::EventId;
use crate::telemetry::TraceContext;
use crate::upcast::{decode_event, UpcastError};

/// Why a record did not encode or decode.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RecordError {
    /// A record failed its checksum or did not decode.
    #[error("corrupt record at position {position}: {reason}")]
    Corrupt {
        /// The position of the bad record (0 when unknown).
        position: u64,
        /// What was wrong.
        reason: String,
    },
    /// A record was written by a newer build with a schema this one cannot read.
    #[error("record at position {position} has unsupported schema: {reason}")]
    UnsupportedSchema {
        /// The record's position.
        position: u64,
        /// Detail.
        reason: String,
    },
    /// The record could not be serialized.
    #[error("encoding record: {0}")]
    Encode(String),
}

/// The record format this build writes and reads.
pub const RECORD_FORMAT: u8 = 1;
const HEADER_LEN: usize = 5;

/// The largest event the log accepts: 1 MiB of one record's encoded body
/// (the JSON envelope with its event, i.e. what follows the 5-byte header on
/// disk, and exactly one line of an export without its newline).
///
/// Why 1 MiB: an event is one message, tool call or result, or a fork's seed,
/// and everything in it is text a model reads or wrote. A 200k-token context
/// window is about 800 KB of text, so no single legitimate event needs more;
/// larger payloads belong in attachments (the reserved `blobs` family), not
/// inline. The bound keeps every reader's memory proportional to it: one
/// import line, one record decode, one group commit entry. The store refuses
/// a larger event at append (`store/event-too-large`) and import refuses a
/// longer line without reading it whole.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Encodes a record.
///
/// # Errors
/// Only if the event cannot be serialized, which the schema's types rule out;
/// reported as [`RecordError::Encode`] rather than a panic all the same.
pub fn encode(record: &RecordedEvent) -> Result<Vec<u8>, RecordError> {
    let mut bytes = vec![0u8; HEADER_LEN];
    serde_json::to_writer(&mut bytes, record)
        .map_err(|err| RecordError::Encode(err.to_string()))?;
    let crc = crc32c::crc32c(&bytes[HEADER_LEN..]);
    bytes[0] = RECORD_FORMAT;
    bytes[1..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    Ok(bytes)
}

/// The length of the body of an [`encode`]d record: the size
/// [`MAX_EVENT_BYTES`] bounds.
#[must_use]
pub fn body_len(encoded: &[u8]) -> usize {
    encoded.len().saturating_sub(HEADER_LEN)
}

/// The largest content (the JSON of a prompt's or message's blocks) a
/// request may carry: [`MAX_EVENT_BYTES`] less [`ENVELOPE_RESERVE`], so the
/// event that records it always fits. A start checks its prompt against this
/// before it reserves anything, so an oversized prompt records nothing.
pub const MAX_CONTENT_BYTES: usize = MAX_EVENT_BYTES - ENVELOPE_RESERVE;

/// What a content-carrying event adds around its content: the record's
/// envelope (ids, positions, timestamps, stream name) and the message's own
/// fields (source, delivery, time zone). Each is bounded and together they
/// stay well under 1 KiB; 4 KiB leaves room to grow.
pub const ENVELOPE_RESERVE: usize = 4 * 1024;

/// The length of `value`'s JSON, counted without building it.
///
/// # Errors
/// `value`'s serialization error.
pub fn json_len(value: &impl serde::Serialize) -> Result<usize, serde_json::Error> {
    /// A writer that keeps only how many bytes passed through it.
    struct ByteCount(usize);
    impl std::io::Write for ByteCount {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = ByteCount(0);
    serde_json::to_writer(&mut count, value)?;
    Ok(count.0)
}

/// The length the body of `record` would have once [`encode`]d, counted
/// without building it: how the runtime refuses an oversized event before
/// it decides anything. Equal to `body_len(&encode(record)?)`.
///
/// # Errors
/// As [`encode`].
pub fn encoded_body_len(record: &RecordedEvent) -> Result<usize, RecordError> {
    json_len(record).map_err(|err| RecordError::Encode(err.to_string()))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordWire<'a> {
    position: u64,
    stream: StreamId,
    version: u64,
    event_id: EventId,
    recorded_at: u64,
    schema_version: u32,
    #[serde(default)]
    correlation_id: Option<Uuid>,
    #[serde(default)]
    causation_id: Option<EventId>,
    #[serde(default)]
    traceparent: Option<TraceContext>,
    #[serde(borrow)]
    event: &'a RawValue,
}

/// Decodes the record stored at `position`.
///
/// # Errors
/// [`RecordError::Corrupt`] for a short record, an unknown format byte, a
/// checksum mismatch, malformed JSON or a record that names another position;
/// [`RecordError::UnsupportedSchema`] for an event from a newer schema.
pub fn decode(position: u64, bytes: &[u8]) -> Result<RecordedEvent, RecordError> {
    let corrupt = |reason: String| RecordError::Corrupt { position, reason };
    if bytes.len() < HEADER_LEN {
        return Err(corrupt(format!(
            "record of {} bytes is truncated",
            bytes.len()
        )));
    }
    if bytes[0] != RECORD_FORMAT {
        return Err(corrupt(format!("unknown record format {}", bytes[0])));
    }
    let mut stored = [0u8; 4];
    stored.copy_from_slice(&bytes[1..HEADER_LEN]);
    let stored = u32::from_le_bytes(stored);
    let body = &bytes[HEADER_LEN..];
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(corrupt(format!(
            "checksum mismatch (stored {stored:08x}, computed {computed:08x})"
        )));
    }
    let record = decode_body(body).map_err(|err| match err {
        RecordError::Corrupt { reason, .. } => corrupt(reason),
        RecordError::UnsupportedSchema { reason, .. } => {
            RecordError::UnsupportedSchema { position, reason }
        }
        other => other,
    })?;
    if record.position != position {
        return Err(corrupt(format!(
            "record names position {}",
            record.position
        )));
    }
    Ok(record)
}

/// Decodes a record body: the JSON envelope without the binary header, as
/// `subagents log --json` and export print it. Upcasts old schema versions.
///
/// # Errors
/// [`RecordError::Corrupt`] for malformed JSON or events (position 0 when the
/// envelope does not even name one); [`RecordError::UnsupportedSchema`] for
/// events of a newer schema.
pub fn decode_body(body: &[u8]) -> Result<RecordedEvent, RecordError> {
    let wire: RecordWire<'_> =
        serde_json::from_slice(body).map_err(|err| RecordError::Corrupt {
            position: 0,
            reason: format!("malformed envelope: {err}"),
        })?;
    let position = wire.position;
    let event = decode_event(wire.schema_version, wire.event.get()).map_err(|err| match err {
        UpcastError::UnsupportedSchema { .. } => RecordError::UnsupportedSchema {
            position,
            reason: err.to_string(),
        },
        other => RecordError::Corrupt {
            position,
            reason: other.to_string(),
        },
    })?;
    Ok(RecordedEvent {
        position,
        stream: wire.stream,
        version: wire.version,
        event_id: wire.event_id,
        recorded_at: wire.recorded_at,
        schema_version: wire.schema_version,
        correlation_id: wire.correlation_id,
        causation_id: wire.causation_id,
        trace: wire.traceparent,
        event,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{arbitrary, SessionId, CURRENT_SCHEMA_VERSION};
    use proptest::prelude::*;

    fn record(event: crate::Event, position: u64) -> RecordedEvent {
        // Every other record keeps a trace context, so both shapes round-trip.
        let trace = position
            .is_multiple_of(2)
            .then(|| crate::TraceContext::new([7; 16], [9; 8], true))
            .flatten();
        RecordedEvent {
            position,
            stream: StreamId::Session(SessionId::new()),
            version: 3,
            event_id: EventId::new(),
            recorded_at: 1_700_000_000_000,
            schema_version: CURRENT_SCHEMA_VERSION,
            correlation_id: Some(Uuid::now_v7()),
            causation_id: None,
            trace,
            event,
        }
    }

    proptest! {
        #[test]
        fn records_round_trip(event in arbitrary::event(), position in 1u64..u64::MAX) {
            let original = record(event, position);
            let bytes = encode(&original).unwrap();
            prop_assert_eq!(decode(position, &bytes).unwrap(), original);
        }

        #[test]
        fn counted_body_length_is_the_encoded_one(event in arbitrary::event(), position in 1u64..u64::MAX) {
            let original = record(event, position);
            let bytes = encode(&original).unwrap();
            prop_assert_eq!(encoded_body_len(&original).unwrap(), body_len(&bytes));
        }

        #[test]
        fn any_flipped_bit_is_reported_as_corrupt(
            event in arbitrary::event(),
            index in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let mut bytes = encode(&record(event, 9)).unwrap();
            let at = index.index(bytes.len());
            bytes[at] ^= 1 << bit;
            let err = decode(9, &bytes).unwrap_err();
            prop_assert!(matches!(err, RecordError::Corrupt { position: 9, .. }), "{err:?}");
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(1, &bytes);
        }
    }

    #[test]
    fn truncated_and_misplaced_records_are_corrupt() {
        let bytes = encode(&record(
            crate::Event::ProviderRemoved { name: "x".into() },
            4,
        ))
        .unwrap();
        assert!(matches!(
            decode(4, &bytes[..3]),
            Err(RecordError::Corrupt { position: 4, .. })
        ));
        assert!(matches!(
            decode(4, &bytes[..bytes.len() - 1]),
            Err(RecordError::Corrupt { .. })
        ));
        let err = decode(5, &bytes).unwrap_err();
        assert!(err.to_string().contains("names position 4"), "{err}");
    }

    #[test]
    fn newer_schema_versions_are_refused_not_misread() {
        let mut newer = record(crate::Event::ProviderRemoved { name: "x".into() }, 2);
        newer.schema_version = CURRENT_SCHEMA_VERSION + 1;
        let bytes = encode(&newer).unwrap();
        assert!(matches!(
            decode(2, &bytes),
            Err(RecordError::UnsupportedSchema { position: 2, .. })
        ));
    }
}
