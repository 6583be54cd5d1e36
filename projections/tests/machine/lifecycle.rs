//! A continuable child's activation (`machine/lifecycle.rs`): a start
//! reserves the child and its first activation; preparation (once) may seed
//! the history and accepts the prompt through the inbox; a published
//! activation runs one turn at a time, records transcript entries of the
//! running turn only, and settles once, a parent-delivered result with a
//! status-only notice to the parent (none for caller delivery); release ends
//! a running turn and settles an unsettled epoch `aborted`; only an
//! unpublished activation is abandoned; a failure settles an unsettled epoch
//! `error` and releases, or records its cause beside a result already
//! settled, which is never overwritten.

use subagent_core::{
    AbandonReason, ContentBlock, Delivery, Diagnostic, ErrorCode, Event, MessageId, MessageSource,
    OutOfOrder, SessionId, SubagentError, SubagentResult, SubagentRunId, SubagentStopReason,
};
use subagent_projections::machine::{settlement_summary, Command, TurnOutput};
use subagent_projections::Activity;

use crate::world::{prepared, send, start, types, World};

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
