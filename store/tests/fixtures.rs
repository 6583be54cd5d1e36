//! Schema fixtures: a log written by each released schema version must keep
//! decoding (DESIGN.md section 3, "Schema evolution").
//!
//! `tests/fixtures/schema-v<N>.jsonl` holds one record body per line, covering
//! every event type of that version. It is generated once, when the version is
//! released, by the ignored `regenerate_current_fixture` and then never edited.

use std::collections::BTreeSet;
use std::path::PathBuf;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use subagent_core::{
    arbitrary, Event, EventId, EventKind, RecordedEvent, SessionId, StreamId,
    CURRENT_SCHEMA_VERSION,
};
use subagent_store::record::decode_body;

fn fixture(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../tests/fixtures/schema-v{version}.jsonl"))
}

#[test]
fn every_released_schema_fixture_still_decodes_losslessly() {
    for version in 1..=CURRENT_SCHEMA_VERSION {
        let path = fixture(version);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let mut types = BTreeSet::new();
        for (index, line) in text.lines().enumerate() {
            let record = decode_body(line.as_bytes())
                .unwrap_or_else(|err| panic!("line {}: {err}", index + 1));
            assert_eq!(record.schema_version, version);
            types.insert(record.event.type_name());
            if version == CURRENT_SCHEMA_VERSION {
                let again: serde_json::Value = serde_json::to_value(&record).unwrap();
                let original: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(again, original, "line {} re-encodes differently", index + 1);
            }
        }
        let all: BTreeSet<&str> = EventKind::ALL.iter().map(|kind| kind.as_str()).collect();
        if version == CURRENT_SCHEMA_VERSION {
            assert_eq!(types, all, "the current fixture covers every event type");
        }
    }
}

/// Writes the fixture of the current schema version: deterministic draws of
/// the event strategy until every type is covered. Run only when releasing a
/// new schema version:
/// `cargo test -p subagent-store --test fixtures -- --ignored regenerate`.
#[test]
#[ignore = "writes tests/fixtures; run when releasing a schema version"]
fn regenerate_current_fixture() {
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeSet::new();
    let mut lines = Vec::new();
    let stream_session = SessionId::from_uuid(uuid::Uuid::from_u128(7));
    while seen.len() < EventKind::ALL.len() {
        let event = arbitrary::event().new_tree(&mut runner).unwrap().current();
        if !seen.insert(event.type_name()) {
            continue;
        }
        let position = lines.len() as u64 + 1;
        let stream = match (&event, event.stream_kind()) {
            (Event::SessionCreated { session, .. }, _) => StreamId::Session(*session),
            // Since version 3, host-level facts may be in a host stream.
            (Event::ProviderRemoved { .. }, _) if CURRENT_SCHEMA_VERSION >= 3 => {
                StreamId::Host(subagent_core::HostId::from_uuid(uuid::Uuid::from_u128(9)))
            }
            (_, subagent_core::StreamKind::Runtime) => StreamId::Runtime,
            _ => StreamId::Session(stream_session),
        };
        let record = RecordedEvent {
            position,
            stream,
            version: position,
            event_id: EventId::from_uuid(uuid::Uuid::from_u128(u128::from(position))),
            recorded_at: 1_764_460_800_000 + position,
            schema_version: CURRENT_SCHEMA_VERSION,
            correlation_id: None,
            causation_id: None,
            trace: None,
            event,
        };
        lines.push(serde_json::to_string(&record).unwrap());
    }
    std::fs::write(fixture(CURRENT_SCHEMA_VERSION), lines.join("\n") + "\n").unwrap();
}
