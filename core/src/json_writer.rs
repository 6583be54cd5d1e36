//! The record's event written as compact JSON, faster than serde_json
//! writes it, and byte for byte what it writes.
//!
//! Every appended event is written once into its record, and the runtime
//! counts its length once before it decides anything
//! (`record::encoded_body_len`). serde_json checks every byte of every
//! string, field names included, against its escape table one at a time,
//! and reaches its output through `io::Write`: half of a record's
//! encoding (BENCHMARKS.md, "The event written by a JSON writer of our
//! own"). This writer looks at a string eight bytes at a time for a byte
//! that needs escaping, and writes straight into its sink.
//!
//! **Contract.** For every value it writes, the bytes equal
//! `serde_json::to_writer`'s (`json_writer_tests.rs` checks arbitrary
//! events, records and edge values). A shape it does not write exactly as
//! serde_json does is declined rather than guessed: a map key that is not
//! a string (serde_json quotes numbers and booleans), bytes, and
//! serde_json's raw value. A declined value, or a value's own error, is
//! written by serde_json itself ([`write`], [`len`]), so the output, and
//! any error, is always serde_json's.

use std::fmt::Display;

use serde::ser::{self, Impossible, Serialize};
use serde_json::ser::{CompactFormatter, Formatter};

/// Appends `value`'s compact JSON to `out`: exactly what
/// `serde_json::to_writer(out, value)` would append.
///
/// # Errors
/// serde_json's error for `value`; `out` then holds a partial value, as
/// with serde_json.
pub(crate) fn write<T: Serialize + ?Sized>(
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), serde_json::Error> {
    let start = out.len();
    if value.serialize(Json { sink: &mut *out }).is_ok() {
        return Ok(());
    }
    out.truncate(start);
    serde_json::to_writer(out, value)
}

/// The length of `value`'s compact JSON, counted without building it.
///
/// # Errors
/// serde_json's error for `value`.
pub(crate) fn len<T: Serialize + ?Sized>(value: &T) -> Result<usize, serde_json::Error> {
    let mut count = Count(0);
    if value.serialize(Json { sink: &mut count }).is_ok() {
        return Ok(count.0);
    }
    let mut count = Count(0);
    serde_json::to_writer(SinkWriter(&mut count), value)?;
    Ok(count.0)
}

/// Where the writer's bytes go.
pub(crate) trait Sink {
    fn put(&mut self, bytes: &[u8]);
    fn put_byte(&mut self, byte: u8);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn put_byte(&mut self, byte: u8) {
        self.push(byte);
    }
}

/// A sink as an `io::Write`, for serde_json's number formatter and for
/// serde_json writing what this writer declined.
struct SinkWriter<'a, S: Sink>(&'a mut S);

impl<S: Sink> std::io::Write for SinkWriter<'_, S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.put(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A sink that keeps only how many bytes passed through it.
struct Count(usize);

impl Sink for Count {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
    fn put_byte(&mut self, _: u8) {
        self.0 += 1;
    }
}

/// Why the writer stopped: a shape it leaves to serde_json, or the value's
/// own error. Either way serde_json writes the value instead.
#[derive(Debug)]
pub(crate) struct Declined;

impl Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("left to serde_json")
    }
}

impl std::error::Error for Declined {}

impl ser::Error for Declined {
    fn custom<T: Display>(_: T) -> Self {
        Declined
    }
}

type Written = Result<(), Declined>;

/// The name serde_json gives its raw value's struct (feature `raw_value`).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Writes one value.
struct Json<'a, S: Sink> {
    sink: &'a mut S,
}

/// Writes the items of an array or the entries of an object, then `close`.
struct Compound<'a, S: Sink> {
    sink: &'a mut S,
    first: bool,
    close: &'static [u8],
}

/// Writes a map's key: a string, as serde_json requires of most keys.
struct MapKey<'a, S: Sink> {
    sink: &'a mut S,
}

macro_rules! integers {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method(self, value: $ty) -> Written {
            self.sink.put(itoa::Buffer::new().format(value).as_bytes());
            Ok(())
        }
    )*};
}

/// Floats: `null` when not finite, as serde_json writes them; else
/// through serde_json's own formatter, whichever it uses, so a float's
/// digits are always its.
macro_rules! floats {
    ($($method:ident: $ty:ty => $format:ident),*) => {$(
        fn $method(self, value: $ty) -> Written {
            if !value.is_finite() {
                self.sink.put(b"null");
                return Ok(());
            }
            CompactFormatter
                .$format(&mut SinkWriter(self.sink), value)
                .map_err(|_| Declined)
        }
    )*};
}

