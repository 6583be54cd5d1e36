//! The state machine, command by command: what each command records, and
//! each rejection with its stable code.

use subagent_core::{
    AbandonReason, AgentOptions, AgentRoute, ContentBlock, Delivery, Diagnostic, ErrorCode, Event,
    MessageId, MessageSource, ModelSelectionSettings, OutOfOrder, SessionId, StartOptions,
    StartSettings, SubagentCapabilities, SubagentError, SubagentResult, SubagentRunId,
    SubagentStopReason, ToolRestriction,
};
use subagent_projections::machine::{
    decide, settlement_summary, Command, Decision, StartChild, TurnOutput,
};
use subagent_projections::testing::HistoryBuilder;
use subagent_projections::{Activity, Projections, RunPhase};

/// A state plus the history it was folded from; `commit` plays the runtime.
struct World {
    history: HistoryBuilder,
    state: Projections,
}

impl World {
    fn new() -> Self {
        let mut world = World {
            history: HistoryBuilder::new(),
            state: Projections::new(),
        };
        for (name, continuable, capabilities) in [
            (
                "spawn",
                true,
                SubagentCapabilities {
                    tool_filter: true,
                    depth_limit: true,
                    ..SubagentCapabilities::default()
                },
            ),
            ("process", false, SubagentCapabilities::default()),
        ] {
            world.run(Command::RegisterProvider {
                registration: Event::ProviderRegistered {
                    name: name.into(),
                    capabilities,
                    inherits_parent_context: false,
                    route_defaults: None,
                    continuable,
                    one_shot: !continuable,
                },
            });
        }
        world
    }

    fn commit(&mut self, decision: Decision) -> Vec<(subagent_core::StreamId, Event)> {
        let mut recorded = Vec::new();
        for (stream, events) in decision {
            for event in events {
                let record = self.history.push(stream, event.clone()).clone();
                self.state.apply(&record);
                recorded.push((stream, event));
            }
        }
        recorded
    }

    fn run(&mut self, command: Command) -> Vec<(subagent_core::StreamId, Event)> {
        let decision = decide(&self.state, command).expect("command accepted");
        self.commit(decision)
    }

    /// Registers a continuable provider with every start capability.
    fn register_capable(&mut self, name: &str) {
        self.run(Command::RegisterProvider {
            registration: Event::ProviderRegistered {
                name: name.into(),
                capabilities: SubagentCapabilities::ALL,
                inherits_parent_context: false,
                route_defaults: None,
                continuable: true,
                one_shot: false,
            },
        });
    }

    /// The exact rejection of `command`.
    fn refuse(&self, command: Command) -> SubagentError {
        decide(&self.state, command).expect_err("command rejected")
    }

    fn reject(&self, command: Command) -> ErrorCode {
        decide(&self.state, command)
            .expect_err("command rejected")
            .code()
    }

    fn root(&mut self) -> SessionId {
        let session = SessionId::new();
        self.run(Command::OpenRoot {
            session,
            label: "root".into(),
            agent_options: None,
        });
        session
    }

    fn start(&mut self, parent: SessionId, provider: &str, delivery: Delivery) -> SessionId {
        let start = start(parent, provider, delivery);
        let child = start.child;
        self.run(Command::StartChild(start));
        child
    }
}

fn start(parent: SessionId, provider: &str, delivery: Delivery) -> StartChild {
    StartChild {
        parent,
        child: SessionId::new(),
        provider: provider.into(),
        label: "task".into(),
        options: StartOptions::default(),
        delivery,
        run_id: SubagentRunId::new(),
        settings: std::sync::Arc::new(settings()),
    }
}

/// Persona variable `user`; tools `read_file`, `write_file`, `shell`; model
/// selection enabled for `openai/gpt-5` only.
fn settings() -> StartSettings {
    StartSettings {
        persona_variables: [("user".to_owned(), "Ada".to_owned())]
            .into_iter()
            .collect(),
        tools: ["read_file", "write_file", "shell"]
            .iter()
            .map(|name| (*name).to_owned())
            .collect(),
        model_selection: ModelSelectionSettings {
            enabled: true,
            allowed_routes: vec![AgentRoute {
                provider: "openai".into(),
                model: "gpt-5".into(),
            }],
        },
    }
}

fn types(recorded: &[(subagent_core::StreamId, Event)]) -> Vec<&'static str> {
    recorded
        .iter()
        .map(|(_, event)| event.type_name())
        .collect()
}

fn prepared(child: SessionId, prompt: MessageId) -> Command {
    Command::PrepareActivation {
        child,
        epoch: 1,
        prompt: Some((prompt, vec![ContentBlock::text("do it")])),
        seed: None,
        seed_source: None,
    }
}

#[test]
fn starting_a_continuable_child_reserves_it_and_preparation_accepts_the_prompt() {
    let mut world = World::new();
    let root = world.root();
    let start = start(root, "spawn", Delivery::Parent);
    let child = start.child;
    let recorded = world.run(Command::StartChild(start));
    assert_eq!(
        types(&recorded),
        vec!["ChildCataloged", "SessionCreated", "ActivationRequested"]
    );
    assert_eq!(
        recorded[0].0,
        subagent_core::StreamId::Session(root),
        "catalog entry in the parent's stream"
    );
    assert_eq!(world.state.list_children(root)[0].entry.child_id, child);
    assert_eq!(world.state.sessions[&child].depth, 1);
    let prompt = MessageId::new();
    let recorded = world.run(prepared(child, prompt));
    assert_eq!(
        types(&recorded),
        vec!["ActivationPrepared", "MessageAccepted"]
    );
    let Event::MessageAccepted { source, .. } = &recorded[1].1 else {
        unreachable!()
    };
    assert_eq!(
        *source,
        MessageSource::Delegation {
            parent_session_id: root
        }
    );
    assert_eq!(
        world.state.pending_messages(child),
        vec![prompt],
        "the prompt goes through the inbox"
    );
    assert_eq!(
        world.refuse(prepared(child, MessageId::new())),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::PreparedTwice
        },
        "prepared twice"
    );
}

