//! The catalog and descendant listings, answered once what they reflect
//! is durable.

use subagent_core::{SessionId, SubagentDescendantListEntry, SubagentError, SubagentListEntry};

use super::SubagentRuntime;

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
}
