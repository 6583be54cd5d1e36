//! The bridge between [`EventLog`](subagent_store::EventLog)'s synchronous
//! methods and the async driver.
//!
//! A log owns its own tokio runtime ([`OwnedRuntime`], two worker threads,
//! built at connect). A synchronous method spawns its work onto that
//! runtime and blocks on a `std::sync::mpsc` channel for the answer
//! ([`wait`]), which works whether or not the caller is inside another
//! tokio runtime: the caller's thread never runs `Runtime::block_on`, and
//! the work never needs the caller's executor. The runtime is shut down
//! with `shutdown_background`, so dropping the last handle inside an async
//! context never panics.

use std::future::Future;
use std::time::Duration;

use subagent_store::StoreError;
use tokio::runtime::{Builder, Handle, Runtime};

/// A tokio runtime that is shut down in the background when dropped.
pub(crate) struct OwnedRuntime {
    runtime: Option<Runtime>,
    handle: Handle,
}

impl OwnedRuntime {
    /// A multi-threaded runtime with two workers, IO and timers.
    ///
    /// # Errors
    /// [`StoreError::Io`] when its threads cannot be started.
    pub(crate) fn new() -> Result<OwnedRuntime, StoreError> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("subagents-pg")
            .enable_all()
            .build()
            .map_err(|err| StoreError::Io(format!("starting the log's runtime: {err}")))?;
        let handle = runtime.handle().clone();
        Ok(OwnedRuntime {
            runtime: Some(runtime),
            handle,
        })
    }

    /// Its handle, for spawning.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `future` to completion on this runtime, at most `limit`. Only
    /// for a thread outside every runtime (the closing thread).
    pub(crate) fn finish<F: Future>(&self, future: F, limit: Duration) {
        if let Some(runtime) = &self.runtime {
            let _ = runtime.block_on(async { tokio::time::timeout(limit, future).await });
        }
    }
}

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Runs `future` on `handle`'s runtime and blocks the calling thread until
/// it answers. Must not be called from a thread of that runtime (nothing in
/// this crate does).
///
/// # Errors
/// The future's error, or [`StoreError::Closed`] when the runtime dropped
/// it (the log was shut down).
pub(crate) fn wait<T, F>(handle: &Handle, future: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, StoreError>> + Send + 'static,
{
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    drop(handle.spawn(async move {
        // The caller may have stopped waiting; that is not an error here.
        let _ = sender.send(future.await);
    }));
    receiver.recv().unwrap_or(Err(StoreError::Closed))
}
