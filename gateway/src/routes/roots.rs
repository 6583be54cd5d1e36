//! Roots over HTTP: `GET /v1/roots` lists every host root of the log and
//! whether this server holds it, `POST /v1/roots` opens one, `POST
//! /v1/roots/{root}/reopen` takes an existing one back after a restart,
//! `DELETE /v1/roots/{root}` closes one. The gateway holds the handles of
//! the roots it opened; starts and disposals go through them.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use subagent_core::{AgentOptions, SessionId, SubagentError};

use super::{session_id, Segments};
use crate::error::GatewayError;
use crate::limits::BoundedJson;
use crate::server::Gateway;

/// `POST /v1/roots`'s body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct OpenRoot {
    label: String,
    #[serde(default)]
    agent_options: Option<AgentOptions>,
}

/// A root's identity.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RootOpened {
    session_id: SessionId,
}

/// Every host root of the log, in creation order.
pub(crate) async fn list(
    State(gateway): State<Arc<Gateway>>,
) -> Result<Json<Vec<subagent_runtime::RootEntry>>, GatewayError> {
    Ok(Json(gateway.runtime()?.roots().await?))
}

/// Opens a root: 201 `{sessionId}`.
pub(crate) async fn open(
    State(gateway): State<Arc<Gateway>>,
    BoundedJson(body): BoundedJson<OpenRoot>,
) -> Result<(StatusCode, Json<RootOpened>), GatewayError> {
    let root = gateway
        .runtime()?
        .open_root_with(&body.label, body.agent_options)
        .await?;
    let session_id = root.session();
    gateway.roots().insert(session_id, root);
    Ok((StatusCode::CREATED, Json(RootOpened { session_id })))
}

/// Takes an existing root back: 200 `{sessionId}`. A root already held is
/// `subagent/root-held`.
pub(crate) async fn reopen(
    State(gateway): State<Arc<Gateway>>,
    Segments(root): Segments<String>,
) -> Result<Json<RootOpened>, GatewayError> {
    let session_id = session_id(&root)?;
    let root = gateway.runtime()?.reopen_root(session_id).await?;
    gateway.roots().insert(session_id, root);
    Ok(Json(RootOpened { session_id }))
}

/// Closes a held root: 204. A root this gateway does not hold is
/// `subagent/unauthorized`.
pub(crate) async fn close(
    State(gateway): State<Arc<Gateway>>,
    Segments(root): Segments<String>,
) -> Result<StatusCode, GatewayError> {
    let session_id = session_id(&root)?;
    let agent = held(&gateway, session_id)?;
    gateway.runtime()?.close_root(&agent).await?;
    gateway.roots().remove(&session_id);
    Ok(StatusCode::NO_CONTENT)
}

/// The handle of a root this gateway holds. Another host's root (on a
/// shared log) is `subagent/tree-elsewhere` naming its holder; any other
/// root this gateway does not hold is `subagent/unauthorized`.
pub(crate) fn held(
    gateway: &Gateway,
    root: SessionId,
) -> Result<subagent_runtime::LiveAgent, GatewayError> {
    if let Some(agent) = gateway.roots().get(&root).cloned() {
        return Ok(agent);
    }
    gateway.runtime()?.refuse_tree_elsewhere(root)?;
    Err(SubagentError::Unauthorized(format!("{root} is not a root this gateway holds")).into())
}
