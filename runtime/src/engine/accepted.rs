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
use subagent_core::{ContentBlock, Event, MessageId, SessionId};

/// Kept at most: this many messages ...
const MAX_KEPT: usize = 4096;
/// ... and this many bytes of their contents, counted as JSON (or as the
/// JSON of their whole record, when the engine counted that already).
const MAX_KEPT_BYTES: usize = 16 * 1024 * 1024;

/// A message's inbox and id: what a claim names.
type Key = (SessionId, MessageId);

/// One kept message.
#[derive(Debug)]
struct Kept {
    content: Vec<ContentBlock>,
    /// The bytes it was counted as.
    bytes: usize,
    /// When it was kept: its place in the eviction queue.
    order: u64,
}

/// Accepted messages' contents by inbox and id, in acceptance order.
#[derive(Debug, Default)]
pub(crate) struct AcceptedContents {
    by_key: HashMap<Key, Kept>,
    /// Keys in the order they were kept, eviction's queue, each with its
    /// `Kept::order`. A key taken, dropped or kept again stays here until
    /// it reaches the front, where only a matching `order` evicts; the
    /// queue holds at most [`MAX_KEPT`], so `by_key` never holds more.
    queue: VecDeque<(Key, u64)>,
    /// The `order` of the next message kept.
    next_order: u64,
    /// The bytes of everything in `by_key`.
    bytes: usize,
}

impl AcceptedContents {
    /// Notes what `event`, just recorded on `session`'s stream, changes: an
    /// accepted message's contents are kept, dropped messages forgotten.
    /// `counted`: the bytes its whole record was already counted as (the
    /// engine counts every record it decides), which bound its contents'
    /// and stand for them; without it the contents are counted here.
    /// `claimed`: whether a driver claims `session`'s messages, asked only
    /// of an accepted message (a root's are read by its host from the log,
    /// so they are not kept).
    pub(crate) fn note(
        &mut self,
        session: SessionId,
        event: &Event,
        counted: Option<usize>,
        claimed: impl FnOnce() -> bool,
    ) {
        match event {
            Event::MessageAccepted {
                message_id,
                content,
                ..
            } if claimed() => self.keep((session, *message_id), content, counted),
            Event::MessagesDropped { ids, .. } => {
                for id in ids {
                    self.forget(&(session, *id));
                }
            }
            _ => {}
        }
    }

    fn keep(&mut self, key: Key, content: &[ContentBlock], counted: Option<usize>) {
        // Whatever was kept under this key is not what it holds now.
        self.forget(&key);
        // Contents that cannot be counted, or could never fit, are left
        // to the log.
        let Some(bytes) = counted.or_else(|| json_len(&content).ok()) else {
            return;
        };
        if bytes > MAX_KEPT_BYTES {
            return;
        }
        while self.queue.len() >= MAX_KEPT || self.bytes + bytes > MAX_KEPT_BYTES {
            let Some((oldest, order)) = self.queue.pop_front() else {
                break;
            };
            if self
                .by_key
                .get(&oldest)
                .is_some_and(|kept| kept.order == order)
            {
                self.forget(&oldest);
            }
        }
        let order = self.next_order;
        self.next_order += 1;
        self.by_key.insert(
            key,
            Kept {
                content: content.to_vec(),
                bytes,
                order,
            },
        );
        self.queue.push_back((key, order));
        self.bytes += bytes;
    }

    fn forget(&mut self, key: &Key) -> Option<Vec<ContentBlock>> {
        let kept = self.by_key.remove(key)?;
        self.bytes -= kept.bytes;
        Some(kept.content)
    }

    /// Takes the contents of `session`'s messages `ids`, in their order,
    /// if every one is kept. Otherwise answers `None` (the caller reads
    /// the log) and forgets those it kept: a message is claimed once, so
    /// nothing would take them later.
    pub(crate) fn take(
        &mut self,
        session: SessionId,
        ids: &[MessageId],
    ) -> Option<Vec<Vec<ContentBlock>>> {
        let taken: Vec<Option<Vec<ContentBlock>>> =
            ids.iter().map(|id| self.forget(&(session, *id))).collect();
        taken.into_iter().collect()
    }

    /// How many messages are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_key.len()
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

    /// One inbox's cache: notes and takes for `session`.
    struct Inbox {
        kept: AcceptedContents,
        session: SessionId,
    }

    impl Inbox {
        fn new() -> Inbox {
            Inbox {
                kept: AcceptedContents::default(),
                session: SessionId::new(),
            }
        }
        fn accept(&mut self, id: MessageId, content: Vec<ContentBlock>) {
            self.kept
                .note(self.session, &accepted(id, content), None, || true);
        }
        fn take(&mut self, ids: &[MessageId]) -> Option<Vec<Vec<ContentBlock>>> {
            self.kept.take(self.session, ids)
        }
    }

    #[test]
    fn a_claim_takes_what_was_accepted_once_in_its_order() {
        let mut inbox = Inbox::new();
        let (a, b) = (MessageId::new(), MessageId::new());
        inbox.accept(a, text("first"));
        inbox.accept(b, text("second"));
        assert_eq!(
            inbox.take(&[b, a]),
            Some(vec![text("second"), text("first")])
        );
        assert_eq!(inbox.take(&[a]), None, "a message is taken once");
        assert_eq!((inbox.kept.len(), inbox.kept.bytes), (0, 0));
    }

