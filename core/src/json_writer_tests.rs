//! Unit tests of `json_writer`: its bytes are serde_json's, for arbitrary
//! events and strings and for every edge value, and it writes every event
//! itself (a writer that declined everything would pass the first tests
//! and gain nothing).

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde::Serialize;
use serde_json::json;

use super::*;
use crate::arbitrary;

fn ours<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = b"prefix".to_vec();
    write(value, &mut out).unwrap();
    assert_eq!(&out[..6], b"prefix", "appended, not overwritten");
    out.split_off(6)
}

fn assert_same<T: Serialize + ?Sized>(value: &T) {
    let expected = serde_json::to_vec(value).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ours(value)),
        String::from_utf8_lossy(&expected)
    );
    assert_eq!(len(value).unwrap(), expected.len());
}

/// Whether the writer writes `value` itself, not serde_json.
fn written_without_serde_json<T: Serialize + ?Sized>(value: &T) -> bool {
    let mut out = Vec::new();
    value.serialize(Json { sink: &mut out }).is_ok()
}

/// Strings made mostly of what escaping is about: quotes, backslashes,
/// every control character, U+007F, multi-byte characters, and runs of
/// plain text long enough to be looked at eight bytes at a time.
fn tricky_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("\"".to_string()),
        Just("\\".to_string()),
        (0u8..0x20).prop_map(|byte| char::from(byte).to_string()),
        Just("\u{7f}".to_string()),
        Just("é日本🦀".to_string()),
        "[a-z ]{0,19}",
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_event_is_written_as_serde_json_writes_it(event in arbitrary::event()) {
        let expected = serde_json::to_vec(&event).unwrap();
        prop_assert_eq!(ours(&event), expected.clone());
        prop_assert_eq!(len(&event).unwrap(), expected.len());
        prop_assert!(written_without_serde_json(&event));
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them(text in tricky_text(), any in any::<String>()) {
        for text in [&text, &any] {
            prop_assert_eq!(ours(text), serde_json::to_vec(text).unwrap());
            let as_key = BTreeMap::from([(text.clone(), text.len())]);
            prop_assert_eq!(ours(&as_key), serde_json::to_vec(&as_key).unwrap());
        }
    }

    #[test]
    fn numbers_are_written_as_serde_json_writes_them(
        float in any::<f64>(),
        small in any::<f32>(),
        wide in any::<i128>(),
        unsigned in any::<u128>(),
    ) {
        assert_same(&(float, small, wide, unsigned));
    }
}

#[test]
fn every_control_character_and_each_position_in_a_word() {
    for byte in 0u8..=0x7f {
        for at in 0..17 {
            let mut text = "x".repeat(17);
            text.replace_range(at..=at, &char::from(byte).to_string());
            assert_same(&text);
        }
    }
}

#[test]
fn edge_values_are_written_as_serde_json_writes_them() {
    #[derive(Serialize)]
    enum Shape {
        Unit,
        Newtype(u8),
        Tuple(u8, &'static str),
        Struct { a: Option<u8>, b: () },
    }
    #[derive(Serialize)]
    struct UnitStruct;
    #[derive(Serialize)]
    struct Empty {}
    #[derive(Serialize)]
    #[serde(tag = "kind")]
    enum Tagged {
        Inner { shapes: Vec<Shape> },
    }
    #[derive(Serialize)]
    struct Flattened {
        own: bool,
        #[serde(flatten)]
        rest: BTreeMap<String, serde_json::Value>,
    }
    assert_same(&[
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        1e21,
        5e-324,
        0.1,
    ]);
    assert_same(&[f32::NAN, f32::MAX, f32::MIN_POSITIVE, 1.5]);
    assert_same(&(
        i128::MIN,
        u128::MAX,
        i64::MIN,
        u64::MAX,
        i8::MIN,
        'q',
        '\u{1}',
    ));
    assert_same(&(true, false, (), UnitStruct, Empty {}, None::<u8>, Some("s")));
    assert_same(&[
        Shape::Unit,
        Shape::Newtype(1),
        Shape::Tuple(2, "t"),
        Shape::Struct { a: None, b: () },
    ]);
    assert_same(&Tagged::Inner {
        shapes: vec![Shape::Unit, Shape::Newtype(9)],
    });
    assert_same(&Flattened {
        own: true,
        rest: BTreeMap::from([("k\"ey".to_string(), json!({"n": [1.5, null, "\u{0}"]}))]),
    });
    assert_same(&json!({"": {}, "a": [], "b": [[]], "c": {"d": -1}}));
    assert_same(&Vec::<u8>::new());
    assert_same(&BTreeMap::<String, u8>::new());
}

/// Shapes serde_json writes in a way of its own are left to it, and the
/// output is still serde_json's.
#[test]
fn what_the_writer_declines_serde_json_writes() {
    let numbered = BTreeMap::from([(1u8, "a"), (2, "b")]);
    let flagged = BTreeMap::from([(true, 1u8)]);
    let bytes = serde_bytes_like(b"\x00\xff");
    let raw = serde_json::value::RawValue::from_string("{ \"spaced\" : 1 }".into()).unwrap();
    for declined in [&numbered as &dyn erased::Value, &flagged, &bytes, &raw] {
        assert!(!declined.fast(), "left to serde_json");
        assert_eq!(declined.ours(), declined.theirs());
    }
    let not_a_key = BTreeMap::from([(vec![1u8], 1u8)]);
    let mut out = b"kept".to_vec();
    assert!(
        write(&not_a_key, &mut out).is_err(),
        "serde_json's own error"
    );
    assert!(len(&not_a_key).is_err());
}

/// A value serialized through `serialize_bytes`.
fn serde_bytes_like(bytes: &'static [u8]) -> impl Serialize {
    struct Bytes(&'static [u8]);
    impl Serialize for Bytes {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_bytes(self.0)
        }
    }
    Bytes(bytes)
}

/// The writer and serde_json over values of different types, in one list.
mod erased {
    use super::*;

    pub(super) trait Value {
        fn fast(&self) -> bool;
        fn ours(&self) -> Vec<u8>;
        fn theirs(&self) -> Vec<u8>;
    }

    impl<T: Serialize> Value for T {
        fn fast(&self) -> bool {
            written_without_serde_json(self)
        }
        fn ours(&self) -> Vec<u8> {
            super::ours(self)
        }
        fn theirs(&self) -> Vec<u8> {
            serde_json::to_vec(self).unwrap()
        }
    }
}
