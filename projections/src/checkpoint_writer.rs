//! The checkpoint's MessagePack writer: the layout `rmp_serde::to_vec_named`
//! writes, except that struct field names, and the names of enum variants
//! that carry data, are MessagePack `bin`, not `str` (BENCHMARKS.md, "Names
//! as bytes").
//!
//! A checkpoint holds about 700k structs for a 1M-event log, each with its
//! field names, and every name a `str` costs the reader a UTF-8 validation
//! before the derived visitor matches it: a quarter of the decode. Such a
//! name is read as an identifier, which the reader (`rmp_serde`'s
//! `Deserializer`) hands to the derived visitor as bytes
//! (`visit_borrowed_bytes`) when it is a `bin`, matched as a `str` would
//! be, unchecked; serde's buffered forms (tagged enums, flattened structs)
//! read identifiers from bytes too. A unit variant stays a `str`: it is a
//! value, and serde's buffered forms accept a unit variant only as a
//! string. Everything else is as `rmp_serde` writes it:
//! - integers in their shortest form, floats, `bool`, `nil` for `()`, `None`
//!   and unit; `Some(v)` as `v`; an empty array for a unit struct; a newtype
//!   struct as its value; 128-bit integers as 16 big-endian bytes;
//! - a string as `str` (data is validated as before), bytes as `bin`;
//! - sequences and tuples as arrays, maps as maps, structs as maps from
//!   field name to value;
//! - a unit variant as its name (`str`); any other variant as a one-entry
//!   map from its name to its value, its array of fields, or its map of
//!   fields.
//!
//! Not human-readable, as `rmp_serde`'s default, so types that serialize
//! differently for people (ids) write the same bytes the reader expects.

use std::fmt::Display;

use rmp::encode;
use serde::ser::{self, Serialize};

/// Why a value could not be written: a length past MessagePack's `u32`, or
/// a type's own refusal. Writing the projections into memory meets neither.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct WriteError(String);

impl ser::Error for WriteError {
    fn custom<T: Display>(msg: T) -> Self {
        WriteError(msg.to_string())
    }
}

type Written = Result<(), WriteError>;

/// `value` as MessagePack, names as `bin`.
///
/// # Errors
/// [`WriteError`] when a length passes `u32::MAX` or the value refuses.
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, WriteError> {
    let mut out = Vec::new();
    value.serialize(Writer { out: &mut out })?;
    Ok(out)
}

fn wrote<E: Display>(result: Result<impl Sized, E>) -> Written {
    result
        .map(drop)
        .map_err(|err| WriteError(format!("writing MessagePack: {err}")))
}

fn length(len: usize) -> Result<u32, WriteError> {
    u32::try_from(len).map_err(|_| WriteError(format!("a length of {len} passes u32::MAX")))
}

fn bin(out: &mut Vec<u8>, bytes: &[u8]) -> Written {
    length(bytes.len())?;
    wrote(encode::write_bin(out, bytes))
}

fn array_len(out: &mut Vec<u8>, len: usize) -> Written {
    wrote(encode::write_array_len(out, length(len)?))
}

fn map_len(out: &mut Vec<u8>, len: usize) -> Written {
    wrote(encode::write_map_len(out, length(len)?))
}

/// Writes one value into `out`.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// A one-entry map from `variant`'s name, as `bin`, to what follows.
    fn variant(self, variant: &str) -> Result<Writer<'a>, WriteError> {
        map_len(self.out, 1)?;
        bin(self.out, variant.as_bytes())?;
        Ok(self)
    }

    /// A container of `len` items, or of items counted as they come.
    fn container(self, len: Option<usize>, kind: Kind) -> Result<Container<'a>, WriteError> {
        let pending = match len {
            Some(len) => {
                kind.header(self.out, len)?;
                None
            }
            None => Some(Pending {
                bytes: Vec::new(),
                count: 0,
                kind,
            }),
        };
        Ok(Container {
            out: self.out,
            pending,
        })
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Array,
    Map,
}

