//! The admissibility check against both sides: every history the state
//! machine or the faithful builder produces passes it (it is not too
//! strict), and every impossible one fails at its first impossible record
//! (it is not vacuous). `decide`'s own histories are also checked inside the
//! `decide_sequence` fuzz body, so the corpora replay covers them.

mod common;

use common::capable_provider;

use std::collections::HashSet;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use subagent_core::{
    ContentBlock, Delivery, ErrorCode, Event, MessageDelivery, MessageId, MessageSource,
    OutOfOrder, SessionId, SessionMode, StreamId, SubagentError, SubagentRunId,
};
use subagent_projections::testing::{history, impossible_histories, steps, HistoryBuilder, Step};
use subagent_projections::{decide, fuzzing, Command, HistoryCheck, HistoryViolation, Projections};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The builder's histories are admissible, and the projections the
    /// check folds agree with [`fuzzing::ReferenceFold`], a fold written
    /// apart from `Projections::apply` (which the check itself runs, so a
    /// comparison with `Projections::fold` could not fail).
    #[test]
    fn every_built_history_is_admissible(steps in steps(80)) {
        let records = history(&steps);
        let checked = HistoryCheck::history(&records);
        prop_assert!(checked.is_ok(), "{:?}", checked.err());
        let reference = fuzzing::ReferenceFold::fold(&records);
        let disagreement = reference.disagreement(&checked.unwrap());
        prop_assert!(disagreement.is_none(), "{}", disagreement.unwrap_or_default());
    }

    /// Any command bytes through `decide` record an admissible history (the
    /// fuzz body panics otherwise).
    #[test]
    fn every_decided_history_is_admissible(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        fuzzing::decide_sequence(&bytes);
    }
}

#[test]
fn the_builder_reaches_every_lifecycle_event_it_claims() {
    // Not vacuous: long random histories contain every kind of step.
    let mut seen = HashSet::new();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for _ in 0..64 {
        let steps = steps(120).new_tree(&mut runner).unwrap().current();
        for record in history(&steps) {
            seen.insert(record.event.type_name());
        }
    }
    for expected in [
        "ProviderRegistered",
        "ChildCataloged",
        "SessionCreated",
        "ActivationRequested",
        "ActivationPrepared",
        "ActivationPublished",
        "MessageAccepted",
        "MessagesClaimed",
        "TurnStarted",
        "AssistantMessage",
        "TurnEnded",
        "ActivationSettled",
        "ActivationReleased",
        "RunRequested",
        "RunStarted",
        "RunSettled",
        "RunDisposed",
        "AdmissionClosed",
        "AdmissionReopened",
    ] {
        assert!(seen.contains(expected), "{expected} never built");
    }
}

#[test]
fn every_impossible_history_fails_at_its_first_impossible_record() {
    let cases = impossible_histories();
    assert!(cases.len() >= 20);
    for case in cases {
        // Every record before the impossible one is admitted.
        let mut check = HistoryCheck::new();
        for record in &case.records[..(case.position - 1) as usize] {
            check
                .check(record)
                .unwrap_or_else(|violation| panic!("{}: {violation}", case.name));
        }
        let violation: HistoryViolation =
            HistoryCheck::history(&case.records).expect_err(case.name);
        assert_eq!(
            violation.position, case.position,
            "{}: {violation}",
            case.name
        );
        assert_eq!(violation.code(), ErrorCode::ReplayImpossibleHistory);
        assert!(
            violation
                .to_string()
                .contains(&format!("position {}", case.position)),
            "{violation}"
        );
    }
}

#[test]
fn a_label_decide_would_refuse_is_an_impossible_record() {
    for label in ["", "forged\nline", "x\u{1b}[2J"] {
        let mut built = HistoryBuilder::new();
        built.root(label);
        let violation = HistoryCheck::history(&built.records).expect_err(label);
        assert_eq!(violation.position, 1, "{label:?}: {violation}");
        assert!(violation.reason.contains("label"), "{label:?}: {violation}");
    }
    let mut records = history(&[Step::Child {
        parent: 0,
        continuable: true,
    }]);
    let cataloged = records
        .iter_mut()
        .find(|record| matches!(record.event, Event::ChildCataloged { .. }))
        .expect("a start catalogs its child");
    let Event::ChildCataloged { label, .. } = &mut cataloged.event else {
        unreachable!()
    };
    *label = "bad\u{7}".into();
    let at = cataloged.position;
    let violation = HistoryCheck::history(&records).expect_err("a child's label");
    assert_eq!(violation.position, at, "{violation}");
    assert!(
        violation.reason.contains("control character"),
        "{violation}"
    );
}

