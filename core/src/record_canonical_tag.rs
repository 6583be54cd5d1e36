//! The event of a canonical body, `{"type":"<Variant>","data":<data>}`:
//! its two keys and its variant's name matched byte for byte, and only its
//! data handed to serde_json.
//!
//! [`Event`] is adjacently tagged, so decoded from JSON text (as the
//! general decoder decodes it) serde reads its two keys and its variant's
//! name as JSON strings, each through serde_json's string parser, and
//! matches them through its generic tag-and-content machinery before it
//! reaches the data. Here the derived `Deserialize` is handed the same
//! map by [`TaggedMap`], with its keys and the variant's name as borrowed
//! strings and its data still read by serde_json: the same code decides
//! what the data means.
//!
//! The contract is the envelope's ([`super`]): [`decode`] returns `Some`
//! only for text that the general decoder decodes to the same event.
//! serde_json's nesting limit counts from the event's own object there,
//! one level above the data here; data that could reach that limit is
//! decoded as the general decoder decodes it, from the event's object, so
//! both paths refuse the same events.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::de::StrRead;

use crate::event::Event;

/// What precedes the variant's name.
const TYPE: &str = r#"{"type":""#;
/// What follows the variant's name, up to the data.
const DATA: &str = r#"","data":"#;
/// What closes the envelope, after the event.
const ENVELOPE_END: &str = "}";

/// The deepest nesting serde_json reads: its budget of 128 levels runs
/// out at the 128th open bracket. The general decoder spends one level on
/// the event's object, so the data it reads has at most 126.
const SERDE_JSON_DEEPEST: usize = 127;

/// Decodes the event, `text` being what follows the envelope's `"event":`
/// key, through the envelope's closing brace; `None` when the tag is not
/// laid out as [`crate::json_writer`] writes it, or the event does not
/// decode.
pub(super) fn decode(text: &str) -> Option<Event> {
    let event = text.strip_suffix(ENVELOPE_END)?;
    let rest = event.strip_prefix(TYPE)?;
    let name_len = rest
        .bytes()
        .position(|byte| !byte.is_ascii_alphanumeric())?;
    let (name, rest) = rest.split_at(name_len);
    let data = rest.strip_prefix(DATA)?.strip_suffix('}')?;
    // The data nests no deeper than it has open brackets. Strings may
    // hold brackets too (code, JSON as text), and then this count is more
    // than the depth: such data is read from the event's object, where
    // serde_json counts the depth as the general decoder does.
    if open_brackets(data) >= SERDE_JSON_DEEPEST {
        return serde_json::from_str(event).ok();
    }
    let mut reader = serde_json::Deserializer::from_str(data);
    let decoded = Event::deserialize(TaggedMap {
        name,
        data: &mut reader,
        next: Entry::Type,
    })
    .ok()?;
    reader.end().ok()?;
    Some(decoded)
}

/// The number of `{` and `[` in `text`.
fn open_brackets(text: &str) -> usize {
    text.bytes()
        .filter(|&byte| byte == b'{' || byte == b'[')
        .count()
}

/// An adjacently tagged event as the map `{"type": name, "data": data}`,
/// for the derived `Deserialize`: a deserializer that yields itself as
/// that map.
struct TaggedMap<'a, 'de> {
    /// The variant's name, as the tag's value.
    name: &'de str,
    /// The data, as the `data` key's value.
    data: &'a mut serde_json::Deserializer<StrRead<'de>>,
    /// The entry whose key comes next, or whose value was asked for.
    next: Entry,
}

/// The entry a [`TaggedMap`] gives next.
#[derive(Clone, Copy)]
enum Entry {
    /// The `type` key, then its value, the variant's name.
    Type,
    /// The `data` key, then the data.
    Data,
    /// No more entries.
    Done,
}

