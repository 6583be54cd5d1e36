//! The inbox view of one session: pending messages in FIFO order, claimed
//! ones with their turn, dropped ones with their epoch.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use subagent_core::{MessageDelivery, MessageId};

/// One session's inbox.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inbox {
    /// Accepted and not yet claimed, oldest first.
    pub pending: VecDeque<(MessageId, MessageDelivery)>,
    /// Claimed messages and the turn that claimed them.
    pub claimed: HashMap<MessageId, u64>,
    /// Dropped messages and the epoch whose disposal dropped them.
    pub dropped: HashMap<MessageId, u64>,
    /// Every message ever accepted.
    pub accepted: u64,
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

    pub(crate) fn claim(&mut self, ids: &[MessageId], turn: u64) {
        self.pending.retain(|(id, _)| !ids.contains(id));
        self.claimed.extend(ids.iter().map(|id| (*id, turn)));
    }

    pub(crate) fn drop_messages(&mut self, ids: &[MessageId], epoch: u64) {
        self.pending.retain(|(id, _)| !ids.contains(id));
        self.dropped.extend(ids.iter().map(|id| (*id, epoch)));
    }
}
