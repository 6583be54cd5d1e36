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
            requested_by: None,
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
            requested_by: None,
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

/// `bytes` with the checksum made good again: what a writer of another
/// layout, or of a lie, would store.
fn resealed(mut bytes: Vec<u8>) -> Vec<u8> {
    let crc = checkpoint::checksum(&bytes).unwrap();
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    bytes
}

#[test]
fn checkpoints_round_trip_and_bad_ones_are_rejected() {
    use checkpoint::CheckpointRejected::{Corrupt, Malformed, UnknownVersion};

    let mut history = HistoryBuilder::new();
    let root = history.root("root");
    let child = history.child(root, 1, "a", SessionMode::Continuable, false);
    let message = history.message(child, root);
    history.activation(child, 1, 1, vec![message]);
    let state = Projections::fold(&history.records);
    let bytes = checkpoint::encode(&state);
    assert_eq!(checkpoint::decode(&bytes).unwrap(), state);
    assert_eq!(&bytes[..8], &checkpoint::MAGIC);
    assert_eq!(
        checkpoint::decode(&checkpoint::encode(&Projections::new())).unwrap(),
        Projections::new()
    );

    // Another version, older or newer, with a sound checksum, is refused
    // before its parts are read (and the log refolded), even when all that
    // follows the header is gone.
    let with_version = |version: u32| {
        let mut other = bytes[..checkpoint::HEADER_LEN].to_vec();
        other[8..12].copy_from_slice(&version.to_le_bytes());
        resealed(other)
    };
    // An older binary one is what an upgrade leaves behind.
    for version in [
        checkpoint::FIRST_BINARY_VERSION,
        checkpoint::CHECKPOINT_VERSION - 1,
        checkpoint::CHECKPOINT_VERSION + 1,
        u32::MAX,
    ] {
        assert_eq!(
            checkpoint::decode(&with_version(version)),
            Err(UnknownVersion(version))
        );
    }
    // No binary frame of a JSON version (1, 2) was ever written: such a
    // frame is malformed, not another version.
    for version in 0..checkpoint::FIRST_BINARY_VERSION {
        assert!(matches!(
            checkpoint::decode(&with_version(version)),
            Err(Malformed(_))
        ));
    }
    // A JSON checkpoint (versions 1 and 2) is refused as the version it
    // names, from its first bytes.
    for (json, version) in [
        (r#"{"checkpointVersion":1,"position":1,"state":{}}"#, 1),
        (r#"{"checkpointVersion":2,"position":1,"state":{"#, 2),
        (r#" { "checkpointVersion" : 2, "position": 1}"#, 2),
    ] {
        assert_eq!(
            checkpoint::decode(json.as_bytes()),
            Err(UnknownVersion(version)),
            "{json}"
        );
    }

    // Any flipped bit of the version or after it fails the checksum,
    // before a part is decoded: damage is never taken for another version.
    for at in [
        8,
        11,
        12,
        13,
        16,
        20,
        24,
        31,
        checkpoint::HEADER_LEN,
        bytes.len() - 1,
    ] {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x10;
        assert_eq!(checkpoint::decode(&flipped), Err(Corrupt), "byte {at}");
    }
    // So does a trailing byte, or a missing one.
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(checkpoint::decode(&longer), Err(Corrupt));
    assert_eq!(checkpoint::decode(&bytes[..bytes.len() - 1]), Err(Corrupt));

    // The position is the header's.
    let mut moved = bytes.clone();
    moved[16..24].copy_from_slice(&7u64.to_le_bytes());
    assert_eq!(checkpoint::decode(&resealed(moved)).unwrap().position, 7);

    // A sound checksum over a malformed frame or part is still refused.
    let first_len = u64::from_le_bytes(bytes[24..32].try_into().unwrap());
    let first_end = checkpoint::HEADER_LEN + usize::try_from(first_len).unwrap();
    let with_first_len = |len: u64| {
        let mut frame = bytes.clone();
        frame[24..32].copy_from_slice(&len.to_le_bytes());
        resealed(frame)
    };
    let mut bad = vec![
        (
            "a first part past the end".to_owned(),
            with_first_len(u64::MAX),
        ),
        (
            "a first part one past the end".to_owned(),
            with_first_len((bytes.len() - checkpoint::HEADER_LEN + 1) as u64),
        ),
    ];
    for len in [0, first_len - 1, first_len + 1] {
        bad.push((format!("a first part of {len} bytes"), with_first_len(len)));
    }
    // A part is exactly one value: a nil after either is refused.
    let mut after_second = bytes.clone();
    after_second.push(0xc0);
    bad.push((
        "a value after the second part".to_owned(),
        resealed(after_second),
    ));
    let mut after_first = bytes.clone();
    after_first.insert(first_end, 0xc0);
    after_first[24..32].copy_from_slice(&(first_len + 1).to_le_bytes());
    bad.push((
        "a value after the first part".to_owned(),
        resealed(after_first),
    ));
    let mut garbled = bytes.clone();
    garbled[checkpoint::HEADER_LEN] = 0xc1; // a MessagePack marker never used
    bad.push(("a garbled part".to_owned(), resealed(garbled)));
    bad.push((
        "no second part".to_owned(),
        resealed(bytes[..first_end].to_vec()),
    ));
    let mut no_magic = bytes.clone();
    no_magic[0] = b'X';
    bad.push(("no magic".to_owned(), no_magic));
    bad.push(("a short header".to_owned(), bytes[..31].to_vec()));
    bad.push(("nothing".to_owned(), Vec::new()));
    bad.push(("JSON that names no version".to_owned(), b"{nope".to_vec()));
    bad.push((
        "JSON naming a version past u32".to_owned(),
        br#"{"checkpointVersion":4294967296}"#.to_vec(),
    ));
    for version in [0, 3, 4, 9] {
        bad.push((
            format!("JSON naming version {version}, which was never JSON"),
            format!(r#"{{"checkpointVersion":{version}}}"#).into_bytes(),
        ));
    }
    for (what, frame) in bad {
        assert!(
            matches!(checkpoint::decode(&frame), Err(Malformed(_))),
            "{what}: {:?}",
            checkpoint::decode(&frame)
        );
    }
}

#[test]
fn a_map_claiming_more_entries_than_its_part_holds_is_refused_not_allocated() {
    // Every map keyed by session id is sized up front from the count its
    // header declares, but never for more entries than its part's bytes
    // could hold: a header claiming u32::MAX entries (about 1.5 TB of
    // session records) is refused as malformed (the entry after the last
    // real one is the next field's name, not an id, or the part's end),
    // and neither allocated nor aborting the process. That the bound is
    // no looser than 19 bytes an entry is the unit test's
    // (`checkpoint::tests::a_map_is_sized_for_what_it_declares_up_to_what_its_part_can_hold`);
    // a reservation the bound lets through that fails is not an error.
    let bytes = checkpoint::encode(&Projections::new());
    let first_end = |frame: &[u8]| {
        checkpoint::HEADER_LEN
            + usize::try_from(u64::from_le_bytes(frame[24..32].try_into().unwrap())).unwrap()
    };
    for name in [
        "sessions",
        "catalogs",
        "owners",
        "activations",
        "runs",
        "inboxes",
    ] {
        // The field's name as MessagePack `bin`, then its empty map.
        let mut field = vec![0xc4, u8::try_from(name.len()).unwrap()];
        field.extend_from_slice(name.as_bytes());
        field.push(0x80);
        let at = bytes
            .windows(field.len())
            .position(|window| window == field)
            .unwrap_or_else(|| panic!("{name} is an empty map in the checkpoint"))
            + field.len()
            - 1;
        let mut claiming = bytes.clone();
        claiming.splice(at..=at, [0xdf, 0xff, 0xff, 0xff, 0xff]);
        if at < first_end(&bytes) {
            let first_len = u64::try_from(first_end(&bytes) - checkpoint::HEADER_LEN + 4).unwrap();
            claiming[24..32].copy_from_slice(&first_len.to_le_bytes());
        }
        let decoded = checkpoint::decode(&resealed(claiming));
        assert!(
            matches!(decoded, Err(checkpoint::CheckpointRejected::Malformed(_))),
            "{name}: {decoded:?}"
        );
    }
}

/// The fold of the newest schema fixture: every event kind of its schema.
fn fixture_state() -> Projections {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/schema-v3.jsonl");
    let records: Vec<_> = std::fs::read_to_string(fixture)
        .unwrap()
        .lines()
        .map(|line| subagent_core::record::decode_body(line.as_bytes()).unwrap())
        .collect();
    Projections::fold(&records)
}

#[test]
fn a_checkpoint_keeps_every_kind_of_content_and_number_exactly() {
    let mut state = fixture_state();
    assert!(!state.activations.is_empty() && !state.sessions.is_empty());
    // Every block kind, unknown fields, and the numbers a JSON value can
    // hold at their edges, in a settled result.
    let rich: subagent_core::SubagentResult = serde_json::from_value(serde_json::json!({
        "output": [
            {"type": "text", "text": "hi", "cacheControl": {"ttl": 5}, "z": [true, null]},
            {"type": "image", "mimeType": "image/png", "data": "AAAA", "x": 1},
            {"type": "tool_use", "id": "c1", "name": "grep",
             "input": {"max": u64::MAX, "min": i64::MIN, "neg": -5, "float": 2.5,
                       "tiny": 1e-300, "empty": {}, "list": [], "s": "é\u{1F600}\n"}},
            {"type": "tool_result", "toolUseId": "c1", "isError": true,
             "content": [{"type": "text", "text": "boom"}]},
            {"type": "audio", "data": "AAAA", "format": "wav"}
        ],
        "structured": {"answer": 42, "nested": [1, [2, [3]]]},
        "diagnostic": "the backend stopped early",
        "stopReason": "a-backend-specific-reason"
    }))
    .unwrap();
    let (_, activation) = state
        .activations
        .iter_mut()
        .max_by_key(|(id, _)| **id)
        .unwrap();
    activation.last_result = Some((u64::MAX, rich.clone()));
    let bytes = checkpoint::encode(&state);
    let back = checkpoint::decode(&bytes).unwrap();
    assert_eq!(back, state);
    // Equal as JSON values too (maps compared as maps: their order
    // follows each HashMap's own seed): no number changed its kind.
    assert_eq!(
        serde_json::to_value(&back).unwrap(),
        serde_json::to_value(&state).unwrap()
    );
}

/// Runs `work` on a thread with `stack` bytes of stack.
fn with_stack<T: Send + 'static>(stack: usize, work: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(stack)
        .spawn(work)
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn a_checkpoint_nested_past_its_depth_is_refused_and_one_within_it_kept() {
    // Building, encoding and dropping deep values recurses on the test's
    // own thread, so that gets room; the decodes run on a thread with
    // 64 KiB, far too little for 127 levels, which only passes because
    // the decoder recurses on stacks of its own.
    with_stack(256 << 20, || {
        let nested = |depth: usize| {
            let mut value = serde_json::Value::Null;
            for _ in 0..depth {
                value = serde_json::Value::Array(vec![value]);
            }
            let block: subagent_core::ContentBlock = serde_json::from_value(
                serde_json::json!({"type": "text", "text": "deep", "deep": value}),
            )
            .unwrap();
            let mut state = fixture_state();
            let (_, activation) = state.activations.iter_mut().next().unwrap();
            activation.last_result =
                Some((1, subagent_core::SubagentResult::completed(vec![block])));
            state
        };
        let decoded_on_a_small_stack = |bytes: Vec<u8>| {
            with_stack(64 << 10, move || {
                let decoded = checkpoint::decode(&bytes);
                // Whatever decoded is dropped where it has room.
                decoded
                    .map_err(|rejected| rejected.to_string())
                    .map(|state| std::mem::ManuallyDrop::new(Box::new(state)))
            })
        };
        // As deep as an event's content can be (the log decodes 128 levels).
        let within = nested(127);
        let back = decoded_on_a_small_stack(checkpoint::encode(&within)).unwrap();
        assert_eq!(**back, within);
        drop(std::mem::ManuallyDrop::into_inner(back));
        // Deeper: refused, not overflowed.
        let past = nested(1_000);
        let refused = decoded_on_a_small_stack(checkpoint::encode(&past)).unwrap_err();
        assert!(refused.contains("depth limit exceeded"), "{refused}");
    });
}
