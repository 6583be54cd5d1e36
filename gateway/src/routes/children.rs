//! Children of a held root over HTTP: `POST /v1/roots/{root}/children`
//! starts one with the full start request (the same as
//! `start_activation`), `DELETE /v1/roots/{root}/children/{child}` disposes
//! one (releases its activation; its durable history stays).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use subagent_core::{MessageId, SessionId, SubagentActivationSpec};
use tokio_util::sync::CancellationToken;

use super::roots::held;
use super::{session_id, Segments};
use crate::error::GatewayError;
use crate::limits::BoundedJson;
use crate::server::Gateway;

/// A started child's identities.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildStarted {
    child_id: SessionId,
    /// The accepted initial prompt's inbox id (continuable children).
    #[serde(skip_serializing_if = "Option::is_none")]
    message_id: Option<MessageId>,
}

/// Starts a child of a held root: 201 `{childId, messageId?}` once the
/// prompt is durable (continuable) or the run published (external). Its
/// result arrives later, on the event stream. The client going away before
/// then abandons the start; once started, the child's work is its own.
pub(crate) async fn start(
    State(gateway): State<Arc<Gateway>>,
    Segments(root): Segments<String>,
    BoundedJson(spec): BoundedJson<SubagentActivationSpec>,
) -> Result<(StatusCode, Json<ChildStarted>), GatewayError> {
    let parent = held(&gateway, session_id(&root)?)?;
    // The signal abandons the start if the client goes away first; after
    // publication it would abort the child's work, so it is disarmed then.
    let signal = CancellationToken::new();
    let cancel_when_dropped = signal.clone().drop_guard();
    let activation = gateway
        .runtime()?
        .start_activation(&parent, spec, signal)
        .await?;
    cancel_when_dropped.disarm();
    Ok((
        StatusCode::CREATED,
        Json(ChildStarted {
            child_id: activation.child_id(),
            message_id: activation.message_id(),
        }),
    ))
}

/// Disposes a direct child of a held root: 204 once its activation
/// released. An absent child is an accepted no-op.
pub(crate) async fn dispose(
    State(gateway): State<Arc<Gateway>>,
    Segments((root, child)): Segments<(String, String)>,
) -> Result<StatusCode, GatewayError> {
    let parent = held(&gateway, session_id(&root)?)?;
    let child = session_id(&child)?;
    gateway.runtime()?.drain_children(&parent, &[child]).await?;
    Ok(StatusCode::NO_CONTENT)
}
