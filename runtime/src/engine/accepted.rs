//! The contents of messages this engine recorded as accepted and nobody
//! has taken yet: what a claim took, handed to the driver that claimed it
//! without rereading the session's stream.
//!
//! A cache, not a projection: the log stays the truth, and a claim whose
//! messages are not here (accepted before the runtime opened, or evicted)
//! reads them from the log as before. It is fed as the engine folds live
//! records in ([`Pipeline::fold_live`](super::Pipeline::fold_live): its
//! own commands' and, on a shared log, the follower's), never by the
//! opening fold (which would clone every message in the log's tail to keep
//! a few), and bounded by count and by bytes, oldest out first.

use std::collections::VecDeque;

use foldhash::HashMap;
use subagent_core::record::json_len;
use subagent_core::{ContentBlock, Event, MessageId};

/// Kept at most: this many messages ...
const MAX_KEPT: usize = 4096;
/// ... and this many bytes of their contents, counted as JSON.
const MAX_KEPT_BYTES: usize = 16 * 1024 * 1024;

/// Accepted messages' contents by id, in acceptance order.
#[derive(Debug, Default)]
pub(crate) struct AcceptedContents {
    /// The contents kept, with the bytes each was counted as.
    by_id: HashMap<MessageId, (Vec<ContentBlock>, usize)>,
    /// Ids in acceptance order, eviction's queue. An id taken or dropped
    /// stays here until it reaches the front; the queue holds at most
    /// [`MAX_KEPT`], so `by_id` never holds more.
    order: VecDeque<MessageId>,
    /// The bytes of everything in `by_id`.
    bytes: usize,
}

impl AcceptedContents {
    /// Notes what `event`, just recorded, changes: an accepted message's
    /// contents are kept, dropped messages are forgotten.
    pub(crate) fn note(&mut self, event: &Event) {
        match event {
            Event::MessageAccepted {
                message_id,
                content,
                ..
            } => self.keep(*message_id, content),
            Event::MessagesDropped { ids, .. } => {
                for id in ids {
                    self.forget(id);
                }
            }
            _ => {}
        }
    }