#[test]
fn starting_an_external_child_records_a_run_request_and_no_inbox() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "process", Delivery::Caller);
    assert!(world.state.sessions[&child].external);
    assert_eq!(world.state.runs[&child].phase, RunPhase::Requested);
    assert!(world.state.pending_messages(child).is_empty());
}

#[test]
fn bad_starts_are_rejected_with_stable_codes() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let with = |options: StartOptions, provider: &str| {
        let mut request = start(root, provider, Delivery::Parent);
        request.options = options;
        Command::StartChild(request)
    };
    assert_eq!(
        world.reject(Command::StartChild(start(
            SessionId::new(),
            "spawn",
            Delivery::Parent
        ))),
        ErrorCode::ParentUnavailable
    );
    assert_eq!(
        world.reject(with(StartOptions::default(), "nope")),
        ErrorCode::UnknownProvider
    );
    assert_eq!(
        world.reject(with(
            StartOptions {
                persona: Some("p".into()),
                ..StartOptions::default()
            },
            "spawn"
        )),
        ErrorCode::CapabilityUnsupported
    );
    assert_eq!(
        world.reject(with(
            StartOptions {
                tool_filter: Some(ToolRestriction::Deny(vec![])),
                ..StartOptions::default()
            },
            "process"
        )),
        ErrorCode::CapabilityUnsupported
    );
    assert_eq!(
        world.reject(with(
            StartOptions {
                max_depth: Some(0),
                ..StartOptions::default()
            },
            "spawn"
        )),
        ErrorCode::DepthExceeded
    );
    assert_eq!(
        world.reject(with(
            StartOptions {
                max_depth: Some(1 << 53),
                ..StartOptions::default()
            },
            "spawn"
        )),
        ErrorCode::InvalidDepth
    );
    let mut reused = start(root, "spawn", Delivery::Parent);
    reused.child = child;
    assert_eq!(
        world.reject(Command::StartChild(reused)),
        ErrorCode::BadRequest
    );
    let mut unlabeled = start(root, "spawn", Delivery::Parent);
    unlabeled.label.clear();
    assert_eq!(
        world.reject(Command::StartChild(unlabeled)),
        ErrorCode::BadRequest
    );
    // A depth cap the child meets exactly is accepted.
    world.run(with(
        StartOptions {
            max_depth: Some(1),
            ..StartOptions::default()
        },
        "spawn",
    ));
}

#[test]
fn a_closed_admission_refuses_starts_anywhere_below_the_parent() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let record = world
        .history
        .push(
            subagent_core::StreamId::Runtime,
            Event::AdmissionClosed { parent: root },
        )
        .clone();
    world.state.apply(&record);
    assert_eq!(
        world.reject(Command::StartChild(start(root, "spawn", Delivery::Parent))),
        ErrorCode::AdmissionClosed
    );
    assert_eq!(
        world.reject(Command::StartChild(start(child, "spawn", Delivery::Parent))),
        ErrorCode::AdmissionClosed
    );
    let other = world.root();
    world.start(other, "spawn", Delivery::Parent);
}

