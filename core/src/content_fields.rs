//! Decoding a known content block's own fields (everything after its
//! `type`) in one pass.
//!
//! Each block keeps the fields this version does not know in `extra`. With
//! serde's `#[serde(flatten)]` that costs a buffer of every field of every
//! block, each decoded twice; here each known key goes straight into its
//! field and every other key into `extra`, in the order read. The inputs
//! accepted and refused are the derived form's: a repeated known key, a
//! missing required one, or a value of the wrong type is an error; a
//! repeated unknown key keeps its last value.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Error, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::{ContentBlock, ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock};

/// A block whose fields [`FieldsVisitor`] reads.
trait BlockFields: Sized {
    /// What the visitor expects, for its error messages.
    const EXPECTING: &'static str;
    /// The known fields read so far.
    type Partial: Default;
    /// Reads `key`'s value into `partial` when `key` is one of the block's
    /// own fields, and says whether it was.
    fn read_known<'de, A: MapAccess<'de>>(
        partial: &mut Self::Partial,
        key: &str,
        map: &mut A,
    ) -> Result<bool, A::Error>;
    /// The block, or the first required field that never came.
    fn finish<E: Error>(partial: Self::Partial, extra: Map<String, Value>) -> Result<Self, E>;
}

/// Reads a block's fields from a map.
struct FieldsVisitor<B>(PhantomData<B>);

impl<'de, B: BlockFields> Visitor<'de> for FieldsVisitor<B> {
    type Value = B;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(B::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<B, A::Error> {
        let mut partial = B::Partial::default();
        let mut extra = Map::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if !B::read_known(&mut partial, &key, &mut map)? {
                let value = map.next_value::<Value>()?;
                extra.insert(key.into_owned(), value);
            }
        }
        B::finish(partial, extra)
    }
}

/// A map key, borrowed from the input whenever the input allows (serde's
/// own `Cow<str>` always copies), so a known key costs no allocation.
pub(super) struct Key<'de>(pub(super) Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Reads a [`Key`].
struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a string key")
    }

    fn visit_borrowed_str<E: Error>(self, key: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(key)))
    }

    fn visit_str<E: Error>(self, key: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key.to_owned())))
    }

    fn visit_string<E: Error>(self, key: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key)))
    }

    /// A key as bytes (a binary format's name): UTF-8, or refused.
    fn visit_borrowed_bytes<E: Error>(self, key: &'de [u8]) -> Result<Key<'de>, E> {
        std::str::from_utf8(key)
            .map(|key| Key(Cow::Borrowed(key)))
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Bytes(key), &self))
    }

    fn visit_bytes<E: Error>(self, key: &[u8]) -> Result<Key<'de>, E> {
        std::str::from_utf8(key)
            .map(|key| Key(Cow::Owned(key.to_owned())))
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Bytes(key), &self))
    }
}

/// Reads the next value into `slot`, refusing a second occurrence of `key`.
fn read_once<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    slot: &mut Option<T>,
    key: &'static str,
    map: &mut A,
) -> Result<bool, A::Error> {
    if slot.is_some() {
        return Err(A::Error::duplicate_field(key));
    }
    *slot = Some(map.next_value()?);
    Ok(true)
}

/// `slot`'s value, or the error that names the missing `key`.
fn required<T, E: Error>(slot: Option<T>, key: &'static str) -> Result<T, E> {
    slot.ok_or_else(|| E::missing_field(key))
}

/// Implements `Deserialize` through [`FieldsVisitor`].
macro_rules! deserialize_through_fields {
    ($($block:ty),*) => {$(
        impl<'de> Deserialize<'de> for $block {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_map(FieldsVisitor::<$block>(PhantomData))
            }
        }
    )*};
}

deserialize_through_fields!(TextBlock, ImageBlock, ToolUseBlock, ToolResultBlock);

impl BlockFields for TextBlock {
    const EXPECTING: &'static str = "a text block";
    type Partial = Option<String>;

    fn read_known<'de, A: MapAccess<'de>>(
        text: &mut Option<String>,
        key: &str,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match key {
            "text" => read_once(text, "text", map),
            _ => Ok(false),
        }
    }

    fn finish<E: Error>(text: Option<String>, extra: Map<String, Value>) -> Result<Self, E> {
        Ok(TextBlock {
            text: required(text, "text")?,
            extra,
        })
    }
}

/// An image block's known fields, as read.
#[derive(Default)]
struct ImagePartial {
    mime_type: Option<String>,
    data: Option<Option<String>>,
    attachment: Option<Option<String>>,
}

impl BlockFields for ImageBlock {
    const EXPECTING: &'static str = "an image block";
    type Partial = ImagePartial;

    fn read_known<'de, A: MapAccess<'de>>(
        partial: &mut ImagePartial,
        key: &str,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match key {
            "mimeType" => read_once(&mut partial.mime_type, "mimeType", map),
            "data" => read_once(&mut partial.data, "data", map),
            "attachment" => read_once(&mut partial.attachment, "attachment", map),
            _ => Ok(false),
        }
    }

    fn finish<E: Error>(partial: ImagePartial, extra: Map<String, Value>) -> Result<Self, E> {
        Ok(ImageBlock {
            mime_type: required(partial.mime_type, "mimeType")?,
            data: partial.data.flatten(),
            attachment: partial.attachment.flatten(),
            extra,
        })
    }
}

/// A tool call's known fields, as read.
#[derive(Default)]
struct ToolUsePartial {
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
}

impl BlockFields for ToolUseBlock {
    const EXPECTING: &'static str = "a tool_use block";
    type Partial = ToolUsePartial;

    fn read_known<'de, A: MapAccess<'de>>(
        partial: &mut ToolUsePartial,
        key: &str,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match key {
            "id" => read_once(&mut partial.id, "id", map),
            "name" => read_once(&mut partial.name, "name", map),
            "input" => read_once(&mut partial.input, "input", map),
            _ => Ok(false),
        }
    }

    fn finish<E: Error>(partial: ToolUsePartial, extra: Map<String, Value>) -> Result<Self, E> {
        Ok(ToolUseBlock {
            id: required(partial.id, "id")?,
            name: required(partial.name, "name")?,
            input: required(partial.input, "input")?,
            extra,
        })
    }
}

/// A tool result's known fields, as read.
#[derive(Default)]
struct ToolResultPartial {
    tool_use_id: Option<String>,
    content: Option<Vec<ContentBlock>>,
    is_error: Option<bool>,
}

impl BlockFields for ToolResultBlock {
    const EXPECTING: &'static str = "a tool_result block";
    type Partial = ToolResultPartial;

    fn read_known<'de, A: MapAccess<'de>>(
        partial: &mut ToolResultPartial,
        key: &str,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match key {
            "toolUseId" => read_once(&mut partial.tool_use_id, "toolUseId", map),
            "content" => read_once(&mut partial.content, "content", map),
            "isError" => read_once(&mut partial.is_error, "isError", map),
            _ => Ok(false),
        }
    }

    fn finish<E: Error>(partial: ToolResultPartial, extra: Map<String, Value>) -> Result<Self, E> {
        Ok(ToolResultBlock {
            tool_use_id: required(partial.tool_use_id, "toolUseId")?,
            content: required(partial.content, "content")?,
            is_error: partial.is_error.unwrap_or(false),
            extra,
        })
    }
}
