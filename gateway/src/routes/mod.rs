//! The gateway's handlers, one file per group of methods, and the two
//! parsers they share: ids from a path and typed query strings, both
//! refused as `gateway/bad-request` in the gateway's JSON form.

pub(crate) mod attachments;
pub(crate) mod children;
pub(crate) mod console;
pub(crate) mod events;
pub(crate) mod history;
pub(crate) mod reads;
pub(crate) mod remote;
pub(crate) mod roots;
pub(crate) mod scrape;

use axum::http::Uri;
use serde::de::DeserializeOwned;
use subagent_core::SessionId;

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