#[test]
fn a_continuable_activation_runs_to_settlement_and_notifies_its_parent() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let prompt = MessageId::new();
    let seed = vec![serde_json::json!({"type": "UserMessage"})];
    let recorded = world.run(Command::PrepareActivation {
        child,
        epoch: 1,
        prompt: Some((prompt, vec![ContentBlock::text("do it")])),
        seed: Some(seed),
        seed_source: Some((root, 3)),
    });
    assert_eq!(
        types(&recorded),
        vec!["HistorySeeded", "ActivationPrepared", "MessageAccepted"]
    );
    world.run(Command::PublishActivation {
        child,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    assert_eq!(world.state.activity(child), Activity::Idle);
    let recorded = world.run(Command::BeginTurn { session: child });
    assert!(
        matches!(&recorded[0].1, Event::MessagesClaimed { ids, turn: 1 } if *ids == vec![prompt])
    );
    assert_eq!(world.state.activity(child), Activity::Running);
    assert_eq!(
        world.refuse(Command::BeginTurn { session: child }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::TurnRunning
        }
    );
    let answer = vec![ContentBlock::text("found it")];
    world.run(Command::RecordTranscript {
        session: child,
        entry: Event::AssistantMessage {
            turn: 1,
            content: answer.clone(),
            usage: None,
        },
    });
    assert_eq!(
        world.refuse(Command::RecordTranscript {
            session: child,
            entry: Event::AssistantMessage {
                turn: 2,
                content: vec![],
                usage: None
            }
        }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::OtherTurn {
                entry: 2,
                running: 1
            }
        }
    );
    assert_eq!(
        world.reject(Command::RecordTranscript {
            session: child,
            entry: Event::ProviderRemoved { name: "x".into() }
        }),
        ErrorCode::BadRequest
    );
    // The first turn's end settles the epoch: `decide` builds the result
    // from the agent's raw output (the last non-empty assistant message).
    let recorded = world.run(Command::EndTurn {
        session: child,
        stop_reason: SubagentStopReason::Completed,
        output: TurnOutput {
            assistant: vec![answer.clone(), vec![]],
            structured: None,
            diagnostic: None,
        },
    });
    assert_eq!(
        types(&recorded),
        vec!["TurnEnded", "ActivationSettled", "MessageAccepted"]
    );
    let result = SubagentResult::completed(answer);
    assert!(
        matches!(&recorded[1].1, Event::ActivationSettled { epoch: 1, result: settled } if *settled == result)
    );
    let (stream, notice) = &recorded[2];
    assert_eq!(*stream, subagent_core::StreamId::Session(root));
    let Event::MessageAccepted {
        source, content, ..
    } = notice
    else {
        unreachable!()
    };
    assert_eq!(
        *source,
        MessageSource::SubagentSettled {
            summary: settlement_summary("task", &result),
            sender_session_id: child
        },
        "the notice is the runtime's account, attributed to the child only as sender"
    );
    assert!(
        !subagent_core::content::plain_text(content).contains("found it"),
        "status only, never the child's words"
    );
    assert_eq!(
        world.refuse(Command::SettleActivation {
            child,
            epoch: 1,
            result: SubagentResult::completed(vec![])
        }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::AlreadySettled
        }
    );
    world.run(Command::ReleaseActivation {
        child,
        epoch: 1,
        cleanup_error: Some(Diagnostic::new("socket busy")),
    });
    assert_eq!(world.state.activity(child), Activity::Inactive);
    assert_eq!(
        world.state.activations[&child].last_result,
        Some((1, result))
    );
}

#[test]
fn caller_delivery_sends_no_notice() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Caller);
    world.run(Command::PublishActivation {
        child,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    let recorded = world.run(Command::SettleActivation {
        child,
        epoch: 1,
        result: SubagentResult::completed(vec![]),
    });
    assert_eq!(types(&recorded), vec!["ActivationSettled"]);
    assert!(world.state.pending_messages(root).is_empty());
}

#[test]
fn releasing_before_settlement_ends_the_turn_and_settles_aborted() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    world.run(Command::PublishActivation {
        child,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    world.run(Command::BeginTurn { session: child });
    let recorded = world.run(Command::ReleaseActivation {
        child,
        epoch: 1,
        cleanup_error: None,
    });
    assert_eq!(
        types(&recorded),
        vec![
            "TurnEnded",
            "ActivationSettled",
            "ActivationReleased",
            "MessageAccepted"
        ]
    );
    let (_, result) = world.state.activations[&child].last_result.clone().unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Aborted);
    assert_eq!(
        world.refuse(Command::ReleaseActivation {
            child,
            epoch: 1,
            cleanup_error: None
        }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::NotLive { epoch: 1 }
        }
    );
}

#[test]
fn only_unpublished_activations_are_abandoned() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let recorded = world.run(Command::AbandonActivation {
        child,
        epoch: 1,
        reason: AbandonReason::Cancelled,
    });
    assert_eq!(types(&recorded), vec!["ActivationAbandoned"]);
    assert_eq!(world.state.activity(child), Activity::Inactive);
    assert!(
        world.state.pending_messages(child).is_empty(),
        "cancelled before the prompt was accepted"
    );
    let other = world.start(root, "spawn", Delivery::Parent);
    world.run(Command::PublishActivation {
        child: other,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    assert_eq!(
        world.refuse(Command::AbandonActivation {
            child: other,
            epoch: 1,
            reason: AbandonReason::Drained
        }),
        SubagentError::OutOfOrder {
            session: other,
            reason: OutOfOrder::AbandonPublished
        }
    );
}

#[test]
fn an_external_run_reports_its_final_text_diagnostic_and_status_to_the_parent() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "process", Delivery::Parent);
    assert_eq!(
        world.refuse(Command::SettleRun {
            child,
            result: SubagentResult::completed(vec![])
        }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::RunPhase {
                phase: "requested",
                accepted: "only a started, unsettled run settles"
            }
        }
    );
    world.run(Command::StartRun { child });
    let result = SubagentResult::failed(
        SubagentStopReason::MaxTokens,
        vec![ContentBlock::text("partial answer")],
        "token ceiling",
    );
    let recorded = world.run(Command::SettleRun { child, result });
    let Event::MessageAccepted {
        source, content, ..
    } = &recorded[1].1
    else {
        panic!("no report")
    };
    assert_eq!(
        *source,
        MessageSource::SubagentReport {
            sender_session_id: child
        }
    );
    let text = subagent_core::content::plain_text(content);
    for part in [
        "partial answer",
        "diagnostic: token ceiling",
        "status: max-tokens",
    ] {
        assert!(text.contains(part), "{text}");
    }
    world.run(Command::DisposeRun {
        child,
        cleanup_error: None,
    });
    assert_eq!(world.state.runs[&child].phase, RunPhase::Disposed);
    assert_eq!(
        world.refuse(Command::DisposeRun {
            child,
            cleanup_error: None
        }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::RunPhase {
                phase: "disposed",
                accepted: "only a run not yet disposed is disposed"
            }
        }
    );
}

#[test]
fn disposing_an_unsettled_run_settles_it_aborted_and_failed_starts_are_recorded() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "process", Delivery::Caller);
    world.run(Command::StartRun { child });
    let recorded = world.run(Command::DisposeRun {
        child,
        cleanup_error: None,
    });
    assert_eq!(types(&recorded), vec!["RunSettled", "RunDisposed"]);
    assert_eq!(
        world.state.runs[&child]
            .result
            .as_ref()
            .map(|r| r.stop_reason.clone()),
        Some(SubagentStopReason::Aborted)
    );
    let failing = world.start(root, "process", Delivery::Caller);
    world.run(Command::FailRunStart {
        child: failing,
        diagnostic: Diagnostic::new("binary not found"),
    });
    assert_eq!(world.state.runs[&failing].phase, RunPhase::StartFailed);
    assert_eq!(
        world.refuse(Command::StartRun { child: failing }),
        SubagentError::OutOfOrder {
            session: failing,
            reason: OutOfOrder::RunPhase {
                phase: "refused at start",
                accepted: "only a requested run starts"
            }
        }
    );
}

