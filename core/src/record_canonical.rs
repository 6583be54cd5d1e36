//! The fast path of [`decode_body`](super::decode_body): an envelope laid
//! out exactly as [`encode`](super::encode) writes it, read without a JSON
//! parser.
//!
//! Most of a record's decoding time went to its strings (each key and value
//! through UTF-8 validation and an escape scan: about 300 instructions a
//! string, 18 strings a record; see BENCHMARKS.md, "Replay"). The envelope's
//! keys are fixed and come in a fixed order, and its values are integers
//! and printable-ASCII ids, so they are matched byte for byte here. The
//! event itself still goes through serde.
//!
//! The contract, which `decode_body`'s tests check on arbitrary records and
//! its fuzz target on arbitrary bytes: this returns `Some` only for a body
//! that the general decoder decodes to the same record. Anything else (keys
//! in another order, whitespace, escapes, `null`s, an unknown key, an old
//! schema version, a malformed event) is `None`, and the general decoder,
//! which is the one that judges and reports, reads it from the start.

use serde::de::value::{BorrowedStrDeserializer, Error as ValueError};
use serde::Deserialize;

use crate::event::{Event, RecordedEvent, CURRENT_SCHEMA_VERSION};

/// Decodes a body in the canonical layout, or says it is not one.
pub(super) fn decode(body: &[u8]) -> Option<RecordedEvent> {
    let mut cursor = Cursor { rest: body };
    cursor.literal(br#"{"position":"#)?;
    let position = cursor.integer()?;
    cursor.literal(br#","stream":""#)?;
    let stream = cursor.string()?;
    cursor.literal(br#","version":"#)?;
    let version = cursor.integer()?;
    cursor.literal(br#","eventId":""#)?;
    let event_id = cursor.string()?;
    cursor.literal(br#","recordedAt":"#)?;
    let recorded_at = cursor.integer()?;
    cursor.literal(br#","schemaVersion":"#)?;
    let schema_version = u32::try_from(cursor.integer()?).ok()?;
    if schema_version != CURRENT_SCHEMA_VERSION {
        return None;
    }
    let correlation_id = cursor.optional_string(br#","correlationId":""#)?;
    let causation_id = cursor.optional_string(br#","causationId":""#)?;
    let trace = cursor.optional_string(br#","traceparent":""#)?;
    cursor.literal(br#","event":"#)?;
    let mut events = serde_json::Deserializer::from_slice(cursor.rest).into_iter::<Event>();
    let event = events.next()?.ok()?;
    (cursor.rest.get(events.byte_offset()..)? == b"}").then_some(())?;
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
        let digits = self
            .rest
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        let (text, rest) = self.rest.split_at(digits);
        if text.is_empty() || (text.len() > 1 && text[0] == b'0') {
            return None;
        }
        let value = text.iter().try_fold(0u64, |value, digit| {
            value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
        })?;
        self.rest = rest;
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

    /// An optional string field: absent (`Some(None)`) unless the body goes
    /// on with `key`, whose value must then read (`None` when it does not).
    fn optional_string<T: Deserialize<'a>>(&mut self, key: &[u8]) -> Option<Option<T>> {
        if self.literal(key).is_none() {
            return Some(None);
        }
        self.string().map(Some)
    }
}
