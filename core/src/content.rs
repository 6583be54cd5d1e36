//! Content blocks: the unit of every prompt, message and assistant output.
//!
//! The wire form is the published one: an object tagged by `type`
//! (`text`, `image`, `tool_use`, `tool_result`). Decoding is lossless: fields
//! this version does not know are kept in `extra` and written back, and a block
//! of an unknown `type` is kept whole as [`ContentBlock::Other`], so a log
//! written by a newer host still replays and re-exports byte-for-byte
//! equivalent JSON.

use std::fmt;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The known blocks' `Deserialize`, one pass over their fields.
#[path = "content_fields.rs"]
mod fields;

/// One block of content.
#[derive(Clone, Debug, PartialEq)]
pub enum ContentBlock {
    /// Plain text.
    Text(TextBlock),
    /// An image, carried inline (base64) or by attachment reference.
    Image(ImageBlock),
    /// A model's request to call a tool.
    ToolUse(ToolUseBlock),
    /// The outcome of a tool call.
    ToolResult(ToolResultBlock),
    /// A block of a type this version does not know, kept verbatim.
    Other(Map<String, Value>),
}

/// `{"type":"text","text":...}`
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TextBlock {
    /// The text.
    pub text: String,
    /// Unknown fields, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"type":"image","mimeType":...,"data":...}`
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageBlock {
    /// The media type, e.g. `image/png`.
    pub mime_type: String,
    /// Base64 data, when inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Content address in the attachment store, when not inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment: Option<String>,
    /// Unknown fields, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"type":"tool_use","id":...,"name":...,"input":{...}}`
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolUseBlock {
    /// The call id that the matching result names.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Arbitrary JSON input.
    pub input: Value,
    /// Unknown fields, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"type":"tool_result","toolUseId":...,"content":[...],"isError":false}`
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultBlock {
    /// The id of the `tool_use` this answers.
    pub tool_use_id: String,
    /// The result content.
    pub content: Vec<ContentBlock>,
    /// Whether the tool failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Unknown fields, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ContentBlock {
    /// A text block.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(TextBlock {
            text: text.into(),
            extra: Map::new(),
        })
    }

    /// The text of a text block, `None` for every other kind.
    #[must_use]
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text(block) => Some(&block.text),
            _ => None,
        }
    }

    /// Whether the block carries nothing a reader would see: an empty text
    /// block. Every other kind counts as content.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        matches!(self, ContentBlock::Text(block) if block.text.is_empty())
    }

    /// The wire `type` of a known block kind; `None` for a kind this
    /// version does not know.
    #[must_use]
    pub fn type_name(&self) -> Option<&'static str> {
        match self {
            ContentBlock::Text(_) => Some("text"),
            ContentBlock::Image(_) => Some("image"),
            ContentBlock::ToolUse(_) => Some("tool_use"),
            ContentBlock::ToolResult(_) => Some("tool_result"),
            ContentBlock::Other(_) => None,
        }
    }
}

/// Concatenates the text of the text blocks, ignoring every other kind.
#[must_use]
pub fn plain_text(blocks: &[ContentBlock]) -> String {
    blocks.iter().filter_map(ContentBlock::as_text).collect()
}

/// Refuses a message of no content block (`what` names it in the refusal,
/// e.g. "a prompt"): the one rule for every message a caller sends, a
/// `prompt` and a start's prompt alike.
///
/// # Errors
/// `gateway/bad-request` when `blocks` is empty.
pub fn require_content(blocks: &[ContentBlock], what: &str) -> Result<(), crate::SubagentError> {
    if blocks.is_empty() {
        return Err(crate::SubagentError::BadRequest(format!(
            "{what} needs at least one content block"
        )));
    }
    Ok(())
}

/// The wire form of a known block on its way out: `type` first, then the
/// block's own fields and its preserved unknown ones, written straight to
/// the serializer (no intermediate `Value`).
#[derive(Serialize)]
struct Tagged<'a, B: Serialize> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    block: &'a B,
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ContentBlock::Text(block) => tagged("text", block, serializer),
            ContentBlock::Image(block) => tagged("image", block, serializer),
            ContentBlock::ToolUse(block) => tagged("tool_use", block, serializer),
            ContentBlock::ToolResult(block) => tagged("tool_result", block, serializer),
            ContentBlock::Other(map) => map.serialize(serializer),
        }
    }
}

/// Writes `block` as a known block of wire type `kind`.
fn tagged<S: Serializer, B: Serialize>(
    kind: &'static str,
    block: &B,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    Tagged { kind, block }.serialize(serializer)
}

impl<'de> Deserialize<'de> for ContentBlock {
    /// Streams a block whose first key is `type` (how this crate writes
    /// them, so every stored block) straight into its typed form; any other
    /// key order is gathered into a map first and decoded from it. Both
    /// accept and refuse the same inputs.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(BlockVisitor)
    }
}

/// Decodes one block from a JSON object.
struct BlockVisitor;

