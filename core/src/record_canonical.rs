//! The canonical layout of a record's body, in both directions:
//! [`encode`](super::encode) writes it, and the fast path of
//! [`decode_body`](super::decode_body) reads it back without a JSON parser.
//!
//! The layout is exactly what `serde_json` writes for a [`RecordedEvent`]
//! (fixed keys in field order, no whitespace, the optional fields left out
//! when absent): `log --json` and export print the same bytes either way,
//! and records written before this module existed read here unchanged.
//! Writing it by hand skips serde's per-string work on the envelope (each
//! key and id through an escape scan) and the buffer's regrowth; the event
//! goes through serde in both directions, though on the way in only its
//! data does ([`tag`]: its tag is matched here too).
//!
//! Most of a record's decoding time went to its strings (each key and value
//! through UTF-8 validation and an escape scan: about 300 instructions a
//! string, 18 strings a record; see BENCHMARKS.md, "Replay"). The envelope's
//! keys are fixed and come in a fixed order, and its values are integers
//! and printable-ASCII ids, so they are matched byte for byte here.
//!
//! The contracts, which `record`'s tests check on arbitrary records and
//! the `record_decode` fuzz target on arbitrary bytes: [`write`] writes
//! what `serde_json::to_writer` writes for the same record, byte for byte;
//! [`decode`] returns `Some` only for a body that the general decoder
//! decodes to the same record. Anything else (keys in another order,
//! whitespace, escapes, `null`s, an unknown key, an old schema version, a
//! malformed event) is `None`, and the general decoder, which is the one
//! that judges and reports, reads it from the start.

use serde::de::value::{BorrowedStrDeserializer, Error as ValueError};
use serde::Deserialize;
use uuid::Uuid;

use crate::event::{RecordedEvent, StreamId, CURRENT_SCHEMA_VERSION};
use crate::ids::{EventId, IdText};
use crate::telemetry::{TraceContext, TRACEPARENT_LEN};

/// The event's tag and data ([`tag::decode`]).
#[path = "record_canonical_tag.rs"]
mod tag;

/// The envelope's keys, each with what precedes its value: a string
/// value's opening quote is part of its key.
mod key {
    pub(super) const POSITION: &[u8] = br#"{"position":"#;
    pub(super) const STREAM: &[u8] = br#","stream":""#;
    pub(super) const VERSION: &[u8] = br#","version":"#;
    pub(super) const EVENT_ID: &[u8] = br#","eventId":""#;
    pub(super) const RECORDED_AT: &[u8] = br#","recordedAt":"#;
    pub(super) const SCHEMA_VERSION: &[u8] = br#","schemaVersion":"#;
    pub(super) const CORRELATION_ID: &[u8] = br#","correlationId":""#;
    pub(super) const CAUSATION_ID: &[u8] = br#","causationId":""#;
    pub(super) const TRACEPARENT: &[u8] = br#","traceparent":""#;
    pub(super) const EVENT: &[u8] = br#","event":"#;
    /// What closes the envelope after the event.
    pub(super) const END: &[u8] = b"}";
}

/// Appends `record`'s body in the canonical layout to `out`.
///
/// # Errors
/// The event's serialization error, which the schema's types rule out;
/// `out` then holds a partial body.
pub(super) fn write(record: &RecordedEvent, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    let mut integer = itoa::Buffer::new();
    out.extend_from_slice(key::POSITION);
    out.extend_from_slice(integer.format(record.position).as_bytes());
    out.extend_from_slice(key::STREAM);
    out.extend_from_slice(record.stream.name().as_bytes());
    out.push(b'"');
    out.extend_from_slice(key::VERSION);
    out.extend_from_slice(integer.format(record.version).as_bytes());
    out.extend_from_slice(key::EVENT_ID);
    write_uuid(record.event_id.as_uuid(), out);
    out.extend_from_slice(key::RECORDED_AT);
    out.extend_from_slice(integer.format(record.recorded_at).as_bytes());
    out.extend_from_slice(key::SCHEMA_VERSION);
    out.extend_from_slice(integer.format(record.schema_version).as_bytes());
    if let Some(correlation) = &record.correlation_id {
        out.extend_from_slice(key::CORRELATION_ID);
        write_uuid(correlation, out);
    }
    if let Some(causation) = &record.causation_id {
        out.extend_from_slice(key::CAUSATION_ID);
        write_uuid(causation.as_uuid(), out);
    }
    if let Some(trace) = &record.trace {
        out.extend_from_slice(key::TRACEPARENT);
        out.extend_from_slice(&trace.traceparent());
        out.push(b'"');
    }
    out.extend_from_slice(key::EVENT);
    crate::json_writer::write(&record.event, out)?;
    out.extend_from_slice(key::END);
    Ok(())
}

