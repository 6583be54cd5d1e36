//! `spawn` and `fork`: the continuable providers. Their only participation in
//! a child is the detached creation data: nothing for `spawn`, the parent's
//! completed-turn prefix for `fork`.

use serde_json::Value;
use subagent_core::{ContinuableCreateSpec, SubagentCapabilities, SubagentError};

use crate::provider::{ContinuableCreateRequest, SubagentProvider};
use crate::BoxFuture;

/// A fresh continuable child.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpawnProvider;

impl SubagentProvider for SpawnProvider {
    fn name(&self) -> &str {
        "spawn"
    }
    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities::ALL
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn is_continuable(&self) -> bool {
        true
    }
    fn prepare_continuable(
        &self,
        _request: ContinuableCreateRequest,
    ) -> BoxFuture<'static, Result<ContinuableCreateSpec, SubagentError>> {
        Box::pin(async { Ok(ContinuableCreateSpec { seed: None }) })
    }
}

/// A continuable child seeded with the parent's completed-turn prefix.
#[derive(Clone, Copy, Debug, Default)]
pub struct ForkProvider;

/// The completed-turn prefix of a history: contiguous from the start, ending
/// at the last `TurnEnded` (or empty when no turn completed), so the seed is
/// balanced: no turn is cut in half.
#[must_use]
pub(super) fn completed_turn_prefix(history: &[Value]) -> Vec<Value> {
    let end = history
        .iter()
        .rposition(|event| event.get("type").and_then(Value::as_str) == Some("TurnEnded"))
        .map_or(0, |index| index + 1);
    history[..end].to_vec()
}

impl SubagentProvider for ForkProvider {
    fn name(&self) -> &str {
        "fork"
    }
    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities::ALL
    }
    fn inherits_parent_context(&self) -> bool {
        true
    }
    fn is_continuable(&self) -> bool {
        true
    }
    fn prepare_continuable(
        &self,
        request: ContinuableCreateRequest,
    ) -> BoxFuture<'static, Result<ContinuableCreateSpec, SubagentError>> {
        let seed = completed_turn_prefix(&request.parent_history);
        Box::pin(async move { Ok(ContinuableCreateSpec { seed: Some(seed) }) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_seed_ends_at_the_last_completed_turn() {
        let history = vec![
            json!({"type": "SessionCreated"}),
            json!({"type": "TurnStarted"}),
            json!({"type": "TurnEnded"}),
            json!({"type": "TurnStarted"}),
            json!({"type": "AssistantMessage"}),
        ];
        assert_eq!(completed_turn_prefix(&history), history[..3].to_vec());
        assert!(completed_turn_prefix(&history[..2]).is_empty());
    }
}