impl<'de> Visitor<'de> for BlockVisitor {
    type Value = ContentBlock;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a content block object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ContentBlock, A::Error> {
        let Some(fields::Key(first)) = map.next_key::<fields::Key<'de>>()? else {
            return Err(A::Error::custom("content block without `type`"));
        };
        if first != "type" {
            let mut fields = Map::new();
            fields.insert(first.into_owned(), map.next_value()?);
            while let Some((key, value)) = map.next_entry::<String, Value>()? {
                fields.insert(key, value);
            }
            return ContentBlock::from_fields(fields).map_err(A::Error::custom);
        }
        let Value::String(kind) = map.next_value::<Value>()? else {
            return Err(A::Error::custom(TYPE_NOT_A_STRING));
        };
        let rest = MapAccessDeserializer::new(map);
        let block = match kind.as_str() {
            "text" => TextBlock::deserialize(rest).map(ContentBlock::Text),
            "image" => ImageBlock::deserialize(rest).map(ContentBlock::Image),
            "tool_use" => ToolUseBlock::deserialize(rest).map(ContentBlock::ToolUse),
            "tool_result" => ToolResultBlock::deserialize(rest).map(ContentBlock::ToolResult),
            _ => {
                let mut fields = Map::deserialize(rest)?;
                fields.shift_insert(0, "type".to_owned(), Value::String(kind));
                return Ok(ContentBlock::Other(fields));
            }
        }
        .map_err(|err| A::Error::custom(format!("malformed {kind} block: {err}")))?;
        if block
            .extra()
            .is_some_and(|extra| extra.contains_key("type"))
        {
            return Err(A::Error::custom("content block with two `type` fields"));
        }
        Ok(block)
    }
}

const TYPE_NOT_A_STRING: &str = "content block `type` must be a string";

