//! `GET /v1/attachments/{id}`: the stored bytes of one image a prompt
//! carried, by its content address (`sha256:<hex>`), to a caller that
//! passed the gateway's token check like every other.
//!
//! The bytes are served with the type sniffed from them (never a type a
//! client declared), `nosniff`, and as immutable: an address names one
//! content forever.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use subagent_core::AttachmentId;

use super::Segments;
use crate::error::GatewayError;
use crate::server::Gateway;

/// The attachment's bytes, or `gateway/not-found` when none is stored
/// under `id` (`gateway/bad-request` when `id` is not an address).
pub(crate) async fn get(
    State(gateway): State<Arc<Gateway>>,
    Segments(id): Segments<String>,
) -> Result<Response, GatewayError> {
    let id: AttachmentId =
        id.parse()
            .map_err(|err: subagent_core::attachment::BadAttachmentId| {
                GatewayError::bad_request(err.to_string())
            })?;
    let runtime = gateway.runtime()?;
    let found = tokio::task::spawn_blocking(move || runtime.attachment(&id))
        .await
        .map_err(|err| GatewayError::Runtime(subagent_core::SubagentError::internal_from(err)))??;
    let Some((kind, bytes)) = found else {
        return Err(GatewayError::NotFound(format!("attachment {id}")));
    };
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(kind.mime_type()),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=31536000, immutable"),
    );
    Ok(response)
}
