//! Admissible histories from random steps: [`history`] interprets [`Step`]s
//! through the state machine's own rules, recording only what it could have.

use serde_json::json;

use crate::activation::{ActivationPhase, RunPhase};
use crate::machine;
use crate::state::Projections;
use subagent_core::content::ImageBlock;
use subagent_core::{
    AttachmentId, ContentBlock, Delivery, Event, MessageDelivery, MessageId, MessageSource,
    RecordedEvent, SessionId, SessionMode, StreamId, SubagentResult, SubagentRunId,
};

use super::HistoryBuilder;

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

/// Interprets `steps` into a history below one root that the state machine
/// could have produced (it passes [`crate::HistoryCheck`]): two registered
/// providers, children started with their first activation or run, messages
/// between adjacent sessions (cold-resuming an absent child), activations
/// walking through prepare, publish, turns (claim, start, transcript, end),
/// settle with its notice and release, external runs through start, settle
/// with their report and dispose, and admission changes. A step that the
/// state machine would refuse at that point records nothing.
#[must_use]
pub fn history(steps: &[Step]) -> Vec<RecordedEvent> {
    let mut legal = LegalHistory::new();
    for step in steps {
        match *step {
            Step::Child {
                parent,
                continuable,
            } => {
                let parent = legal.pick(parent);
                legal.start_child(parent, continuable);
            }
            Step::Message { target } => {
                let target = legal.pick(target);
                legal.message(target);
            }
            Step::Admission { target } => {
                let target = legal.pick(target);
                let event = if legal.state.admission_closed.contains(&target) {
                    Event::AdmissionReopened { parent: target }
                } else {
                    Event::AdmissionClosed { parent: target }
                };
                legal.push(StreamId::Runtime, event);
            }
            Step::Advance { target } => {
                let target = legal.pick(target);
                legal.advance(target);
            }
        }
    }
    legal.history.records
}

/// A [`HistoryBuilder`] that records only what the state machine would, by
/// asking the projections of the history so far.
pub(super) struct LegalHistory {
    pub(super) history: HistoryBuilder,
    pub(super) state: Projections,
    /// Every session, in creation order (the root first).
    pub(super) sessions: Vec<SessionId>,
    /// The epoch whose turn has run, per session.
    pub(super) turn_ran: std::collections::HashMap<SessionId, u64>,
}

impl LegalHistory {
    pub(super) fn new() -> Self {
        let mut legal = LegalHistory {
            history: HistoryBuilder::new(),
            state: Projections::new(),
            sessions: Vec::new(),
            turn_ran: std::collections::HashMap::new(),
        };
        let root = SessionId::new();
        legal.push(StreamId::Session(root), Event::root_created(root, "root"));
        legal.sessions.push(root);
        for (name, continuable) in [("spawn", true), ("process", false)] {
            legal.push(
                StreamId::Runtime,
                Event::ProviderRegistered {
                    name: name.into(),
                    capabilities: subagent_core::SubagentCapabilities::ALL,
                    inherits_parent_context: false,
                    route_defaults: None,
                    continuable,
                    one_shot: !continuable,
                },
            );
        }
        legal
    }

    pub(super) fn push(&mut self, stream: StreamId, event: Event) {
        let record = self.history.push(stream, event).clone();
        self.state.apply(&record);
    }

    pub(super) fn pick(&self, index: usize) -> SessionId {
        self.sessions[index % self.sessions.len()]
    }

    pub(super) fn start_child(&mut self, parent: SessionId, continuable: bool) {
        let Ok(parent_record) = machine::start_parent(&self.state, parent) else {
            return;
        };
        let depth = parent_record.depth + 1;
        let child = SessionId::new();
        let (provider, mode) = if continuable {
            ("spawn", SessionMode::Continuable)
        } else {
            ("process", SessionMode::OneShot)
        };
        self.push(
            StreamId::Session(parent),
            Event::ChildCataloged {
                child,
                label: "task".into(),
                provider: provider.into(),
                mode,
                external: !continuable,
            },
        );
        self.push(
            StreamId::Session(child),
            Event::SessionCreated {
                session: child,
                parent: Some(parent),
                depth,
                label: "task".into(),
                provider: Some(provider.into()),
                mode,
                external: !continuable,
                descriptor: json!({"version": 1, "provider": provider, "mode": mode, "inheritsParentContext": false}),
            },
        );
        let first = if continuable {
            Event::ActivationRequested {
                epoch: 1,
                delivery: Delivery::Parent,
                output_schema: None,
                requested_by: None,
            }
        } else {
            Event::RunRequested {
                run_id: SubagentRunId::from_uuid(*child.as_uuid()),
                provider: provider.into(),
                delivery: Delivery::Parent,
                requested_by: None,
            }
        };
        self.push(StreamId::Session(child), first);
        self.sessions.push(child);
    }

    /// A message from the target's parent, or for the root from its first
    /// child.
    pub(super) fn message(&mut self, target: SessionId) {
        let sender = match self.state.sessions.get(&target).and_then(|r| r.parent) {
            Some(parent) => parent,
            None => match self.state.catalogs.get(&target).and_then(|f| f.first()) {
                Some(fact) => fact.child,
                None => return,
            },
        };
        let Ok(route) = machine::route_message(&self.state, sender, target) else {
            return;
        };
        self.push(
            StreamId::Session(target),
            Event::MessageAccepted {
                message_id: MessageId::new(),
                source: MessageSource::AgentMessage {
                    sender_session_id: sender,
                },
                delivery: MessageDelivery::Queue,
                content: vec![ContentBlock::text("hello")],
            },
        );
        if let Some(epoch) = route.resume_epoch {
            self.push(
                StreamId::Session(target),
                Event::ActivationRequested {
                    epoch,
                    delivery: Delivery::Parent,
                    output_schema: None,
                    requested_by: None,
                },
            );
        }
    }