impl<'a, S: Sink> ser::Serializer for Json<'a, S> {
    type Ok = ();
    type Error = Declined;
    type SerializeSeq = Compound<'a, S>;
    type SerializeTuple = Compound<'a, S>;
    type SerializeTupleStruct = Compound<'a, S>;
    type SerializeTupleVariant = Compound<'a, S>;
    type SerializeMap = Compound<'a, S>;
    type SerializeStruct = Compound<'a, S>;
    type SerializeStructVariant = Compound<'a, S>;

    fn serialize_bool(self, value: bool) -> Written {
        self.sink.put(if value { b"true" } else { b"false" });
        Ok(())
    }

    integers!(
        serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_u128: u128
    );

    floats!(serialize_f32: f32 => write_f32, serialize_f64: f64 => write_f64);

    fn serialize_char(self, value: char) -> Written {
        write_escaped(self.sink, value.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, value: &str) -> Written {
        write_escaped(self.sink, value);
        Ok(())
    }

    fn serialize_bytes(self, _: &[u8]) -> Written {
        Err(Declined)
    }

    fn serialize_none(self) -> Written {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Written {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Written {
        self.sink.put(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _: &'static str) -> Written {
        self.serialize_unit()
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Written {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Written {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Written {
        self.sink.put_byte(b'{');
        write_escaped(self.sink, variant);
        self.sink.put_byte(b':');
        value.serialize(Json {
            sink: &mut *self.sink,
        })?;
        self.sink.put_byte(b'}');
        Ok(())
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a, S>, Declined> {
        Ok(Compound::open(self.sink, b"[", b"]"))
    }

    fn serialize_tuple(self, _: usize) -> Result<Compound<'a, S>, Declined> {
        Ok(Compound::open(self.sink, b"[", b"]"))
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Compound<'a, S>, Declined> {
        Ok(Compound::open(self.sink, b"[", b"]"))
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a, S>, Declined> {
        Ok(Compound::variant(self.sink, variant, b"[", b"]}"))
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a, S>, Declined> {
        Ok(Compound::open(self.sink, b"{", b"}"))
    }

    fn serialize_struct(self, name: &'static str, _: usize) -> Result<Compound<'a, S>, Declined> {
        if name == RAW_VALUE_TOKEN {
            return Err(Declined);
        }
        Ok(Compound::open(self.sink, b"{", b"}"))
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a, S>, Declined> {
        Ok(Compound::variant(self.sink, variant, b"{", b"}}"))
    }
}

impl<'a, S: Sink> Compound<'a, S> {
    fn open(sink: &'a mut S, open: &'static [u8], close: &'static [u8]) -> Self {
        sink.put(open);
        Compound {
            sink,
            first: true,
            close,
        }
    }

    /// A variant's fields: `{"variant":` then `open`, closed by `close`.
    fn variant(sink: &'a mut S, variant: &str, open: &'static [u8], close: &'static [u8]) -> Self {
        sink.put_byte(b'{');
        write_escaped(sink, variant);
        sink.put_byte(b':');
        Self::open(sink, open, close)
    }

    fn comma(&mut self) {
        if !self.first {
            self.sink.put_byte(b',');
        }
        self.first = false;
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        self.comma();
        value.serialize(Json {
            sink: &mut *self.sink,
        })
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Written {
        self.comma();
        write_escaped(self.sink, key);
        self.sink.put_byte(b':');
        value.serialize(Json {
            sink: &mut *self.sink,
        })
    }

    fn finish(self) -> Written {
        self.sink.put(self.close);
        Ok(())
    }
}

/// The compound traits whose items are values.
macro_rules! items_as_values {
    ($($compound:ident :: $item:ident),*) => {$(
        impl<S: Sink> ser::$compound for Compound<'_, S> {
            type Ok = ();
            type Error = Declined;

            fn $item<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
                self.element(value)
            }

            fn end(self) -> Written {
                self.finish()
            }
        }
    )*};
}

items_as_values!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// The compound traits of named fields.
macro_rules! named_fields {
    ($($compound:ident),*) => {$(
        impl<S: Sink> ser::$compound for Compound<'_, S> {
            type Ok = ();
            type Error = Declined;

            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Written {
                self.field(key, value)
            }

            fn end(self) -> Written {
                self.finish()
            }
        }
    )*};
}

named_fields!(SerializeStruct, SerializeStructVariant);

impl<S: Sink> ser::SerializeMap for Compound<'_, S> {
    type Ok = ();
    type Error = Declined;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Written {
        self.comma();
        key.serialize(MapKey {
            sink: &mut *self.sink,
        })
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        self.sink.put_byte(b':');
        value.serialize(Json {
            sink: &mut *self.sink,
        })
    }

    fn end(self) -> Written {
        self.finish()
    }
}

/// The key shapes left to serde_json.
macro_rules! declined {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method(self, _: $ty) -> Written {
            Err(Declined)
        }
    )*};
}

impl<S: Sink> ser::Serializer for MapKey<'_, S> {
    type Ok = ();
    type Error = Declined;
    type SerializeSeq = Impossible<(), Declined>;
    type SerializeTuple = Impossible<(), Declined>;
    type SerializeTupleStruct = Impossible<(), Declined>;
    type SerializeTupleVariant = Impossible<(), Declined>;
    type SerializeMap = Impossible<(), Declined>;
    type SerializeStruct = Impossible<(), Declined>;
    type SerializeStructVariant = Impossible<(), Declined>;

    fn serialize_str(self, value: &str) -> Written {
        write_escaped(self.sink, value);
        Ok(())
    }

    fn serialize_char(self, value: char) -> Written {
        self.serialize_str(value.encode_utf8(&mut [0; 4]))
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Written {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Written {
        value.serialize(self)
    }

    declined!(
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_i128: i128, serialize_u8: u8, serialize_u16: u16,
        serialize_u32: u32, serialize_u64: u64, serialize_u128: u128, serialize_f32: f32,
        serialize_f64: f64, serialize_bytes: &[u8], serialize_unit_struct: &'static str
    );

    fn serialize_none(self) -> Written {
        Err(Declined)
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Written {
        Err(Declined)
    }

    fn serialize_unit(self) -> Written {
        Err(Declined)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Written {
        Err(Declined)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Declined> {
        Err(Declined)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Declined> {
        Err(Declined)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Declined> {
        Err(Declined)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Declined> {
        Err(Declined)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Declined> {
        Err(Declined)
    }

    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, Declined> {
        Err(Declined)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Declined> {
        Err(Declined)
    }
}

/// Writes `text` as a JSON string, escaped as serde_json escapes it: `"`,
/// `\` and the control characters below U+0020 (`\b \t \n \f \r` by name,
/// the rest as `\u00xx` in lower-case hex); everything else, U+007F and
/// all non-ASCII included, as it is. A string with nothing to escape, the
/// usual one, is looked at eight bytes at a time and copied whole.
fn write_escaped<S: Sink>(sink: &mut S, text: &str) {
    let bytes = text.as_bytes();
    sink.put_byte(b'"');
    if any_needs_escape(bytes) {
        let mut written = 0;
        for (index, &byte) in bytes.iter().enumerate() {
            if let Some(escaped) = Escape::of(byte) {
                sink.put(&bytes[written..index]);
                escaped.write(sink);
                written = index + 1;
            }
        }
        sink.put(&bytes[written..]);
    } else {
        sink.put(bytes);
    }
    sink.put_byte(b'"');
}

/// Whether any byte of `bytes` needs escaping, looked at eight at a time;
/// the last few one at a time. (Padding them into a word on the stack cost
/// more than the whole scan: the word's load waited for the bytes' copy,
/// a store it could not forward. BENCHMARKS.md, "The memtables without
/// bloom filters".)
fn any_needs_escape(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    let mut found = false;
    for word in &mut words {
        let mut whole = [0; 8];
        whole.copy_from_slice(word);
        found |= needs_escape(u64::from_le_bytes(whole));
    }
    found
        || words
            .remainder()
            .iter()
            .any(|&byte| Escape::of(byte).is_some())
}

/// Whether any of the eight bytes of `word` is below `0x20`, `"` or `\`
/// (exact as to whether there is one: the classic zero-byte tests).
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |value: u64| value.wrapping_sub(ONES) & !value & HIGH;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    let quote = zero_byte(word ^ (ONES * u64::from(b'"')));
    let backslash = zero_byte(word ^ (ONES * u64::from(b'\\')));
    below_space | quote | backslash != 0
}

/// How one byte is escaped.
enum Escape {
    Named(&'static [u8]),
    Control(u8),
}

impl Escape {
    fn of(byte: u8) -> Option<Escape> {
        Some(match byte {
            b'"' => Escape::Named(b"\\\""),
            b'\\' => Escape::Named(b"\\\\"),
            0x08 => Escape::Named(b"\\b"),
            b'\t' => Escape::Named(b"\\t"),
            b'\n' => Escape::Named(b"\\n"),
            0x0c => Escape::Named(b"\\f"),
            b'\r' => Escape::Named(b"\\r"),
            0x00..=0x1f => Escape::Control(byte),
            _ => return None,
        })
    }

    fn write<S: Sink>(self, sink: &mut S) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        match self {
            Escape::Named(text) => sink.put(text),
            Escape::Control(byte) => sink.put(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]),
        }
    }
}

#[cfg(test)]
#[path = "json_writer_tests.rs"]
mod tests;