#[test]
fn recovery_settles_everything_that_was_live_explicitly_and_only_once() {
    let mut world = World::new();
    let root = world.root();
    let running = world.start(root, "spawn", Delivery::Parent);
    world.run(Command::PublishActivation {
        child: running,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    world.run(Command::BeginTurn { session: running });
    let queued = world.start(root, "spawn", Delivery::Parent);
    world.run(prepared(queued, MessageId::new()));
    let external = world.start(root, "process", Delivery::Parent);
    world.run(Command::StartRun { child: external });
    let recorded = world.run(Command::Recover);
    let kinds = types(&recorded);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "ActivationAbandoned")
            .count(),
        2
    );
    assert!(
        kinds.contains(&"RunSettled")
            && kinds.contains(&"RunDisposed")
            && kinds.contains(&"HostRecovered")
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "ProviderRemoved").count(),
        2,
        "registrations end with the host"
    );
    assert!(world.state.providers.is_empty());
    for child in [running, queued] {
        assert_eq!(
            world.state.activity(child),
            Activity::Inactive,
            "cold-resumable"
        );
    }
    assert_eq!(
        world.state.pending_messages(queued).len(),
        1,
        "pending messages stay pending"
    );
    let run = &world.state.runs[&external];
    assert_eq!(
        run.result.as_ref().map(|r| r.stop_reason.clone()),
        Some(SubagentStopReason::Error)
    );
    assert!(run
        .result
        .as_ref()
        .and_then(|r| r.diagnostic.as_ref())
        .is_some_and(|d| d.as_str().contains("host restarted")));
    assert!(
        world.run(Command::Recover).is_empty(),
        "nothing is live any more"
    );
}

#[test]
fn provider_registration_is_unique_and_removal_needs_a_registered_name() {
    let mut world = World::new();
    let duplicate = Event::ProviderRegistered {
        name: "spawn".into(),
        capabilities: SubagentCapabilities::default(),
        inherits_parent_context: false,
        route_defaults: None,
        continuable: true,
        one_shot: false,
    };
    assert_eq!(
        world.reject(Command::RegisterProvider {
            registration: duplicate
        }),
        ErrorCode::DuplicateProvider
    );
    assert_eq!(
        world.reject(Command::RemoveProvider {
            name: "nope".into()
        }),
        ErrorCode::UnknownProvider
    );
    world.run(Command::RemoveProvider {
        name: "spawn".into(),
    });
    let root = world.root();
    assert_eq!(
        world.reject(Command::StartChild(start(root, "spawn", Delivery::Parent))),
        ErrorCode::UnknownProvider
    );
}

fn send(sender: SessionId, target: SessionId) -> Command {
    Command::SendMessage {
        sender,
        target,
        message_id: MessageId::new(),
        content: vec![ContentBlock::text("psst")],
        delivery: subagent_core::MessageDelivery::Queue,
    }
}

#[test]
fn messages_flow_only_between_a_direct_parent_and_its_direct_child() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let sibling = world.start(root, "spawn", Delivery::Parent);
    let grandchild = world.start(child, "spawn", Delivery::Parent);
    let recorded = world.run(send(root, child));
    assert!(matches!(
        &recorded[0].1,
        Event::MessageAccepted { source: MessageSource::AgentMessage { sender_session_id }, .. } if *sender_session_id == root
    ));
    let recorded = world.run(send(child, root));
    assert_eq!(
        types(&recorded),
        vec!["MessageAccepted"],
        "a root's inbox is read by its host"
    );
    assert_eq!(world.reject(send(child, sibling)), ErrorCode::Unauthorized);
    assert_eq!(
        world.reject(send(root, grandchild)),
        ErrorCode::Unauthorized
    );
    assert_eq!(
        world.reject(send(SessionId::new(), child)),
        ErrorCode::Unauthorized
    );
    let external = world.start(root, "process", Delivery::Parent);
    assert_eq!(
        world.reject(send(root, external)),
        ErrorCode::NotResumable,
        "external runs take no follow-ups"
    );
}

