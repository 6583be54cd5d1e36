//! `subagent/start` and `subagent/end`: the [`Notice`]s the runtime
//! announces, to every listener or scoped to one parent.

use subagent_core::{SessionId, SubagentError, SubagentRunEndInfo, SubagentRunInfo};

use tokio::sync::{broadcast, mpsc};

use super::SubagentRuntime;

/// A lifecycle notification.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    /// `subagent/start`, keyed by the delegating parent.
    Start {
        /// The delegating parent.
        parent: SessionId,
        /// The payload.
        info: SubagentRunInfo,
    },
    /// `subagent/end`, keyed by the delegating parent.
    End {
        /// The delegating parent.
        parent: SessionId,
        /// The payload.
        info: SubagentRunEndInfo,
    },
    /// `subagent/provider-added`.
    ProviderAdded(String),
    /// `subagent/provider-removed`.
    ProviderRemoved(String),
}

impl SubagentRuntime {
    /// Lifecycle notifications (`subagent/start`, `subagent/end`, provider
    /// added/removed). Filter `Start`/`End` by `parent` for a scoped audience.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn notices(&self) -> Result<broadcast::Receiver<Notice>, SubagentError> {
        self.ensure_open()?;
        Ok(self.inner.notices.subscribe())
    }

    /// `subagent/start` and `subagent/end` of `parent`'s own delegations
    /// only: the scoped audience of one delegating parent. Ends when the
    /// runtime is closed or dropped; a subscriber that falls more than 1024
    /// notices behind skips the oldest.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn notices_for(&self, parent: SessionId) -> Result<mpsc::Receiver<Notice>, SubagentError> {
        let mut all = self.notices()?;
        let shutdown = self.inner.shutdown.clone();
        let (sender, receiver) = mpsc::channel(256);
        self.inner.tasks.spawn(async move {
            loop {
                let received = tokio::select! {
                    received = all.recv() => received,
                    () = shutdown.cancelled() => return,
                };
                let notice = match received {
                    Ok(notice) => notice,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let scoped = match &notice {
                    Notice::Start { parent: owner, .. } | Notice::End { parent: owner, .. } => {
                        *owner == parent
                    }
                    Notice::ProviderAdded(_) | Notice::ProviderRemoved(_) => false,
                };
                if scoped && sender.send(notice).await.is_err() {
                    return;
                }
            }
        });
        Ok(receiver)
    }

    pub(crate) fn notify(&self, notice: Notice) {
        // No subscriber is not an error.
        let _ = self.inner.notices.send(notice);
    }
}
