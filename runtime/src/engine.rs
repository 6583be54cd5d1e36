//! The engine: the one path every transition takes. A command is decided
//! against the projections, its events are appended atomically and durably,
//! and only then folded into the projections and acknowledged.
//!
//! Commands are serialized by the state lock, held across the durable append,
//! so every decision sees every earlier transition. That costs one WAL sync
//! per command under load; pipelining decisions ahead of durability (the
//! raft-rs `Ready` shape, with a rebuild from the log on append failure) is
//! the planned optimization.

use std::sync::Arc;

use subagent_core::{NewEvent, RecordedEvent, SubagentError};
use subagent_projections::{decide, Command, Projections};
use subagent_store::{EventLog, EventLogExt, ExpectedVersion, StreamAppend};
use tokio::sync::{Mutex, MutexGuard};
use tracing::debug;

/// Decides, appends, applies.
pub(crate) struct Engine {
    log: Arc<dyn EventLog>,
    state: Mutex<Projections>,
}

pub(crate) fn internal(err: impl std::fmt::Display) -> SubagentError {
    SubagentError::Internal(err.to_string())
}

impl Engine {
    /// Folds the whole log into fresh projections.
    pub(crate) fn open(log: Arc<dyn EventLog>) -> Result<Engine, SubagentError> {
        let mut state = Projections::new();
        for record in log.read_all(1) {
            state.apply(&record.map_err(internal)?);
        }
        Ok(Engine {
            log,
            state: Mutex::new(state),
        })
    }

    /// The log.
    pub(crate) fn log(&self) -> &Arc<dyn EventLog> {
        &self.log
    }

    /// Read access to the projections (held briefly; blocks commits).
    pub(crate) async fn state(&self) -> MutexGuard<'_, Projections> {
        self.state.lock().await
    }

    /// Decides `command`, appends its events durably, folds them in and
    /// returns them. A rejection appends nothing.
    ///
    /// # Errors
    /// The rejection, or `gateway/internal` when the append fails.
    pub(crate) async fn commit(
        &self,
        command: Command,
    ) -> Result<Vec<RecordedEvent>, SubagentError> {
        let mut state = self.state.lock().await;
        let decision = decide(&state, command)?;
        if decision.is_empty() {
            return Ok(Vec::new());
        }
        let parts: Vec<StreamAppend> = decision
            .into_iter()
            .map(|(stream, events)| StreamAppend {
                stream,
                expected: ExpectedVersion::Any,
                events: events.into_iter().map(NewEvent::new).collect(),
            })
            .collect();
        let outcomes = self
            .log
            .append_atomic(parts.clone())
            .await
            .map_err(internal)?;
        let mut records = Vec::new();
        for (part, outcome) in parts.into_iter().zip(outcomes) {
            let count = part.events.len() as u64;
            for (offset, new) in (0u64..).zip(part.events) {
                let version = outcome.stream_version + 1 + offset - count;
                let record =
                    new.into_record(outcome.first_position + offset, part.stream, version, 0);
                state.apply(&record);
                records.push(record);
            }
        }
        debug!(events = records.len(), head = state.position, "committed");
        Ok(records)
    }
}
