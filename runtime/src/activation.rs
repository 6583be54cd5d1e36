//! [`SubagentActivation`]: the caller's handle on one managed execution: the
//! child id, the accepted initial message id (local children), the result as
//! a future, and an idempotent `dispose`.

use std::sync::{Arc, Mutex};

use subagent_core::{MessageId, SessionId, SubagentError, SubagentResult};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Shared between a driver task and the handles that address it.
pub(crate) struct DriverHandle {
    pub(crate) child: SessionId,
    pub(crate) parent: SessionId,
    /// The activation epoch this handle addresses: disposing it never
    /// touches a later epoch (a cold resume after this one ended).
    pub(crate) epoch: u64,
    /// Cancels the driver's remaining work (dispose, drain, restart).
    pub(crate) stop: CancellationToken,
    pub(crate) task: Mutex<Option<JoinHandle<()>>>,
    pub(crate) result: watch::Sender<Option<Result<SubagentResult, SubagentError>>>,
    /// Serializes and dedupes disposal.
    pub(crate) disposal: tokio::sync::Mutex<bool>,
    /// Counts waking sends; an idle or parked driver waits for it to move.
    pub(crate) wake: watch::Sender<u64>,
    /// Cancels the running turn only (interrupt).
    pub(crate) turn: Mutex<Option<CancellationToken>>,
    /// The wake count when the running turn was interrupted: the driver parks
    /// until a send accepted after that.
    pub(crate) interrupted_at: Mutex<Option<u64>>,
    /// Capacity held while the activation is live; dropped on release.
    pub(crate) permits: Mutex<Option<crate::capacity::Permits>>,
}

impl DriverHandle {
    pub(crate) fn new(child: SessionId, parent: SessionId, epoch: u64) -> Arc<DriverHandle> {
        Arc::new(DriverHandle {
            child,
            parent,
            epoch,
            stop: CancellationToken::new(),
            task: Mutex::new(None),
            result: watch::channel(None).0,
            disposal: tokio::sync::Mutex::new(false),
            wake: watch::channel(0).0,
            turn: Mutex::new(None),
            interrupted_at: Mutex::new(None),
            permits: Mutex::new(None),
        })
    }

    /// Publishes the result once; later calls change nothing (a settled
    /// result is never overwritten).
    pub(crate) fn settle(&self, result: Result<SubagentResult, SubagentError>) {
        self.result.send_if_modified(|slot| {
            if slot.is_some() {
                return false;
            }
            *slot = Some(result);
            true
        });
    }

    /// Stops the driver and waits until its task has ended.
    pub(crate) async fn stop_and_join(&self) {
        self.stop.cancel();
        let task = self.task.lock().ok().and_then(|mut task| task.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// A managed child execution.
pub struct SubagentActivation {
    pub(crate) child_id: SessionId,
    pub(crate) message_id: Option<MessageId>,
    pub(crate) handle: Arc<DriverHandle>,
    pub(crate) runtime: crate::runtime::SubagentRuntime,
}

impl SubagentActivation {
    /// The child's stable id.
    #[must_use]
    pub fn child_id(&self) -> SessionId {
        self.child_id
    }

    /// The child's live agent handle, to delegate from it. It is refused
    /// once this activation is disposed.
    #[must_use]
    pub fn agent(&self) -> crate::runtime::LiveAgent {
        crate::runtime::LiveAgent::new(self.child_id)
    }

    /// The accepted initial message, for a local child.
    #[must_use]
    pub fn message_id(&self) -> Option<MessageId> {
        self.message_id
    }

    /// Resolves with the execution's result, independently of resource
    /// release. A model or transport failure, including an agent that could
    /// not be built, is a result with stop reason `error` and a diagnostic.
    ///
    /// # Errors
    /// An infrastructure fault the result cannot represent as a stop reason
    /// (for example, the log failed, so the result could not be recorded).
    pub async fn result(&self) -> Result<SubagentResult, SubagentError> {
        let mut receiver = self.handle.result.subscribe();
        let settled = receiver
            .wait_for(Option::is_some)
            .await
            .map_err(|_| SubagentError::internal("the driver stopped without a result"))?;
        settled
            .clone()
            .unwrap_or_else(|| Err(SubagentError::internal("no result")))
    }

    /// Stops and releases this activation and its owned descendants,
    /// child-first, and waits for quiescence. Idempotent: an activation
    /// already released (by an earlier dispose, a drain, its own failure, or
    /// the runtime's `close`) is a no-op.
    ///
    /// # Errors
    /// `gateway/internal` if the release could not be recorded;
    /// `subagent/closed` if the runtime closed without releasing it.
    pub async fn dispose(&self) -> Result<(), SubagentError> {
        self.runtime.dispose_driver(&self.handle).await
    }
}