/// A root, the spawn provider, and a published child whose activation state
/// carries `turns` and `epoch` as given (a damaged or adversarial log can
/// say anything; the fold takes it).
fn child_with(turns: u64, epoch: u64, root_depth: u64) -> (Projections, SessionId, SessionId) {
    let mut history = HistoryBuilder::new();
    let root = SessionId::new();
    let mut created = Event::root_created(root, "root");
    if let Event::SessionCreated { depth, .. } = &mut created {
        *depth = root_depth;
    }
    history.push(StreamId::Session(root), created);
    history.push(StreamId::Runtime, capable_provider("spawn"));
    let child = history.child(root, 1, "c", SessionMode::Continuable, false);
    let stream = StreamId::Session(child);
    history.push(
        stream,
        Event::ActivationRequested {
            epoch,
            delivery: Delivery::Parent,
            output_schema: None,
            requested_by: None,
        },
    );
    history.push(
        stream,
        Event::ActivationPublished {
            epoch,
            run_id: SubagentRunId::new(),
        },
    );
    history.push(stream, Event::TurnStarted { turn: turns, epoch });
    history.push(
        stream,
        Event::TurnEnded {
            turn: turns,
            stop_reason: subagent_core::SubagentStopReason::Completed,
        },
    );
    (Projections::fold(&history.records), root, child)
}

#[test]
fn decide_refuses_instead_of_overflowing_on_u64_max() {
    let (state, _, child) = child_with(u64::MAX, 1, 0);
    let err = decide(&state, Command::BeginTurn { session: child }).unwrap_err();
    assert_eq!(
        err,
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::Exhausted("turn")
        }
    );

    // A released child at epoch u64::MAX cannot be cold-resumed past it.
    let (mut state, root, child) = child_with(1, u64::MAX, 0);
    let record = subagent_core::RecordedEvent {
        position: state.position + 1,
        stream: StreamId::Session(child),
        version: 99,
        event_id: subagent_core::EventId::new(),
        recorded_at: 0,
        schema_version: subagent_core::CURRENT_SCHEMA_VERSION,
        correlation_id: None,
        causation_id: None,
        trace: None,
        event: Event::ActivationAbandoned {
            epoch: u64::MAX,
            reason: subagent_core::AbandonReason::HostRestart,
        },
    };
    state.apply(&record);
    let err = decide(
        &state,
        Command::SendMessage {
            sender: root,
            target: child,
            message_id: MessageId::new(),
            content: vec![ContentBlock::text("again")],
            delivery: MessageDelivery::Queue,
        },
    )
    .unwrap_err();
    assert_eq!(
        err,
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::Exhausted("activation epoch")
        }
    );

    // A parent at depth u64::MAX has no deeper child.
    let (state, root, _) = child_with(1, 1, u64::MAX);
    let err = decide(
        &state,
        Command::StartChild(subagent_projections::StartChild {
            parent: root,
            child: SessionId::new(),
            provider: "spawn".into(),
            label: "deeper".into(),
            options: subagent_core::StartOptions::default(),
            delivery: Delivery::Parent,
            run_id: SubagentRunId::new(),
            requested_by: None,
            settings: std::sync::Arc::default(),
        }),
    )
    .unwrap_err();
    assert_eq!(
        err,
        SubagentError::OutOfOrder {
            session: root,
            reason: OutOfOrder::Exhausted("depth")
        }
    );
}

#[test]
fn the_fold_survives_a_checkpointed_counter_at_u64_max() {
    let (mut state, root, child) = child_with(1, 1, 0);
    state.inboxes.entry(root).or_default().accepted = u64::MAX;
    let record = subagent_core::RecordedEvent {
        position: state.position + 1,
        stream: StreamId::Session(root),
        version: 9,
        event_id: subagent_core::EventId::new(),
        recorded_at: 0,
        schema_version: subagent_core::CURRENT_SCHEMA_VERSION,
        correlation_id: None,
        causation_id: None,
        trace: None,
        event: Event::MessageAccepted {
            message_id: MessageId::new(),
            source: MessageSource::AgentMessage {
                sender_session_id: child,
            },
            delivery: MessageDelivery::Queue,
            content: vec![],
        },
    };
    state.apply(&record);
    assert_eq!(state.inboxes[&root].accepted, u64::MAX);
    assert_eq!(state.pending_messages(root).len(), 1);
}

#[test]
fn a_settlement_notice_must_match_its_settlement() {
    // The genuine notice passes; one naming another epoch does not.
    let steps = [
        subagent_projections::testing::Step::Child {
            parent: 0,
            continuable: true,
        },
        subagent_projections::testing::Step::Advance { target: 1 },
        subagent_projections::testing::Step::Advance { target: 1 },
        subagent_projections::testing::Step::Advance { target: 1 },
        subagent_projections::testing::Step::Advance { target: 1 },
        subagent_projections::testing::Step::Advance { target: 1 },
    ];
    let mut records = history(&steps);
    let notice = records.last().unwrap().clone();
    assert!(matches!(
        notice.event,
        Event::MessageAccepted {
            source: MessageSource::SubagentSettled { .. },
            ..
        }
    ));
    assert!(HistoryCheck::history(&records).is_ok());
    if let Event::MessageAccepted { message_id, .. } = &mut records.last_mut().unwrap().event {
        *message_id = MessageId::new();
    }
    let violation = HistoryCheck::history(&records).unwrap_err();
    assert_eq!(violation.position, notice.position);
}