/// Appends `id` hyphenated in lower case, then the closing quote: how
/// `uuid`'s serde writes it.
fn write_uuid(id: &Uuid, out: &mut Vec<u8>) {
    out.extend_from_slice(IdText::of(id).as_bytes());
    out.push(b'"');
}

/// The length of a body less its event's JSON, counted from the
/// envelope's fields as [`write`] lays them out: the keys, decimal
/// integers, the stream's name, and ids and a `traceparent` of fixed
/// lengths, none of them escaped (names and ids are ASCII letters, digits
/// and hyphens), so nothing needs writing to be counted.
pub(super) fn envelope_len(record: &RecordedEvent) -> usize {
    /// A hyphenated UUID and its closing quote.
    const UUID: usize = UUID_LEN + 1;
    let digits = |n: u64| n.checked_ilog10().map_or(1, |log| log as usize + 1);
    let mut len = key::POSITION.len()
        + digits(record.position)
        + key::STREAM.len()
        + record.stream.name_len()
        + 1
        + key::VERSION.len()
        + digits(record.version)
        + key::EVENT_ID.len()
        + UUID
        + key::RECORDED_AT.len()
        + digits(record.recorded_at)
        + key::SCHEMA_VERSION.len()
        + digits(u64::from(record.schema_version))
        + key::EVENT.len()
        + key::END.len();
    if record.correlation_id.is_some() {
        len += key::CORRELATION_ID.len() + UUID;
    }
    if record.causation_id.is_some() {
        len += key::CAUSATION_ID.len() + UUID;
    }
    if record.trace.is_some() {
        len += key::TRACEPARENT.len() + TRACEPARENT_LEN + 1;
    }
    len
}

/// Decodes a body in the canonical layout, or says it is not one.
pub(super) fn decode(body: &[u8]) -> Option<RecordedEvent> {
    let mut cursor = Cursor { rest: body };
    cursor.literal(key::POSITION)?;
    let position = cursor.integer()?;
    cursor.literal(key::STREAM)?;
    let stream = cursor.fixed(StreamId::SESSION_NAME_LEN, StreamId::session_from_ascii)?;
    cursor.literal(key::VERSION)?;
    let version = cursor.integer()?;
    cursor.literal(key::EVENT_ID)?;
    let event_id = cursor.fixed(UUID_LEN, |id| uuid(id).map(EventId::from_uuid))?;
    cursor.literal(key::RECORDED_AT)?;
    let recorded_at = cursor.integer()?;
    cursor.literal(key::SCHEMA_VERSION)?;
    let schema_version = u32::try_from(cursor.integer()?).ok()?;
    if schema_version != CURRENT_SCHEMA_VERSION {
        return None;
    }
    let correlation_id = cursor.optional(key::CORRELATION_ID, UUID_LEN, uuid)?;
    let causation_id = cursor.optional(key::CAUSATION_ID, UUID_LEN, |id| {
        uuid(id).map(EventId::from_uuid)
    })?;
    let trace = cursor.optional(key::TRACEPARENT, TRACEPARENT_LEN, TraceContext::parse_ascii)?;
    cursor.literal(key::EVENT)?;
    // The general decoder keeps the event as raw text, so it refuses an
    // event that is not UTF-8 throughout; a reader over bytes would skip
    // an ignored field's string without checking it (the `record_decode`
    // fuzz target found one). Checked once here, the event's strings need
    // no check of their own.
    let event = tag::decode(std::str::from_utf8(cursor.rest).ok()?)?;
    Some(RecordedEvent {
        position,
        stream,
        version,
        event_id,
        recorded_at,
        schema_version,
        correlation_id,
        causation_id,
        trace,
        event,
    })
}

