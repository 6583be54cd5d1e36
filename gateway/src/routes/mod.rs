//! The gateway's handlers, one file per group of methods, and the parsers
//! they share: a path's segments ([`Segments`]), ids from a segment and
//! typed query strings, each refused as `gateway/bad-request` in the
//! gateway's JSON form.

pub(crate) mod attachments;
pub(crate) mod children;
pub(crate) mod console;
pub(crate) mod events;
pub(crate) mod health;
pub(crate) mod history;
pub(crate) mod reads;
pub(crate) mod remote;
pub(crate) mod roots;
pub(crate) mod scrape;

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::Uri;
use serde::de::DeserializeOwned;
use subagent_core::{SessionId, SubagentError};

use crate::error::GatewayError;

/// The session id in a path segment.
pub(crate) fn session_id(segment: &str) -> Result<SessionId, GatewayError> {
    Ok(SessionId::parse(segment)?)
}

/// The query string of `uri` as `T`.
pub(crate) fn query<T: DeserializeOwned>(uri: &Uri) -> Result<T, GatewayError> {
    axum::extract::Query::<T>::try_from_uri(uri)
        .map(|query| query.0)
        .map_err(|rejection| GatewayError::bad_request(rejection.body_text()))
}

/// A route's path segments as `T`: axum's `Path`, whose refusal (a segment
/// that is not UTF-8 once percent-decoded, say) is plain text, answered
/// instead as `gateway/bad-request` in the gateway's JSON form. A refusal
/// axum counts as the server's own (a route without the segments its
/// handler reads) is `gateway/internal`.
pub(crate) struct Segments<T>(pub(crate) T);

impl<T, S> FromRequestParts<S> for Segments<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = GatewayError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(segments)) => Ok(Segments(segments)),
            Err(rejection) if rejection.status().is_server_error() => {
                Err(SubagentError::internal(rejection.body_text()).into())
            }
            Err(rejection) => Err(GatewayError::bad_request(rejection.body_text())),
        }
    }
}
