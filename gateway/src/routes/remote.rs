//! The spec's two remote methods: `POST /v1/prompt` and
//! `POST /v1/interruptByParent`, each a thin call into the runtime, which
//! holds every rule.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use subagent_core::{InterruptReceipt, InterruptRequest, PromptReceipt, PromptRequest};
use tokio_util::sync::CancellationToken;

use crate::error::GatewayError;
use crate::limits::BoundedJson;
use crate::server::Gateway;

/// `prompt`: `{messageId}` once the child's inbox accepted the message.
/// The client going away before then cancels the call (`gateway/cancelled`
/// for whoever still listens).
pub(crate) async fn prompt(
    State(gateway): State<Arc<Gateway>>,
    BoundedJson(request): BoundedJson<PromptRequest>,
) -> Result<Json<PromptReceipt>, GatewayError> {
    let signal = CancellationToken::new();
    let _cancel_when_dropped = signal.clone().drop_guard();
    Ok(Json(gateway.runtime()?.prompt(request, signal).await?))
}

/// `interruptByParent`: `{interrupted}`; an absent, idle or finished
/// target is an accepted no-op (`interrupted: false`).
pub(crate) async fn interrupt_by_parent(
    State(gateway): State<Arc<Gateway>>,
    BoundedJson(request): BoundedJson<InterruptRequest>,
) -> Result<Json<InterruptReceipt>, GatewayError> {
    Ok(Json(gateway.runtime()?.interrupt_by_parent(request).await?))
}