#[test]
fn a_message_to_an_absent_child_cold_resumes_it_in_a_new_epoch() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Caller);
    world.run(Command::PublishActivation {
        child,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    let recorded = world.run(send(root, child));
    assert_eq!(
        types(&recorded),
        vec!["MessageAccepted"],
        "a live child just takes it"
    );
    world.run(Command::ReleaseActivation {
        child,
        epoch: 1,
        cleanup_error: None,
    });
    let recorded = world.run(send(root, child));
    assert_eq!(
        types(&recorded),
        vec!["MessageAccepted", "ActivationRequested"]
    );
    assert!(
        matches!(
            recorded[1].1,
            Event::ActivationRequested {
                epoch: 2,
                output_schema: None,
                ..
            }
        ),
        "no inherited schema"
    );
    assert_eq!(
        world.state.pending_messages(child).len(),
        2,
        "both messages wait for the resumed activation"
    );
}

#[test]
fn structured_capture_closes_input_and_a_drain_blocks_cold_resume() {
    let mut world = World::new();
    let root = world.root();
    world.register_capable("capture");
    let mut capturing = start(root, "capture", Delivery::Caller);
    capturing.options.output_schema = Some(serde_json::json!({"type": "object"}));
    let capturing_child = capturing.child;
    world.run(Command::StartChild(capturing));
    assert_eq!(
        world.reject(send(root, capturing_child)),
        ErrorCode::DeliveryUnavailable
    );

    let idle = world.start(root, "spawn", Delivery::Caller);
    world.run(Command::AbandonActivation {
        child: idle,
        epoch: 1,
        reason: AbandonReason::Cancelled,
    });
    world.run(Command::CloseAdmission { parent: root });
    assert!(
        world
            .run(Command::CloseAdmission { parent: root })
            .is_empty(),
        "closing twice records once"
    );
    assert_eq!(world.reject(send(root, idle)), ErrorCode::AdmissionClosed);
    world.run(Command::ReopenAdmission { parent: root });
    assert_eq!(
        types(&world.run(send(root, idle))),
        vec!["MessageAccepted", "ActivationRequested"]
    );
}

#[test]
fn interrupts_need_the_parent_address_or_a_live_ancestor_and_idle_targets_are_no_ops() {
    use subagent_core::InterruptAuthority;
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let grandchild = world.start(child, "spawn", Delivery::Parent);
    let user = |parent_session_id| InterruptAuthority::User { parent_session_id };
    let ancestor = |agent_session_id| InterruptAuthority::Ancestor { agent_session_id };
    assert!(
        world
            .run(Command::Interrupt {
                target: grandchild,
                authority: user(child)
            })
            .is_empty(),
        "idle: no-op"
    );
    assert!(
        world
            .run(Command::Interrupt {
                target: SessionId::new(),
                authority: user(root)
            })
            .is_empty(),
        "absent: no-op"
    );
    world.run(Command::PublishActivation {
        child: grandchild,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    world.run(Command::BeginTurn {
        session: grandchild,
    });
    assert_eq!(
        world.reject(Command::Interrupt {
            target: grandchild,
            authority: user(root)
        }),
        ErrorCode::Unauthorized,
        "not the direct parent"
    );
    assert_eq!(
        world.reject(Command::Interrupt {
            target: grandchild,
            authority: ancestor(grandchild)
        }),
        ErrorCode::Unauthorized
    );
    let recorded = world.run(Command::Interrupt {
        target: grandchild,
        authority: ancestor(root),
    });
    assert_eq!(types(&recorded), vec!["InterruptRequested"]);
    let recorded = world.run(Command::Interrupt {
        target: grandchild,
        authority: user(child),
    });
    assert_eq!(types(&recorded), vec!["InterruptRequested"]);
}

#[test]
fn steering_claims_pending_messages_for_the_running_turn_only() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    world.run(Command::PublishActivation {
        child,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    assert_eq!(
        world.refuse(Command::ClaimSteering { session: child }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::NoTurnRunning
        },
        "no turn is running"
    );
    world.run(Command::BeginTurn { session: child });
    assert!(
        world
            .run(Command::ClaimSteering { session: child })
            .is_empty(),
        "nothing pending: nothing recorded"
    );
    world.run(send(root, child));
    let recorded = world.run(Command::ClaimSteering { session: child });
    assert!(matches!(&recorded[0].1, Event::MessagesClaimed { ids, turn: 1 } if ids.len() == 1));
    assert!(world.state.pending_messages(child).is_empty());
}

#[test]
fn a_persona_must_parse_and_name_only_registered_variables() {
    let mut world = World::new();
    world.register_capable("persona");
    let root = world.root();
    let with = |persona: &str| {
        let mut request = start(root, "persona", Delivery::Caller);
        request.options.persona = Some(persona.into());
        Command::StartChild(request)
    };
    assert_eq!(
        world.reject(with("Hello {{stranger}}")),
        ErrorCode::InvalidPersona
    );
    assert_eq!(
        world.reject(with("Hello {{user")),
        ErrorCode::InvalidPersona
    );
    let mut unsupported = start(root, "spawn", Delivery::Caller);
    unsupported.options.persona = Some("Hello {{stranger}}".into());
    assert_eq!(
        world.reject(Command::StartChild(unsupported)),
        ErrorCode::CapabilityUnsupported,
        "the capability is checked first"
    );
    world.run(with("You assist {{ user }}."));
}

#[test]
fn an_output_schema_outside_the_subset_is_rejected_at_start() {
    let mut world = World::new();
    world.register_capable("schema");
    let root = world.root();
    let with = |schema: serde_json::Value| {
        let mut request = start(root, "schema", Delivery::Caller);
        request.options.output_schema = Some(schema);
        Command::StartChild(request)
    };
    assert_eq!(
        world.reject(with(serde_json::json!({"type": "array"}))),
        ErrorCode::InvalidOutputSchema
    );
    let recorded = world.run(with(serde_json::json!({"type": "object"})));
    assert!(matches!(
        recorded[2].1,
        Event::ActivationRequested {
            output_schema: Some(_),
            ..
        }
    ));
}

#[test]
fn the_first_turn_end_settles_with_a_valid_capture_or_an_error() {
    let mut world = World::new();
    world.register_capable("schema");
    let root = world.root();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"]
    });
    let end_first_turn = |world: &mut World, structured: Option<serde_json::Value>| {
        let mut request = start(root, "schema", Delivery::Caller);
        request.options.output_schema = Some(schema.clone());
        let child = request.child;
        world.run(Command::StartChild(request));
        world.run(Command::PrepareActivation {
            child,
            epoch: 1,
            prompt: Some((MessageId::new(), vec![ContentBlock::text("go")])),
            seed: None,
            seed_source: None,
        });
        world.run(Command::PublishActivation {
            child,
            epoch: 1,
            run_id: SubagentRunId::new(),
        });
        world.run(Command::BeginTurn { session: child });
        let recorded = world.run(Command::EndTurn {
            session: child,
            stop_reason: SubagentStopReason::Completed,
            output: TurnOutput {
                assistant: vec![vec![ContentBlock::text("here")]],
                structured,
                diagnostic: None,
            },
        });
        recorded
            .into_iter()
            .find_map(|(_, event)| match event {
                Event::ActivationSettled { result, .. } => Some(result),
                _ => None,
            })
            .expect("the first turn end settles")
    };
    let valid = end_first_turn(&mut world, Some(serde_json::json!({"answer": "42"})));
    assert_eq!(valid.stop_reason, SubagentStopReason::Completed);
    assert_eq!(valid.structured, Some(serde_json::json!({"answer": "42"})));
    assert_eq!(valid.output, vec![ContentBlock::text("here")]);

    let missing = end_first_turn(&mut world, None);
    assert_eq!(missing.stop_reason, SubagentStopReason::Error);
    assert_eq!(missing.structured, None);
    assert!(missing.diagnostic.is_some(), "{missing:?}");

    let wrong = end_first_turn(&mut world, Some(serde_json::json!({"answer": 42})));
    assert_eq!(wrong.stop_reason, SubagentStopReason::Error);
    assert_eq!(wrong.structured, None);
}

/// The effective options recorded in the child's descriptor.
fn recorded_options(world: &World, child: SessionId) -> Option<AgentOptions> {
    world.state.sessions[&child].agent_options.clone()
}

fn with_options(parent: SessionId, provider: &str, options: StartOptions) -> StartChild {
    StartChild {
        options,
        ..start(parent, provider, Delivery::Parent)
    }
}

#[test]
fn tool_filters_name_only_host_tools_and_narrow_down_the_lineage() {
    let mut world = World::new();
    let root = world.root();
    let filter = |restriction| StartOptions {
        tool_filter: Some(restriction),
        ..StartOptions::default()
    };
    for unknown in [
        ToolRestriction::Allow(vec!["read_file".into(), "rm_rf".into()]),
        ToolRestriction::Deny(vec!["".into()]),
    ] {
        assert_eq!(
            world.reject(Command::StartChild(with_options(
                root,
                "spawn",
                filter(unknown)
            ))),
            ErrorCode::UnknownTool
        );
    }
    assert!(
        world.state.sessions.len() == 1,
        "a rejection records nothing"
    );
    let child = with_options(
        root,
        "spawn",
        filter(ToolRestriction::Deny(vec!["shell".into()])),
    );
    let child_id = child.child;
    world.run(Command::StartChild(child));
    let grandchild = with_options(
        child_id,
        "spawn",
        filter(ToolRestriction::Allow(vec![
            "shell".into(),
            "read_file".into(),
        ])),
    );
    let grandchild_id = grandchild.child;
    world.run(Command::StartChild(grandchild));
    let lineage = world.state.tool_lineage(grandchild_id);
    assert_eq!(lineage.len(), 2);
    assert!(ToolRestriction::permits_in(
        lineage.iter().copied(),
        "read_file"
    ));
    // Allowed by the grandchild's own filter, denied above it.
    assert!(!ToolRestriction::permits_in(
        lineage.iter().copied(),
        "shell"
    ));
    assert!(!ToolRestriction::permits_in(
        lineage.iter().copied(),
        "write_file"
    ));
    assert!(world.state.tool_lineage(root).is_empty());
}

#[test]
fn decide_answers_tool_calls_refusing_what_the_lineage_restricts() {
    let mut world = World::new();
    let root = world.root();
    let parent = with_options(
        root,
        "spawn",
        StartOptions {
            tool_filter: Some(ToolRestriction::Deny(vec!["shell".into()])),
            ..StartOptions::default()
        },
    );
    let child = parent.child;
    world.run(Command::StartChild(parent));
    world.run(Command::PrepareActivation {
        child,
        epoch: 1,
        prompt: Some((MessageId::new(), vec![ContentBlock::text("go")])),
        seed: None,
        seed_source: None,
    });
    world.run(Command::PublishActivation {
        child,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    let call = |name: &str, known: bool| Command::CallTool {
        session: child,
        turn: 1,
        call_id: format!("call-{name}"),
        name: name.into(),
        input: serde_json::json!({"path": "x"}),
        known,
    };
    // No turn is running yet.
    assert_eq!(
        world.refuse(call("read_file", true)),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::NoTurnRunning
        }
    );
    world.run(Command::BeginTurn { session: child });

    // Permitted and known: only the call, the instruction to execute.
    let recorded = world.run(call("read_file", true));
    assert_eq!(types(&recorded), vec!["ToolCalled"]);

    // Restricted down the lineage: the call and its refusal, together.
    let recorded = world.run(call("shell", true));
    assert_eq!(types(&recorded), vec!["ToolCalled", "ToolReturned"]);
    assert!(matches!(
        &recorded[1].1,
        Event::ToolReturned { call_id, is_error: true, refused: true, output, .. }
            if call_id == "call-shell"
                && subagent_core::content::plain_text(output) == "tool shell is not available to this agent"
    ));

    // Permitted but not a host tool: fails, not refused.
    let recorded = world.run(call("teleport", false));
    assert!(matches!(
        &recorded[1].1,
        Event::ToolReturned { is_error: true, refused: false, output, .. }
            if subagent_core::content::plain_text(output) == "unknown tool teleport"
    ));

    // A call naming another turn is out of order.
    let mut other_turn = call("read_file", true);
    if let Command::CallTool { turn, .. } = &mut other_turn {
        *turn = 2;
    }
    assert_eq!(
        world.refuse(other_turn),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::OtherTurn {
                entry: 2,
                running: 1
            }
        }
    );
}

#[test]
fn local_children_inherit_the_parents_options_with_the_request_merged_over() {
    let mut world = World::new();
    world.register_capable("capable");
    let root = SessionId::new();
    let root_options = AgentOptions {
        provider: Some("openai".into()),
        model: Some("gpt-5".into()),
        reasoning_effort: Some("low".into()),
        max_output_tokens: Some(2000),
    };
    world.run(Command::OpenRoot {
        session: root,
        label: "root".into(),
        agent_options: Some(root_options.clone()),
    });
    assert_eq!(recorded_options(&world, root), Some(root_options.clone()));
    let effort = StartOptions {
        agent_options: Some(AgentOptions {
            reasoning_effort: Some("high".into()),
            ..AgentOptions::default()
        }),
        ..StartOptions::default()
    };
    let child = with_options(root, "capable", effort);
    let child_id = child.child;
    world.run(Command::StartChild(child));
    let expected = AgentOptions {
        reasoning_effort: Some("high".into()),
        ..root_options.clone()
    };
    assert_eq!(recorded_options(&world, child_id), Some(expected.clone()));
    // The grandchild inherits the child's effective options, not the root's.
    let grandchild = start(child_id, "capable", Delivery::Parent);
    let grandchild_id = grandchild.child;
    world.run(Command::StartChild(grandchild));
    assert_eq!(recorded_options(&world, grandchild_id), Some(expected));
}

#[test]
fn external_children_merge_over_the_providers_route_defaults() {
    let mut world = World::new();
    world.run(Command::RegisterProvider {
        registration: Event::ProviderRegistered {
            name: "sdk".into(),
            capabilities: SubagentCapabilities::ALL,
            inherits_parent_context: false,
            route_defaults: Some(AgentRoute {
                provider: "openai".into(),
                model: "gpt-5".into(),
            }),
            continuable: false,
            one_shot: true,
        },
    });
    let root = SessionId::new();
    world.run(Command::OpenRoot {
        session: root,
        label: "root".into(),
        agent_options: Some(AgentOptions {
            reasoning_effort: Some("low".into()),
            ..AgentOptions::default()
        }),
    });
    let ceiling = StartOptions {
        agent_options: Some(AgentOptions {
            max_output_tokens: Some(512),
            ..AgentOptions::default()
        }),
        ..StartOptions::default()
    };
    let child = with_options(root, "sdk", ceiling);
    let child_id = child.child;
    world.run(Command::StartChild(child));
    // The parent's effort is not inherited across the external boundary.
    assert_eq!(
        recorded_options(&world, child_id),
        Some(AgentOptions {
            provider: Some("openai".into()),
            model: Some("gpt-5".into()),
            reasoning_effort: None,
            max_output_tokens: Some(512),
        })
    );
}

#[test]
fn model_selection_rejects_routes_outside_it_and_bad_options() {
    let mut world = World::new();
    world.register_capable("capable");
    let root = world.root();
    let route = |provider: Option<&str>, model: &str| StartOptions {
        agent_options: Some(AgentOptions {
            provider: provider.map(str::to_owned),
            model: Some(model.to_owned()),
            ..AgentOptions::default()
        }),
        ..StartOptions::default()
    };
    // Outside the allowed routes, and a model with no provider to pair with.
    for options in [route(Some("openai"), "gpt-4"), route(None, "gpt-5")] {
        assert_eq!(
            world.reject(Command::StartChild(with_options(root, "capable", options))),
            ErrorCode::RouteNotAllowed
        );
    }
    // Disabled selection refuses even an otherwise allowed route.
    let mut disabled = with_options(root, "capable", route(Some("openai"), "gpt-5"));
    disabled.settings = std::sync::Arc::new(StartSettings {
        model_selection: ModelSelectionSettings::default(),
        ..settings()
    });
    assert_eq!(
        world.reject(Command::StartChild(disabled)),
        ErrorCode::RouteNotAllowed
    );
    for bad in [
        AgentOptions {
            max_output_tokens: Some(0),
            ..AgentOptions::default()
        },
        AgentOptions {
            reasoning_effort: Some(String::new()),
            ..AgentOptions::default()
        },
        AgentOptions {
            model: Some("gpt 5".into()),
            ..AgentOptions::default()
        },
    ] {
        let options = StartOptions {
            agent_options: Some(bad),
            ..StartOptions::default()
        };
        assert_eq!(
            world.reject(Command::StartChild(with_options(root, "capable", options))),
            ErrorCode::BadRequest
        );
    }
    assert_eq!(world.state.sessions.len(), 1, "rejections record nothing");
    world.run(Command::StartChild(with_options(
        root,
        "capable",
        route(Some("openai"), "gpt-5"),
    )));
}

#[test]
fn route_defaults_need_the_agent_options_capability() {
    let world = World::new();
    let registration = |capabilities, model: &str| Command::RegisterProvider {
        registration: Event::ProviderRegistered {
            name: "routed".into(),
            capabilities,
            inherits_parent_context: false,
            route_defaults: Some(AgentRoute {
                provider: "openai".into(),
                model: model.into(),
            }),
            continuable: false,
            one_shot: true,
        },
    };
    assert_eq!(
        world.reject(registration(SubagentCapabilities::default(), "gpt-5")),
        ErrorCode::BadRequest
    );
    assert_eq!(
        world.reject(registration(SubagentCapabilities::ALL, "")),
        ErrorCode::BadRequest
    );
    assert!(decide(
        &world.state,
        registration(SubagentCapabilities::ALL, "gpt-5")
    )
    .is_ok());
}

#[test]
fn a_depth_cap_counts_the_durable_lineage() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let capped = |parent, max_depth| {
        with_options(
            parent,
            "spawn",
            StartOptions {
                max_depth: Some(max_depth),
                ..StartOptions::default()
            },
        )
    };
    // The grandchild is at depth 2.
    assert_eq!(
        world.reject(Command::StartChild(capped(child, 1))),
        ErrorCode::DepthExceeded
    );
    world.run(Command::StartChild(capped(child, 2)));
}

#[test]
fn a_failed_agent_settles_error_notifies_its_parent_and_releases_so_a_send_cold_resumes() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let prompt = MessageId::new();
    world.run(prepared(child, prompt));
    // The agent could not be built: no publication, no turn.
    let recorded = world.run(Command::FailActivation {
        child,
        epoch: 1,
        diagnostic: Diagnostic::new("creating the agent failed: model endpoint down"),
    });
    assert_eq!(
        types(&recorded),
        vec!["ActivationSettled", "ActivationReleased", "MessageAccepted"]
    );
    let (epoch, result) = world.state.activations[&child].last_result.clone().unwrap();
    assert_eq!(epoch, 1);
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    assert!(result.output.is_empty());
    assert_eq!(
        result.diagnostic.unwrap().as_str(),
        "creating the agent failed: model endpoint down"
    );
    assert_eq!(world.state.activity(child), Activity::Inactive, "released");
    assert_eq!(
        world.state.pending_messages(child),
        vec![prompt],
        "the unclaimed prompt stays pending for the next activation"
    );
    // The parent is told, status only, as for any settlement.
    let notice = recorded
        .iter()
        .find_map(|(stream, event)| match event {
            Event::MessageAccepted {
                source: MessageSource::SubagentSettled { summary, .. },
                ..
            } if *stream == subagent_core::StreamId::Session(root) => Some(summary.clone()),
            _ => None,
        })
        .expect("a settlement notice to the parent");
    assert_eq!(
        notice,
        settlement_summary("task", &result_of(&world, child))
    );
    assert!(notice.ends_with("error"), "{notice}");
    // Nothing is left live: the failed epoch cannot fail or settle again,
    // and the next send cold-resumes a new epoch that claims both messages.
    assert_eq!(
        world.refuse(Command::FailActivation {
            child,
            epoch: 1,
            diagnostic: Diagnostic::new("again"),
        }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::NotLive { epoch: 1 }
        }
    );
    assert_eq!(
        types(&world.run(send(root, child))),
        vec!["MessageAccepted", "ActivationRequested"]
    );
    assert_eq!(world.state.pending_messages(child).len(), 2);
}

