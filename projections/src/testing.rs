//! Builders of histories for tests of this crate and the crates above it
//! (feature `testing`). They build events through the same `Event` variants
//! the runtime appends. [`HistoryBuilder`]'s methods record exactly what they
//! are told, so projection tests can also build histories the state machine
//! would never produce (a child with no provider, a cycle); [`history`]
//! records only what the state machine could have (it passes
//! [`crate::HistoryCheck`]), so replay, import and verify can use it.

use serde_json::json;

use crate::activation::{ActivationPhase, RunPhase};
use crate::machine;
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
struct LegalHistory {
    history: HistoryBuilder,
    state: Projections,
    /// Every session, in creation order (the root first).
    sessions: Vec<SessionId>,
    /// The epoch whose turn has run, per session.
    turn_ran: std::collections::HashMap<SessionId, u64>,
}

impl LegalHistory {
    fn new() -> Self {
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

    fn push(&mut self, stream: StreamId, event: Event) {
        let record = self.history.push(stream, event).clone();
        self.state.apply(&record);
    }

    fn pick(&self, index: usize) -> SessionId {
        self.sessions[index % self.sessions.len()]
    }

    fn start_child(&mut self, parent: SessionId, continuable: bool) {
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
            }
        } else {
            Event::RunRequested {
                run_id: SubagentRunId::from_uuid(*child.as_uuid()),
                provider: provider.into(),
                delivery: Delivery::Parent,
            }
        };
        self.push(StreamId::Session(child), first);
        self.sessions.push(child);
    }

    /// A message from the target's parent, or for the root from its first
    /// child.
    fn message(&mut self, target: SessionId) {
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
                },
            );
        }
    }

    /// The next lifecycle step of the target's activation or run.
    fn advance(&mut self, target: SessionId) {
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
    fn notice(&mut self, child: SessionId, epoch: u64, result: &SubagentResult) {
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
    fn report(&mut self, child: SessionId, run_id: SubagentRunId) {
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

/// One history the state machine could not have produced.
pub struct ImpossibleHistory {
    /// What is wrong with it.
    pub name: &'static str,
    /// The records.
    pub records: Vec<RecordedEvent>,
    /// The position of its first impossible record (for a history that ends
    /// inside a decision: its last position).
    pub position: u64,
}

/// Histories the state machine could not have produced, each an admissible
/// prefix (a root, both providers, a published continuable child whose
/// prompt is pending, a requested external run) followed by one impossible
/// record: the adversarial cases `import` must refuse and `verify` report.
#[must_use]
pub fn impossible_histories() -> Vec<ImpossibleHistory> {
    type Case = (&'static str, fn(&mut Base) -> Vec<(StreamId, Event)>);
    let cases: [Case; 24] = [
        ("orphan child", |b| {
            let child = SessionId::new();
            vec![(
                StreamId::Session(child),
                b.created(child, Some(SessionId::new()), 1),
            )]
        }),
        ("self-parent", |b| {
            let child = SessionId::new();
            vec![(StreamId::Session(child), b.created(child, Some(child), 1))]
        }),
        ("parent cycle", |b| {
            let (first, second) = (SessionId::new(), SessionId::new());
            vec![
                (StreamId::Session(first), b.created(first, Some(second), 1)),
                (StreamId::Session(second), b.created(second, Some(first), 2)),
            ]
        }),
        ("cycle through the catalog", |b| {
            vec![(StreamId::Session(b.child), b.cataloged(b.root))]
        }),
        ("catalog entry without its session", |b| {
            let (child, other) = (SessionId::new(), SessionId::new());
            vec![
                (StreamId::Session(b.root), b.cataloged(child)),
                (
                    StreamId::Session(other),
                    Event::root_created(other, "other"),
                ),
            ]
        }),
        ("log ends inside a start", |b| {
            vec![(StreamId::Session(b.root), b.cataloged(SessionId::new()))]
        }),
        ("session created twice", |b| {
            vec![(
                StreamId::Session(b.root),
                Event::root_created(b.root, "again"),
            )]
        }),
        ("two live epochs of one session", |b| {
            vec![(StreamId::Session(b.child), requested(2))]
        }),
        ("settle with no request", |b| {
            vec![(
                StreamId::Session(b.run_child),
                Event::ActivationSettled {
                    epoch: 1,
                    result: SubagentResult::completed(vec![]),
                },
            )]
        }),
        ("release with no request", |b| {
            vec![(
                StreamId::Session(b.root),
                Event::ActivationReleased {
                    epoch: 1,
                    cleanup_error: None,
                },
            )]
        }),
        ("release before the result", |b| {
            vec![(
                StreamId::Session(b.child),
                Event::ActivationReleased {
                    epoch: 1,
                    cleanup_error: None,
                },
            )]
        }),
        ("turn without its claim", |b| {
            vec![(
                StreamId::Session(b.child),
                Event::TurnStarted { turn: 1, epoch: 1 },
            )]
        }),
        ("claim that leaves a pending message", |b| {
            vec![(
                StreamId::Session(b.child),
                Event::MessagesClaimed {
                    ids: vec![],
                    turn: 1,
                },
            )]
        }),
        ("transcript outside a turn", |b| {
            vec![(
                StreamId::Session(b.child),
                Event::AssistantMessage {
                    turn: 1,
                    content: vec![],
                    usage: None,
                },
            )]
        }),
        ("run disposed before it settled", |b| {
            vec![(
                StreamId::Session(b.run_child),
                Event::RunDisposed {
                    run_id: SubagentRunId::from_uuid(*b.run_child.as_uuid()),
                    cleanup_error: None,
                },
            )]
        }),
        ("dropped messages", |b| {
            vec![(
                StreamId::Session(b.child),
                Event::MessagesDropped {
                    ids: vec![],
                    epoch: 1,
                },
            )]
        }),
        ("user message", |b| {
            vec![(
                StreamId::Session(b.root),
                Event::MessageAccepted {
                    message_id: MessageId::new(),
                    source: MessageSource::User,
                    delivery: MessageDelivery::Queue,
                    content: vec![],
                },
            )]
        }),
        ("message between siblings", |b| {
            vec![(
                StreamId::Session(b.child),
                Event::MessageAccepted {
                    message_id: MessageId::new(),
                    source: MessageSource::AgentMessage {
                        sender_session_id: b.run_child,
                    },
                    delivery: MessageDelivery::Queue,
                    content: vec![],
                },
            )]
        }),
        ("provider registered twice", |_| {
            vec![(StreamId::Runtime, registration("spawn", true))]
        }),
        ("child of a removed provider", |b| {
            vec![
                (
                    StreamId::Runtime,
                    Event::ProviderRemoved {
                        name: "spawn".into(),
                    },
                ),
                (StreamId::Session(b.root), b.cataloged(SessionId::new())),
            ]
        }),
        ("child below closed admission", |b| {
            vec![
                (StreamId::Runtime, Event::AdmissionClosed { parent: b.root }),
                (StreamId::Session(b.root), b.cataloged(SessionId::new())),
            ]
        }),
        ("child at the wrong depth", |b| {
            let child = SessionId::new();
            vec![
                (StreamId::Session(b.root), b.cataloged(child)),
                (StreamId::Session(child), b.created(child, Some(b.root), 5)),
            ]
        }),
        ("recovery marker with nothing recovered", |b| {
            vec![(
                StreamId::Runtime,
                Event::HostRecovered {
                    previous_head: b.head,
                    abandoned_activations: 0,
                    failed_runs: 0,
                },
            )]
        }),
        ("claim for a turn out of sequence", |b| {
            vec![(
                StreamId::Session(b.child),
                Event::MessagesClaimed {
                    ids: b.pending.clone(),
                    turn: u64::MAX,
                },
            )]
        }),
    ];
    cases
        .into_iter()
        .map(|(name, bad)| {
            let mut base = Base::new();
            let records = bad(&mut base);
            let mut history = base.legal.history;
            let first_bad = history.records.len() as u64 + 1;
            for (stream, event) in records {
                history.push(stream, event);
            }
            // Only the cycle's first record is already impossible; every
            // other case's last record is its first impossible one (or, for
            // a log ending inside a start, the last position).
            let position = if name == "parent cycle" {
                first_bad
            } else {
                history.records.len() as u64
            };
            ImpossibleHistory {
                name,
                records: history.records,
                position,
            }
        })
        .collect()
}

fn requested(epoch: u64) -> Event {
    Event::ActivationRequested {
        epoch,
        delivery: Delivery::Parent,
        output_schema: None,
    }
}

fn registration(name: &str, continuable: bool) -> Event {
    Event::ProviderRegistered {
        name: name.into(),
        capabilities: subagent_core::SubagentCapabilities::ALL,
        inherits_parent_context: false,
        route_defaults: None,
        continuable,
        one_shot: !continuable,
    }
}

/// The admissible prefix of [`impossible_histories`].
struct Base {
    legal: LegalHistory,
    root: SessionId,
    /// A continuable child, published, its prompt pending.
    child: SessionId,
    /// An external child whose run is requested.
    run_child: SessionId,
    /// The child's pending messages.
    pending: Vec<MessageId>,
    head: u64,
}

impl Base {
    fn new() -> Self {
        let mut legal = LegalHistory::new();
        let root = legal.sessions[0];
        legal.start_child(root, true);
        let child = legal.sessions[1];
        legal.advance(child);
        legal.advance(child);
        legal.start_child(root, false);
        let run_child = legal.sessions[2];
        let pending = legal.state.pending_messages(child);
        let head = legal.state.position;
        Base {
            legal,
            root,
            child,
            run_child,
            pending,
            head,
        }
    }

    fn cataloged(&self, child: SessionId) -> Event {
        Event::ChildCataloged {
            child,
            label: "task".into(),
            provider: "spawn".into(),
            mode: SessionMode::Continuable,
            external: false,
        }
    }

    fn created(&self, child: SessionId, parent: Option<SessionId>, depth: u64) -> Event {
        Event::SessionCreated {
            session: child,
            parent,
            depth,
            label: "task".into(),
            provider: Some("spawn".into()),
            mode: SessionMode::Continuable,
            external: false,
            descriptor: json!({"version": 1, "provider": "spawn", "mode": "continuable", "inheritsParentContext": false}),
        }
    }
}
