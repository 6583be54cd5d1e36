//! Messages, interrupts and admission (`machine/messaging.rs`): messages
//! flow only between a direct parent and its direct child, and never to an
//! external run; a message to an absent child cold-resumes it in a new epoch,
//! unless structured capture closed its input or a drain closed admission;
//! an interrupt needs the direct parent's address or a live ancestor, and is
//! a no-op on an idle or absent target; a closed admission refuses starts
//! anywhere below its parent.

use subagent_core::{
    AbandonReason, Delivery, ErrorCode, Event, MessageSource, SessionId, SubagentRunId,
};
use subagent_projections::machine::Command;

use crate::world::{send, start, types, World};

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
