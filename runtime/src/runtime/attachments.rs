//! Attachments at the runtime's edges: admitting a prompt's image parts
//! into the blob store ([`admit_images`]), the caps they face, the
//! child-route check, and giving an agent its images' bytes back
//! ([`inline_attachments`]).
//!
//! An admitted image part is recorded as `{type: image, mimeType,
//! attachment: "sha256:…"}`: the event names the bytes, and the bytes go
//! into the blob store in the same atomic write as the event (the engine's
//! `commit_with`), so neither is durable without the other.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use subagent_core::content::ImageBlock;
use subagent_core::{
    Attachment, AttachmentId, AttachmentLimits, ContentBlock, ImageKind, SessionId, SubagentError,
    MAX_ATTACHMENT_BYTES,
};
use subagent_store::EventLog;

use crate::agent::InputRoute;

use super::{lock, SubagentRuntime};

/// A prompt's content as it will be recorded, and the attachments its image
/// parts were admitted as (new bytes only; each id once).
#[derive(Debug)]
pub(crate) struct AdmittedContent {
    pub(crate) content: Vec<ContentBlock>,
    pub(crate) attachments: Vec<Attachment>,
}

impl AdmittedContent {
    /// Whether any part is an image.
    pub(crate) fn has_images(&self) -> bool {
        self.content
            .iter()
            .any(|block| matches!(block, ContentBlock::Image(_)))
    }
}

/// The most base64 characters that decode to at most `bytes` bytes.
fn encoded_len(bytes: usize) -> usize {
    bytes.div_ceil(3).saturating_mul(4)
}

/// Admits every image part of `content`: inline base64 (`data`) is decoded,
/// capped, sniffed against its declared `mimeType` and replaced by its
/// attachment id; a part that names an `attachment` already stored is
/// checked the same way against the stored bytes. Other parts pass
/// unchanged. Reads the blob store; writes nothing.
///
/// # Errors
/// `subagent/attachment-invalid` naming the part: neither or both of `data`
/// and `attachment`, bad base64, an image over `limits.per_image` or images
/// together over `limits.per_request`, bytes that are not PNG, JPEG, GIF or
/// WebP, a declared type other than the sniffed one, a malformed or unknown
/// attachment id. `gateway/internal` when the blob store cannot be read.
pub(crate) fn admit_images(
    content: Vec<ContentBlock>,
    limits: AttachmentLimits,
    log: &dyn EventLog,
) -> Result<AdmittedContent, SubagentError> {
    let mut admitted = AdmittedContent {
        content: Vec::with_capacity(content.len()),
        attachments: Vec::new(),
    };
    let mut total = 0usize;
    for (index, block) in content.into_iter().enumerate() {
        let ContentBlock::Image(image) = block else {
            admitted.content.push(block);
            continue;
        };
        let invalid =
            |why: String| SubagentError::AttachmentInvalid(format!("part {index}: {why}"));
        let ImageBlock {
            mime_type,
            data,
            attachment,
            extra,
        } = image;
        let (id, size, fresh) = match (data, attachment) {
            (Some(data), None) => {
                if data.len() > encoded_len(limits.per_image) {
                    return Err(invalid(format!(
                        "the image is over the {} byte cap",
                        limits.per_image
                    )));
                }
                let bytes = STANDARD
                    .decode(data.as_bytes())
                    .map_err(|err| invalid(format!("`data` is not base64: {err}")))?;
                check_image(&bytes, &mime_type, limits).map_err(invalid)?;
                let fresh = Attachment::new(bytes);
                (fresh.id(), fresh.bytes().len(), Some(fresh))
            }
            (None, Some(reference)) => {
                let id: AttachmentId = reference.parse().map_err(
                    |err: subagent_core::attachment::BadAttachmentId| invalid(err.to_string()),
                )?;
                let bytes = log
                    .attachment(&id)
                    .map_err(SubagentError::internal_from)?
                    .ok_or_else(|| invalid(format!("no attachment {id} is stored")))?;
                check_image(&bytes, &mime_type, limits).map_err(invalid)?;
                (id, bytes.len(), None)
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "an image carries `data` or names an `attachment`, not both".into(),
                ))
            }
            (None, None) => {
                return Err(invalid(
                    "an image carries `data` or names an `attachment`".into(),
                ))
            }
        };
        total = total.saturating_add(size);
        if total > limits.per_request {
            return Err(SubagentError::AttachmentInvalid(format!(
                "the images together are over the {} byte cap of one request",
                limits.per_request
            )));
        }
        if let Some(fresh) = fresh {
            if !admitted.attachments.iter().any(|seen| seen.id() == id) {
                admitted.attachments.push(fresh);
            }
        }
        admitted.content.push(ContentBlock::Image(ImageBlock {
            mime_type,
            data: None,
            attachment: Some(id.to_string()),
            extra,
        }));
    }
    Ok(admitted)
}

