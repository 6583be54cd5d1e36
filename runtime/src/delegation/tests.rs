//! Each tool's input schema against what its handler takes: a sample that
//! sets every property the schema lists passes both; without a required
//! property, with a property the schema does not list, or with a value
//! outside an enum, both refuse it; without an optional one, both take it.

use serde_json::{json, Value};
use subagent_core::{AgentRoute, SubagentCapabilities};

use super::*;

/// Whether `tool`'s handler parses `input`.
fn handler_takes(tool: &str, input: &Value) -> bool {
    match tool {
        SUBAGENT => parse::<StartInput>(tool, input).is_ok(),
        LIST_AGENTS => parse::<Empty>(tool, input).is_ok(),
        SEND_MESSAGE => parse::<MessageInput>(tool, input).is_ok(),
        CONTROL => parse::<ControlInput>(tool, input).is_ok(),
        other => panic!("no handler for {other}"),
    }
}

/// Whether `schema` accepts `input`.
fn schema_takes(schema: &Value, input: &Value) -> bool {
    subagent_core::schema::validate_capture(schema, Some(input)).is_ok()
}

/// A sample input of `tool` setting every property its schema can list.
fn full_sample(tool: &str) -> Value {
    match tool {
        SUBAGENT => json!({
            "provider": "spawn",
            "label": "check",
            "prompt": "check it",
            "outputSchema": {"type": "object"},
            "maxDepth": 2,
            "toolFilter": {"deny": ["shell"]},
            "persona": "You check {{project}}.",
            "agentOptions": {
                "provider": "openai",
                "model": "gpt-5",
                "reasoningEffort": "low",
                "maxOutputTokens": 1000,
            },
        }),
        LIST_AGENTS => json!({}),
        SEND_MESSAGE => json!({"to": "parent", "text": "found it"}),
        CONTROL => json!({
            "action": "wait",
            "child": "01890a5d-ac96-774b-bcce-b302099a8057",
            "timeoutSeconds": 30,
        }),
        other => panic!("no sample for {other}"),
    }
}

/// The tools composed for a provider that takes every option, with model
/// selection on (so `agentOptions` lists a model).
fn every_tool() -> Vec<ToolDefinition> {
    let offered = [Offered {
        name: "spawn".into(),
        capabilities: SubagentCapabilities::ALL,
        inherits_parent_context: false,
        continuable: true,
    }];
    let routes = [AgentRoute {
        provider: "openai".into(),
        model: "gpt-5".into(),
    }];
    definitions(&offered, Some(&routes))
}

fn keys(object: &Value) -> Vec<String> {
    let mut keys: Vec<String> = object
        .as_object()
        .map(|map| map.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

#[test]
fn every_tool_schema_and_its_handler_take_and_refuse_the_same_inputs() {
    let tools = every_tool();
    let mut names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    names.sort_unstable();
    let mut expected = NAMES.to_vec();
    expected.sort_unstable();
    assert_eq!(names, expected, "every tool is composed");
    for tool in &tools {
        let name = tool.name.as_str();
        let schema = &tool.input_schema;
        let sample = full_sample(name);
        assert_eq!(
            keys(&schema["properties"]),
            keys(&sample),
            "{name}: the sample sets every property the schema lists"
        );
        assert!(
            schema_takes(schema, &sample),
            "{name}: the schema takes the sample"
        );
        assert!(
            handler_takes(name, &sample),
            "{name}: the handler takes the sample"
        );

        let required: Vec<String> = schema["required"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        for property in keys(&sample) {
            let mut without = sample.clone();
            without.as_object_mut().unwrap().remove(&property);
            let takes = !required.contains(&property);
            assert_eq!(
                schema_takes(schema, &without),
                takes,
                "{name} without {property}: the schema"
            );
            assert_eq!(
                handler_takes(name, &without),
                takes,
                "{name} without {property}: the handler"
            );
        }

        let mut unknown = sample.clone();
        unknown["teleport"] = json!(true);
        assert!(
            !schema_takes(schema, &unknown),
            "{name}: the schema refuses an unlisted property"
        );
        assert!(
            !handler_takes(name, &unknown),
            "{name}: the handler refuses an unlisted property"
        );
    }
}

#[test]
fn nested_options_and_enums_are_refused_alike() {
    let tools = every_tool();
    let schema_of = |name: &str| {
        &tools
            .iter()
            .find(|tool| tool.name == name)
            .expect("composed")
            .input_schema
    };
    let refused_by_both = |name: &str, input: Value| {
        assert!(
            !schema_takes(schema_of(name), &input),
            "{name}: the schema takes {input}"
        );
        assert!(
            !handler_takes(name, &input),
            "{name}: the handler takes {input}"
        );
    };
    // agentOptions lists exactly what its handler reads.
    let mut sample = full_sample(SUBAGENT);
    assert_eq!(
        keys(&schema_of(SUBAGENT)["properties"]["agentOptions"]["properties"]),
        keys(&sample["agentOptions"])
    );
    sample["agentOptions"]["temperature"] = json!(0.2);
    refused_by_both(SUBAGENT, sample);
    // A tool filter is one list, allowed or denied.
    let mut sample = full_sample(SUBAGENT);
    sample["toolFilter"] = json!({"only": ["shell"]});
    refused_by_both(SUBAGENT, sample);
    // The control tool's actions.
    let mut sample = full_sample(CONTROL);
    sample["action"] = json!("pause");
    refused_by_both(CONTROL, sample);
    // Types.
    let mut sample = full_sample(SEND_MESSAGE);
    sample["text"] = json!(7);
    refused_by_both(SEND_MESSAGE, sample);
    let mut sample = full_sample(CONTROL);
    sample["timeoutSeconds"] = json!(-1);
    refused_by_both(CONTROL, sample);
}
