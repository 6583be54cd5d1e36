//! Teardown: draining a parent's children or a whole subtree, waiting for
//! child work, and disposing one driver.

use std::sync::Arc;

use subagent_core::{SessionId, SubagentError};
use subagent_projections::Command;

use crate::activation::DriverHandle;

use super::{aggregate, lock, LiveAgent, SubagentRuntime};

impl SubagentRuntime {
    /// Releases the selected resident direct children of `parent`; other
    /// children stay. Absent targets are no-ops.
    ///
    /// # Errors
    /// `subagent/unauthorized` when the parent is stale or a resident target
    /// belongs to another parent (nothing is released then);
    /// `subagent/closed`.
    pub async fn drain_children(
        &self,
        parent: &LiveAgent,
        child_ids: &[SessionId],
    ) -> Result<(), SubagentError> {
        self.authorize(parent)?;
        let mut selected = Vec::new();
        for id in child_ids {
            let driver = lock(&self.inner.drivers).get(id).cloned();
            match driver {
                Some(driver) if driver.parent != parent.session => {
                    return Err(SubagentError::Unauthorized(format!(
                        "{id} is not a child of {}",
                        parent.session
                    )));
                }
                Some(driver) => selected.push(driver),
                None => {}
            }
        }
        let mut failures = Vec::new();
        for driver in selected {
            if let Err(err) = self.dispose_driver(&driver).await {
                failures.push(err);
            }
        }
        aggregate(failures)
    }

    /// Closes admission below each exact live parent, stops their visible
    /// descendant activations at once, then releases those forests
    /// child-first. The cutoff lasts until the parent leaves the registry
    /// (its root is closed or its activation disposed); unrelated trees stay
    /// live.
    ///
    /// # Errors
    /// `subagent/unauthorized` for a stale parent; `subagent/closed`;
    /// otherwise one aggregate error after every branch settled, if any
    /// failed.
    pub async fn drain_descendants(&self, parents: &[LiveAgent]) -> Result<(), SubagentError> {
        self.ensure_open()?;
        for parent in parents {
            self.authorize(parent)?;
        }
        for parent in parents {
            self.inner
                .engine
                .commit(Command::CloseAdmission {
                    parent: parent.session,
                })
                .await?;
        }
        // Starts admitted before the cutoff land first, so they are drained too.
        let mut gate = self.inner.gate.subscribe();
        let _ = gate.wait_for(|gate| gate.in_flight == 0).await;
        let forests: Vec<Arc<DriverHandle>> = {
            let drivers = lock(&self.inner.drivers);
            let below = |driver: &DriverHandle| {
                parents
                    .iter()
                    .any(|parent| self.is_below(driver.child, parent.session))
            };
            let all: Vec<_> = drivers
                .values()
                .filter(|driver| below(driver))
                .cloned()
                .collect();
            for driver in &all {
                if let Some(turn) = lock(&driver.turn).as_ref() {
                    turn.cancel();
                }
            }
            all.into_iter()
                .filter(|driver| parents.iter().any(|parent| driver.parent == parent.session))
                .collect()
        };
        let mut failures = Vec::new();
        for driver in forests {
            if let Err(err) = self.dispose_driver(&driver).await {
                failures.push(err);
            }
        }
        aggregate(failures)
    }

    pub(crate) fn is_below(&self, session: SessionId, ancestor: SessionId) -> bool {
        self.inner
            .engine
            .state()
            .ancestors(session)
            .any(|record| record.id == ancestor)
    }

    /// Waits for the parent's currently owned child work to settle, without
    /// cancelling it. Returns whether any work was observed.
    ///
    /// # Errors
    /// `subagent/unauthorized` for a stale parent; `subagent/closed`.
    pub async fn wait_for_children(&self, parent: &LiveAgent) -> Result<bool, SubagentError> {
        self.authorize(parent)?;
        let children: Vec<Arc<DriverHandle>> = lock(&self.inner.drivers)
            .values()
            .filter(|driver| driver.parent == parent.session)
            .cloned()
            .collect();
        for child in &children {
            let mut result = child.result.subscribe();
            let _ = result.wait_for(Option::is_some).await;
        }
        Ok(!children.is_empty())
    }

    /// Disposes one driver: its live descendants first (child-first), then
    /// itself, then records the release. Idempotent.
    pub(crate) async fn dispose_driver(
        &self,
        handle: &Arc<DriverHandle>,
    ) -> Result<(), SubagentError> {
        let mut disposed = handle.disposal.lock().await;
        if *disposed {
            return Ok(());
        }
        let children: Vec<Arc<DriverHandle>> = lock(&self.inner.drivers)
            .values()
            .filter(|other| other.parent == handle.child)
            .cloned()
            .collect();
        let mut failures = Vec::new();
        for child in children {
            if let Err(err) = Box::pin(self.dispose_driver(&child)).await {
                failures.push(err);
            }
        }
        handle.stop_and_join().await;
        // Only this handle's epoch: a later one (a cold resume after this
        // activation ended) is not this handle's to release.
        let live = self
            .inner
            .engine
            .state()
            .activations
            .get(&handle.child)
            .and_then(|a| a.live.as_ref())
            .is_some_and(|live| live.epoch == handle.epoch);
        if live {
            self.inner
                .engine
                .commit(Command::ReleaseActivation {
                    child: handle.child,
                    epoch: handle.epoch,
                    cleanup_error: None,
                })
                .await?;
        }
        let settled = self
            .inner
            .engine
            .state()
            .activations
            .get(&handle.child)
            .and_then(|a| a.last_result.clone())
            .filter(|(epoch, _)| *epoch == handle.epoch);
        if let Some((_, result)) = settled {
            handle.settle(Ok(result));
        }
        self.unregister_driver(handle);
        // The disposed child leaves the registry: a drain's cutoff below it ends.
        self.inner
            .engine
            .commit(Command::ReopenAdmission {
                parent: handle.child,
            })
            .await?;
        *disposed = true;
        aggregate(failures)
    }

    /// Takes `handle` out of the registry (if it is still the one registered
    /// for its child: a cold resume may have registered a newer one) and
    /// returns its capacity.
    pub(crate) fn unregister_driver(&self, handle: &Arc<DriverHandle>) {
        let mut drivers = lock(&self.inner.drivers);
        if drivers
            .get(&handle.child)
            .is_some_and(|registered| Arc::ptr_eq(registered, handle))
        {
            drivers.remove(&handle.child);
        }
        drop(drivers);
        lock(&handle.permits).take();
    }
}
