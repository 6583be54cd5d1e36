//! The inbox view of one session: pending messages in FIFO order, claimed
//! ones with their turn, dropped ones with their epoch, and the receipts of
//! browser-authored prompts by their request id (for idempotent retries).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subagent_core::{ContentBlock, MessageDelivery, MessageId};

use crate::IdMap;

/// One session's inbox.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inbox {
    /// Accepted and not yet claimed, oldest first.
    pub pending: VecDeque<(MessageId, MessageDelivery)>,
    /// Claimed messages and the turn that claimed them.
    pub claimed: IdMap<MessageId, u64>,
    /// Dropped messages and the epoch whose disposal dropped them.
    pub dropped: IdMap<MessageId, u64>,
    /// Every message ever accepted.
    pub accepted: u64,
    /// Browser-authored messages by their caller-minted request id.
    pub prompts: IdMap<String, PromptRecord>,
}

/// A browser-authored message as its retries are compared with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptRecord {
    /// The id its inbox accepted it under: every retry's receipt.
    pub message_id: MessageId,
    /// [`prompt_digest`] of what it carried.
    pub digest: [u8; 32],
}

/// What a prompt carries, as one SHA-256 digest: its delivery, time zone and
/// content (its request id is the key, its address the inbox). Two prompts
/// with the same request id are one request exactly when their digests are
/// equal.
#[must_use]
pub fn prompt_digest(
    delivery: MessageDelivery,
    zone: Option<&str>,
    content: &[ContentBlock],
) -> [u8; 32] {
    let mut hasher = Sha256::new();
    // Each part is length-framed, so no two different requests share an
    // encoding.
    let parts = [
        serde_json::to_vec(&delivery).unwrap_or_default(),
        serde_json::to_vec(&zone).unwrap_or_default(),
        serde_json::to_vec(content).unwrap_or_default(),
    ];
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

impl Inbox {
    /// Ids pending, oldest first.
    pub fn pending_ids(&self) -> impl Iterator<Item = MessageId> + '_ {
        self.pending.iter().map(|(id, _)| *id)
    }

    pub(crate) fn accept(&mut self, id: MessageId, delivery: MessageDelivery) {
        self.pending.push_back((id, delivery));
        // Each acceptance is a record, so only a damaged checkpoint could
        // bring this near the limit; the fold itself never fails.
        self.accepted = self.accepted.saturating_add(1);
    }

    /// Keeps the first message under `request_id`: a later one under the
    /// same id is a retry `decide` answered without recording, or (in a
    /// damaged history) a conflict `decide` would have refused.
    pub(crate) fn record_prompt(
        &mut self,
        request_id: &str,
        message_id: MessageId,
        digest: [u8; 32],
    ) {
        self.prompts
            .entry(request_id.to_owned())
            .or_insert(PromptRecord { message_id, digest });
    }

    pub(crate) fn claim(&mut self, ids: &[MessageId], turn: u64) {
        self.pending.retain(|(id, _)| !ids.contains(id));
        self.claimed.extend(ids.iter().map(|id| (*id, turn)));
    }

    pub(crate) fn drop_messages(&mut self, ids: &[MessageId], epoch: u64) {
        self.pending.retain(|(id, _)| !ids.contains(id));
        self.dropped.extend(ids.iter().map(|id| (*id, epoch)));
    }
}
