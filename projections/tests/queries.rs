//! The projection queries, each against a hand-built history.

use subagent_core::{
    CatalogMode, Delivery, Event, SessionMode, StreamId, SubagentResult, SubagentRunId,
    SubagentStopReason,
};
use subagent_projections::testing::HistoryBuilder;
use subagent_projections::{checkpoint, Activity, Projections, RunPhase};

#[test]
fn list_children_is_the_parent_catalog_in_parent_event_order() {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    let first = history.child(root, 1, "first", SessionMode::Continuable, false);
    let second = history.child(root, 1, "second", SessionMode::OneShot, true);
    let third = history.child(root, 1, "third", SessionMode::Continuable, false);
    let state = Projections::fold(&history.records);
    let children = state.list_children(root);
    let ids: Vec<_> = children.iter().map(|c| c.entry.child_id).collect();
    assert_eq!(ids, vec![first, second, third]);
    assert_eq!(children[1].entry.mode, CatalogMode::OneShot);
    assert!(children[1].entry.external);
    assert!(children.iter().all(|c| c.diagnostic.is_none()));
    assert!(state.list_children(first).is_empty());
}

#[test]
fn children_with_unreadable_descriptors_are_listed_as_unknown() {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    let child = subagent_core::SessionId::new();
    history.push(
        StreamId::Session(root),
        Event::ChildCataloged {
            child,
            label: "old".into(),
            provider: "legacy".into(),
            mode: SessionMode::Continuable,
            external: false,
        },
    );
    history.push(
        StreamId::Session(child),
        Event::SessionCreated {
            session: child,
            parent: Some(root),
            depth: 1,
            label: "old".into(),
            provider: Some("legacy".into()),
            mode: SessionMode::Continuable,
            external: false,
            descriptor: serde_json::json!({"version": 99}),
        },
    );
    let missing = subagent_core::SessionId::new();
    history.push(
        StreamId::Session(root),
        Event::ChildCataloged {
            child: missing,
            label: "gone".into(),
            provider: "spawn".into(),
            mode: SessionMode::Continuable,
            external: false,
        },
    );
    let state = Projections::fold(&history.records);
    let children = state.list_children(root);
    assert_eq!(children.len(), 2);
    for listed in &children {
        assert_eq!(listed.entry.mode, CatalogMode::Unknown);
        assert!(listed.diagnostic.is_some());
    }
    assert!(!state.sessions[&child].is_resumable());
    assert!(
        state.list_agents(root).is_empty(),
        "unknown children grant no continuation"
    );
}

#[test]
fn list_descendants_is_stable_pre_order_through_one_shot_children() {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    let a = history.child(root, 1, "a", SessionMode::Continuable, false);
    let b = history.child(root, 1, "b", SessionMode::OneShot, false);
    let a1 = history.child(a, 2, "a1", SessionMode::Continuable, false);
    let b1 = history.child(b, 2, "b1", SessionMode::Continuable, false);
    let a2 = history.child(a, 2, "a2", SessionMode::OneShot, true);
    let a11 = history.child(a1, 3, "a11", SessionMode::Continuable, false);
    let state = Projections::fold(&history.records);
    let listed: Vec<_> = state
        .list_descendants(root)
        .into_iter()
        .map(|e| (e.entry.entry.child_id, e.parent_id, e.depth))
        .collect();
    assert_eq!(
        listed,
        vec![
            (a, root, 1),
            (a1, a, 2),
            (a11, a1, 3),
            (a2, a, 2),
            (b, root, 1),
            (b1, b, 2)
        ]
    );
    let below_a: Vec<_> = state
        .list_descendants(a)
        .into_iter()
        .map(|e| (e.entry.entry.child_id, e.depth))
        .collect();
    assert_eq!(
        below_a,
        vec![(a1, 1), (a11, 2), (a2, 1)],
        "depth counts from the requested root"
    );
}