    fn keep(&mut self, id: MessageId, content: &[ContentBlock]) {
        // Contents that cannot be counted are left to the log.
        let Ok(bytes) = json_len(&content) else {
            return;
        };
        if bytes > MAX_KEPT_BYTES {
            return;
        }
        self.forget(&id);
        while self.order.len() >= MAX_KEPT || self.bytes + bytes > MAX_KEPT_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.forget(&oldest);
        }
        self.by_id.insert(id, (content.to_vec(), bytes));
        self.order.push_back(id);
        self.bytes += bytes;
    }

    fn forget(&mut self, id: &MessageId) -> Option<Vec<ContentBlock>> {
        let (content, bytes) = self.by_id.remove(id)?;
        self.bytes -= bytes;
        Some(content)
    }

    /// Takes the contents of `ids`, in their order, if every one is kept;
    /// otherwise takes nothing and answers `None` (the caller reads the
    /// log). Taken contents are forgotten: a message is claimed once.
    pub(crate) fn take(&mut self, ids: &[MessageId]) -> Option<Vec<Vec<ContentBlock>>> {
        if !ids.iter().all(|id| self.by_id.contains_key(id)) {
            return None;
        }
        ids.iter().map(|id| self.forget(id)).collect()
    }

    /// How many messages are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use subagent_core::content::TextBlock;
    use subagent_core::{MessageDelivery, MessageSource};

    use super::*;

    fn text(text: &str) -> Vec<ContentBlock> {
        vec![ContentBlock::Text(TextBlock {
            text: text.to_owned(),
            extra: serde_json::Map::new(),
        })]
    }

    fn accepted(id: MessageId, content: Vec<ContentBlock>) -> Event {
        Event::MessageAccepted {
            message_id: id,
            source: MessageSource::User,
            delivery: MessageDelivery::Queue,
            content,
        }
    }

    #[test]
    fn a_claim_takes_what_was_accepted_once_in_its_order() {
        let mut kept = AcceptedContents::default();
        let (a, b) = (MessageId::new(), MessageId::new());
        kept.note(&accepted(a, text("first")));
        kept.note(&accepted(b, text("second")));
        assert_eq!(
            kept.take(&[b, a]),
            Some(vec![text("second"), text("first")])
        );
        assert_eq!(kept.take(&[a]), None, "a message is taken once");
        assert_eq!((kept.len(), kept.bytes), (0, 0));
    }

    #[test]
    fn a_claim_with_any_message_missing_takes_nothing() {
        let mut kept = AcceptedContents::default();
        let (a, missing) = (MessageId::new(), MessageId::new());
        kept.note(&accepted(a, text("kept")));
        assert_eq!(kept.take(&[a, missing]), None);
        assert_eq!(
            kept.take(&[a]),
            Some(vec![text("kept")]),
            "left for the next claim"
        );
    }

    #[test]
    fn dropped_messages_are_forgotten() {
        let mut kept = AcceptedContents::default();
        let (a, b) = (MessageId::new(), MessageId::new());
        kept.note(&accepted(a, text("dropped")));
        kept.note(&accepted(b, text("kept")));
        kept.note(&Event::MessagesDropped {
            ids: vec![a],
            epoch: 1,
        });
        assert_eq!(kept.take(&[a]), None);
        assert_eq!(kept.take(&[b]), Some(vec![text("kept")]));
    }

    #[test]
    fn the_oldest_go_first_past_the_count() {
        let mut kept = AcceptedContents::default();
        let ids: Vec<MessageId> = (0..=MAX_KEPT).map(|_| MessageId::new()).collect();
        for id in &ids {
            kept.note(&accepted(*id, text("x")));
        }
        assert_eq!(kept.len(), MAX_KEPT);
        assert_eq!(kept.take(&ids[..1]), None, "the oldest was evicted");
        assert_eq!(kept.take(&ids[1..2]), Some(vec![text("x")]));
        assert_eq!(kept.take(&ids[MAX_KEPT..]), Some(vec![text("x")]));
    }

    #[test]
    fn taken_messages_do_not_hold_places_in_the_queue_past_the_count() {
        let mut kept = AcceptedContents::default();
        // Far more messages than the bound pass through, each taken at
        // once: the queue of ids stays bounded too.
        for _ in 0..3 * MAX_KEPT {
            let id = MessageId::new();
            kept.note(&accepted(id, text("x")));
            assert!(kept.take(&[id]).is_some());
        }
        assert!(kept.order.len() <= MAX_KEPT);
        assert_eq!(kept.len(), 0);
    }

    #[test]
    fn the_oldest_go_first_past_the_bytes_and_an_oversized_one_is_not_kept() {
        let mut kept = AcceptedContents::default();
        let quarter = "q".repeat(MAX_KEPT_BYTES / 4);
        let ids: Vec<MessageId> = (0..5).map(|_| MessageId::new()).collect();
        for id in &ids {
            kept.note(&accepted(*id, text(&quarter)));
        }
        assert!(kept.bytes <= MAX_KEPT_BYTES);
        assert_eq!(kept.take(&ids[..2]), None, "the first two were evicted");
        assert_eq!(kept.len(), 3);
        let huge = MessageId::new();
        kept.note(&accepted(huge, text(&"h".repeat(MAX_KEPT_BYTES))));
        assert_eq!(kept.take(&[huge]), None);
        assert_eq!(kept.len(), 3, "nothing was evicted for it");
    }

    #[test]
    fn bytes_are_counted_as_json_and_returned_when_taken() {
        let mut kept = AcceptedContents::default();
        let id = MessageId::new();
        let content = text("counted");
        kept.note(&accepted(id, content.clone()));
        assert_eq!(kept.bytes, json_len(&content).unwrap());
        kept.take(&[id]);
        assert_eq!(kept.bytes, 0);
    }
}
