//! Read views of the projections for people: one session's status in words
//! ([`SessionStatus`]) and a root's whole tree with each node's status
//! ([`TreeView`]). The CLI's tree and the console's draw the same view, so
//! "what state is this child in" has one answer.

use serde::Serialize;
use subagent_core::{CatalogMode, SessionId, SubagentStopReason, ToolCallRef};

use crate::activation::{Activity, RunPhase};
use crate::state::Projections;

/// What a session is doing, in the words both faces show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionState {
    /// A live activation runs a turn, or an external run was published.
    Running,
    /// A live activation waits for input.
    Idle,
    /// No live activation (cold-resumable from the log).
    Inactive,
    /// An external run was requested and not yet published.
    Requested,
    /// An external run settled.
    Settled,
    /// An external run was disposed.
    Disposed,
    /// An external run failed to start.
    StartFailed,
}

impl SessionState {
    /// The word (`running`, `start-failed`, ...).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Running => "running",
            SessionState::Idle => "idle",
            SessionState::Inactive => "inactive",
            SessionState::Requested => "requested",
            SessionState::Settled => "settled",
            SessionState::Disposed => "disposed",
            SessionState::StartFailed => "start-failed",
        }
    }
}

/// A session's state and how its last activation or run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionStatus {
    /// What it is doing.
    pub state: SessionState,
    /// How its last settled activation or run ended, if one did.
    pub stop_reason: Option<SubagentStopReason>,
    /// Whether it has a live activation or a published run.
    pub live: bool,
}

impl SessionStatus {
    /// The status of `session` in `state`.
    #[must_use]
    pub fn of(state: &Projections, session: SessionId) -> SessionStatus {
        if let Some(run) = state.runs.get(&session) {
            let phase = match run.phase {
                RunPhase::Requested => SessionState::Requested,
                RunPhase::Started => SessionState::Running,
                RunPhase::Settled => SessionState::Settled,
                RunPhase::Disposed => SessionState::Disposed,
                RunPhase::StartFailed => SessionState::StartFailed,
            };
            return SessionStatus {
                state: phase,
                stop_reason: run.result.as_ref().map(|result| result.stop_reason.clone()),
                live: phase == SessionState::Running,
            };
        }
        let activity = state.activity(session);
        SessionStatus {
            state: match activity {
                Activity::Running => SessionState::Running,
                Activity::Idle => SessionState::Idle,
                Activity::Inactive => SessionState::Inactive,
            },
            stop_reason: state
                .activations
                .get(&session)
                .and_then(|activation| activation.last_result.as_ref())
                .map(|(_, result)| result.stop_reason.clone()),
            live: activity != Activity::Inactive,
        }
    }
}

/// One session of a [`TreeView`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeNode {
    /// The session.
    pub id: SessionId,
    /// Its direct parent; `None` for the root.
    pub parent_id: Option<SessionId>,
    /// Edges from the root (the root is 0).
    pub depth: u64,
    /// Creation label.
    pub label: String,
    /// The creating provider; `None` for the root.
    pub provider: Option<String>,
    /// `continuable`, `one-shot` or `unknown`.
    pub mode: CatalogMode,
    /// Whether it runs as an external one-shot execution.
    pub external: bool,
    /// What it is doing, and how it last ended.
    #[serde(flatten)]
    pub status: SessionStatus,
    /// Why the catalog entry could not be fully interpreted, if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
    /// The delegation tool call of its parent's turn that started it;
    /// absent for the root and for a child its host started directly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<ToolCallRef>,
}

/// A root and its descendants, in stable pre-order, as of `position`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeView {
    /// The log position the view reflects.
    pub position: u64,
    /// The root first, then every descendant.
    pub nodes: Vec<TreeNode>,
}

impl TreeView {
    /// The tree below `root` in `state`; `None` when `state` has no such
    /// session.
    #[must_use]
    pub fn of(state: &Projections, root: SessionId) -> Option<TreeView> {
        let record = state.sessions.get(&root)?;
        let mut nodes = vec![TreeNode {
            id: root,
            parent_id: record.parent,
            depth: 0,
            label: record.label.clone(),
            provider: record.provider.clone(),
            mode: CatalogMode::from(record.mode),
            external: record.external,
            status: SessionStatus::of(state, root),
            diagnostic: None,
            requested_by: None,
        }];
        nodes.extend(state.list_descendants(root).into_iter().map(|listed| {
            let entry = listed.entry.entry;
            TreeNode {
                id: entry.child_id,
                parent_id: Some(listed.parent_id),
                depth: listed.depth,
                status: SessionStatus::of(state, entry.child_id),
                label: entry.label,
                provider: Some(entry.provider),
                mode: entry.mode,
                external: entry.external,
                diagnostic: listed.entry.diagnostic,
                requested_by: state
                    .sessions
                    .get(&entry.child_id)
                    .and_then(|record| record.requested_by.clone()),
            }
        }));
        Some(TreeView {
            position: state.position,
            nodes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{history, Step};

    #[test]
    fn a_tree_lists_the_root_first_then_every_descendant_with_its_status() {
        let records = history(&[
            Step::Child {
                parent: 0,
                continuable: true,
            },
            Step::Child {
                parent: 1,
                continuable: false,
            },
        ]);
        let state = Projections::fold(&records);
        let root = state.roots[0];
        let view = TreeView::of(&state, root).unwrap();
        assert_eq!(view.position, records.len() as u64);
        assert_eq!(view.nodes[0].id, root);
        assert_eq!(view.nodes[0].depth, 0);
        assert_eq!(view.nodes[0].parent_id, None);
        assert_eq!(view.nodes.len(), 1 + state.list_descendants(root).len());
        for node in &view.nodes[1..] {
            assert_eq!(node.status, SessionStatus::of(&state, node.id));
            assert!(node.parent_id.is_some());
        }
        let json = serde_json::to_value(&view.nodes[1]).unwrap();
        for field in [
            "id",
            "parentId",
            "depth",
            "label",
            "provider",
            "mode",
            "external",
            "state",
            "stopReason",
            "live",
        ] {
            assert!(json.get(field).is_some(), "{field} in {json}");
        }
        assert_eq!(TreeView::of(&state, SessionId::new()), None);
    }

    #[test]
    fn state_words_are_kebab_case_and_match_their_serialization() {
        for state in [
            SessionState::Running,
            SessionState::Idle,
            SessionState::Inactive,
            SessionState::Requested,
            SessionState::Settled,
            SessionState::Disposed,
            SessionState::StartFailed,
        ] {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.as_str())
            );
        }
    }
}
