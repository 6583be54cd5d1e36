//! The delegation tools as a model sees them: their names, and the
//! definitions composed from the providers a session may start children
//! on. Pure: the wording and the schema are a function of the providers'
//! durable registrations, so they say only what `decide` will accept.
//!
//! - [`SUBAGENT`] starts a child (delivery `parent`): `provider` is an enum
//!   of the offered providers, and an option appears only when some
//!   offered provider takes it; the description says, per provider, which
//!   options it takes, whether the child sees this conversation, and
//!   whether it is continuable or one-shot.
//! - [`LIST_AGENTS`] lists the continuable children with running or
//!   inactive activity.
//! - [`SEND_MESSAGE`] messages the caller's parent or a direct child.
//! - [`CONTROL`] interrupts, waits for or closes the caller's own direct
//!   children.

use serde_json::{json, Map, Value};
use subagent_core::{AgentRoute, SubagentCapabilities};

use crate::tools::ToolDefinition;

/// Starts a child.
pub const SUBAGENT: &str = "subagent";
/// Lists the caller's continuable children.
pub const LIST_AGENTS: &str = "list_agents";
/// Messages the caller's parent or a direct child.
pub const SEND_MESSAGE: &str = "send_message";
/// Interrupts, waits for or closes a direct child.
pub const CONTROL: &str = "subagent_control";

/// Every delegation tool's name, in the order they are offered.
pub const NAMES: [&str; 4] = [SUBAGENT, LIST_AGENTS, SEND_MESSAGE, CONTROL];

/// The longest a `wait` may last, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 600;

/// Whether `name` is a delegation tool's.
#[must_use]
pub fn is_delegation(name: &str) -> bool {
    NAMES.contains(&name)
}

/// One provider a session may start children on, as its registration
/// records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offered {
    /// The provider's name.
    pub name: String,
    /// The options it takes.
    pub capabilities: SubagentCapabilities,
    /// Whether its children see the parent's conversation.
    pub inherits_parent_context: bool,
    /// Continuable (a child that can be messaged) or one-shot.
    pub continuable: bool,
}

/// A start option the `subagent` tool may offer: its field, the capability
/// that gates it, its schema (given the model routes a start may pick,
/// `None` when it may pick none) and what the description calls it.
struct StartOption {
    field: &'static str,
    takes: fn(&SubagentCapabilities) -> bool,
    schema: fn(Option<&[AgentRoute]>) -> Value,
    said: &'static str,
}

/// The start options, in the schema's order.
const OPTIONS: [StartOption; 5] = [
    StartOption {
        field: "outputSchema",
        takes: |caps| caps.output_schema,
        schema: |_| json!({"type": "object", "description": "A JSON Schema (object-rooted) the child's final answer must match."}),
        said: "outputSchema",
    },
    StartOption {
        field: "maxDepth",
        takes: |caps| caps.depth_limit,
        schema: |_| json!({"type": "integer", "minimum": 0, "description": "The deepest any descendant of the child may sit, counted from the root (an absolute cap; the user's setting may lower it)."}),
        said: "maxDepth",
    },
    StartOption {
        field: "toolFilter",
        takes: |caps| caps.tool_filter,
        schema: |_| {
            let names = json!({"type": "array", "items": {"type": "string"}});
            json!({
                "description": "The tools the child may use: only those allowed, or all but those denied.",
                "oneOf": [
                    {"type": "object", "required": ["allow"], "additionalProperties": false, "properties": {"allow": names}},
                    {"type": "object", "required": ["deny"], "additionalProperties": false, "properties": {"deny": names}}
                ]
            })
        },
        said: "toolFilter",
    },
    StartOption {
        field: "persona",
        takes: |caps| caps.persona,
        schema: |_| json!({"type": "string", "description": "A persona for the child; `{{name}}` names a deployment variable."}),
        said: "persona",
    },
    StartOption {
        field: "agentOptions",
        takes: |caps| caps.agent_options,
        schema: |routes| {
            let mut properties = json!({
                "reasoningEffort": {"type": "string"},
                "maxOutputTokens": {"type": "integer", "minimum": 1}
            });
            let description = match routes {
                // Model selection is off: a start may not name a model.
                None => "The child's model settings (its model is its provider's).".to_owned(),
                Some(routes) => {
                    properties["provider"] = json!({"type": "string"});
                    properties["model"] = json!({"type": "string"});
                    let listed: Vec<String> = routes
                        .iter()
                        .map(|route| format!("{}/{}", route.provider, route.model))
                        .collect();
                    format!(
                        "The child's model and its settings; provider and model must make one of: {}.",
                        listed.join(", ")
                    )
                }
            };
            json!({
                "type": "object",
                "additionalProperties": false,
                "description": description,
                "properties": properties
            })
        },
        said: "agentOptions (model)",
    },
];