impl ContentBlock {
    /// A block from its fields gathered in any order: the slow path of
    /// [`Deserialize`], for objects whose first key is not `type`.
    fn from_fields(mut map: Map<String, Value>) -> Result<Self, String> {
        let kind = match map.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            Some(_) => return Err(TYPE_NOT_A_STRING.to_owned()),
            None => return Err("content block without `type`".to_owned()),
        };
        if !matches!(kind.as_str(), "text" | "image" | "tool_use" | "tool_result") {
            return Ok(ContentBlock::Other(map));
        }
        map.shift_remove("type");
        let body = Value::Object(map);
        match kind.as_str() {
            "text" => serde_json::from_value(body).map(ContentBlock::Text),
            "image" => serde_json::from_value(body).map(ContentBlock::Image),
            "tool_use" => serde_json::from_value(body).map(ContentBlock::ToolUse),
            _ => serde_json::from_value(body).map(ContentBlock::ToolResult),
        }
        .map_err(|err| format!("malformed {kind} block: {err}"))
    }

    /// The preserved unknown fields of a known block.
    fn extra(&self) -> Option<&Map<String, Value>> {
        match self {
            ContentBlock::Text(block) => Some(&block.extra),
            ContentBlock::Image(block) => Some(&block.extra),
            ContentBlock::ToolUse(block) => Some(&block.extra),
            ContentBlock::ToolResult(block) => Some(&block.extra),
            ContentBlock::Other(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(value: Value) {
        let block: ContentBlock = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&block).unwrap(), value);
    }

    #[test]
    fn known_blocks_round_trip_with_unknown_fields_preserved() {
        round_trip(json!({"type": "text", "text": "hi", "cacheControl": {"ttl": 5}}));
        round_trip(json!({"type": "image", "mimeType": "image/png", "data": "AAAA"}));
        round_trip(json!({
            "type": "tool_use", "id": "c1", "name": "grep",
            "input": {"pattern": "x", "nested": [1, 2.5, null, {"deep": true}]}
        }));
        round_trip(json!({
            "type": "tool_result", "toolUseId": "c1", "isError": true,
            "content": [{"type": "text", "text": "boom"}]
        }));
    }

    #[test]
    fn unknown_block_types_are_kept_verbatim() {
        let value = json!({"type": "thinking", "signature": "abc", "thinking": "hmm"});
        let block: ContentBlock = serde_json::from_value(value.clone()).unwrap();
        assert!(matches!(block, ContentBlock::Other(_)));
        assert_eq!(serde_json::to_value(&block).unwrap(), value);
    }

    #[test]
    fn malformed_known_blocks_are_rejected() {
        for bad in [
            json!({"type": "text"}),
            json!({"text": "no type"}),
            json!({"type": 3, "text": "x"}),
            json!({"type": "tool_use", "id": "c1"}),
        ] {
            assert!(
                serde_json::from_value::<ContentBlock>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn stored_blocks_re_encode_byte_for_byte() {
        // `type` first (as this crate writes blocks), unknown fields after
        // the known ones in their own order: decoding from text streams the
        // block, and encoding it again gives the same bytes.
        for text in [
            r#"{"type":"text","text":"hi","zeta":1,"alpha":{"b":2,"a":1},"mid":[true,null]}"#,
            r#"{"type":"image","mimeType":"image/png","attachment":"ab12","z":1,"a":2}"#,
            r#"{"type":"tool_use","id":"c1","name":"grep","input":{"q":"x","a":[1,2.5]},"z":0,"a":0}"#,
            r#"{"type":"tool_result","toolUseId":"c1","content":[{"type":"text","text":"ok","y":1,"b":2}],"isError":true,"z":3,"a":4}"#,
            r#"{"type":"thinking","thinking":"hmm","signature":"abc"}"#,
        ] {
            let block: ContentBlock = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&block).unwrap(), text);
            let from_value: ContentBlock =
                serde_json::from_value(serde_json::from_str(text).unwrap()).unwrap();
            assert_eq!(from_value, block, "{text}");
        }
    }

    #[test]
    fn any_key_order_decodes_to_the_same_block() {
        let streamed: ContentBlock =
            serde_json::from_str(r#"{"type":"text","text":"hi","x":1,"y":2}"#).unwrap();
        let gathered: ContentBlock =
            serde_json::from_str(r#"{"text":"hi","x":1,"type":"text","y":2}"#).unwrap();
        assert_eq!(streamed, gathered);
        assert_eq!(
            serde_json::to_string(&gathered).unwrap(),
            r#"{"type":"text","text":"hi","x":1,"y":2}"#
        );
        let other: ContentBlock =
            serde_json::from_str(r#"{"thinking":"t","type":"thinking"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&other).unwrap(),
            r#"{"thinking":"t","type":"thinking"}"#
        );
    }

    #[test]
    fn malformed_blocks_are_rejected_in_either_key_order() {
        for bad in [
            r#"{}"#,
            r#"[]"#,
            r#""text""#,
            r#"{"type":"text"}"#,
            r#"{"text":"x"}"#,
            r#"{"type":3,"text":"x"}"#,
            r#"{"text":"x","type":3}"#,
            r#"{"type":"text","text":"x","type":"image"}"#,
            r#"{"type":"text","text":5}"#,
            r#"{"type":"image","mimeType":"image/png","data":7}"#,
            r#"{"type":"tool_use","id":"c1"}"#,
            r#"{"id":"c1","type":"tool_use"}"#,
            r#"{"type":"tool_result","toolUseId":"c1","content":[{"text":"no type"}]}"#,
            r#"{"type":"tool_result","toolUseId":"c1","content":[],"isError":null}"#,
            r#"{"type":"text","text":"a","text":"b"}"#,
            r#"{"type":"image","mimeType":"a","mimeType":"b"}"#,
            r#"{"type":"tool_use","id":"c1","name":"n","input":1,"input":2}"#,
            r#"{"type":"tool_result","toolUseId":"c1","content":[],"isError":true,"isError":true}"#,
            r#"{"type":"tool_use","id":"c1","name":"n"}"#,
            r#"{"type":"tool_result","toolUseId":"c1"}"#,
            r#"{"type":"image","data":"AAAA"}"#,
            r#"{"type":"text","text":["x"]}"#,
        ] {
            let err = serde_json::from_str::<ContentBlock>(bad);
            assert!(err.is_err(), "{bad} decoded: {err:?}");
        }
        let err = serde_json::from_str::<ContentBlock>(r#"{"type":3}"#).unwrap_err();
        assert!(err.to_string().contains("must be a string"), "{err}");
        let err = serde_json::from_str::<ContentBlock>(r#"{"type":"text"}"#).unwrap_err();
        assert!(err.to_string().contains("malformed text block"), "{err}");
    }

    #[test]
    fn block_fields_decode_with_their_defaults_and_name_what_is_wrong() {
        let image: ContentBlock =
            serde_json::from_str(r#"{"type":"image","mimeType":"image/png","data":null}"#).unwrap();
        let ContentBlock::Image(image) = image else {
            panic!("{image:?}")
        };
        assert_eq!((image.data, image.attachment), (None, None));
        let result: ContentBlock =
            serde_json::from_str(r#"{"type":"tool_result","toolUseId":"c1","content":[]}"#)
                .unwrap();
        assert!(matches!(
            result,
            ContentBlock::ToolResult(ToolResultBlock {
                is_error: false,
                ..
            })
        ));
        // A repeated unknown key keeps its last value, as a map does.
        let text: ContentBlock =
            serde_json::from_str(r#"{"type":"text","x":1,"text":"t","x":2}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&text).unwrap(),
            r#"{"type":"text","text":"t","x":2}"#
        );
        for (bad, says) in [
            (
                r#"{"type":"text","text":"a","text":"b"}"#,
                "duplicate field `text`",
            ),
            (
                r#"{"type":"tool_use","id":"c1","name":"n"}"#,
                "missing field `input`",
            ),
            (
                r#"{"type":"tool_result","content":[]}"#,
                "missing field `toolUseId`",
            ),
            (
                r#"{"type":"image","data":"AAAA"}"#,
                "missing field `mimeType`",
            ),
        ] {
            let err = serde_json::from_str::<ContentBlock>(bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn empty_means_empty_text_only() {
        assert!(ContentBlock::text("").is_empty());
        assert!(!ContentBlock::text(" ").is_empty());
        assert_eq!(
            plain_text(&[ContentBlock::text("a"), ContentBlock::text("b")]),
            "ab"
        );
    }
}
