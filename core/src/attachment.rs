//! Attachments: the bytes of an image part, stored once in the log's blob
//! store and referred to from messages by content address.
//!
//! This module owns the pure rules: the address ([`AttachmentId`], SHA-256
//! of the bytes, written `sha256:<64 lowercase hex>`), what kind of image a
//! byte string is ([`ImageKind::sniff`], by magic number, never by what the
//! sender declares), and the size caps ([`AttachmentLimits`]). Storing and
//! reading the bytes is the log's job; admitting a prompt's images is the
//! runtime's.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::content::ContentBlock;
use crate::contracts::MessageSource;
use crate::event::Event;

/// The content address of an attachment: the SHA-256 of its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttachmentId([u8; 32]);

/// The text before the hex digest of every [`AttachmentId`].
pub const ATTACHMENT_SCHEME: &str = "sha256:";

impl AttachmentId {
    /// The address of `bytes`.
    #[must_use]
    pub fn of(bytes: &[u8]) -> Self {
        AttachmentId(Sha256::digest(bytes).into())
    }

    /// The raw digest (the blob store's key).
    #[must_use]
    pub fn digest(&self) -> &[u8; 32] {
        &self.0
    }

    /// The id whose digest is `digest`.
    #[must_use]
    pub fn from_digest(digest: [u8; 32]) -> Self {
        AttachmentId(digest)
    }
}

impl fmt::Display for AttachmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut digits = [0u8; 64];
        // Exactly twice the digest's length: the encode cannot fail.
        let _ = hex::encode_to_slice(self.0, &mut digits);
        f.write_str(ATTACHMENT_SCHEME)?;
        // ASCII by construction.
        f.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for AttachmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a text is not an [`AttachmentId`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an attachment id is `sha256:` and 64 lowercase hex digits, not {0:?}")]
pub struct BadAttachmentId(pub String);

impl FromStr for AttachmentId {
    type Err = BadAttachmentId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadAttachmentId(text.chars().take(80).collect());
        let hex = text.strip_prefix(ATTACHMENT_SCHEME).ok_or_else(bad)?;
        crate::lower_hex::decode::<32>(hex.as_bytes())
            .map(AttachmentId)
            .ok_or_else(bad)
    }
}

impl Serialize for AttachmentId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AttachmentId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// An image format the runtime admits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// `image/png`
    Png,
    /// `image/jpeg`
    Jpeg,
    /// `image/gif`
    Gif,
    /// `image/webp`
    Webp,
}

impl ImageKind {
    /// Every admitted kind.
    pub const ALL: [ImageKind; 4] = [
        ImageKind::Png,
        ImageKind::Jpeg,
        ImageKind::Gif,
        ImageKind::Webp,
    ];

    /// The kind `bytes` are, by their magic number; `None` for anything
    /// else (including a truncated header).
    #[must_use]
    pub fn sniff(bytes: &[u8]) -> Option<Self> {
        const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";
        const JPEG: &[u8] = b"\xff\xd8\xff";
        if bytes.starts_with(PNG) {
            Some(ImageKind::Png)
        } else if bytes.starts_with(JPEG) {
            Some(ImageKind::Jpeg)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Some(ImageKind::Gif)
        } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
            Some(ImageKind::Webp)
        } else {
            None
        }
    }

    /// Its media type.
    #[must_use]
    pub fn mime_type(self) -> &'static str {
        match self {
            ImageKind::Png => "image/png",
            ImageKind::Jpeg => "image/jpeg",
            ImageKind::Gif => "image/gif",
            ImageKind::Webp => "image/webp",
        }
    }

    /// The kind a media type names, exactly (`image/png`, not `IMAGE/PNG`
    /// or `image/jpg`): a declared type is a promise about the bytes, and
    /// a loose match would let two spellings of one image digest apart.
    #[must_use]
    pub fn from_mime_type(mime_type: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.mime_type() == mime_type)
    }
}

/// The largest attachment there can be, in bytes, whatever
/// [`AttachmentLimits`] a host sets: so every export's attachment lines
/// have a bound an import can read to.
pub const MAX_ATTACHMENT_BYTES: usize = 32 * 1024 * 1024;

/// The size caps of a prompt's images, in decoded bytes; `per_image` is at
/// most [`MAX_ATTACHMENT_BYTES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachmentLimits {
    /// The largest one image may be.
    pub per_image: usize,
    /// The largest all images of one request may be together.
    pub per_request: usize,
}

impl AttachmentLimits {
    /// 5 MiB per image, 20 MiB per request: the caps the large hosted
    /// models put on one image and on one request's images.
    pub const DEFAULT: AttachmentLimits = AttachmentLimits {
        per_image: 5 * 1024 * 1024,
        per_request: 20 * 1024 * 1024,
    };
}

impl Default for AttachmentLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The bytes of one attachment and their address, ready for the blob store.
#[derive(Clone, PartialEq, Eq)]
pub struct Attachment {
    /// `AttachmentId::of(&bytes)`.
    id: AttachmentId,
    bytes: Vec<u8>,
}

impl Attachment {
    /// `bytes` under their address.
    #[must_use]
    pub fn new(bytes: Vec<u8>) -> Self {
        Attachment {
            id: AttachmentId::of(&bytes),
            bytes,
        }
    }

    /// The address.
    #[must_use]
    pub fn id(&self) -> AttachmentId {
        self.id
    }

    /// The bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes, owned.
    #[must_use]
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl fmt::Debug for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attachment")
            .field("id", &self.id)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// The attachments `event`'s record needs in the blob store: the image
/// parts of a prompt (a browser-sourced `MessageAccepted`), the only
/// content the runtime admits through the blob store. Other image parts
/// are content like any other: their `attachment` field is not a promise
/// the blob store made. Each id once, in content order.
#[must_use]
pub fn stored_attachments(event: &Event) -> Vec<AttachmentId> {
    let Event::MessageAccepted {
        source: MessageSource::Browser { .. },
        content,
        ..
    } = event
    else {
        return Vec::new();
    };
    let mut ids: Vec<AttachmentId> = Vec::new();
    for block in content {
        if let ContentBlock::Image(image) = block {
            let id = image
                .attachment
                .as_deref()
                .and_then(|text| text.parse().ok());
            if let Some(id) = id.filter(|id| !ids.contains(id)) {
                ids.push(id);
            }
        }
    }
    ids
}

#[cfg(test)]
#[path = "attachment_tests.rs"]
mod tests;
