//! Histories the state machine could not have produced, one impossible
//! record after an admissible prefix each: what `import` must refuse and
//! `verify` report.

use serde_json::json;

use subagent_core::{
    Delivery, Event, MessageDelivery, MessageId, MessageSource, RecordedEvent, SessionId,
    SessionMode, StreamId, SubagentResult, SubagentRunId,
};

use super::legal::LegalHistory;

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
    let cases: [Case; 26] = [
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
        ("child asked for by a call of no running turn", |b| {
            let child = SessionId::new();
            vec![
                (StreamId::Session(b.child), b.cataloged(child)),
                (StreamId::Session(child), b.created(child, Some(b.child), 2)),
                (StreamId::Session(child), requested_by_call_1()),
            ]
        }),
        (
            "child asked for by a call its parent's turn never made",
            |b| {
                let child = SessionId::new();
                vec![
                    (
                        StreamId::Session(b.child),
                        Event::MessagesClaimed {
                            ids: b.pending.clone(),
                            turn: 1,
                        },
                    ),
                    (
                        StreamId::Session(b.child),
                        Event::TurnStarted { turn: 1, epoch: 1 },
                    ),
                    (StreamId::Session(b.child), b.cataloged(child)),
                    (StreamId::Session(child), b.created(child, Some(b.child), 2)),
                    (StreamId::Session(child), requested_by_call_1()),
                ]
            },
        ),
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

/// A first request naming the call `call-1` of turn 1 of its parent.
fn requested_by_call_1() -> Event {
    Event::ActivationRequested {
        epoch: 1,
        delivery: Delivery::Parent,
        output_schema: None,
        requested_by: Some(subagent_core::ToolCallRef {
            turn: 1,
            call_id: "call-1".into(),
        }),
    }
}

fn requested(epoch: u64) -> Event {
    Event::ActivationRequested {
        epoch,
        delivery: Delivery::Parent,
        output_schema: None,
        requested_by: None,
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
