//! `GET /healthz` and `GET /readyz`: what a process supervisor or a load
//! balancer asks. Both are open without the token and say nothing but the
//! answer: no log position, no cause, no host name.
//! - `/healthz`: the process answers (200), unless the runtime could not
//!   be reopened after its log failed and the host must be restarted (503
//!   `store/unavailable`).
//! - `/readyz`: the runtime serves (200); while it is being reopened after
//!   its log failed, or after the supervisor gave up, 503
//!   `store/unavailable` with `Retry-After`, as every other route answers
//!   then.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};
use subagent_core::SubagentError;
use subagent_runtime::Health;

use crate::error::GatewayError;
use crate::server::Gateway;

/// The paths of this module's routes.
pub(crate) const PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// `GET /healthz`.
pub(crate) async fn live(State(gateway): State<Arc<Gateway>>) -> Result<Json<Value>, GatewayError> {
    match gateway.supervised.health() {
        Health::GaveUp { .. } => Err(unavailable("the runtime could not be reopened")),
        _ => Ok(Json(json!({"status": "ok"}))),
    }
}

/// `GET /readyz`.
pub(crate) async fn ready(
    State(gateway): State<Arc<Gateway>>,
) -> Result<Json<Value>, GatewayError> {
    match gateway.supervised.health() {
        Health::Serving { .. } => Ok(Json(json!({"status": "ready"}))),
        Health::Closed => Err(SubagentError::Closed.into()),
        // The runtime's own refusal carries when to retry; its cause is
        // not told to an unauthenticated caller.
        _ => Err(match gateway.supervised.runtime() {
            Err(SubagentError::StoreUnavailable(fault)) => GatewayError::Runtime(
                SubagentError::StoreUnavailable(fault.with_text("the runtime is not serving")),
            ),
            _ => unavailable("the runtime is not serving"),
        }),
    }
}

/// `store/unavailable` saying `text` alone.
fn unavailable(text: &str) -> GatewayError {
    GatewayError::Runtime(SubagentError::StoreUnavailable(
        subagent_core::Fault::from_text(text),
    ))
}
