//! Builders of histories for tests of this crate and the crates above it
//! (feature `testing`). They build events through the same `Event` variants
//! the runtime appends. [`HistoryBuilder`]'s methods record exactly what they
//! are told, so projection tests can also build histories the state machine
//! would never produce (a child with no provider, a cycle); [`history`]
//! records only what the state machine could have (it passes
//! [`crate::HistoryCheck`]), so replay, import and verify can use it.
//!
//! Layout: this file holds [`HistoryBuilder`]; `legal` interprets random
//! [`Step`]s into admissible histories ([`history`]); `impossible` builds
//! the histories the state machine could not have produced
//! ([`impossible_histories`]).

mod impossible;
mod legal;

pub use impossible::{impossible_histories, ImpossibleHistory};
pub use legal::{history, history_with_image, steps, Step};

use serde_json::json;

use subagent_core::{
    ContentBlock, Delivery, Event, EventId, MessageDelivery, MessageId, MessageSource,
    RecordedEvent, SessionId, SessionMode, StreamId, SubagentResult, SubagentRunId,
    CURRENT_SCHEMA_VERSION,
};

/// Accumulates recorded events with gap-free positions and stream versions,
/// like a log would.
#[derive(Default)]
pub struct HistoryBuilder {
    /// The records so far.
    pub records: Vec<RecordedEvent>,
    versions: std::collections::HashMap<StreamId, u64>,
}

impl HistoryBuilder {
    /// An empty history.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `event` in `stream`.
    pub fn push(&mut self, stream: StreamId, event: Event) -> &RecordedEvent {
        let version = self.versions.entry(stream).or_insert(0);
        *version += 1;
        let position = self.records.len() as u64 + 1;
        self.records.push(RecordedEvent {
            position,
            stream,
            version: *version,
            event_id: EventId::new(),
            recorded_at: 1_764_460_800_000 + position,
            schema_version: CURRENT_SCHEMA_VERSION,
            correlation_id: None,
            causation_id: None,
            trace: None,
            event,
        });
        &self.records[self.records.len() - 1]
    }

    /// Records a host root.
    pub fn root(&mut self, label: &str) -> SessionId {
        let id = SessionId::new();
        self.push(StreamId::Session(id), Event::root_created(id, label));
        id
    }

    /// Records a root and a chain `depth` continuable sessions deep below
    /// it, labelled `c1`, `c2`, ...; returns the root.
    pub fn chain(&mut self, depth: u64) -> SessionId {
        let root = self.root("root");
        let mut parent = root;
        for level in 1..=depth {
            parent = self.child(
                parent,
                level,
                &format!("c{level}"),
                SessionMode::Continuable,
                false,
            );
        }
        root
    }

    /// Records a child: its catalog entry in the parent and its creation.
    pub fn child(
        &mut self,
        parent: SessionId,
        depth: u64,
        label: &str,
        mode: SessionMode,
        external: bool,
    ) -> SessionId {
        let id = SessionId::new();
        let provider = if external { "process" } else { "spawn" };
        self.push(
            StreamId::Session(parent),
            Event::ChildCataloged {
                child: id,
                label: label.into(),
                provider: provider.into(),
                mode,
                external,
            },
        );
        self.push(
            StreamId::Session(id),
            Event::SessionCreated {
                session: id,
                parent: Some(parent),
                depth,
                label: label.into(),
                provider: Some(provider.into()),
                mode,
                external,
                descriptor: json!({"version": 1, "provider": provider, "mode": mode, "inheritsParentContext": false}),
            },
        );
        id
    }

    /// Records a message accepted into `session`'s inbox.
    pub fn message(&mut self, session: SessionId, sender: SessionId) -> MessageId {
        let id = MessageId::new();
        self.push(
            StreamId::Session(session),
            Event::MessageAccepted {
                message_id: id,
                source: MessageSource::AgentMessage {
                    sender_session_id: sender,
                },
                delivery: MessageDelivery::Queue,
                content: vec![ContentBlock::text("hello")],
            },
        );
        id
    }

    /// Records `count` continuable children of `parent` (a root: depth 1),
    /// each sent one message by `parent` and then through one full
    /// activation epoch that claims it ([`HistoryBuilder::activation`]).
    pub fn children_with_one_activation(&mut self, parent: SessionId, count: usize) {
        for _ in 0..count {
            let child = self.child(parent, 1, "worker", SessionMode::Continuable, false);
            let message = self.message(child, parent);
            self.activation(child, 1, 1, vec![message]);
        }
    }

    /// Records a full activation epoch that publishes, runs one turn claiming
    /// the pending `claims`, settles and releases.
    pub fn activation(
        &mut self,
        session: SessionId,
        epoch: u64,
        turn: u64,
        claims: Vec<MessageId>,
    ) {
        let stream = StreamId::Session(session);
        let result = SubagentResult::completed(vec![ContentBlock::text("done")]);
        for event in [
            Event::ActivationRequested {
                epoch,
                delivery: Delivery::Parent,
                output_schema: None,
                requested_by: None,
            },
            Event::ActivationPrepared {
                epoch,
                seeded_events: 0,
            },
            Event::ActivationPublished {
                epoch,
                run_id: SubagentRunId::new(),
            },
            Event::MessagesClaimed { ids: claims, turn },
            Event::TurnStarted { turn, epoch },
            Event::AssistantMessage {
                turn,
                content: result.output.clone(),
                usage: None,
            },
            Event::TurnEnded {
                turn,
                stop_reason: result.stop_reason.clone(),
            },
            Event::ActivationSettled { epoch, result },
            Event::ActivationReleased {
                epoch,
                cleanup_error: None,
            },
        ] {
            self.push(stream, event);
        }
    }
}
