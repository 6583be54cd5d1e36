//! The capacity controller: limits on live activations, in total and per
//! delegating parent. A start may wait for room; a cold resume at capacity is
//! refused at once. Permits gate only admission: a child's settlement and
//! cleanup never wait on a sibling, and a permit is returned when its
//! activation is released.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use subagent_core::{SessionId, SubagentError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Limits on live activations; `None` is unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapacityLimits {
    /// Live activations (local and external) in the whole runtime.
    pub total: Option<usize>,
    /// Live activations below one delegating parent.
    pub per_parent: Option<usize>,
}

/// The permits one live activation holds.
#[derive(Debug, Default)]
pub(crate) struct Permits(Vec<OwnedSemaphorePermit>);

pub(crate) struct Capacity {
    limits: CapacityLimits,
    total: Option<Arc<Semaphore>>,
    per_parent: Mutex<HashMap<SessionId, Arc<Semaphore>>>,
}

impl Capacity {
    pub(crate) fn new(limits: CapacityLimits) -> Self {
        Capacity {
            limits,
            total: limits.total.map(|total| Arc::new(Semaphore::new(total))),
            per_parent: Mutex::new(HashMap::new()),
        }
    }

    /// The semaphores that gate a child of `parent`, per-parent first (one
    /// fixed order, so waiters cannot deadlock).
    fn gates(&self, parent: SessionId) -> Vec<Arc<Semaphore>> {
        let mut gates = Vec::new();
        if let Some(limit) = self.limits.per_parent {
            let mut per_parent = self
                .per_parent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            gates.push(Arc::clone(
                per_parent
                    .entry(parent)
                    .or_insert_with(|| Arc::new(Semaphore::new(limit))),
            ));
        }
        gates.extend(self.total.iter().cloned());
        gates
    }

    /// Waits for room for one more child of `parent`.
    ///
    /// # Errors
    /// `gateway/cancelled` when `signal` fires first.
    pub(crate) async fn admit(
        &self,
        parent: SessionId,
        signal: &CancellationToken,
    ) -> Result<Permits, SubagentError> {
        let mut permits = Permits::default();
        for gate in self.gates(parent) {
            let permit = tokio::select! {
                permit = gate.acquire_owned() => permit.map_err(|_| SubagentError::internal("capacity closed"))?,
                () = signal.cancelled() => return Err(SubagentError::Cancelled),
            };
            permits.0.push(permit);
        }
        Ok(permits)
    }

    /// Room for one more child of `parent` now, or a refusal.
    ///
    /// # Errors
    /// `subagent/delivery-unavailable` at capacity.
    pub(crate) fn try_admit(&self, parent: SessionId) -> Result<Permits, SubagentError> {
        let mut permits = Permits::default();
        for gate in self.gates(parent) {
            let permit = gate.try_acquire_owned().map_err(|_| {
                SubagentError::DeliveryUnavailable(
                    "the runtime is at capacity; cold resume refused".into(),
                )
            })?;
            permits.0.push(permit);
        }
        Ok(permits)
    }
}
