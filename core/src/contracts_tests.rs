//! Unit tests of `contracts`, beside it so the module stays short.

use super::*;
use serde_json::json;

#[test]
fn agent_options_merge_field_by_field() {
    let base = AgentOptions {
        provider: Some("openai".into()),
        model: Some("gpt".into()),
        reasoning_effort: Some("low".into()),
        max_output_tokens: Some(100),
    };
    let overrides = AgentOptions {
        model: Some("o3".into()),
        max_output_tokens: Some(5),
        ..AgentOptions::default()
    };
    let merged = overrides.merged_over(&base);
    assert_eq!(merged.provider.as_deref(), Some("openai"));
    assert_eq!(merged.model.as_deref(), Some("o3"));
    assert_eq!(merged.reasoning_effort.as_deref(), Some("low"));
    assert_eq!(merged.max_output_tokens, Some(5));
}

#[test]
fn capability_check_names_the_missing_flag() {
    let caps = SubagentCapabilities {
        agent_options: true,
        ..SubagentCapabilities::default()
    };
    let ok = StartOptions {
        agent_options: Some(AgentOptions::default()),
        ..StartOptions::default()
    };
    assert!(caps.check("spawn", &ok).is_ok());
    let cases = [
        (
            StartOptions {
                output_schema: Some(json!({"type": "object"})),
                ..StartOptions::default()
            },
            "outputSchema",
        ),
        (
            StartOptions {
                max_depth: Some(2),
                ..StartOptions::default()
            },
            "depthLimit",
        ),
        (
            StartOptions {
                tool_filter: Some(ToolRestriction::Deny(vec!["x".into()])),
                ..StartOptions::default()
            },
            "toolFilter",
        ),
        (
            StartOptions {
                persona: Some("p".into()),
                ..StartOptions::default()
            },
            "persona",
        ),
    ];
    for (options, flag) in cases {
        match caps.check("spawn", &options) {
            Err(SubagentError::CapabilityUnsupported {
                capability,
                provider,
            }) => {
                assert_eq!(capability, flag);
                assert_eq!(provider, "spawn");
            }
            other => panic!("expected rejection for {flag}, got {other:?}"),
        }
    }
    assert!(SubagentCapabilities::ALL.check("x", &cases_all()).is_ok());
}

fn cases_all() -> StartOptions {
    StartOptions {
        agent_options: Some(AgentOptions::default()),
        output_schema: Some(json!({"type": "object"})),
        max_depth: Some(1),
        tool_filter: Some(ToolRestriction::Allow(vec![])),
        persona: Some(String::new()),
    }
}

#[test]
fn wire_names_follow_the_published_contracts() {
    let source = MessageSource::SubagentSettled {
        summary: "completed".into(),
        sender_session_id: SessionId::new(),
    };
    let json = serde_json::to_value(&source).unwrap();
    assert_eq!(json["kind"], "subagent-settled");
    assert!(json.get("senderSessionId").is_some());
    assert_eq!(
        serde_json::to_value(CatalogMode::OneShot).unwrap(),
        "one-shot"
    );
    assert_eq!(serde_json::to_value(Delivery::Caller).unwrap(), "caller");
    let request: SubagentStartRequest = serde_json::from_value(json!({
        "prompt": [{"type": "text", "text": "go"}],
        "maxDepth": 3,
        "toolFilter": {"deny": ["shell"]}
    }))
    .unwrap();
    assert_eq!(request.options.max_depth, Some(3));
    assert_eq!(
        request.options.tool_filter,
        Some(ToolRestriction::Deny(vec!["shell".into()]))
    );
}

#[test]
fn activation_specs_and_run_infos_use_the_published_names() {
    let spec: SubagentActivationSpec = serde_json::from_value(json!({
        "provider": "spawn",
        "label": "research",
        "request": {"prompt": [{"type": "text", "text": "go"}], "persona": "terse"},
        "delivery": "caller"
    }))
    .unwrap();
    assert_eq!(spec.delivery, Delivery::Caller);
    assert_eq!(spec.request.options.persona.as_deref(), Some("terse"));
    assert!(spec.child_id.is_none());
    let end = SubagentRunEndInfo {
        run_id: crate::ids::SubagentRunId::new(),
        provider: "acp".into(),
        id: SessionId::new(),
        local: false,
        stop_reason: crate::result::SubagentStopReason::MaxTokens,
        last_assistant_message: None,
    };
    let json = serde_json::to_value(&end).unwrap();
    assert_eq!(json["stopReason"], "max-tokens");
    assert!(json.get("runId").is_some() && json.get("lastAssistantMessage").is_none());
    assert_eq!(
        serde_json::from_value::<SubagentRunEndInfo>(json).unwrap(),
        end
    );
}

#[test]
fn descriptors_of_unknown_versions_are_not_interpreted() {
    let descriptor = SubagentDescriptor {
        version: DESCRIPTOR_VERSION,
        provider: "spawn".into(),
        mode: SessionMode::Continuable,
        inherits_parent_context: false,
        agent_options: None,
        tool_filter: None,
        persona: None,
        max_depth: None,
    };
    let recorded = serde_json::to_value(&descriptor).unwrap();
    assert_eq!(SubagentDescriptor::interpret(&recorded), Some(descriptor));
    let mut future = recorded.clone();
    future["version"] = json!(99);
    assert_eq!(SubagentDescriptor::interpret(&future), None);
    assert_eq!(SubagentDescriptor::interpret(&json!("garbage")), None);
}