#[test]
fn a_cycle_in_a_damaged_log_is_a_diagnostic_not_a_hang() {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    let a = history.child(root, 1, "a", SessionMode::Continuable, false);
    history.push(
        StreamId::Session(a),
        Event::ChildCataloged {
            child: root,
            label: "loop".into(),
            provider: "spawn".into(),
            mode: SessionMode::Continuable,
            external: false,
        },
    );
    let listed = Projections::fold(&history.records).list_descendants(root);
    assert_eq!(listed.len(), 2);
    assert!(listed[1]
        .entry
        .diagnostic
        .as_deref()
        .unwrap_or_default()
        .contains("twice"));
}

#[test]
fn activation_lifecycle_drives_activity_and_keeps_the_settled_result() {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    let child = history.child(root, 1, "worker", SessionMode::Continuable, false);
    let stream = StreamId::Session(child);
    let message = history.message(child, root);
    let mut state = Projections::fold(&history.records);
    assert_eq!(state.activity(child), Activity::Inactive);
    assert_eq!(state.pending_messages(child), vec![message]);

    history.push(
        stream,
        Event::ActivationRequested {
            epoch: 1,
            delivery: Delivery::Caller,
            output_schema: None,
        },
    );
    history.push(
        stream,
        Event::ActivationPublished {
            epoch: 1,
            run_id: SubagentRunId::new(),
        },
    );
    history.push(
        stream,
        Event::MessagesClaimed {
            ids: vec![message],
            turn: 1,
        },
    );
    history.push(stream, Event::TurnStarted { turn: 1, epoch: 1 });
    for record in &history.records {
        state.apply(record);
    }
    assert_eq!(state.activity(child), Activity::Running);
    assert!(state.pending_messages(child).is_empty());
    assert_eq!(state.inboxes[&child].claimed[&message], 1);
    assert_eq!(
        state.list_agents(root).len(),
        1,
        "running children are listed"
    );

    history.push(
        stream,
        Event::TurnEnded {
            turn: 1,
            stop_reason: SubagentStopReason::Completed,
        },
    );
    let result = SubagentResult::completed(vec![]);
    history.push(
        stream,
        Event::ActivationSettled {
            epoch: 1,
            result: result.clone(),
        },
    );
    for record in &history.records {
        state.apply(record);
    }
    assert_eq!(state.activity(child), Activity::Idle);
    assert!(
        state.list_agents(root).is_empty(),
        "idle children are not listed by list_agents"
    );

    history.push(
        stream,
        Event::ActivationReleased {
            epoch: 1,
            cleanup_error: Some(subagent_core::Diagnostic::new("socket busy")),
        },
    );
    for record in &history.records {
        state.apply(record);
    }
    assert_eq!(state.activity(child), Activity::Inactive);
    let activation = &state.activations[&child];
    assert_eq!(
        activation.last_result,
        Some((1, result)),
        "cleanup failure does not overwrite the result"
    );
    assert_eq!(
        activation
            .last_cleanup_error
            .as_ref()
            .map(|(_, d)| d.as_str()),
        Some("socket busy")
    );
    assert_eq!(
        state.list_agents(root).len(),
        1,
        "inactive children are listed"
    );
}

#[test]
fn an_external_run_keeps_its_first_result() {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    let child = history.child(root, 1, "lint", SessionMode::OneShot, true);
    let stream = StreamId::Session(child);
    let run_id = SubagentRunId::new();
    let first = SubagentResult::completed(vec![]);
    history.push(
        stream,
        Event::RunRequested {
            run_id,
            provider: "process".into(),
            delivery: Delivery::Parent,
        },
    );
    history.push(stream, Event::RunStarted { run_id });
    history.push(
        stream,
        Event::RunSettled {
            run_id,
            result: first.clone(),
        },
    );
    history.push(
        stream,
        Event::RunSettled {
            run_id,
            result: SubagentResult::failed(SubagentStopReason::Error, vec![], "late"),
        },
    );
    history.push(
        stream,
        Event::RunDisposed {
            run_id,
            cleanup_error: None,
        },
    );
    let state = Projections::fold(&history.records);
    let run = &state.runs[&child];
    assert_eq!(run.phase, RunPhase::Disposed);
    assert_eq!(run.result, Some(first));
    assert!(
        state.list_agents(root).is_empty(),
        "external children are not agents"
    );
}

