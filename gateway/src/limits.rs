//! Input and time bounds: the body size, the JSON nesting depth, and the
//! time a request may take. `BoundedJson` is the only way a handler reads
//! a JSON body, so every body passes the size and depth checks before serde
//! sees it; `time_limit` wraps every route but the event stream.

use std::time::Duration;

use axum::extract::{FromRequest, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::error::GatewayError;

/// The gateway's bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body, in bytes, except `prompt`'s.
    pub body_bytes: usize,
    /// The largest `prompt` body, in bytes: it carries images as base64, so
    /// it must hold the runtime's per-request image cap (4/3 of it) and a
    /// prompt's text.
    pub prompt_body_bytes: usize,
    /// The deepest JSON nesting of arrays and objects.
    pub json_depth: usize,
    /// The longest a request (body included) may take.
    pub request_timeout: Duration,
    /// The most records one transcript page holds.
    pub page_records: usize,
}

impl Default for Limits {
    /// 2 MiB bodies; 30 MiB for `prompt` (20 MiB of images as base64 is
    /// under 27 MiB, and a prompt's text is at most 1 MiB); depth 32, 30 s,
    /// 1,000 records a page.
    fn default() -> Limits {
        Limits {
            body_bytes: 2 * 1024 * 1024,
            prompt_body_bytes: 30 * 1024 * 1024,
            json_depth: 32,
            request_timeout: Duration::from_secs(30),
            page_records: 1_000,
        }
    }
}

/// A route's own body cap, in bytes, in place of [`Limits::body_bytes`]
/// (a request extension the route's layer sets).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyCap(pub(crate) usize);

/// A JSON body that passed the gateway's bounds: `Content-Type:
/// application/json`, at most [`Limits::body_bytes`] (or the route's
/// [`BodyCap`]), nesting at most
/// [`Limits::json_depth`], and the shape of `T` (unknown fields refused
/// where `T` says so).
pub(crate) struct BoundedJson<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<std::sync::Arc<crate::server::Gateway>> for BoundedJson<T> {
    type Rejection = GatewayError;

    async fn from_request(
        request: Request,
        gateway: &std::sync::Arc<crate::server::Gateway>,
    ) -> Result<Self, GatewayError> {
        let limits = &gateway.limits;
        let body_bytes = request
            .extensions()
            .get::<BodyCap>()
            .map_or(limits.body_bytes, |cap| cap.0);
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(GatewayError::bad_request(
                "the body must be JSON (Content-Type: application/json)",
            ));
        }
        let too_large = GatewayError::PayloadTooLarge { limit: body_bytes };
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|length| length > body_bytes as u64) {
            return Err(too_large);
        }
        let bytes = axum::body::to_bytes(request.into_body(), body_bytes)
            .await
            .map_err(|err| {
                let over = std::error::Error::source(&err)
                    .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
                if over {
                    too_large
                } else {
                    GatewayError::bad_request(format!("reading the body failed: {err}"))
                }
            })?;
        check_depth(&bytes, limits.json_depth)?;
        serde_json::from_slice(&bytes)
            .map(BoundedJson)
            .map_err(|err| GatewayError::bad_request(format!("malformed JSON body: {err}")))
    }
}

/// Refuses JSON nested deeper than `limit` arrays and objects, counting
/// brackets outside strings (a scan, so a deep body costs no recursion).
pub(crate) fn check_depth(bytes: &[u8], limit: usize) -> Result<(), GatewayError> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &byte in bytes {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Err(GatewayError::bad_request(format!(
                        "the JSON body nests deeper than {limit} levels"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The middleware: a request that takes longer than `limit` (reading its
/// body included) is answered `gateway/timeout`. What it already made
/// durable stays durable: a `prompt` retried with its request id gets its
/// receipt.
pub(crate) async fn time_limit(
    State(limit): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => GatewayError::Timeout {
            limit_ms: limit.as_millis(),
        }
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_brackets_outside_strings_only() {
        assert!(check_depth(br#"{"a":[1,{"b":2}]}"#, 3).is_ok());
        assert!(check_depth(br#"{"a":[1,{"b":2}]}"#, 2).is_err());
        assert!(check_depth(br#"{"a":"[[[[[[\"[[[["}"#, 1).is_ok());
        let deep = "[".repeat(10_000);
        assert!(check_depth(deep.as_bytes(), 32).is_err());
    }
}