    #[test]
    fn a_claim_with_any_message_missing_takes_nothing_and_forgets_the_rest() {
        let mut inbox = Inbox::new();
        let (a, missing) = (MessageId::new(), MessageId::new());
        inbox.accept(a, text("kept"));
        assert_eq!(inbox.take(&[a, missing]), None);
        // The claim took `a` too (the caller reads it from the log), so
        // nothing is left holding it.
        assert_eq!((inbox.kept.len(), inbox.kept.bytes), (0, 0));
    }

    #[test]
    fn inboxes_are_kept_apart() {
        let mut inbox = Inbox::new();
        let id = MessageId::new();
        inbox.accept(id, text("mine"));
        assert_eq!(inbox.kept.take(SessionId::new(), &[id]), None);
        let mut inbox = Inbox::new();
        inbox.accept(id, text("mine"));
        let other = SessionId::new();
        inbox
            .kept
            .note(other, &accepted(id, text("theirs")), None, || true);
        assert_eq!(inbox.take(&[id]), Some(vec![text("mine")]));
        assert_eq!(inbox.kept.take(other, &[id]), Some(vec![text("theirs")]));
    }

    #[test]
    fn dropped_messages_are_forgotten() {
        let mut inbox = Inbox::new();
        let (a, b) = (MessageId::new(), MessageId::new());
        inbox.accept(a, text("dropped"));
        inbox.accept(b, text("kept"));
        inbox.kept.note(
            inbox.session,
            &Event::MessagesDropped {
                ids: vec![a],
                epoch: 1,
            },
            None,
            || true,
        );
        assert_eq!(inbox.take(&[a]), None);
        assert_eq!(inbox.take(&[b]), Some(vec![text("kept")]));
    }

    #[test]
    fn a_message_accepted_again_holds_its_latest_contents_or_none() {
        let mut inbox = Inbox::new();
        let (id, later) = (MessageId::new(), MessageId::new());
        inbox.accept(id, text("old"));
        inbox.accept(later, text("later"));
        inbox.accept(id, text("new"));
        // Past the count, the queue's stale place for `id` is evicted
        // first: it must not take the newer contents with it.
        for _ in 0..MAX_KEPT - 2 {
            inbox.accept(MessageId::new(), text("x"));
        }
        assert_eq!(inbox.take(&[id]), Some(vec![text("new")]));
        // Contents that cannot be kept leave nothing stale behind.
        inbox.accept(id, text("kept"));
        inbox.accept(id, text(&"h".repeat(MAX_KEPT_BYTES)));
        assert_eq!(inbox.take(&[id]), None);
    }

    #[test]
    fn the_oldest_go_first_past_the_count() {
        let mut inbox = Inbox::new();
        let ids: Vec<MessageId> = (0..=MAX_KEPT).map(|_| MessageId::new()).collect();
        for id in &ids {
            inbox.accept(*id, text("x"));
        }
        assert_eq!(inbox.kept.len(), MAX_KEPT);
        assert_eq!(inbox.take(&ids[..1]), None, "the oldest was evicted");
        assert_eq!(inbox.take(&ids[1..2]), Some(vec![text("x")]));
        assert_eq!(inbox.take(&ids[MAX_KEPT..]), Some(vec![text("x")]));
    }

    #[test]
    fn taken_messages_do_not_hold_places_in_the_queue_past_the_count() {
        let mut inbox = Inbox::new();
        // Far more messages than the bound pass through, each taken at
        // once: the queue of keys stays bounded too.
        for _ in 0..3 * MAX_KEPT {
            let id = MessageId::new();
            inbox.accept(id, text("x"));
            assert!(inbox.take(&[id]).is_some());
        }
        assert!(inbox.kept.queue.len() <= MAX_KEPT);
        assert_eq!(inbox.kept.len(), 0);
    }

    #[test]
    fn the_oldest_go_first_past_the_bytes_and_an_oversized_one_is_not_kept() {
        let mut inbox = Inbox::new();
        let quarter = "q".repeat(MAX_KEPT_BYTES / 4);
        let ids: Vec<MessageId> = (0..5).map(|_| MessageId::new()).collect();
        for id in &ids {
            inbox.accept(*id, text(&quarter));
        }
        assert!(inbox.kept.bytes <= MAX_KEPT_BYTES);
        assert_eq!(inbox.kept.len(), 3, "the first two were evicted");
        assert_eq!(inbox.take(&ids[2..]), Some(vec![text(&quarter); 3]));
        let (first, huge) = (MessageId::new(), MessageId::new());
        inbox.accept(first, text("small"));
        inbox.accept(huge, text(&"h".repeat(MAX_KEPT_BYTES)));
        assert_eq!(inbox.kept.len(), 1, "nothing was evicted for it");
        assert_eq!(inbox.take(&[first]), Some(vec![text("small")]));
        assert_eq!(inbox.take(&[huge]), None);
    }

    #[test]
    fn bytes_are_counted_as_json_and_returned_when_taken() {
        let mut inbox = Inbox::new();
        let id = MessageId::new();
        let content = text("counted");
        inbox.accept(id, content.clone());
        assert_eq!(inbox.kept.bytes, json_len(&content).unwrap());
        inbox.take(&[id]);
        assert_eq!(inbox.kept.bytes, 0);
    }
}