impl<'de> de::Deserializer<'de> for TaggedMap<'_, 'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
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

    /// What the general decoder makes of the same event: `text` less the
    /// envelope's closing brace, through serde_json.
    fn general(text: &str) -> Option<Event> {
        serde_json::from_str(text.strip_suffix(ENVELOPE_END)?).ok()
    }

    /// `decode` declines `text` or agrees with the general decoder.
    fn agrees(text: &str) -> Option<Event> {
        let decoded = decode(text);
        if let Some(event) = &decoded {
            assert_eq!(general(text).as_ref(), Some(event), "{text}");
        }
        decoded
    }

    #[test]
    fn an_event_decodes_as_the_general_decoder_decodes_it() {
        let event = Event::TurnStarted { turn: 3, epoch: 2 };
        let text = serde_json::to_string(&event).unwrap();
        assert_eq!(agrees(&format!("{text}}}")), Some(event));
        // Whitespace inside the data or after it, escapes in its strings,
        // a number no `u64` holds, unknown or repeated fields: JSON each
        // path reads with the same serde_json code.
        let turn = |data: &str| format!(r#"{{"type":"TurnStarted","data":{data}}}}}"#);
        let called = |data: &str| format!(r#"{{"type":"ToolCalled","data":{data}}}}}"#);
        let spaced = turn(r#"{ "turn": 3, "epoch": 2 } "#);
        assert_eq!(
            agrees(&spaced),
            Some(Event::TurnStarted { turn: 3, epoch: 2 })
        );
        let escaped =
            called(r#"{"turn":1,"callId":"\u0063\n","name":"\ud83d\ude00","input":"\""}"#);
        assert!(agrees(&escaped).is_some());
        for either in [
            called(r#"{"turn":1,"callId":"c","name":"n","input":"\ud800"}"#),
            turn(r#"{"turn":1e400,"epoch":2}"#),
            turn(r#"{"turn":3,"epoch":2,"unknown":[1]}"#),
            turn(r#"{"turn":3,"turn":4,"epoch":2}"#),
            called(r#"{"turn":1,"callId":"c","name":"n","input":1e400}"#),
        ] {
            assert_eq!(decode(&either), general(&either), "{either}");
        }
    }

    #[test]
    fn a_tag_laid_out_otherwise_is_declined() {
        let text = serde_json::to_string(&Event::TurnStarted { turn: 3, epoch: 2 }).unwrap();
        for declined in [
            // Not closed by the envelope, or closed twice.
            text.clone(),
            format!("{text}}}}}"),
            // Keys in another order, an unknown key, whitespace in the tag.
            r#"{"data":{"turn":3,"epoch":2},"type":"TurnStarted"}}"#.to_owned(),
            r#"{"type":"TurnStarted","data":{"turn":3,"epoch":2},"x":1}}"#.to_owned(),
            r#"{"type": "TurnStarted","data":{"turn":3,"epoch":2}}}"#.to_owned(),
            // An escaped or unknown variant name, data of another variant.
            r#"{"type":"Turn\u0053tarted","data":{"turn":3,"epoch":2}}}"#.to_owned(),
            r#"{"type":"TurnBegun","data":{"turn":3,"epoch":2}}}"#.to_owned(),
            r#"{"type":"","data":{"turn":3,"epoch":2}}}"#.to_owned(),
            r#"{"type":"TurnStarted","data":{"turn":3}}}"#.to_owned(),
            // Text after the data.
            r#"{"type":"TurnStarted","data":{"turn":3,"epoch":2},}}"#.to_owned(),
        ] {
            assert_eq!(decode(&declined), None, "{declined}");
        }
    }

    #[test]
    fn data_that_could_reach_serde_jsons_limit_is_read_from_the_event() {
        assert_eq!(open_brackets(r#"{"a":["{",[]]}"#), 4);
        let called = |input: String| {
            format!(
                r#"{{"type":"ToolCalled","data":{{"turn":1,"callId":"c","name":"n","input":{input}}}}}}}"#
            )
        };
        let nested =
            |levels: usize| called(format!("{}null{}", "[".repeat(levels), "]".repeat(levels)));
        // 125 arrays and the data's object: read by both paths. One more
        // is past the general decoder's limit, and so past this one's.
        assert!(agrees(&nested(125)).is_some());
        assert_eq!(decode(&nested(126)), None);
        assert_eq!(general(&nested(126)), None);
        // Brackets in a string count but do not nest: still read.
        let bracketed = called(format!(r#""{}""#, "{[".repeat(200)));
        assert!(agrees(&bracketed).is_some());
    }
}
