//! What a claim took: the contents of the messages a `MessagesClaimed`
//! names, for a turn's start and for steering: kept by the engine since it
//! recorded them, else read from the session's stream (a bounded window
//! after the previous claim).

use std::collections::HashMap;

use subagent_core::{content::ContentBlock, Event, MessageId, StreamId, SubagentError};
use subagent_projections::Command;
use subagent_store::EventLogExt;

use super::LocalDriver;
use crate::runtime::inline_attachments;

impl LocalDriver {
    /// The agent is at a step boundary: claim every pending message for the
    /// running turn, durably, and return their contents in FIFO order.
    pub(super) async fn steer(
        &self,
        scan_from: &mut u64,
    ) -> Result<Vec<Vec<ContentBlock>>, SubagentError> {
        let records = self
            .runtime
            .inner
            .engine
            .commit(Command::ClaimSteering {
                session: self.handle.child,
            })
            .await?;
        self.claimed_contents(&records, scan_from)
    }

    /// The contents of the messages a claim (`MessagesClaimed` among
    /// `records`) took, in its order, image attachments inlined again.
    ///
    /// The engine hands them over when it recorded their acceptance and
    /// still keeps them ([`Engine::take_accepted`](crate::engine::Engine::take_accepted));
    /// otherwise they are read from the log. A claim takes every pending
    /// message, so the messages of one claim were
    /// all accepted after the previous claim: the scan starts at `scan_from`
    /// (the stream version after the previous claim) and stops at the claim,
    /// instead of rereading the whole stream every turn. Should a message be
    /// missing from that window, the whole stream is read instead.
    pub(super) fn claimed_contents(
        &self,
        records: &[subagent_core::RecordedEvent],
        scan_from: &mut u64,
    ) -> Result<Vec<Vec<ContentBlock>>, SubagentError> {
        let Some((ids, claimed_at)) = records.iter().find_map(|record| match &record.event {
            Event::MessagesClaimed { ids, .. } => Some((ids, record.version)),
            _ => None,
        }) else {
            return Ok(Vec::new());
        };
        let mut claimed = match self
            .runtime
            .inner
            .engine
            .take_accepted(self.handle.child, ids)
        {
            Some(kept) => kept,
            None => {
                let mut contents = self.accepted_between(ids, *scan_from, claimed_at)?;
                if contents.len() < ids.len() {
                    contents = self.accepted_between(ids, 1, claimed_at)?;
                }
                ids.iter().filter_map(|id| contents.remove(id)).collect()
            }
        };
        *scan_from = claimed_at + 1;
        for content in &mut claimed {
            inline_attachments(content, self.runtime.log().as_ref())?;
        }
        Ok(claimed)
    }

    /// The contents of the `ids` accepted at stream versions `from..until`.
    pub(super) fn accepted_between(
        &self,
        ids: &[MessageId],
        from: u64,
        until: u64,
    ) -> Result<HashMap<MessageId, Vec<ContentBlock>>, SubagentError> {
        let mut by_id = HashMap::new();
        for record in self
            .runtime
            .log()
            .read_stream(StreamId::Session(self.handle.child), from)
        {
            let record = record.map_err(SubagentError::internal_from)?;
            if record.version >= until {
                break;
            }
            if let Event::MessageAccepted {
                message_id,
                content,
                ..
            } = record.event
            {
                if ids.contains(&message_id) {
                    by_id.insert(message_id, content);
                }
            }
        }
        Ok(by_id)
    }
}
