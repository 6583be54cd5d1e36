//! Builders of well-formed histories for tests of this crate and the crates
//! above it (feature `testing`). They build events through the same `Event`
//! variants the runtime appends.

use serde_json::json;

use crate::state::Projections;
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

/// One step of a random history, interpreted against the history so far so
/// that the result is always well-formed (indices wrap around what exists).
#[derive(Clone, Debug)]
pub enum Step {
    /// A new child below an existing session.
    Child {
        /// Which existing session is the parent.
        parent: usize,
        /// Continuable or one-shot.
        continuable: bool,
    },
    /// A message into a continuable session.
    Message {
        /// Target session.
        target: usize,
    },
    /// Next lifecycle step of a continuable session's activation.
    Advance {
        /// Target session.
        target: usize,
    },
    /// A drain closes or reopens admission below a session.
    Admission {
        /// Target session.
        target: usize,
    },
}

/// Random steps.
pub fn steps(max: usize) -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
    use proptest::prelude::*;
    let step = prop_oneof![
        1 => (any::<usize>(), any::<bool>()).prop_map(|(parent, continuable)| Step::Child { parent, continuable }),
        1 => any::<usize>().prop_map(|target| Step::Message { target }),
        3 => any::<usize>().prop_map(|target| Step::Advance { target }),
        1 => any::<usize>().prop_map(|target| Step::Admission { target }),
    ];
    proptest::collection::vec(step, 1..max)
}

/// Interprets `steps` into a well-formed history below one root: sessions,
/// catalogs, inbox traffic, activations walking through request, publish,
/// claim, turn, settle and release (or abandon), and admission changes.
#[must_use]
pub fn history(steps: &[Step]) -> Vec<RecordedEvent> {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    // (session, depth, continuable), and per continuable session its stage.
    let mut sessions: Vec<(SessionId, u64, bool)> = vec![(root, 0, true)];
    let mut stage: std::collections::HashMap<SessionId, (u64, u8)> =
        std::collections::HashMap::new();
    let mut closed: std::collections::HashSet<SessionId> = std::collections::HashSet::new();
    for step in steps {
        match *step {
            Step::Child {
                parent,
                continuable,
            } => {
                let (parent, depth, _) = sessions[parent % sessions.len()];
                let mode = if continuable {
                    SessionMode::Continuable
                } else {
                    SessionMode::OneShot
                };
                let child = history.child(parent, depth + 1, "task", mode, !continuable);
                sessions.push((child, depth + 1, continuable));
            }
            Step::Message { target } => {
                let (session, _, continuable) = sessions[target % sessions.len()];
                if continuable {
                    history.message(session, root);
                }
            }
            Step::Admission { target } => {
                let (session, _, _) = sessions[target % sessions.len()];
                let event = if closed.remove(&session) {
                    Event::AdmissionReopened { parent: session }
                } else {
                    closed.insert(session);
                    Event::AdmissionClosed { parent: session }
                };
                history.push(StreamId::Runtime, event);
            }
            Step::Advance { target } => {
                let (session, _, continuable) = sessions[target % sessions.len()];
                let stream = StreamId::Session(session);
                if !continuable {
                    let run_id = SubagentRunId::from_uuid(*session.as_uuid());
                    let event = match history
                        .records
                        .iter()
                        .rev()
                        .find(|r| r.stream == stream)
                        .map(|r| r.event.type_name())
                    {
                        Some("SessionCreated") => Event::RunRequested {
                            run_id,
                            provider: "process".into(),
                            delivery: Delivery::Parent,
                        },
                        Some("RunRequested") => Event::RunStarted { run_id },
                        Some("RunStarted") => Event::RunSettled {
                            run_id,
                            result: SubagentResult::completed(vec![]),
                        },
                        Some("RunSettled") => Event::RunDisposed {
                            run_id,
                            cleanup_error: None,
                        },
                        _ => continue,
                    };
                    history.push(stream, event);
                    continue;
                }
                let (epoch, phase) = stage.entry(session).or_insert((0, 0));
                let turn = *epoch;
                let event = match *phase {
                    0 => {
                        *epoch += 1;
                        Event::ActivationRequested {
                            epoch: *epoch,
                            delivery: Delivery::Parent,
                            output_schema: None,
                        }
                    }
                    1 => Event::ActivationPublished {
                        epoch: *epoch,
                        run_id: SubagentRunId::new(),
                    },
                    2 => {
                        let pending: Vec<MessageId> =
                            Projections::fold(&history.records).pending_messages(session);
                        Event::MessagesClaimed { ids: pending, turn }
                    }
                    3 => Event::TurnStarted {
                        turn,
                        epoch: *epoch,
                    },
                    4 => Event::TurnEnded {
                        turn,
                        stop_reason: subagent_core::SubagentStopReason::Completed,
                    },
                    5 => Event::ActivationSettled {
                        epoch: *epoch,
                        result: SubagentResult::completed(vec![]),
                    },
                    _ => Event::ActivationReleased {
                        epoch: *epoch,
                        cleanup_error: None,
                    },
                };
                *phase = (*phase + 1) % 7;
                history.push(stream, event);
            }
        }
    }
    history.records
}
