//! The console's reads of the log's history: a root's tree with each
//! session's status, live or as it stood at any position
//! (`GET /v1/sessions/{root}/tree?at=N`), the domain changes between two
//! positions (`GET /v1/diff?from=A&to=B`) and the log's `verify` report
//! (`GET /v1/verify`). A past state is folded from the log (replay): no
//! agent runs. Folds and verification run on the blocking pool.

use std::sync::Arc;

use axum::extract::State;
use axum::http::Uri;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use subagent_core::SubagentError;
use subagent_projections::{TreeNode, TreeView};
use subagent_replay::ReplayError;

use super::{query, session_id, Segments};
use crate::error::GatewayError;
use crate::server::Gateway;

/// `?at=N`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AtQuery {
    /// The log position (live when absent).
    at: Option<u64>,
}

/// A tree and where it stands.
#[derive(Serialize)]
pub(crate) struct TreeAnswer {
    /// The log position the tree reflects.
    position: u64,
    /// The log's head now.
    head: u64,
    /// The root first, then its descendants in stable pre-order.
    nodes: Vec<TreeNode>,
}

/// Runs `work` on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ReplayError> + Send + 'static,
) -> Result<T, GatewayError> {
    Ok(tokio::task::spawn_blocking(work)
        .await
        .map_err(SubagentError::internal_from)??)
}

/// `root`'s tree: live (as of the last acknowledged command), or at `?at=N`.
pub(crate) async fn tree(
    State(gateway): State<Arc<Gateway>>,
    Segments(root): Segments<String>,
    uri: Uri,
) -> Result<Json<TreeAnswer>, GatewayError> {
    let root = session_id(&root)?;
    let AtQuery { at } = query(&uri)?;
    let view = match at {
        None => gateway.runtime()?.tree(root).await?,
        Some(at) => {
            let log = Arc::clone(gateway.runtime()?.log());
            blocking(move || {
                subagent_replay::state_at(&*log, Some(at)).map(|state| TreeView::of(&state, root))
            })
            .await?
        }
    };
    let view = view.ok_or(ReplayError::UnknownSession(root))?;
    Ok(Json(TreeAnswer {
        position: view.position,
        head: gateway.runtime()?.log().head(),
        nodes: view.nodes,
    }))
}

/// `?from=A&to=B`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiffQuery {
    /// The earlier position.
    from: u64,
    /// The later position (the head when absent).
    to: Option<u64>,
}

/// The domain changes from one position to another.
#[derive(Serialize)]
pub(crate) struct DiffAnswer {
    from: u64,
    to: u64,
    /// Each change as its JSON with its sentence as `text`.
    changes: Vec<Value>,
}

/// What changed between `from` and `to`: sessions added, activations
/// started and settled, runs, messages.
pub(crate) async fn diff(
    State(gateway): State<Arc<Gateway>>,
    uri: Uri,
) -> Result<Json<DiffAnswer>, GatewayError> {
    let DiffQuery { from, to } = query(&uri)?;
    let log = Arc::clone(gateway.runtime()?.log());
    let (to, before, after) = blocking(move || {
        let to = to.unwrap_or_else(|| log.head());
        let after = subagent_replay::state_at(&*log, Some(to))?;
        let before = subagent_replay::state_at(&*log, Some(from))?;
        Ok((to, before, after))
    })
    .await?;
    if from > to {
        return Err(GatewayError::bad_request(format!(
            "from ({from}) is after to ({to})"
        )));
    }
    let changes = subagent_replay::diff(&before, &after)
        .into_iter()
        .map(|change| {
            let mut json = serde_json::to_value(&change).unwrap_or(Value::Null);
            if let Value::Object(fields) = &mut json {
                fields.insert("text".into(), Value::String(change.to_string()));
            }
            json
        })
        .collect();
    Ok(Json(DiffAnswer { from, to, changes }))
}

/// The log's verification, summarised.
#[derive(Serialize)]
pub(crate) struct VerifyAnswer {
    /// Whether everything agrees.
    ok: bool,
    /// The head verified.
    head: u64,
    /// Events folded.
    events: u64,
    /// Every problem found, one sentence each.
    problems: Vec<String>,
    /// What is worth saying that is no problem (a checkpoint of another
    /// format version), one sentence each.
    notes: Vec<String>,
}

/// `verify` over the live log: admissible history, indexes, attachments,
/// checkpoint.
pub(crate) async fn verify(
    State(gateway): State<Arc<Gateway>>,
) -> Result<Json<VerifyAnswer>, GatewayError> {
    let log = Arc::clone(gateway.runtime()?.log());
    let report = blocking(move || subagent_replay::verify(&*log)).await?;
    let mut problems: Vec<String> = report.checkpoint_problem.iter().cloned().collect();
    problems.extend(
        report
            .impossible_history
            .iter()
            .map(|violation| format!("{}: {violation}", violation.code())),
    );
    problems.extend(report.index_problems.iter().map(|p| format!("index: {p}")));
    problems.extend(
        report
            .attachment_problems
            .iter()
            .map(|p| format!("attachment: {p}")),
    );
    problems.extend(report.differences.iter().cloned());
    Ok(Json(VerifyAnswer {
        ok: report.is_ok(),
        head: report.head,
        events: report.events,
        notes: report.notes(),
        problems,
    }))
}
