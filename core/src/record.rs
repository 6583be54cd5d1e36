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
    let mut bytes = Vec::new();
    encode_into(record, &mut bytes)?;
    Ok(bytes)
}

/// Appends the record [`encode`] would return to `out`, so a writer can
/// encode into a buffer it reuses; returns where in `out` the record
/// starts.
///
/// # Errors
/// As [`encode`]; `out` is then as it was.
pub fn encode_into(record: &RecordedEvent, out: &mut Vec<u8>) -> Result<usize, RecordError> {
    let start = out.len();
    // The envelope's length is known; an event is usually a few hundred bytes.
    out.reserve(HEADER_LEN + canonical::envelope_len(record) + 256);
    out.resize(start + HEADER_LEN, 0);
    if let Err(err) = canonical::write(record, out) {
        out.truncate(start);
        return Err(RecordError::Encode(err.to_string()));
    }
    let crc = crc32c::crc32c(&out[start + HEADER_LEN..]);
    out[start] = RECORD_FORMAT;
    out[start + 1..start + HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    Ok(start)
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
    crate::json_writer::len(value)
}

/// The length the body of `record` would have once [`encode`]d, counted
/// without building it: how the runtime refuses an oversized event before
/// it decides anything. Equal to `body_len(&encode(record)?)`.
///
/// # Errors
/// As [`encode`].
pub fn encoded_body_len(record: &RecordedEvent) -> Result<usize, RecordError> {
    let event = json_len(&record.event).map_err(|err| RecordError::Encode(err.to_string()))?;
    Ok(canonical::envelope_len(record) + event)
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
/// A body laid out exactly as [`encode`] writes it, at the current schema,
/// is read by a fast path that matches the envelope byte for byte
/// (`record_canonical.rs`, [`decode_canonical_body`]); every other body is
/// judged by [`decode_body_general`]. The fast path reads a body only when
/// the general decoder decodes it to the same record: tested on arbitrary
/// and edited records, and fuzzed on arbitrary bytes.
///
/// # Errors
/// As [`decode_body_general`].
pub fn decode_body(body: &[u8]) -> Result<RecordedEvent, RecordError> {
    match canonical::decode(body) {
        Some(record) => Ok(record),
        None => decode_body_general(body),
    }
}

/// The body's canonical layout: written by [`encode`], and read without a
/// parser by [`decode_body`]'s fast path.
#[path = "record_canonical.rs"]
mod canonical;

/// The fast path of [`decode_body`] alone: the record when `body` is laid
/// out exactly as [`encode`] writes it at the current schema, else `None`
/// (never an error: the general decoder judges what this declines). Public
/// so that the `record_decode` fuzz target can check it against
/// [`decode_body_general`].
#[must_use]
pub fn decode_canonical_body(body: &[u8]) -> Option<RecordedEvent> {
    canonical::decode(body)
}

/// Decodes a record body of any layout: the general decoder behind
/// [`decode_body`], and the one that judges every body the fast path
/// declines. Public so that the `record_decode` fuzz target can check the
/// fast path against it.
///
/// The envelope is read with its event kept as raw text, which is then
/// decoded (and upcast, for an old schema version) on its own, so any key
/// order decodes to the same record and a malformed event names the
/// record's position.
///
/// # Errors
/// [`RecordError::Corrupt`] for malformed JSON or events (position 0 when the
/// envelope does not even name one); [`RecordError::UnsupportedSchema`] for
/// events of a newer schema.
pub fn decode_body_general(body: &[u8]) -> Result<RecordedEvent, RecordError> {
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

    /// A record with every envelope field at every width (stream kind,
    /// integers up to `u64::MAX`), each optional one present or not, and
    /// a trace context sampled or not.
    fn any_envelope() -> impl Strategy<Value = RecordedEvent> {
        (
            arbitrary::event(),
            (
                any::<u64>(),
                0u8..3,
                any::<u64>(),
                any::<u64>(),
                any::<u32>(),
            ),
            (any::<bool>(), any::<bool>(), any::<bool>()),
            (any::<[u8; 16]>(), any::<[u8; 8]>(), any::<bool>()),
        )
            .prop_map(
                |(
                    event,
                    (position, stream, version, recorded_at, schema_version),
                    (correlated, caused, traced),
                    (trace_id, span_id, sampled),
                )| RecordedEvent {
                    position,
                    stream: match stream {
                        0 => StreamId::Runtime,
                        1 => StreamId::Host(crate::HostId::new()),
                        _ => StreamId::Session(SessionId::new()),
                    },
                    version,
                    event_id: EventId::new(),
                    recorded_at,
                    schema_version,
                    correlation_id: correlated.then(Uuid::now_v7),
                    causation_id: caused.then(EventId::new),
                    trace: traced
                        .then(|| crate::TraceContext::new(trace_id, span_id, sampled))
                        .flatten(),
                    event,
                },
            )
    }

    proptest! {
        #[test]
        fn records_round_trip(event in arbitrary::event(), position in 1u64..u64::MAX) {
            let original = record(event, position);
            let bytes = encode(&original).unwrap();
            prop_assert_eq!(decode(position, &bytes).unwrap(), original);
        }

        #[test]
        fn counted_body_length_is_the_encoded_one(record in any_envelope()) {
            let bytes = encode(&record).unwrap();
            prop_assert_eq!(encoded_body_len(&record).unwrap(), body_len(&bytes));
        }

        #[test]
        fn the_written_body_is_serde_jsons_byte_for_byte(record in any_envelope()) {
            // What `log --json` and export print, and what every record
            // written before the canonical writer holds.
            let bytes = encode(&record).unwrap();
            let reference = serde_json::to_vec(&record).unwrap();
            prop_assert_eq!(
                std::str::from_utf8(&bytes[HEADER_LEN..]).unwrap(),
                std::str::from_utf8(&reference).unwrap()
            );
            let mut crc = [0u8; 4];
            crc.copy_from_slice(&bytes[1..HEADER_LEN]);
            prop_assert_eq!(u32::from_le_bytes(crc), crc32c::crc32c(&reference));
            prop_assert_eq!(bytes[0], RECORD_FORMAT);
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

    /// The body of `record` with the envelope's keys in reverse order, so
    /// that `event` comes before `schemaVersion` and `position`.
    fn reversed_body(record: &RecordedEvent) -> Vec<u8> {
        let serde_json::Value::Object(fields) = serde_json::to_value(record).unwrap() else {
            unreachable!("an envelope is an object")
        };
        let reversed: serde_json::Map<_, _> = fields.into_iter().rev().collect();
        serde_json::to_vec(&reversed).unwrap()
    }

    proptest! {
        #[test]
        fn any_envelope_key_order_decodes_to_the_same_record(
            event in arbitrary::event(),
            position in 1u64..u64::MAX,
            schema_version in 1..=CURRENT_SCHEMA_VERSION,
        ) {
            let mut original = record(event, position);
            original.schema_version = schema_version;
            let in_order = encode(&original).unwrap();
            prop_assert_eq!(decode_body(&in_order[HEADER_LEN..]).unwrap(), original.clone());
            let reversed = reversed_body(&original);
            prop_assert!(reversed.starts_with(br#"{"event""#), "event is not first");
            prop_assert_eq!(decode_body(&reversed).unwrap(), original);
        }
    }

    #[test]
    fn a_malformed_event_is_corrupt_and_names_the_position_in_either_order() {
        let mut original = record(crate::Event::ProviderRemoved { name: "x".into() }, 7);
        original.trace = None;
        let body = String::from_utf8(encode(&original).unwrap()[HEADER_LEN..].to_vec()).unwrap();
        let bad = body.replace(r#""name":"x""#, r#""name":5"#);
        assert_ne!(bad, body);
        let err = decode_body(bad.as_bytes()).unwrap_err();
        let RecordError::Corrupt { position, reason } = err else {
            panic!("{err:?}")
        };
        assert_eq!(position, 7);
        assert!(reason.starts_with("malformed event"), "{reason}");
        // The same event before the schema version: decoded after the
        // envelope, through the upcasters, with the same kind of error.
        let mut reversed = reversed_body(&original);
        reversed = String::from_utf8(reversed)
            .unwrap()
            .replace(r#""name":"x""#, r#""name":5"#)
            .into_bytes();
        let err = decode_body(&reversed).unwrap_err();
        let RecordError::Corrupt { position, reason } = err else {
            panic!("{err:?}")
        };
        assert_eq!(position, 7);
        assert!(reason.starts_with("malformed event"), "{reason}");
    }

    #[test]
    fn envelope_duplicates_gaps_and_extras_are_judged_as_before() {
        let original = record(crate::Event::ProviderRemoved { name: "x".into() }, 3);
        let body = String::from_utf8(encode(&original).unwrap()[HEADER_LEN..].to_vec()).unwrap();
        // A second `position` (or any key) is corrupt, not a silent overwrite.
        let duplicated = body.replacen(r#"{"position":3,"#, r#"{"position":3,"position":4,"#, 1);
        assert_ne!(duplicated, body);
        let err = decode_body(duplicated.as_bytes()).unwrap_err();
        assert!(
            matches!(&err, RecordError::Corrupt { reason, .. } if reason.contains("duplicate field `position`")),
            "{err:?}"
        );
        // A missing field is corrupt.
        let missing = body.replacen(r#""version":3,"#, "", 1);
        assert_ne!(missing, body);
        let err = decode_body(missing.as_bytes()).unwrap_err();
        assert!(
            matches!(&err, RecordError::Corrupt { reason, .. } if reason.contains("missing field `version`")),
            "{err:?}"
        );
        // An unknown key is ignored, and `null` optional fields read as none.
        let extra = body.replacen(
            r#"{"position":3,"#,
            r#"{"position":3,"futureField":{"a":[1]},"causationId":null,"#,
            1,
        );
        assert_eq!(decode_body(extra.as_bytes()).unwrap(), original);
        // Trailing text after the envelope is corrupt.
        let trailing = format!("{body} x");
        assert!(matches!(
            decode_body(trailing.as_bytes()),
            Err(RecordError::Corrupt { .. })
        ));
        // Not an object at all.
        for bad in ["[]", "3", "\"x\"", ""] {
            let err = decode_body(bad.as_bytes()).unwrap_err();
            assert!(
                matches!(&err, RecordError::Corrupt { position: 0, reason } if reason.starts_with("malformed envelope")),
                "{bad}: {err:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn the_fast_path_takes_every_encoded_record_and_agrees_with_the_general_decoder(
            event in arbitrary::event(),
            position in 1u64..u64::MAX,
        ) {
            let original = record(event, position);
            let body = &encode(&original).unwrap()[HEADER_LEN..];
            prop_assert_eq!(canonical::decode(body), Some(original.clone()));
            prop_assert_eq!(decode_body_general(body).unwrap(), original);
        }

        #[test]
        fn on_edited_bodies_the_fast_path_agrees_with_the_general_decoder_or_declines(
            event in arbitrary::event(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..4),
        ) {
            let mut body = encode(&record(event, 11)).unwrap()[HEADER_LEN..].to_vec();
            for (index, byte, kind) in edits {
                let at = index.index(body.len());
                match kind {
                    0 => body[at] = byte,
                    1 => body.insert(at, byte),
                    _ => { body.remove(at); }
                }
            }
            if let Some(fast) = canonical::decode(&body) {
                prop_assert_eq!(decode_body_general(&body).unwrap(), fast);
            }
        }
    }

    #[test]
    fn the_fast_path_declines_what_it_does_not_own() {
        let mut original = record(crate::Event::ProviderRemoved { name: "x".into() }, 12);
        let body = String::from_utf8(encode(&original).unwrap()[HEADER_LEN..].to_vec()).unwrap();
        assert!(canonical::decode(body.as_bytes()).is_some());
        let edits = [
            // Layout the writer never produces, which the general decoder reads.
            body.replacen(r#""version":3"#, r#""version": 3"#, 1),
            body.replacen(r#"{"position":12,"#, r#"{"position":12,"later":1,"#, 1),
            body.replacen(r#""stream":"session-"#, r#""stream":"\u0073ession-"#, 1),
            format!("{body}\n"),
            // Values the general decoder refuses.
            body.replacen(r#""version":3"#, r#""version":03"#, 1),
            body.replacen(r#""version":3"#, r#""version":3.0"#, 1),
            body.replacen(r#""version":3"#, r#""version":99999999999999999999"#, 1),
            body.replacen(r#""name":"x""#, r#""name":5"#, 1),
            body.replacen(r#""stream":"session-"#, r#""stream":"sesion-"#, 1),
        ];
        for edited in &edits {
            assert_ne!(edited, &body);
            assert_eq!(canonical::decode(edited.as_bytes()), None, "{edited}");
        }
        // Each of the first four reads through the general decoder to the
        // same record; each of the rest is refused by it.
        for edited in &edits[..4] {
            assert_eq!(
                decode_body(edited.as_bytes()).unwrap(),
                original,
                "{edited}"
            );
        }
        for edited in &edits[4..] {
            assert!(decode_body(edited.as_bytes()).is_err(), "{edited}");
        }
        // An old schema version goes through the upcasters.
        original.schema_version = CURRENT_SCHEMA_VERSION - 1;
        let old = encode(&original).unwrap();
        assert_eq!(canonical::decode(&old[HEADER_LEN..]), None);
        assert_eq!(decode_body(&old[HEADER_LEN..]).unwrap(), original);
    }

    #[test]
    fn an_event_that_is_not_utf8_is_refused_on_both_paths_even_in_an_ignored_field() {
        // Found by the `record_decode` fuzz target: the fast path skipped an
        // unknown field's string without checking its bytes, and read a
        // body the general decoder refuses.
        let original = record(crate::Event::ProviderRemoved { name: "x".into() }, 12);
        let body = encode(&original).unwrap()[HEADER_LEN..].to_vec();
        let known = br#"{"name":"x"}"#;
        let at = body
            .windows(known.len())
            .position(|window| window == known)
            .unwrap();
        let with_unknown = |value: &[u8]| {
            let mut edited = body[..at].to_vec();
            edited.extend_from_slice(br#"{"name":"x","later":""#);
            edited.extend_from_slice(value);
            edited.extend_from_slice(b"\"}");
            edited.extend_from_slice(&body[at + known.len()..]);
            edited
        };
        // An unknown field is ignored on both paths when it is text...
        let text = with_unknown("é".as_bytes());
        assert_eq!(canonical::decode(&text), Some(original.clone()));
        assert_eq!(decode_body_general(&text).unwrap(), original);
        // ...and refused on both when it is not.
        let bytes = with_unknown(&[0xa6, 0xb2]);
        assert_eq!(canonical::decode(&bytes), None);
        assert!(matches!(
            decode_body(&bytes),
            Err(RecordError::Corrupt { .. })
        ));
    }

    #[test]
    fn ids_and_traceparents_in_other_spellings_read_as_the_general_decoder_reads_them() {
        // The fast path reads ids and the `traceparent` by their fixed
        // lengths; every other spelling goes through its scan, and both
        // paths agree on each.
        let mut original = record(crate::Event::ProviderRemoved { name: "x".into() }, 12);
        original.causation_id = Some(EventId::new());
        original.trace = crate::TraceContext::new([0xab; 16], [0xcd; 8], true);
        let body = String::from_utf8(encode(&original).unwrap()[HEADER_LEN..].to_vec()).unwrap();
        let event_id = original.event_id.to_string();
        let correlation = original.correlation_id.unwrap().to_string();
        let stream = original.stream.to_string();
        let traceparent = original.trace.unwrap().to_string();
        let upper = |text: &str| text.to_uppercase();
        let simple = |text: &str| text.replace('-', "");
        let read_alike = [
            body.replacen(&event_id, &upper(&event_id), 1),
            body.replacen(&event_id, &simple(&event_id), 1),
            body.replacen(&event_id, &format!("{{{event_id}}}"), 1),
            body.replacen(&correlation, &format!("urn:uuid:{correlation}"), 1),
            body.replacen(
                &stream,
                &format!("session-{}", upper(&stream["session-".len()..])),
                1,
            ),
            // An escape: the same text once unescaped, which the fast path
            // never reads.
            body.replacen(&traceparent, &format!("\\u0030{}", &traceparent[1..]), 1),
        ];
        for edited in &read_alike {
            assert_ne!(edited, &body);
            let general = decode_body_general(edited.as_bytes()).unwrap();
            assert_eq!(general, original, "{edited}");
            assert_eq!(
                decode_body(edited.as_bytes()).unwrap(),
                original,
                "{edited}"
            );
            if let Some(fast) = canonical::decode(edited.as_bytes()) {
                assert_eq!(fast, original, "{edited}");
            }
        }
        let refused = [
            body.replacen(&traceparent, &upper(&traceparent), 1),
            body.replacen(&traceparent, &traceparent.replacen("00-", "01-", 1), 1),
            body.replacen(&event_id, &event_id.replacen('-', "_", 1), 1),
            body.replacen(&event_id, &format!("{}g", &event_id[..35]), 1),
            body.replacen(&stream, &stream.replacen("session-", "session_", 1), 1),
        ];
        for edited in &refused {
            assert_ne!(edited, &body);
            assert_eq!(canonical::decode(edited.as_bytes()), None, "{edited}");
            assert!(decode_body(edited.as_bytes()).is_err(), "{edited}");
        }
    }

    #[test]
    fn the_fast_path_reads_an_integer_only_as_json_reads_a_u64() {
        let original = record(crate::Event::TurnStarted { turn: 1, epoch: 1 }, 12);
        let body = String::from_utf8(encode(&original).unwrap()[HEADER_LEN..].to_vec()).unwrap();
        let at =
            |value: &str| body.replacen(r#""position":12"#, &format!(r#""position":{value}"#), 1);
        let largest = at("18446744073709551615");
        let fast = canonical::decode(largest.as_bytes()).unwrap();
        assert_eq!(fast.position, u64::MAX);
        assert_eq!(decode_body_general(largest.as_bytes()).unwrap(), fast);
        assert_eq!(canonical::decode(at("0").as_bytes()).unwrap().position, 0);
        // A leading zero, a sign, a fraction, an exponent, one past
        // `u64::MAX`, none at all: declined here, judged by the general
        // decoder (which reads the fraction and exponent forms no more
        // than serde_json reads them into a `u64`).
        for declined in [
            "012",
            "-12",
            "+12",
            "12.0",
            "1e1",
            "18446744073709551616",
            "",
        ] {
            let edited = at(declined);
            assert_eq!(canonical::decode(edited.as_bytes()), None, "{edited}");
            assert!(decode_body_general(edited.as_bytes()).is_err(), "{edited}");
        }
    }

    #[test]
    fn both_paths_share_one_nesting_limit_counted_from_the_event() {
        let nested = |levels: usize| {
            let mut input = serde_json::Value::Null;
            for _ in 0..levels {
                input = serde_json::Value::Array(vec![input]);
            }
            record(
                crate::Event::ToolCalled {
                    turn: 1,
                    call_id: "c".into(),
                    name: "n".into(),
                    input,
                },
                5,
            )
        };
        // The event object, its `data` and the input's arrays: serde_json
        // reads 127 levels, so 125 arrays and no more, on either path.
        let deepest = nested(125);
        let body = &encode(&deepest).unwrap()[HEADER_LEN..];
        assert_eq!(decode_body_general(body).unwrap(), deepest);
        assert_eq!(canonical::decode(body), Some(deepest.clone()));
        let reordered = reversed_body(&deepest);
        assert_eq!(decode_body(&reordered).unwrap(), deepest);
        let too_deep = &encode(&nested(126)).unwrap()[HEADER_LEN..];
        assert_eq!(canonical::decode(too_deep), None);
        let err = decode_body(too_deep).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
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