/// The unread part of a body.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    /// Consumes `expected` if the body goes on with it.
    fn literal(&mut self, expected: &[u8]) -> Option<()> {
        self.rest = self.rest.strip_prefix(expected)?;
        Some(())
    }

    /// A JSON integer that fits a `u64`: digits, no sign, no leading zero
    /// (which JSON forbids), no fraction or exponent (the next literal
    /// would not match).
    fn integer(&mut self) -> Option<u64> {
        // One pass: each digit is read and added as it is found.
        let mut value = 0u64;
        let mut digits = 0;
        for &byte in self.rest {
            let digit = byte.wrapping_sub(b'0');
            if digit > 9 {
                break;
            }
            value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
            digits += 1;
        }
        if digits == 0 || (digits > 1 && self.rest[0] == b'0') {
            return None;
        }
        self.rest = &self.rest[digits..];
        Some(value)
    }

    /// The rest of a string whose opening quote the last literal consumed,
    /// through its closing quote, decoded as `T` decodes a JSON string. Only
    /// printable ASCII without a backslash is read here: exactly the strings
    /// whose JSON text is their value.
    fn string<T: Deserialize<'a>>(&mut self) -> Option<T> {
        let len = self
            .rest
            .iter()
            .position(|&byte| byte == b'"' || !(0x20..0x7f).contains(&byte) || byte == b'\\')?;
        if self.rest[len] != b'"' {
            return None;
        }
        let (text, rest) = self.rest.split_at(len);
        let text = std::str::from_utf8(text).ok()?;
        let value = T::deserialize(BorrowedStrDeserializer::<ValueError>::new(text)).ok()?;
        self.rest = &rest[1..];
        Some(value)
    }

    /// A string whose JSON text is its value, read by `parse` when it is
    /// `len` bytes long, else by [`string`](Cursor::string). `parse` must
    /// accept only printable ASCII without a quote or backslash, and only
    /// what `T`'s `Deserialize` reads from the same text, to the same
    /// value: ids and the `traceparent` have fixed lengths and characters
    /// of their own, so they are read without scanning for their end.
    fn fixed<T: Deserialize<'a>>(
        &mut self,
        len: usize,
        parse: impl Fn(&[u8]) -> Option<T>,
    ) -> Option<T> {
        if self.rest.get(len) == Some(&b'"') {
            if let Some(value) = parse(&self.rest[..len]) {
                self.rest = &self.rest[len + 1..];
                return Some(value);
            }
        }
        self.string()
    }

    /// An optional string field: absent (`Some(None)`) unless the body goes
    /// on with `key`, whose value must then read, as
    /// [`fixed`](Cursor::fixed) reads it (`None` when it does not).
    fn optional<T: Deserialize<'a>>(
        &mut self,
        key: &[u8],
        len: usize,
        parse: impl Fn(&[u8]) -> Option<T>,
    ) -> Option<Option<T>> {
        if self.literal(key).is_none() {
            return Some(None);
        }
        self.fixed(len, parse).map(Some)
    }
}

/// The length of a hyphenated UUID.
const UUID_LEN: usize = uuid::fmt::Hyphenated::LENGTH;

/// A hyphenated UUID read from its bytes, as `uuid`'s `Deserialize` reads
/// the same text: at this length only hex digits and hyphens are accepted.
fn uuid(text: &[u8]) -> Option<Uuid> {
    Uuid::try_parse_ascii(text).ok()
}