/// Whether `bytes` are one whole image of the declared type within the
/// caps (bytes, then [`subagent_core::attachment::inspect`]'s pixels and
/// structure).
fn check_image(bytes: &[u8], declared: &str, limits: AttachmentLimits) -> Result<(), String> {
    if bytes.len() > limits.per_image {
        return Err(format!(
            "the image is {} bytes, over the {} byte cap",
            bytes.len(),
            limits.per_image
        ));
    }
    let image = subagent_core::attachment::inspect(bytes).map_err(|fault| fault.to_string())?;
    if ImageKind::from_mime_type(declared) != Some(image.kind) {
        return Err(format!(
            "declared {declared:?}, but the bytes are {}",
            image.kind.mime_type()
        ));
    }
    Ok(())
}

/// Gives every image part of `content` that names an attachment its bytes
/// back as base64 `data` (keeping the `attachment` id), so an agent reads
/// images the way a prompt's author wrote them.
///
/// # Errors
/// `gateway/internal` when a named attachment is missing or damaged: a
/// recorded message refers to it, so the blob store lost what it promised.
pub(crate) fn inline_attachments(
    content: &mut [ContentBlock],
    log: &dyn EventLog,
) -> Result<(), SubagentError> {
    for block in content {
        let ContentBlock::Image(image) = block else {
            continue;
        };
        let (None, Some(reference)) = (&image.data, &image.attachment) else {
            continue;
        };
        let id: AttachmentId = reference.parse().map_err(SubagentError::internal_from)?;
        let bytes = log
            .attachment(&id)
            .map_err(SubagentError::internal_from)?
            .ok_or_else(|| {
                SubagentError::internal(format!(
                    "a recorded message names attachment {id}, which the blob store does not hold"
                ))
            })?;
        image.data = Some(STANDARD.encode(bytes));
    }
    Ok(())
}

impl SubagentRuntime {
    /// The caps a prompt's images face.
    #[must_use]
    pub fn attachment_limits(&self) -> AttachmentLimits {
        *lock(&self.inner.deployment.attachments)
    }

    /// Replaces the caps later prompts' images face.
    ///
    /// # Errors
    /// `gateway/bad-request` for a per-image cap over
    /// [`MAX_ATTACHMENT_BYTES`] (the caps are unchanged); `subagent/closed`.
    pub fn set_attachment_limits(&self, limits: AttachmentLimits) -> Result<(), SubagentError> {
        self.ensure_open()?;
        if limits.per_image > MAX_ATTACHMENT_BYTES {
            return Err(SubagentError::BadRequest(format!(
                "an image may be at most {MAX_ATTACHMENT_BYTES} bytes, not {}",
                limits.per_image
            )));
        }
        *lock(&self.inner.deployment.attachments) = limits;
        Ok(())
    }

    /// The stored bytes of attachment `id` and their kind, `None` when the
    /// blob store has no such attachment.
    ///
    /// # Errors
    /// `gateway/internal` when the blob store cannot be read or the bytes
    /// no longer hash to `id`.
    pub fn attachment(
        &self,
        id: &AttachmentId,
    ) -> Result<Option<(ImageKind, Vec<u8>)>, SubagentError> {
        let Some(bytes) = self
            .log()
            .attachment(id)
            .map_err(SubagentError::internal_from)?
        else {
            return Ok(None);
        };
        let kind = ImageKind::sniff(&bytes).ok_or_else(|| {
            SubagentError::internal(format!("the stored attachment {id} is not an image"))
        })?;
        Ok(Some((kind, bytes)))
    }

    /// Refuses image parts for `child` when its agent host says the child's
    /// route does not take image input. A child the catalog does not know
    /// is left to the prompt's own routing rules.
    ///
    /// # Errors
    /// `subagent/attachment-invalid`.
    pub(crate) fn check_image_route(&self, child: SessionId) -> Result<(), SubagentError> {
        let state = self.inner.engine.state();
        let Some(record) = state.sessions.get(&child) else {
            return Ok(());
        };
        let options = record.agent_options.as_ref();
        let route = InputRoute {
            session: child,
            label: &record.label,
            provider: options.and_then(|options| options.provider.as_deref()),
            model: options.and_then(|options| options.model.as_deref()),
        };
        if self.inner.host.accepts_image_input(&route) {
            Ok(())
        } else {
            Err(SubagentError::AttachmentInvalid(format!(
                "{child}'s route{} does not accept image input",
                route
                    .model
                    .map(|model| format!(" (model {model})"))
                    .unwrap_or_default()
            )))
        }
    }
}

#[cfg(test)]
#[path = "attachments_tests.rs"]
mod tests;
