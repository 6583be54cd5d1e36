//! The event of a canonical body: `{"type":"<Variant>","data":<data>}`,
//! its two keys and its variant's name matched byte for byte, and only
//! its data handed to serde.
//!
//! [`Event`] is adjacently tagged, so serde read every event's two keys
//! and its variant's name as JSON strings (each through serde_json's
//! string parser) and matched them through its generic tag-and-content
//! machinery before it reached the data. Here the derived `Deserialize`
//! is handed the same map, with its keys and the variant's name as
//! borrowed strings ([`Tagged`]) and its data still read by serde_json:
//! the same code decides what the data means.
//!
//! The contract is the envelope's ([`super`]): [`decode`] returns `Some`
//! only for text that the general decoder decodes to the same event.
//! serde_json's nesting limit counts from the event's own object there,
//! one level above the data here; [`decode`] declines data that could
//! reach that limit, so both paths refuse the same events.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::de::StrRead;

use crate::event::Event;

/// What precedes the variant's name.
const TYPE: &str = r#"{"type":""#;
/// What follows the variant's name, up to the data.
const DATA: &str = r#"","data":"#;
/// What closes the event, then the envelope.
const END: &str = "}}";

/// The deepest nesting serde_json reads (its limit of 128 is reached by
/// the 128th open bracket). The general decoder spends one level on the
/// event's object, so its data may nest one level less than here.
const SERDE_JSON_DEEPEST: usize = 127;

/// Decodes the event and the envelope's end, `text` being what follows
/// the envelope's `"event":` key; `None` when it is not laid out as
/// [`crate::json_writer`] writes an event, or does not decode.
pub(super) fn decode(text: &str) -> Option<Event> {
    let rest = text.strip_prefix(TYPE)?;
    let name_len = rest
        .bytes()
        .position(|byte| !byte.is_ascii_alphanumeric())?;
    let (name, rest) = rest.split_at(name_len);
    let data = rest.strip_prefix(DATA)?.strip_suffix(END)?;
    // The data nests no deeper than it has open brackets (strings may
    // hold some too: those only make this decline more than it must).
    // Data the general decoder reads has at most 126 levels.
    if open_brackets(data) >= SERDE_JSON_DEEPEST {
        return None;
    }
    let mut reader = serde_json::Deserializer::from_str(data);
    let event = Event::deserialize(Tagged {
        name,
        data: &mut reader,
    })
    .ok()?;
    reader.end().ok()?;
    Some(event)
}

/// The number of `{` and `[` in `text`.
fn open_brackets(text: &str) -> usize {
    text.bytes()
        .filter(|&byte| byte == b'{' || byte == b'[')
        .count()
}

/// An adjacently tagged event as the map `{"type": name, "data": data}`,
/// for the derived `Deserialize`.
struct Tagged<'a, 'de> {
    name: &'de str,
    data: &'a mut serde_json::Deserializer<StrRead<'de>>,
}

impl<'de> de::Deserializer<'de> for Tagged<'_, 'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(TaggedMap {
            name: self.name,
            data: self.data,
            next: Entry::Type,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// The entry a [`TaggedMap`] gives next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// The `type` key, then its value, the variant's name.
    Type,
    /// The `data` key, then the data.
    Data,
    /// No more entries.
    Done,
}

struct TaggedMap<'a, 'de> {
    name: &'de str,
    data: &'a mut serde_json::Deserializer<StrRead<'de>>,
    /// The entry whose key comes next, or whose value was asked for.
    next: Entry,
}

impl<'de> MapAccess<'de> for TaggedMap<'_, 'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let key = match self.next {
            Entry::Type => "type",
            Entry::Data => "data",
            Entry::Done => return Ok(None),
        };
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        match self.next {
            Entry::Type => {
                self.next = Entry::Data;
                seed.deserialize(BorrowedStrDeserializer::new(self.name))
            }
            Entry::Data => {
                self.next = Entry::Done;
                seed.deserialize(&mut *self.data)
            }
            Entry::Done => Err(de::Error::custom("no value after the event's data")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(match self.next {
            Entry::Type => 2,
            Entry::Data => 1,
            Entry::Done => 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_decodes_as_serde_decodes_it_and_anything_else_is_declined() {
        let event = Event::TurnStarted { turn: 3, epoch: 2 };
        let text = serde_json::to_string(&event).unwrap();
        assert_eq!(decode(&format!("{text}}}")), Some(event));
        for declined in [
            // Not closed by the envelope, or closed twice.
            text.clone(),
            format!("{text}}}}}"),
            // Keys in another order, an unknown key, whitespace.
            r#"{"data":{"turn":3,"epoch":2},"type":"TurnStarted"}}"#.to_owned(),
            r#"{"type":"TurnStarted","data":{"turn":3,"epoch":2},"x":1}}"#.to_owned(),
            r#"{"type": "TurnStarted","data":{"turn":3,"epoch":2}}}"#.to_owned(),
            // An escaped or unknown variant name, data of another variant.
            r#"{"type":"Turn\u0053tarted","data":{"turn":3,"epoch":2}}}"#.to_owned(),
            r#"{"type":"TurnBegun","data":{"turn":3,"epoch":2}}}"#.to_owned(),
            r#"{"type":"TurnStarted","data":{"turn":3}}}"#.to_owned(),
            // Text after the data.
            r#"{"type":"TurnStarted","data":{"turn":3,"epoch":2},}}"#.to_owned(),
        ] {
            assert_eq!(decode(&declined), None, "{declined}");
        }
        // Whitespace inside the data or after it is JSON the general
        // decoder reads to the same event: so is it here.
        let spaced = r#"{"type":"TurnStarted","data":{ "turn": 3, "epoch": 2 } }}"#;
        assert_eq!(
            decode(spaced),
            Some(Event::TurnStarted { turn: 3, epoch: 2 })
        );
    }

    #[test]
    fn data_that_could_reach_serde_jsons_limit_is_declined() {
        assert_eq!(open_brackets(r#"{"a":["{",[]]}"#), 4);
        let nested = |levels: usize| {
            let data = format!(
                r#"{{"turn":1,"callId":"c","name":"n","input":{}null{}}}"#,
                "[".repeat(levels),
                "]".repeat(levels)
            );
            format!(r#"{{"type":"ToolCalled","data":{data}}}}}"#)
        };
        // 125 arrays and the data's object: 126 brackets, read here and by
        // the general decoder; one more is declined, though serde_json
        // would read it here.
        assert!(decode(&nested(125)).is_some());
        assert_eq!(decode(&nested(126)), None);
    }
}