fn result_of(world: &World, child: SessionId) -> SubagentResult {
    world.state.activations[&child]
        .last_result
        .clone()
        .unwrap()
        .1
}

#[test]
fn a_failure_after_settlement_keeps_the_result_and_records_the_cause_beside_it() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Caller);
    world.run(prepared(child, MessageId::new()));
    world.run(Command::PublishActivation {
        child,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    world.run(Command::BeginTurn { session: child });
    world.run(Command::EndTurn {
        session: child,
        stop_reason: SubagentStopReason::Completed,
        output: TurnOutput {
            assistant: vec![vec![ContentBlock::text("done")]],
            structured: None,
            diagnostic: None,
        },
    });
    world.run(send(root, child));
    world.run(Command::BeginTurn { session: child });
    let recorded = world.run(Command::FailActivation {
        child,
        epoch: 1,
        diagnostic: Diagnostic::new("transport lost"),
    });
    assert_eq!(types(&recorded), vec!["TurnEnded", "ActivationReleased"]);
    assert!(matches!(
        &recorded[0].1,
        Event::TurnEnded {
            stop_reason: SubagentStopReason::Error,
            ..
        }
    ));
    assert_eq!(
        result_of(&world, child).stop_reason,
        SubagentStopReason::Completed,
        "a settled result is never overwritten"
    );
    let activation = &world.state.activations[&child];
    assert_eq!(
        activation
            .last_cleanup_error
            .as_ref()
            .map(|(epoch, error)| (*epoch, error.as_str())),
        Some((1, "transport lost"))
    );
    assert_eq!(world.state.activity(child), Activity::Inactive);
}

#[test]
fn only_a_known_root_session_is_reopened_and_reopening_records_nothing() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Caller);
    assert!(world.run(Command::ReopenRoot { session: root }).is_empty());
    assert_eq!(
        world.reject(Command::ReopenRoot { session: child }),
        ErrorCode::Unauthorized
    );
    assert_eq!(
        world.reject(Command::ReopenRoot {
            session: SessionId::new()
        }),
        ErrorCode::ParentUnavailable
    );
}

#[test]
fn recovery_ends_every_admission_cutoff_of_the_previous_host() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Caller);
    world.run(Command::CloseAdmission { parent: root });
    world.run(Command::CloseAdmission { parent: child });
    let recorded = world.run(Command::Recover);
    let reopened: Vec<SessionId> = recorded
        .iter()
        .filter_map(|(_, event)| match event {
            Event::AdmissionReopened { parent } => Some(*parent),
            _ => None,
        })
        .collect();
    assert_eq!(reopened.len(), 2);
    assert!(reopened.contains(&root) && reopened.contains(&child));
    assert!(world.state.admission_closed.is_empty());
    // A root taken back after the restart admits children again (once the
    // new host registered its providers).
    world.run(Command::ReopenRoot { session: root });
    world.register_capable("spawn");
    world.start(root, "spawn", Delivery::Caller);
}
