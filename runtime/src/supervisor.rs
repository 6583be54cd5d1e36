//! [`Supervised`]: a runtime that comes back after its log fails.
//!
//! The stores are fail-stop: after a failed write a log handle refuses every
//! later append, and the engine every later command, so nothing decided on
//! top of a lost event can become durable. Recovery is therefore a reopen:
//! a new log handle, a new runtime over it, and the open's own recovery of
//! whatever was live. A host that wants that without a restart hands its
//! runtime and how to open a new one to [`Supervised::new`], which
//! - waits for [`SubagentRuntime::failed`];
//! - closes the failed runtime (its drivers stop, every agent process group
//!   is killed) and lets go of it, so its log handle can be dropped (a
//!   RocksDB directory can then be opened again);
//! - reopens with jittered exponential backoff, bounded by
//!   [`RecoveryPolicy::give_up_after`], each attempt a full open (recovery
//!   included) that the store must answer;
//! - takes back every root the failed runtime held, so the host's root
//!   handles stay good;
//! - meanwhile answers [`Supervised::runtime`] with `store/unavailable`
//!   and the time to retry after ([`Health`]).

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use subagent_core::SubagentError;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::{BoxFuture, SubagentRuntime};

/// How a supervised runtime retries its reopen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryPolicy {
    /// The delay before the first reopen, doubled after each failed one.
    pub first_delay: Duration,
    /// The longest delay between two reopens.
    pub max_delay: Duration,
    /// How long after the failure reopens are tried; then the supervisor
    /// gives up ([`Health::GaveUp`]) and the host decides (`serve` exits).
    pub give_up_after: Duration,
}

impl Default for RecoveryPolicy {
    /// 200 ms doubling to 5 s, for 10 minutes.
    fn default() -> Self {
        RecoveryPolicy {
            first_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
            give_up_after: Duration::from_secs(600),
        }
    }
}

/// Where a supervised runtime stands.
#[derive(Clone)]
pub enum Health {
    /// The runtime serves; its generation counts reopens (0 first).
    Serving {
        /// The runtime.
        runtime: SubagentRuntime,
        /// How many times it was reopened.
        generation: u64,
    },
    /// The log failed; reopens are being tried.
    Recovering {
        /// Why the runtime stopped, or why the last reopen failed.
        cause: SubagentError,
        /// Reopens tried so far.
        attempts: u32,
        /// When the next one is due.
        retry_at: Instant,
    },
    /// Every reopen failed within [`RecoveryPolicy::give_up_after`].
    GaveUp {
        /// Why the last reopen failed.
        cause: SubagentError,
    },
    /// [`Supervised::close`] closed it.
    Closed,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Health::Serving { generation, .. } => f
                .debug_struct("Serving")
                .field("generation", generation)
                .finish_non_exhaustive(),
            Health::Recovering {
                cause,
                attempts,
                retry_at,
            } => f
                .debug_struct("Recovering")
                .field("cause", cause)
                .field("attempts", attempts)
                .field("retry_at", retry_at)
                .finish(),
            Health::GaveUp { cause } => f.debug_struct("GaveUp").field("cause", cause).finish(),
            Health::Closed => f.write_str("Closed"),
        }
    }
}

/// Opens a new runtime (a new log handle, the open's recovery, the host's
/// providers and settings): what a reopen runs.
pub type Reopen =
    Arc<dyn Fn() -> BoxFuture<'static, Result<SubagentRuntime, SubagentError>> + Send + Sync>;

/// A runtime and the task that reopens it after its log fails. Cheap to
/// clone.
#[derive(Clone)]
pub struct Supervised {
    health: Arc<watch::Sender<Health>>,
    stop: CancellationToken,
    /// The supervision task, awaited by [`close`](Self::close).
    task: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl Supervised {
    /// Supervises `runtime`: when its log fails, it is closed and `reopen`
    /// is tried under `policy` (see the module's contract). Must be called
    /// within a tokio runtime.
    #[must_use]
    pub fn new(runtime: SubagentRuntime, reopen: Reopen, policy: RecoveryPolicy) -> Supervised {
        let health = Arc::new(
            watch::channel(Health::Serving {
                runtime,
                generation: 0,
            })
            .0,
        );
        let stop = CancellationToken::new();
        let task = tokio::spawn(supervise(Arc::clone(&health), reopen, policy, stop.clone()));
        Supervised {
            health,
            stop,
            task: Arc::new(std::sync::Mutex::new(Some(task))),
        }
    }

    /// `runtime` alone, not reopened: after its log fails it stays, and
    /// refuses commands as its engine does, until the host replaces it.
    #[must_use]
    pub fn unsupervised(runtime: SubagentRuntime) -> Supervised {
        Supervised {
            health: Arc::new(
                watch::channel(Health::Serving {
                    runtime,
                    generation: 0,
                })
                .0,
            ),
            stop: CancellationToken::new(),
            task: Arc::default(),
        }
    }

    /// The serving runtime.
    ///
    /// # Errors
    /// `store/unavailable` while it is being reopened (naming the cause and
    /// when the next reopen is due) or after the supervisor gave up;
    /// `subagent/closed` once closed.
    pub fn runtime(&self) -> Result<SubagentRuntime, SubagentError> {
        match &*self.health.borrow() {
            Health::Serving { runtime, .. } => Ok(runtime.clone()),
            Health::Recovering {
                cause, retry_at, ..
            } => Err(SubagentError::unavailable_from(Recovering {
                cause: cause.clone(),
                retry_in: retry_at.saturating_duration_since(Instant::now()),
            })),
            Health::GaveUp { cause } => Err(SubagentError::unavailable_from(GaveUp {
                cause: cause.clone(),
            })),
            Health::Closed => Err(SubagentError::Closed),
        }
    }

    /// Where it stands now.
    #[must_use]
    pub fn health(&self) -> Health {
        self.health.borrow().clone()
    }

    /// Follows every change of [`health`](Self::health).
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<Health> {
        self.health.subscribe()
    }

    /// Stops supervising (waiting for a reopen under way to end, and
    /// closing what it opened) and closes the serving runtime, if one
    /// serves.
    ///
    /// # Errors
    /// As [`SubagentRuntime::close`].
    pub async fn close(&self) -> Result<(), SubagentError> {
        self.stop.cancel();
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
        let previous = self.health.send_replace(Health::Closed);
        match previous {
            Health::Serving { runtime, .. } => runtime.close().await,
            _ => Ok(()),
        }
    }
}

impl From<SubagentRuntime> for Supervised {
    /// [`Supervised::unsupervised`].
    fn from(runtime: SubagentRuntime) -> Supervised {
        Supervised::unsupervised(runtime)
    }
}

/// A request refused while the runtime is being reopened.
#[derive(Debug, thiserror::Error)]
#[error("the runtime is being reopened after its log failed ({cause}); retry in {} ms", retry_in.as_millis())]
pub struct Recovering {
    /// Why.
    #[source]
    pub cause: SubagentError,
    /// How long until the next reopen is tried.
    pub retry_in: Duration,
}

/// A request refused after every reopen failed.
#[derive(Debug, thiserror::Error)]
#[error(
    "the runtime could not be reopened after its log failed ({cause}); the host must be restarted"
)]
pub struct GaveUp {
    /// Why the last reopen failed.
    #[source]
    pub cause: SubagentError,
}

