//! The persona and output-schema start options end to end, each test named
//! after the spec behaviour it checks: a persona is validated at start
//! (a rejection records nothing) and rendered with the deployment's
//! variables for its own child alone; an output schema is checked at start,
//! a valid capture becomes the structured result and closes the child's
//! input, an invalid or missing one settles `error`, and a later cold resume
//! does not inherit the schema.

mod common;

use common::{delegation_host, spec, Harness, Probe};

use subagent_core::{Delivery, ErrorCode, SubagentStopReason};
use subagent_runtime::scripted::Step;
use subagent_runtime::{Script, ScriptedHost};
use subagent_store::EventLog;

#[tokio::test]
async fn a_persona_is_validated_at_start_and_rendered_for_the_child_alone() {
    let probe = Probe::new(delegation_host());
    let h = Harness::open(probe.clone()).await;
    h.runtime
        .set_persona_variables(
            [("user".to_owned(), "Ada".to_owned())]
                .into_iter()
                .collect(),
        )
        .unwrap();
    let head = h.log.head();
    let mut bad = spec("spawn", "x", Delivery::Caller);
    bad.request.options.persona = Some("Serve {{nobody}}".into());
    let err = h.start(bad).await.err().unwrap();
    assert_eq!(err.code(), ErrorCode::InvalidPersona);
    assert_eq!(h.log.head(), head, "nothing recorded");
    let mut good = spec("spawn", "x", Delivery::Caller);
    good.request.options.persona = Some("You assist {{ user }}.".into());
    let with_persona = h.start(good).await.unwrap();
    with_persona.result().await.unwrap();
    let without = h.start(spec("spawn", "y", Delivery::Caller)).await.unwrap();
    without.result().await.unwrap();
    let personas: Vec<_> = probe.specs().into_iter().map(|spec| spec.persona).collect();
    assert_eq!(
        personas,
        vec![Some("You assist Ada.".to_owned()), None],
        "the persona shadows only its own child"
    );
    with_persona.dispose().await.unwrap();
    without.dispose().await.unwrap();
}

#[tokio::test]
async fn an_output_schema_is_checked_at_start_and_the_capture_becomes_structured_or_an_error() {
    let host = ScriptedHost::new(Script::reply("no capture"))
        .with(
            "valid",
            Script {
                turns: vec![vec![
                    Step::Structured(serde_json::json!({"answer": 42})),
                    Step::Say("done".into()),
                ]],
            },
        )
        .with(
            "invalid",
            Script {
                turns: vec![vec![
                    Step::Structured(serde_json::json!({"answer": "many"})),
                    Step::Say("done".into()),
                ]],
            },
        );
    let h = Harness::open(host).await;
    let schema = serde_json::json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]});
    let with_schema = |label: &str, schema: serde_json::Value| {
        let mut request = spec("spawn", label, Delivery::Caller);
        request.request.options.output_schema = Some(schema);
        request
    };
    let head = h.log.head();
    let err = h
        .start(with_schema(
            "valid",
            serde_json::json!({"type": "object", "patternProperties": {}}),
        ))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::InvalidOutputSchema);
    assert_eq!(h.log.head(), head, "a rejected schema records nothing");

    let valid = h.start(with_schema("valid", schema.clone())).await.unwrap();
    let result = valid.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    assert_eq!(result.structured, Some(serde_json::json!({"answer": 42})));
    let err = h.send(valid.child_id(), "more").await.unwrap_err();
    assert_eq!(
        err.code(),
        ErrorCode::DeliveryUnavailable,
        "structured capture closes input"
    );

    for label in ["invalid", "missing"] {
        let activation = h.start(with_schema(label, schema.clone())).await.unwrap();
        let result = activation.result().await.unwrap();
        assert_eq!(result.stop_reason, SubagentStopReason::Error, "{label}");
        assert!(result.structured.is_none());
        assert!(result.diagnostic.is_some(), "{label}");
        activation.dispose().await.unwrap();
    }
    valid.dispose().await.unwrap();
    // A later cold resume does not inherit the schema: its input is open again.
    h.send(valid.child_id(), "again").await.unwrap();
    h.runtime
        .drain_children(&h.root, &[valid.child_id()])
        .await
        .unwrap();
}