/// The delegation tools for a session that may start children on
/// `offered` (empty: it may not delegate, and `subagent` is left out),
/// picking a child's model among `routes` (`None`: model selection is off,
/// and no model may be named).
#[must_use]
pub fn definitions(offered: &[Offered], routes: Option<&[AgentRoute]>) -> Vec<ToolDefinition> {
    let mut tools = Vec::with_capacity(NAMES.len());
    if !offered.is_empty() {
        tools.push(subagent(offered, routes));
    }
    tools.push(ToolDefinition {
        name: LIST_AGENTS.to_owned(),
        description: "List your continuable children that are running or inactive (not the \
                      idle ones waiting for a message): their id, label, provider and status."
            .to_owned(),
        input_schema: json!({"type": "object", "additionalProperties": false, "properties": {}}),
    });
    tools.push(ToolDefinition {
        name: SEND_MESSAGE.to_owned(),
        description: "Send a text message to your parent (to report what you found) or to one \
                      of your direct children (to steer it while it runs, or to wake it with a \
                      follow-up when it is not running). A one-shot child takes no messages."
            .to_owned(),
        input_schema: json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["to", "text"],
            "properties": {
                "to": {"type": "string", "description": "`parent` for your parent, or the session id of a direct child (or of your parent)."},
                "text": {"type": "string", "minLength": 1}
            }
        }),
    });
    tools.push(ToolDefinition {
        name: CONTROL.to_owned(),
        description: format!(
            "Act on your own direct children: `interrupt` one's running turn, `wait` until one \
             (or, without `child`, any that is working) stops working and get where it stands \
             and its result, for at most `timeoutSeconds` (default and most: \
             {MAX_WAIT_SECONDS}), or `close` one (it and its descendants stop and are released; \
             a continuable one can be messaged awake later)."
        ),
        input_schema: json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["action"],
            "properties": {
                "action": {"type": "string", "enum": ["interrupt", "wait", "close"]},
                "child": {"type": "string", "description": "The child's session id; `wait` without it waits for any child."},
                "timeoutSeconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS}
            }
        }),
    });
    tools
}

/// The `subagent` tool for `offered` (not empty).
fn subagent(offered: &[Offered], routes: Option<&[AgentRoute]>) -> ToolDefinition {
    let mut properties = Map::new();
    properties.insert(
        "provider".into(),
        json!({"type": "string", "enum": offered.iter().map(|p| p.name.as_str()).collect::<Vec<_>>()}),
    );
    properties.insert(
        "label".into(),
        json!({"type": "string", "minLength": 1, "description": "A short name for the task, shown in the tree."}),
    );
    properties.insert(
        "prompt".into(),
        json!({"type": "string", "minLength": 1, "description": "The child's task, as its first user message."}),
    );
    for option in &OPTIONS {
        if offered.iter().any(|p| (option.takes)(&p.capabilities)) {
            properties.insert(option.field.into(), (option.schema)(routes));
        }
    }
    let mut description = String::from(
        "Start a child agent on a task. It works on its own: this call returns the child's id \
         at once, and its result reaches you later as a completion notice in a following turn. \
         Options a provider does not take are refused. Providers:",
    );
    for provider in offered {
        let options: Vec<&str> = OPTIONS
            .iter()
            .filter(|option| (option.takes)(&provider.capabilities))
            .map(|option| option.said)
            .collect();
        description.push_str(&format!(
            "\n- `{}`: {}; {}; takes {}.",
            provider.name,
            if provider.continuable {
                "a continuable child (it can be messaged, interrupted and waited for)"
            } else {
                "a one-shot run (it returns one result and takes no messages)"
            },
            if provider.inherits_parent_context {
                "the child sees this conversation's completed turns (not the current one: put the task in the prompt)"
            } else {
                "the child starts fresh: put everything it needs in the prompt"
            },
            if options.is_empty() {
                "no options".to_owned()
            } else {
                options.join(", ")
            },
        ));
    }
    ToolDefinition {
        name: SUBAGENT.to_owned(),
        description,
        input_schema: json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["provider", "label", "prompt"],
            "properties": properties,
        }),
    }
}
