//! The spec's `prompt` in `decide` (`machine/messaging.rs`): a browser
//! message reaches a continuable child only through its direct parent,
//! keeps its request id and zone, cold-resumes an absent child; a retry
//! with the same request id and body records nothing and answers the first
//! receipt; the same id with another body is refused; every decided
//! history is admissible and a repeated request id in a history is not.

use subagent_core::{
    ContentBlock, Delivery, ErrorCode, Event, MessageDelivery, MessageId, MessageSource, SessionId,
    SubagentError,
};
use subagent_projections::machine::{prompt_receipt, Command};
use subagent_projections::{prompt_digest, HistoryCheck};

use crate::world::{types, World};

/// A prompt from `parent` to `child` under `request_id` saying `text`.
fn prompt(parent: SessionId, child: SessionId, request_id: &str, text: &str) -> Command {
    Command::Prompt {
        parent,
        child,
        request_id: request_id.into(),
        zone: Some("Europe/Paris".into()),
        message_id: MessageId::new(),
        content: vec![ContentBlock::text(text)],
        delivery: MessageDelivery::Steer,
    }
}

#[test]
fn a_prompt_keeps_its_request_id_and_zone_and_a_retry_records_nothing() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let recorded = world.run(prompt(root, child, "r-1", "hello"));
    let [(
        _,
        Event::MessageAccepted {
            message_id,
            source,
            delivery,
            ..
        },
    )] = recorded.as_slice()
    else {
        panic!("one message: {recorded:?}");
    };
    assert_eq!(
        source,
        &MessageSource::Browser {
            request_id: "r-1".into(),
            zone: Some("Europe/Paris".into())
        }
    );
    assert_eq!(*delivery, MessageDelivery::Steer);

    // A retry (a fresh message id, the same body) records nothing, and the
    // receipt is the first message's.
    assert!(world.run(prompt(root, child, "r-1", "hello")).is_empty());
    let digest = prompt_digest(
        MessageDelivery::Steer,
        Some("Europe/Paris"),
        &[ContentBlock::text("hello")],
    );
    assert_eq!(
        prompt_receipt(world.state(), root, child, "r-1", &digest),
        Ok(Some(*message_id))
    );
    assert_eq!(
        prompt_receipt(world.state(), root, child, "r-2", &digest),
        Ok(None)
    );
    // Another address gets no receipt, and decide refuses it.
    let stranger = world.root();
    assert_eq!(
        prompt_receipt(world.state(), stranger, child, "r-1", &digest),
        Ok(None)
    );
    assert_eq!(
        world.reject(prompt(stranger, child, "r-1", "hello")),
        ErrorCode::Unauthorized
    );
}

#[test]
fn the_same_request_id_with_another_body_is_refused() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    world.run(prompt(root, child, "r-1", "hello"));
    let refused = world.refuse(prompt(root, child, "r-1", "goodbye"));
    assert_eq!(
        refused,
        SubagentError::BadRequest(format!(
            "requestId \"r-1\" was already used for another prompt to {child}"
        ))
    );
    let mut other_zone = prompt(root, child, "r-1", "hello");
    if let Command::Prompt { zone, .. } = &mut other_zone {
        *zone = None;
    }
    assert_eq!(world.reject(other_zone), ErrorCode::BadRequest);
}

#[test]
fn only_the_direct_parent_may_prompt_a_continuable_child() {
    let mut world = World::new();
    let root = world.root();
    let other = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let grandchild = world.start(child, "spawn", Delivery::Parent);
    assert_eq!(
        world.refuse(prompt(other, child, "r", "x")),
        SubagentError::Unauthorized(format!("{other} is not the direct parent of {child}"))
    );
    assert_eq!(
        world.reject(prompt(root, grandchild, "r", "x")),
        ErrorCode::Unauthorized
    );
    assert_eq!(
        world.reject(prompt(child, root, "r", "x")),
        ErrorCode::Unauthorized
    );
    assert_eq!(
        world.reject(prompt(root, SessionId::new(), "r", "x")),
        ErrorCode::Unauthorized
    );
    let external = world.start(root, "process", Delivery::Parent);
    assert_eq!(
        world.reject(prompt(root, external, "r", "x")),
        ErrorCode::NotResumable
    );
}

#[test]
fn a_prompt_to_an_absent_child_cold_resumes_it_and_its_history_is_admissible() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    world.run(Command::AbandonActivation {
        child,
        epoch: 1,
        reason: subagent_core::AbandonReason::Cancelled,
    });
    let recorded = world.run(prompt(root, child, "wake", "again"));
    assert_eq!(
        types(&recorded),
        vec!["MessageAccepted", "ActivationRequested"]
    );
    let mut check = HistoryCheck::new();
    for record in world.history() {
        check
            .check(record)
            .expect("a decided history is admissible");
    }
}

#[test]
fn a_history_that_repeats_a_request_id_is_not_admissible() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    world.run(prompt(root, child, "r-1", "hello"));
    let stream = world.history().last().unwrap().stream;
    world.push_raw(
        stream,
        Event::MessageAccepted {
            message_id: MessageId::new(),
            source: MessageSource::Browser {
                request_id: "r-1".into(),
                zone: None,
            },
            delivery: MessageDelivery::Queue,
            content: vec![ContentBlock::text("another body")],
        },
    );
    let mut check = HistoryCheck::new();
    let violation = world
        .history()
        .iter()
        .find_map(|record| check.check(record).err())
        .expect("the repeated prompt is refused");
    assert_eq!(violation.event_type, "MessageAccepted");
    assert!(violation.reason.contains("r-1"), "{}", violation.reason);
}
