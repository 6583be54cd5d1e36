//! Attachments: the bytes of an image part, stored once in the log's blob
//! store and referred to from messages by content address.
//!
//! This module owns the pure rules: the address ([`AttachmentId`], SHA-256
//! of the bytes, written `sha256:<64 lowercase hex>`), what kind of image a
//! byte string is ([`ImageKind::sniff`], by magic number, never by what the
//! sender declares), whether it is one whole image of that kind
//! ([`inspect`]: decoded by the `image` crate, under [`MAX_IMAGE_SIDE`]),
//! and the size caps ([`AttachmentLimits`]). Storing and reading the bytes
//! is the log's job; admitting a prompt's images is the runtime's.

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

/// The widest and tallest an admitted image may be, in pixels: past the
/// 8000 px the large hosted models take, and a bound on what decoding one
/// can allocate.
pub const MAX_IMAGE_SIDE: u32 = 8192;

/// The most pixels an admitted image may have (32 megapixels): what
/// bounds decoding one, whatever its shape within [`MAX_IMAGE_SIDE`].
pub const MAX_IMAGE_PIXELS: u64 = 32 * 1024 * 1024;

/// The most memory decoding one image may allocate: [`MAX_IMAGE_PIXELS`]
/// at eight bytes each (16-bit RGBA, the widest of the four formats), and a
/// little more.
const MAX_DECODE_BYTES: u64 = 8 * MAX_IMAGE_PIXELS + (1 << 20);

/// What [`inspect`] found an image to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    /// Its format, by its bytes.
    pub kind: ImageKind,
    /// Its width in pixels.
    pub width: u32,
    /// Its height in pixels.
    pub height: u32,
}

/// Why bytes are not one admissible image.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageFault {
    /// No admitted format's magic number.
    #[error("the bytes are not a PNG, JPEG, GIF or WebP image")]
    NotAnImage,
    /// Wider or taller than [`MAX_IMAGE_SIDE`], or more pixels than
    /// [`MAX_IMAGE_PIXELS`].
    #[error("the {kind} image is {width}x{height} pixels, over the caps of {MAX_IMAGE_SIDE} pixels a side and {MAX_IMAGE_PIXELS} in all", kind = kind.mime_type())]
    TooLarge {
        /// Its format.
        kind: ImageKind,
        /// Its width.
        width: u32,
        /// Its height.
        height: u32,
    },
    /// The format's magic number, but not a whole image of it: cut short,
    /// or damaged. The decoder's reason, which quotes no pixel data.
    #[error("the bytes start as {kind} but are not a whole image of it: {reason}", kind = kind.mime_type())]
    Malformed {
        /// The format its magic number names.
        kind: ImageKind,
        /// What the decoder found wrong.
        reason: String,
    },
}

/// Whether `bytes` are one whole image of an admitted kind within
/// [`MAX_IMAGE_SIDE`]: the format by its magic number, the dimensions from
/// its header, then a full decode (bounded by the dimensions and
/// what that many pixels take), so a truncated or damaged image is refused.
///
/// # Errors
/// The [`ImageFault`].
pub fn inspect(bytes: &[u8]) -> Result<ImageInfo, ImageFault> {
    let kind = ImageKind::sniff(bytes).ok_or(ImageFault::NotAnImage)?;
    let malformed = |err: image::ImageError| ImageFault::Malformed {
        kind,
        reason: err.to_string(),
    };
    let format = match kind {
        ImageKind::Png => image::ImageFormat::Png,
        ImageKind::Jpeg => image::ImageFormat::Jpeg,
        ImageKind::Gif => image::ImageFormat::Gif,
        ImageKind::Webp => image::ImageFormat::WebP,
    };
    let reader = || {
        let mut reader = image::ImageReader::with_format(std::io::Cursor::new(bytes), format);
        let mut limits = image::Limits::default();
        limits.max_image_width = Some(MAX_IMAGE_SIDE);
        limits.max_image_height = Some(MAX_IMAGE_SIDE);
        limits.max_alloc = Some(MAX_DECODE_BYTES);
        reader.limits(limits);
        reader
    };
    let (width, height) = image::ImageReader::with_format(std::io::Cursor::new(bytes), format)
        .into_dimensions()
        .map_err(malformed)?;
    if width > MAX_IMAGE_SIDE
        || height > MAX_IMAGE_SIDE
        || u64::from(width) * u64::from(height) > MAX_IMAGE_PIXELS
    {
        return Err(ImageFault::TooLarge {
            kind,
            width,
            height,
        });
    }
    if width == 0 || height == 0 {
        return Err(ImageFault::Malformed {
            kind,
            reason: format!("it is {width}x{height} pixels"),
        });
    }
    // The JPEG and GIF decoders fill a cut image in rather than refuse it:
    // each format's end is checked here.
    if kind == ImageKind::Jpeg && !jpeg_ends(bytes) {
        return Err(ImageFault::Malformed {
            kind,
            reason: "its scan data has no end-of-image marker: it was cut short".into(),
        });
    }
    if kind == ImageKind::Gif && bytes.last() != Some(&GIF_TRAILER) {
        return Err(ImageFault::Malformed {
            kind,
            reason: "it does not end with the GIF trailer: it was cut short".into(),
        });
    }
    reader().decode().map_err(malformed)?;
    Ok(ImageInfo {
        kind,
        width,
        height,
    })
}

/// The byte every GIF ends with.
const GIF_TRAILER: u8 = 0x3b;

/// Whether a JPEG's end-of-image marker (`FF D9`) follows the image's own
/// first scan: its segments are walked by their lengths from the start
/// (so a thumbnail inside an `APP1` segment, scan and end included, is
/// skipped), then the scan data is searched. Inside a scan every `FF` data
/// byte is stuffed (`FF 00`), and no other marker is `FF D9`, so the pair
/// found there is the image's end.
fn jpeg_ends(bytes: &[u8]) -> bool {
    if !bytes.starts_with(&[0xff, 0xd8]) {
        return false;
    }
    let mut at = 2;
    loop {
        if bytes.get(at) != Some(&0xff) {
            return false;
        }
        // Fill bytes may pad a marker.
        let mut code_at = at + 1;
        while bytes.get(code_at) == Some(&0xff) {
            code_at += 1;
        }
        let Some(&code) = bytes.get(code_at) else {
            return false;
        };
        let after = code_at + 1;
        match code {
            // The end before any scan.
            0xd9 => return false,
            // Markers with no length.
            0x01 | 0xd0..=0xd7 => {
                at = after;
                continue;
            }
            _ => {}
        }
        let Some(length) = bytes
            .get(after..after + 2)
            .map(|pair| usize::from(u16::from_be_bytes([pair[0], pair[1]])))
        else {
            return false;
        };
        let end = after + length;
        if length < 2 || end > bytes.len() {
            return false;
        }
        if code == 0xda {
            return bytes[end..].windows(2).any(|pair| pair == [0xff, 0xd9]);
        }
        at = end;
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