#[test]
fn applying_an_old_position_again_changes_nothing() {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    history.child(root, 1, "a", SessionMode::Continuable, false);
    let mut state = Projections::fold(&history.records);
    let before = state.clone();
    state.apply(&history.records[1]);
    assert_eq!(state, before);
}

#[test]
fn checkpoints_round_trip_and_bad_ones_are_rejected() {
    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    let child = history.child(root, 1, "a", SessionMode::Continuable, false);
    let message = history.message(child, root);
    history.activation(child, 1, 1, vec![message]);
    let state = Projections::fold(&history.records);
    let bytes = checkpoint::encode(&state);
    assert_eq!(checkpoint::decode(&bytes).unwrap(), state);

    assert!(matches!(
        checkpoint::decode(b"{nope"),
        Err(checkpoint::CheckpointRejected::Malformed(_))
    ));
    // Another version, older or newer, is refused (and the log refolded).
    for version in [
        checkpoint::CHECKPOINT_VERSION - 1,
        checkpoint::CHECKPOINT_VERSION + 1,
    ] {
        let mut other: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        other["checkpointVersion"] = version.into();
        assert_eq!(
            checkpoint::decode(&serde_json::to_vec(&other).unwrap()),
            Err(checkpoint::CheckpointRejected::UnknownVersion(version))
        );
    }
    let mut lying: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    lying["position"] = 1.into();
    assert_eq!(
        checkpoint::decode(&serde_json::to_vec(&lying).unwrap()),
        Err(checkpoint::CheckpointRejected::Inconsistent)
    );

    // The fields in another order (the state first) decode the same, and
    // the version is still judged.
    let text = String::from_utf8(bytes.clone()).unwrap();
    let state_json = serde_json::to_string(&state).unwrap();
    let reordered = |version: u32| {
        format!(
            r#"{{"state":{state_json},"extra":[1,{{"a":null}}],"position":{},"checkpointVersion":{version}}}"#,
            state.position
        )
    };
    assert_eq!(
        checkpoint::decode(reordered(checkpoint::CHECKPOINT_VERSION).as_bytes()).unwrap(),
        state
    );
    assert_eq!(
        checkpoint::decode(reordered(checkpoint::CHECKPOINT_VERSION + 1).as_bytes()),
        Err(checkpoint::CheckpointRejected::UnknownVersion(
            checkpoint::CHECKPOINT_VERSION + 1
        ))
    );
    // Missing, repeated or trailing parts are malformed.
    let version = checkpoint::CHECKPOINT_VERSION;
    for bad in [
        format!(
            r#"{{"checkpointVersion":{version},"position":{}}}"#,
            state.position
        ),
        format!(r#"{{"checkpointVersion":{version},"state":{state_json}}}"#),
        format!(r#"{{"position":0,"state":{state_json}}}"#),
        format!(
            r#"{{"checkpointVersion":{version},"checkpointVersion":{version},"position":0,"state":{{}}}}"#
        ),
        format!(
            r#"{{"checkpointVersion":{version},"position":{},"state":{state_json},"state":{state_json}}}"#,
            state.position
        ),
        format!("{text} {{}}"),
        format!(r#"{{"checkpointVersion":"{version}","position":0,"state":{state_json}}}"#),
        "[]".to_owned(),
        String::new(),
    ] {
        assert!(
            matches!(
                checkpoint::decode(bad.as_bytes()),
                Err(checkpoint::CheckpointRejected::Malformed(_))
            ),
            "{bad}"
        );
    }
}
