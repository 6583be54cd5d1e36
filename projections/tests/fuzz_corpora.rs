//! Replays every committed fuzz corpus (`fuzz/corpus/<target>/`) through the
//! same bodies the cargo-fuzz targets run (`subagent_projections::fuzzing`),
//! so `make test` re-checks every input the fuzzer ever kept, on stable and
//! without libFuzzer. A missing or empty corpus fails: a replay of nothing
//! would prove nothing.
//!
//! `cargo test -p subagent-projections --test fuzz_corpora -- --ignored`
//! rewrites the seed inputs (files named `seed-*`) from the schema fixture
//! and built-in examples.

use std::path::PathBuf;

use subagent_projections::fuzzing;

type Body = fn(&[u8]);

const TARGETS: [(&str, Body); 6] = [
    ("record_decode", fuzzing::record_decode),
    ("event_json", fuzzing::event_json),
    ("checkpoint_decode", fuzzing::checkpoint_decode),
    ("schema_subset", fuzzing::schema_subset),
    ("persona_template", fuzzing::persona_template),
    ("decide_sequence", fuzzing::decide_sequence),
];

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

#[test]
fn every_corpus_input_passes_its_target() {
    for (target, body) in TARGETS {
        let dir = corpus_dir(target);
        let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
            .map(|entry| entry.expect("corpus entry").path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{target}: the corpus is empty");
        for input in &inputs {
            let bytes = std::fs::read(input).expect("corpus input reads");
            let outcome = std::panic::catch_unwind(|| body(&bytes));
            assert!(outcome.is_ok(), "{target}: {} fails", input.display());
        }
        println!("{target}: {} inputs replayed", inputs.len());
    }
}

#[test]
fn the_decide_seeds_drive_a_child_through_its_whole_lifecycle() {
    let seed = std::fs::read(corpus_dir("decide_sequence").join("seed-00")).unwrap();
    let recorded = fuzzing::decide_sequence_history(&seed);
    for expected in [
        "SessionCreated",
        "ProviderRegistered",
        "ChildCataloged",
        "ActivationRequested",
        "MessageAccepted",
        "ActivationPublished",
        "TurnStarted",
        "AssistantMessage",
        "TurnEnded",
        "ActivationSettled",
        "ActivationReleased",
    ] {
        assert!(
            recorded.contains(&expected),
            "{expected} missing from {recorded:?}"
        );
    }
}

/// The records of the schema-v1 fixture, the seeds' source.
fn fixture_records() -> Vec<subagent_core::RecordedEvent> {
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/schema-v1.jsonl");
    std::fs::read_to_string(fixture)
        .expect("fixture")
        .lines()
        .map(|line| subagent_core::record::decode_body(line.as_bytes()).expect("fixture decodes"))
        .collect()
}

#[test]
fn the_checkpoint_seeds_are_checkpoints_of_this_format() {
    // The fuzz body skips what does not decode, so replaying the corpus
    // alone would pass a decoder that refused everything.
    use subagent_projections::{checkpoint, Projections};

    let records = fixture_records();
    let dir = corpus_dir("checkpoint_decode");
    for (seed, state) in [
        ("seed-fixture", Projections::fold(&records)),
        ("seed-empty", Projections::new()),
    ] {
        let bytes = std::fs::read(dir.join(seed)).expect("seed");
        assert_eq!(checkpoint::decode(&bytes), Ok(state), "{seed}");
    }
}

#[test]
#[ignore = "rewrites the seed corpora; run by hand"]
fn regenerate_seed_corpora() {
    use subagent_core::record::encode;
    use subagent_projections::{checkpoint, Projections};

    let records = fixture_records();
    let write = |target: &str, name: String, bytes: &[u8]| {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    };
    for (index, record) in records.iter().enumerate().take(12) {
        let mut at_one = record.clone();
        at_one.position = 1;
        write(
            "record_decode",
            format!("{index:02}"),
            &encode(&at_one).unwrap(),
        );
        let event = serde_json::to_vec(&record.event).unwrap();
        write("event_json", format!("{index:02}"), &event);
    }
    let state = Projections::fold(&records);
    write(
        "checkpoint_decode",
        "fixture".into(),
        &checkpoint::encode(&state),
    );
    write(
        "checkpoint_decode",
        "empty".into(),
        &checkpoint::encode(&Projections::new()),
    );
    let schemas = [
        r#"{"type":"object","properties":{"answer":{"type":"integer","minimum":0}},"required":["answer"],"examples":{"answer":3}}"#,
        r##"{"type":"object","properties":{"notes":{"type":"array","items":{"$ref":"#/$defs/note"}}},"$defs":{"note":{"type":"string","maxLength":80}}}"##,
        r#"{"type":"object","additionalProperties":false,"properties":{"a":{"enum":[1,"x",null]}}}"#,
        r#"{"type":"array"}"#,
        r#"{"type":"object","properties":{"x":{"$ref":"https://example.com/s.json"}}}"#,
    ];
    for (index, schema) in schemas.iter().enumerate() {
        write("schema_subset", format!("{index:02}"), schema.as_bytes());
    }
    let personas = [
        "You assist {{user}} with {{ task }}.",
        "Plain persona with no variables.",
        "Unbalanced {{user",
        "Unknown {{nobody}}",
        "Nested {{ {{user}} }}",
        "}} stray close",
    ];
    for (index, persona) in personas.iter().enumerate() {
        write(
            "persona_template",
            format!("{index:02}"),
            persona.as_bytes(),
        );
    }
    // Open a root, register both providers, start a local child, prepare,
    // publish, run a turn, settle, message it, release; then an external run.
    let sequences: [&[u8]; 3] = [
        &[
            0, 0, 1, 0, 1, 1, 3, 0, 0, 0, 4, 1, 2, 5, 1, 2, 6, 1, 8, 1, 9, 1, 0, 10, 1, 2, 0, 17,
            0, 1, 0, 6, 1, 11, 1, 2, 0,
        ],
        &[0, 1, 1, 1, 3, 0, 0, 1, 13, 1, 14, 1, 0, 15, 1, 21],
        &[
            0, 0, 1, 0, 3, 0, 1, 3, 0, 4, 1, 2, 19, 0, 3, 0, 0, 0, 18, 1, 0, 1, 12, 1, 2, 3, 20, 0,
            21,
        ],
    ];
    for (index, sequence) in sequences.iter().enumerate() {
        write("decide_sequence", format!("{index:02}"), sequence);
    }
}
