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

/// Point-in-time figures a metrics scrape reports as gauges, read from the
/// projections and the log (nothing is kept incrementally for them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeGauges {
    /// Live continuable activations (reserved, prepared or published).
    pub live_continuable: u64,
    /// Live external runs (requested, started, or settled and not yet
    /// disposed).
    pub live_external: u64,
    /// The log's durable head position.
    pub log_head: u64,
    /// The position of the newest projections checkpoint (0: none).
    pub checkpoint_position: u64,
}

impl RuntimeGauges {
    /// Events recorded since the newest checkpoint: how much a reopen
    /// would refold.
    #[must_use]
    pub fn checkpoint_age_events(&self) -> u64 {
        self.log_head.saturating_sub(self.checkpoint_position)
    }
}

impl SubagentRuntime {
    /// The figures a metrics scrape reports as gauges. Cheap enough per
    /// scrape: one pass over the live activations and runs.
    #[must_use]
    pub fn gauges(&self) -> RuntimeGauges {
        let engine = &self.inner.engine;
        let (live_continuable, live_external) = {
            let state = engine.state();
            let continuable = state
                .activations
                .values()
                .filter(|activation| activation.live.is_some())
                .count();
            let external = state.runs.values().filter(|run| run.is_live()).count();
            (continuable as u64, external as u64)
        };
        RuntimeGauges {
            live_continuable,
            live_external,
            log_head: engine.log().head(),
            checkpoint_position: engine.checkpoint_position(),
        }
    }

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