    /// The next lifecycle step of the target's activation or run.
    pub(super) fn advance(&mut self, target: SessionId) {
        let stream = StreamId::Session(target);
        if let Some(run) = self.state.runs.get(&target) {
            let run_id = run.run_id;
            match run.phase {
                RunPhase::Requested => self.push(stream, Event::RunStarted { run_id }),
                RunPhase::Started => {
                    self.push(
                        stream,
                        Event::RunSettled {
                            run_id,
                            result: SubagentResult::completed(vec![]),
                        },
                    );
                    self.report(target, run_id);
                }
                RunPhase::Settled => self.push(
                    stream,
                    Event::RunDisposed {
                        run_id,
                        cleanup_error: None,
                    },
                ),
                RunPhase::Disposed | RunPhase::StartFailed => {}
            }
            return;
        }
        let Some(activation) = self.state.activations.get(&target) else {
            return;
        };
        let Some(live) = activation.live.clone() else {
            return;
        };
        let epoch = live.epoch;
        if let Some(turn) = activation.running_turn {
            self.push(
                stream,
                Event::AssistantMessage {
                    turn,
                    content: vec![ContentBlock::text("done")],
                    usage: None,
                },
            );
            self.push(
                stream,
                Event::TurnEnded {
                    turn,
                    stop_reason: subagent_core::SubagentStopReason::Completed,
                },
            );
            return;
        }
        match live.phase {
            ActivationPhase::Requested => {
                self.push(
                    stream,
                    Event::ActivationPrepared {
                        epoch,
                        seeded_events: 0,
                    },
                );
                if let (1, Some(parent)) = (epoch, self.state.sessions[&target].parent) {
                    self.push(
                        stream,
                        Event::MessageAccepted {
                            message_id: MessageId::new(),
                            source: MessageSource::Delegation {
                                parent_session_id: parent,
                            },
                            delivery: MessageDelivery::Queue,
                            content: vec![ContentBlock::text("the task")],
                        },
                    );
                }
            }
            ActivationPhase::Prepared => self.push(
                stream,
                Event::ActivationPublished {
                    epoch,
                    run_id: SubagentRunId::new(),
                },
            ),
            ActivationPhase::Published => {
                let ran = self.turn_ran.get(&target) == Some(&epoch);
                let pending = !self.state.pending_messages(target).is_empty();
                if !ran || (live.settled && pending) {
                    let Ok((turn, _)) = machine::next_turn(&self.state, target) else {
                        return;
                    };
                    let ids = self.state.pending_messages(target);
                    self.push(stream, Event::MessagesClaimed { ids, turn });
                    self.push(stream, Event::TurnStarted { turn, epoch });
                    self.turn_ran.insert(target, epoch);
                } else if !live.settled {
                    let result = SubagentResult::completed(vec![ContentBlock::text("done")]);
                    self.push(
                        stream,
                        Event::ActivationSettled {
                            epoch,
                            result: result.clone(),
                        },
                    );
                    self.notice(target, epoch, &result);
                } else {
                    self.push(
                        stream,
                        Event::ActivationReleased {
                            epoch,
                            cleanup_error: None,
                        },
                    );
                }
            }
        }
    }

    /// The settlement notice a parent-delivered activation sends its parent.
    pub(super) fn notice(&mut self, child: SessionId, epoch: u64, result: &SubagentResult) {
        let record = &self.state.sessions[&child];
        let Some(parent) = record.parent else {
            return;
        };
        let summary = machine::settlement_summary(&record.label, result);
        self.push(
            StreamId::Session(parent),
            Event::MessageAccepted {
                message_id: machine::settlement_notice_id(child, epoch),
                source: MessageSource::SubagentSettled {
                    summary: summary.clone(),
                    sender_session_id: child,
                },
                delivery: MessageDelivery::Queue,
                content: vec![ContentBlock::text(summary)],
            },
        );
    }

    /// The report a parent-delivered external run sends its parent.
    pub(super) fn report(&mut self, child: SessionId, run_id: SubagentRunId) {
        let Some(parent) = self.state.sessions[&child].parent else {
            return;
        };
        self.push(
            StreamId::Session(parent),
            Event::MessageAccepted {
                message_id: MessageId::from_uuid(*run_id.as_uuid()),
                source: MessageSource::SubagentReport {
                    sender_session_id: child,
                },
                delivery: MessageDelivery::Queue,
                content: vec![ContentBlock::text("status: completed")],
            },
        );
    }
}

/// An admissible history whose last record is a prompt from the browser
/// (a message from the parent) to a continuable child, naming `image` (the
/// bytes of a PNG) by its attachment id, which is returned with it. The
/// image's bytes are not in the history: an export carries them on a line
/// of their own.
#[must_use]
pub fn history_with_image(image: &[u8]) -> (Vec<RecordedEvent>, AttachmentId) {
    let id = AttachmentId::of(image);
    let mut records = history(&[
        Step::Child {
            parent: 0,
            continuable: true,
        },
        Step::Message { target: 1 },
    ]);
    let last = records
        .last_mut()
        .expect("a child and a message record events");
    if let Event::MessageAccepted {
        source, content, ..
    } = &mut last.event
    {
        *source = MessageSource::Browser {
            request_id: "r".into(),
            zone: None,
        };
        *content = vec![
            ContentBlock::text("look"),
            ContentBlock::Image(ImageBlock {
                mime_type: "image/png".into(),
                data: None,
                attachment: Some(id.to_string()),
                extra: serde_json::Map::new(),
            }),
        ];
    } else {
        unreachable!("the history ends with a message: {last:?}");
    }
    (records, id)
}