/// The supervision loop: one failure and recovery per turn.
async fn supervise(
    health: Arc<watch::Sender<Health>>,
    reopen: Reopen,
    policy: RecoveryPolicy,
    stop: CancellationToken,
) {
    let mut generation = 0;
    loop {
        let Health::Serving { runtime, .. } = health.borrow().clone() else {
            return;
        };
        let cause = tokio::select! {
            () = stop.cancelled() => return,
            cause = runtime.failed() => cause,
        };
        tracing::error!(error = %cause, "the log failed; closing the runtime to reopen it");
        let held = runtime.held_roots();
        let failed_at = Instant::now();
        let first_retry = failed_at + policy.first_delay;
        let replaced = health.send_if_modified(|now| {
            if matches!(now, Health::Closed) {
                return false;
            }
            *now = Health::Recovering {
                cause: cause.clone(),
                attempts: 0,
                retry_at: first_retry,
            };
            true
        });
        if !replaced {
            return;
        }
        // Its drivers stop and its agents' process groups are killed; its
        // own storage steps fail, which is expected.
        if let Err(err) = runtime.close().await {
            tracing::warn!(error = %err, "closing the failed runtime");
        }
        drop(runtime);
        let Some(reopened) = reopen_until(&health, &reopen, policy, failed_at, &stop).await else {
            return;
        };
        if stop.is_cancelled() {
            let _ = reopened.close().await;
            return;
        }
        for root in held {
            if let Err(err) = reopened.reopen_root(root).await {
                tracing::warn!(%root, error = %err, "taking a held root back after the reopen");
            }
        }
        generation += 1;
        tracing::info!(generation, "the runtime was reopened after its log failed");
        let published = health.send_if_modified(|now| {
            if matches!(now, Health::Closed) {
                return false;
            }
            *now = Health::Serving {
                runtime: reopened.clone(),
                generation,
            };
            true
        });
        if !published {
            let _ = reopened.close().await;
            return;
        }
    }
}

/// Tries `reopen` with backoff until it succeeds (the new runtime), the
/// policy's time runs out ([`Health::GaveUp`], `None`) or `stop` fires.
async fn reopen_until(
    health: &watch::Sender<Health>,
    reopen: &Reopen,
    policy: RecoveryPolicy,
    failed_at: Instant,
    stop: &CancellationToken,
) -> Option<SubagentRuntime> {
    let mut delay = policy.first_delay;
    let mut attempts = 0u32;
    loop {
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(jittered(delay)) => {}
        }
        attempts += 1;
        let cause = match reopen().await {
            Ok(runtime) => return Some(runtime),
            Err(err) => err,
        };
        delay = (delay * 2).min(policy.max_delay);
        let retry_at = Instant::now() + delay;
        if retry_at.duration_since(failed_at) > policy.give_up_after {
            tracing::error!(error = %cause, attempts, "giving up reopening the runtime");
            health.send_if_modified(|now| {
                if matches!(now, Health::Closed) {
                    return false;
                }
                *now = Health::GaveUp { cause };
                true
            });
            return None;
        }
        tracing::warn!(error = %cause, attempts, "reopening the runtime failed; retrying");
        let published = health.send_if_modified(|now| {
            if matches!(now, Health::Closed) {
                return false;
            }
            *now = Health::Recovering {
                cause,
                attempts,
                retry_at,
            };
            true
        });
        if !published {
            return None;
        }
    }
}

/// `delay` less up to a quarter of it, at random: hosts that lost one
/// database server together do not reopen in lockstep.
fn jittered(delay: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let quarter = delay / 4;
    let nanos = u64::try_from(quarter.as_nanos()).unwrap_or(u64::MAX);
    delay - Duration::from_nanos(random % nanos.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_takes_at_most_a_quarter() {
        for _ in 0..100 {
            let delay = jittered(Duration::from_millis(400));
            assert!(delay <= Duration::from_millis(400) && delay > Duration::from_millis(300));
        }
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }
}
