//! The catalog and descendant listings, the roots and the tree view,
//! answered once what they reflect is durable.

use serde::Serialize;
use subagent_core::{SessionId, SubagentDescendantListEntry, SubagentError, SubagentListEntry};
use subagent_projections::TreeView;

use super::{lock, SubagentRuntime};

/// One host root of the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RootEntry {
    /// The root session.
    pub session_id: SessionId,
    /// Its label.
    pub label: String,
    /// The log position of its creation.
    pub created_at: u64,
    /// Whether this runtime holds it (opened or re-opened it, and has not
    /// closed it): only then is it a live parent.
    pub held: bool,
}

impl SubagentRuntime {
    /// The parent's durable catalog, in parent event order.
    ///
    /// # Errors
    /// `subagent/closed`; `gateway/internal` when the log failed (naming
    /// the cause), so an answer that cannot be made durable is never given.
    pub async fn list_children(
        &self,
        parent: SessionId,
    ) -> Result<Vec<SubagentListEntry>, SubagentError> {
        self.ensure_open()?;
        self.inner
            .engine
            .read_durable(|state| state.list_children(parent))
            .await
    }

    /// The root's complete subtree, stable pre-order.
    ///
    /// # Errors
    /// As [`list_children`](Self::list_children).
    pub async fn list_descendants(
        &self,
        root: SessionId,
    ) -> Result<Vec<SubagentDescendantListEntry>, SubagentError> {
        self.ensure_open()?;
        self.inner
            .engine
            .read_durable(|state| state.list_descendants(root))
            .await
    }

    /// The root of `session`'s tree (`session` itself for a root), as of the
    /// last acknowledged command; `None` for a session the log does not know.
    /// A session's root never changes, so a caller may cache the answer.
    #[must_use]
    pub fn root_of(&self, session: SessionId) -> Option<SessionId> {
        self.inner
            .engine
            .state()
            .lineage(session)
            .last()
            .map(|record| record.id)
    }

    /// Every host root of the log, in creation order.
    ///
    /// # Errors
    /// As [`list_children`](Self::list_children).
    pub async fn roots(&self) -> Result<Vec<RootEntry>, SubagentError> {
        self.ensure_open()?;
        let roots = self
            .inner
            .engine
            .read_durable(|state| {
                state
                    .roots
                    .iter()
                    .filter_map(|root| state.sessions.get(root))
                    .map(|record| (record.id, record.label.clone(), record.created_at))
                    .collect::<Vec<_>>()
            })
            .await?;
        let held = lock(&self.inner.roots).clone();
        Ok(roots
            .into_iter()
            .map(|(session_id, label, created_at)| RootEntry {
                held: held.contains(&session_id),
                session_id,
                label,
                created_at,
            })
            .collect())
    }

    /// `root`'s tree with each session's status ([`TreeView`]); `None` for
    /// a session the log does not know.
    ///
    /// # Errors
    /// As [`list_children`](Self::list_children).
    pub async fn tree(&self, root: SessionId) -> Result<Option<TreeView>, SubagentError> {
        self.ensure_open()?;
        self.inner
            .engine
            .read_durable(|state| TreeView::of(state, root))
            .await
    }
}
