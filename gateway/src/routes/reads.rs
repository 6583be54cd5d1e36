//! Reads: `GET /v1/sessions/{session}/children` (the durable catalog),
//! `.../descendants` (the tree in stable pre-order), `.../transcript` (the
//! session's own events, a page at a time) and `GET /v1/state?at=N` (every
//! projection as of a log position, from `subagent-replay`); plus the
//! answers for an unknown route or method.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{Method, Uri};
use axum::Json;
use serde::{Deserialize, Serialize};
use subagent_core::{
    RecordedEvent, SessionId, StreamId, SubagentDescendantListEntry, SubagentError,
    SubagentListEntry,
};
use subagent_projections::Projections;
use subagent_replay::ReplayError;
use subagent_store::EventLogExt;

use super::{query, session_id, Segments};
use crate::error::GatewayError;
use crate::server::Gateway;

/// A parent's direct children, in parent event order.
pub(crate) async fn children(
    State(gateway): State<Arc<Gateway>>,
    Segments(session): Segments<String>,
) -> Result<Json<Vec<SubagentListEntry>>, GatewayError> {
    let session = known(&gateway, &session)?;
    Ok(Json(gateway.runtime()?.list_children(session).await?))
}

/// A session's whole subtree, in stable pre-order.
pub(crate) async fn descendants(
    State(gateway): State<Arc<Gateway>>,
    Segments(session): Segments<String>,
) -> Result<Json<Vec<SubagentDescendantListEntry>>, GatewayError> {
    let session = known(&gateway, &session)?;
    Ok(Json(gateway.runtime()?.list_descendants(session).await?))
}

/// `?after=V&limit=N` of a transcript page.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    /// The last stream version already read (0: from the start).
    #[serde(default)]
    after: u64,
    /// At most this many records, at least one (capped by the gateway's
    /// page limit).
    limit: Option<usize>,
}

/// One page of a session's events.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TranscriptPage {
    /// The records, in stream order, with their envelopes.
    records: Vec<RecordedEvent>,
    /// The `after` of the next page, when there may be one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<u64>,
}

/// A session's own events (its inbox, turns, transcript entries and
/// lifecycle), a page at a time.
pub(crate) async fn transcript(
    State(gateway): State<Arc<Gateway>>,
    Segments(session): Segments<String>,
    uri: Uri,
) -> Result<Json<TranscriptPage>, GatewayError> {
    let session = known(&gateway, &session)?;
    let page: PageQuery = query(&uri)?;
    if page.limit == Some(0) {
        return Err(GatewayError::bad_request(
            "limit must be at least 1: a page of no records reads nothing",
        ));
    }
    let limit = page
        .limit
        .unwrap_or(gateway.limits.page_records)
        .min(gateway.limits.page_records);
    let log = Arc::clone(gateway.runtime()?.log());
    let from = page.after.saturating_add(1);
    let records = tokio::task::spawn_blocking(move || {
        log.read_stream(StreamId::Session(session), from)
            .take(limit)
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(SubagentError::internal_from)?
    .map_err(SubagentError::internal_from)?;
    let next = (records.len() == limit).then(|| records.last().map(|r| r.version));
    Ok(Json(TranscriptPage {
        next: next.flatten(),
        records,
    }))
}

/// `?at=N` of a state read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateQuery {
    /// The log position (the head when absent).
    at: Option<u64>,
}

/// Every projection as of position `at`, folded from the log (replay:
/// nothing reruns).
pub(crate) async fn state_at(
    State(gateway): State<Arc<Gateway>>,
    uri: Uri,
) -> Result<Json<Projections>, GatewayError> {
    let StateQuery { at } = query(&uri)?;
    let log = Arc::clone(gateway.runtime()?.log());
    let state = tokio::task::spawn_blocking(move || subagent_replay::state_at(&*log, at))
        .await
        .map_err(SubagentError::internal_from)??;
    Ok(Json(state))
}

/// A session the log knows (`replay/unknown-session` otherwise).
fn known(gateway: &Gateway, segment: &str) -> Result<SessionId, GatewayError> {
    let session = session_id(segment)?;
    match gateway.runtime()?.root_of(session) {
        Some(_) => Ok(session),
        None => Err(ReplayError::UnknownSession(session).into()),
    }
}

/// The OpenAPI document of every route.
pub(crate) async fn openapi() -> Json<serde_json::Value> {
    Json(crate::openapi::document())
}

/// Any path that is not a route.
pub(crate) async fn no_route(uri: Uri) -> GatewayError {
    let path: String = uri.path().chars().take(200).collect();
    GatewayError::NotFound(path)
}

/// A route asked with a method it does not take.
pub(crate) async fn wrong_method(method: Method) -> GatewayError {
    GatewayError::MethodNotAllowed(method.to_string())
}