impl Kind {
    /// The header of a container of this kind holding `len` items (a
    /// map's are its entries).
    fn header(self, out: &mut Vec<u8>, len: usize) -> Written {
        match self {
            Kind::Array => array_len(out, len),
            Kind::Map => map_len(out, len),
        }
    }
}

/// The items of a container whose length was not known when it began:
/// MessagePack writes a length first, so they are written aside and
/// counted, and follow their header when it ends.
struct Pending {
    bytes: Vec<u8>,
    count: usize,
    kind: Kind,
}

/// An array, map or struct being written.
struct Container<'a> {
    out: &'a mut Vec<u8>,
    pending: Option<Pending>,
}

impl Container<'_> {
    /// Where the next item goes, counted as one.
    fn item(&mut self) -> Writer<'_> {
        match &mut self.pending {
            Some(pending) => {
                pending.count += 1;
                Writer {
                    out: &mut pending.bytes,
                }
            }
            None => Writer { out: self.out },
        }
    }

    /// Where the next byte of the current item goes, not counted.
    fn more(&mut self) -> &mut Vec<u8> {
        match &mut self.pending {
            Some(pending) => &mut pending.bytes,
            None => self.out,
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        value.serialize(self.item())
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Written {
        bin(self.item().out, name.as_bytes())?;
        value.serialize(Writer { out: self.more() })
    }

    fn finish(self) -> Written {
        if let Some(pending) = self.pending {
            pending.kind.header(self.out, pending.count)?;
            self.out.extend_from_slice(&pending.bytes);
        }
        Ok(())
    }
}

impl<'a> ser::Serializer for Writer<'a> {
    type Ok = ();
    type Error = WriteError;
    type SerializeSeq = Container<'a>;
    type SerializeTuple = Container<'a>;
    type SerializeTupleStruct = Container<'a>;
    type SerializeTupleVariant = Container<'a>;
    type SerializeMap = Container<'a>;
    type SerializeStruct = Container<'a>;
    type SerializeStructVariant = Container<'a>;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn serialize_bool(self, v: bool) -> Written {
        wrote(encode::write_bool(self.out, v))
    }

    fn serialize_i8(self, v: i8) -> Written {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i16(self, v: i16) -> Written {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i32(self, v: i32) -> Written {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i64(self, v: i64) -> Written {
        wrote(encode::write_sint(self.out, v))
    }

    fn serialize_i128(self, v: i128) -> Written {
        self.serialize_bytes(&v.to_be_bytes())
    }

    fn serialize_u8(self, v: u8) -> Written {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u16(self, v: u16) -> Written {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u32(self, v: u32) -> Written {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u64(self, v: u64) -> Written {
        wrote(encode::write_uint(self.out, v))
    }

    fn serialize_u128(self, v: u128) -> Written {
        self.serialize_bytes(&v.to_be_bytes())
    }

    fn serialize_f32(self, v: f32) -> Written {
        wrote(encode::write_f32(self.out, v))
    }

    fn serialize_f64(self, v: f64) -> Written {
        wrote(encode::write_f64(self.out, v))
    }

    fn serialize_char(self, v: char) -> Written {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }

    fn serialize_str(self, v: &str) -> Written {
        length(v.len())?;
        wrote(encode::write_str(self.out, v))
    }

    fn serialize_bytes(self, v: &[u8]) -> Written {
        bin(self.out, v)
    }

    fn serialize_none(self) -> Written {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Written {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Written {
        wrote(encode::write_nil(self.out))
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Written {
        array_len(self.out, 0)
    }

    fn serialize_unit_variant(self, _name: &'static str, _: u32, variant: &'static str) -> Written {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Written {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Written {
        value.serialize(self.variant(variant)?)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Container<'a>, WriteError> {
        self.container(len, Kind::Array)
    }

    fn serialize_tuple(self, len: usize) -> Result<Container<'a>, WriteError> {
        self.container(Some(len), Kind::Array)
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Container<'a>, WriteError> {
        self.container(Some(len), Kind::Array)
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Container<'a>, WriteError> {
        self.variant(variant)?.container(Some(len), Kind::Array)
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Container<'a>, WriteError> {
        self.container(len, Kind::Map)
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Container<'a>, WriteError> {
        self.container(Some(len), Kind::Map)
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Container<'a>, WriteError> {
        self.variant(variant)?.container(Some(len), Kind::Map)
    }
}

/// The compound traits whose items are plain values: each item is
/// written as it comes.
macro_rules! items_as_values {
    ($($compound:ident :: $item:ident),*) => {$(
        impl ser::$compound for Container<'_> {
            type Ok = ();
            type Error = WriteError;

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

/// The compound traits of named fields: each name is written as `bin`.
macro_rules! named_fields {
    ($($compound:ident),*) => {$(
        impl ser::$compound for Container<'_> {
            type Ok = ();
            type Error = WriteError;

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

impl ser::SerializeMap for Container<'_> {
    type Ok = ();
    type Error = WriteError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Written {
        key.serialize(self.item())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        value.serialize(Writer { out: self.more() })
    }

    fn end(self) -> Written {
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::de::DeserializeOwned;
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Record {
        name: String,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        maybe: Option<u32>,
        shapes: Vec<Shape>,
        tagged: Vec<Tagged>,
        flat: WithFlatten,
        pair: (i8, u64),
        map: BTreeMap<String, i64>,
        unit: Unit,
        wrapped: Wrapped,
        wide: u128,
        float: f64,
        letter: char,
        #[serde(with = "serde_bytes_like")]
        raw: Vec<u8>,
    }

    /// Bytes as `serialize_bytes`, as `uuid` writes its ids.
    mod serde_bytes_like {
        pub(super) fn serialize<S: serde::Serializer>(
            bytes: &[u8],
            s: S,
        ) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(bytes)
        }

        pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<Vec<u8>, D::Error> {
            struct Bytes;
            impl serde::de::Visitor<'_> for Bytes {
                type Value = Vec<u8>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                    Ok(v.to_vec())
                }
            }
            d.deserialize_bytes(Bytes)
        }
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    enum Shape {
        Dot,
        Circle(f32),
        Line(i32, i32),
        Box { wide: u16, high: u16 },
    }

    /// A unit enum: a value, read back through serde's buffered forms
    /// below (a tagged variant's field, a flattened struct's field, a map
    /// key) as well as directly.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
    enum Color {
        Red,
        Blue,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "camelCase")]
    enum Tagged {
        Named { label: String, color: Color },
        Empty,
    }

    /// A struct with a flattened one is written as a map of unknown
    /// length, its names as the map's keys.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct WithFlatten {
        id: u8,
        #[serde(flatten)]
        extra: Extra,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Extra {
        note: String,
        color: Option<Color>,
        by_color: BTreeMap<Color, u8>,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Unit;

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Wrapped(Option<u8>);

    fn record() -> Record {
        Record {
            name: "ünïcode and \"quotes\"".into(),
            maybe: None,
            shapes: vec![
                Shape::Dot,
                Shape::Circle(1.5),
                Shape::Line(-1, 70_000),
                Shape::Box { wide: 3, high: 4 },
            ],
            tagged: vec![
                Tagged::Named {
                    label: "x".into(),
                    color: Color::Blue,
                },
                Tagged::Empty,
            ],
            flat: WithFlatten {
                id: 7,
                extra: Extra {
                    note: "flattened".into(),
                    color: Some(Color::Red),
                    by_color: [(Color::Blue, 2)].into(),
                },
            },
            pair: (-128, u64::MAX),
            map: [("a".to_owned(), i64::MIN), ("b".to_owned(), 300)].into(),
            unit: Unit,
            wrapped: Wrapped(Some(3)),
            wide: u128::MAX - 1,
            float: -0.25,
            letter: 'é',
            raw: vec![0, 255, 7],
        }
    }

    fn read<T: DeserializeOwned>(bytes: &[u8]) -> T {
        rmp_serde::from_slice(bytes).expect("rmp_serde reads what the writer wrote")
    }

    #[test]
    fn rmp_serde_reads_back_every_shape_the_writer_writes() {
        let record = record();
        assert_eq!(read::<Record>(&to_vec(&record).unwrap()), record);
        let some = Record {
            maybe: Some(9),
            ..record
        };
        assert_eq!(read::<Record>(&to_vec(&some).unwrap()), some);
    }

    /// Whether `bytes` holds `window` anywhere.
    fn holds(bytes: &[u8], window: &[u8]) -> bool {
        bytes.windows(window.len()).any(|found| found == window)
    }

    #[test]
    fn names_are_bytes_and_data_strings_are_strings() {
        let bytes = to_vec(&record()).unwrap();
        // `bin 8` (0xc4) then the length, against `fixstr` (0xa0 | length).
        for name in ["name", "shapes", "wide", "Circle", "Box", "high"] {
            let mut as_bin = vec![0xc4, name.len() as u8];
            as_bin.extend_from_slice(name.as_bytes());
            let mut as_str = vec![0xa0 | name.len() as u8];
            as_str.extend_from_slice(name.as_bytes());
            assert!(holds(&bytes, &as_bin), "{name} as bin");
            assert!(!holds(&bytes, &as_str), "{name} not as str");
        }
        // Data stays a string: a string value, an internal tag's value (the
        // variant's name as data), the keys of a map, which a flattened
        // struct's fields are, and a unit variant, a value.
        for text in ["named", "id", "note", "flattened", "Dot", "Red", "Blue"] {
            let mut as_str = vec![0xa0 | text.len() as u8];
            as_str.extend_from_slice(text.as_bytes());
            assert!(holds(&bytes, &as_str), "{text} as str");
        }
        let name = "ünïcode and \"quotes\"";
        let mut as_str = vec![0xa0 | name.len() as u8];
        as_str.extend_from_slice(name.as_bytes());
        assert!(holds(&bytes, &as_str));
    }

    #[test]
    fn it_writes_what_rmp_serde_writes_apart_from_the_names() {
        // Without structs or variants, the bytes are rmp_serde's own.
        let plain = (
            vec![1u8, 200],
            [("k".to_owned(), -5i32)]
                .into_iter()
                .collect::<BTreeMap<_, _>>(),
            Some("s"),
            None::<u8>,
            (),
            2.5f32,
            u128::MAX,
        );
        assert_eq!(
            to_vec(&plain).unwrap(),
            rmp_serde::to_vec_named(&plain).unwrap()
        );
    }

    /// A content block reads its keys itself (`core`'s `content_fields`):
    /// as a `str` (how this writer writes them, a flattened struct's) or,
    /// should one ever come as a `bin`, as bytes.
    #[test]
    fn a_content_block_reads_its_keys_as_strings_or_bytes() {
        use subagent_core::ContentBlock;
        let block = ContentBlock::text("hi");
        assert_eq!(read::<ContentBlock>(&to_vec(&block).unwrap()), block);
        let mut as_bins = Vec::new();
        encode::write_map_len(&mut as_bins, 2).unwrap();
        for (key, value) in [("type", "text"), ("text", "hi")] {
            encode::write_bin(&mut as_bins, key.as_bytes()).unwrap();
            encode::write_str(&mut as_bins, value).unwrap();
        }
        assert_eq!(read::<ContentBlock>(&as_bins), block);
    }

    #[test]
    fn a_sequence_of_unknown_length_is_counted() {
        struct Unknown(Vec<Shape>);
        impl Serialize for Unknown {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeSeq;
                let mut seq = s.serialize_seq(None)?;
                for shape in &self.0 {
                    seq.serialize_element(shape)?;
                }
                seq.end()
            }
        }
        let shapes = vec![Shape::Dot; 20];
        assert_eq!(
            read::<Vec<Shape>>(&to_vec(&Unknown(shapes.clone())).unwrap()),
            shapes
        );
    }
}
