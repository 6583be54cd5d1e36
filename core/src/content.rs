//! Content blocks: the unit of every prompt, message and assistant output.
//!
//! The wire form is the published one: an object tagged by `type`
//! (`text`, `image`, `tool_use`, `tool_result`). Decoding is lossless: fields
//! this version does not know are kept in `extra` and written back, and a block
//! of an unknown `type` is kept whole as [`ContentBlock::Other`], so a log
//! written by a newer host still replays and re-exports byte-for-byte
//! equivalent JSON.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextBlock {
    /// The text.
    pub text: String,
    /// Unknown fields, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"type":"image","mimeType":...,"data":...}`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let body = match self {
            ContentBlock::Text(block) => serde_json::to_value(block),
            ContentBlock::Image(block) => serde_json::to_value(block),
            ContentBlock::ToolUse(block) => serde_json::to_value(block),
            ContentBlock::ToolResult(block) => serde_json::to_value(block),
            ContentBlock::Other(map) => return map.serialize(serializer),
        }
        .map_err(serde::ser::Error::custom)?;
        let Value::Object(fields) = body else {
            return Err(serde::ser::Error::custom("content block must be an object"));
        };
        let mut tagged = Map::with_capacity(fields.len() + 1);
        if let Some(name) = self.type_name() {
            tagged.insert("type".to_owned(), Value::String(name.to_owned()));
        }
        tagged.extend(fields);
        tagged.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut map = Map::deserialize(deserializer)?;
        let kind = match map.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            Some(_) => return Err(D::Error::custom("content block `type` must be a string")),
            None => return Err(D::Error::custom("content block without `type`")),
        };
        let known = matches!(kind.as_str(), "text" | "image" | "tool_use" | "tool_result");
        if !known {
            return Ok(ContentBlock::Other(map));
        }
        map.remove("type");
        let body = Value::Object(map);
        let block = match kind.as_str() {
            "text" => serde_json::from_value(body).map(ContentBlock::Text),
            "image" => serde_json::from_value(body).map(ContentBlock::Image),
            "tool_use" => serde_json::from_value(body).map(ContentBlock::ToolUse),
            _ => serde_json::from_value(body).map(ContentBlock::ToolResult),
        };
        block.map_err(|err| D::Error::custom(format!("malformed {kind} block: {err}")))
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
    fn empty_means_empty_text_only() {
        assert!(ContentBlock::text("").is_empty());
        assert!(!ContentBlock::text(" ").is_empty());
        assert_eq!(
            plain_text(&[ContentBlock::text("a"), ContentBlock::text("b")]),
            "ab"
        );
    }
}
