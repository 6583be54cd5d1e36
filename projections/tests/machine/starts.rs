//! Starting a child (`StartChild` in `machine/lifecycle.rs`, with the
//! guards it calls): each bad start is refused with its stable code and
//! records nothing. The parent must be known and the provider registered and
//! capable of the options; a depth cap counts the durable lineage; the child
//! id is unused and the label not empty; a persona parses and names only
//! registered variables; an output schema is in the subset; tool filters name
//! only host tools and narrow down the lineage; agent options are well
//! formed, merged over the parent's (local children) or the provider's route
//! defaults (external ones), and held to model selection.

use subagent_core::{
    AgentOptions, AgentRoute, Delivery, ErrorCode, Event, ModelSelectionSettings, SessionId,
    StartOptions, StartSettings, SubagentCapabilities, ToolRestriction,
};
use subagent_projections::machine::Command;

use crate::world::{settings, start, with_options, World};

#[test]
fn bad_starts_are_rejected_with_stable_codes() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let with = |options: StartOptions, provider: &str| {
        let mut request = start(root, provider, Delivery::Parent);
        request.options = options;
        Command::StartChild(request)
    };
    assert_eq!(
        world.reject(Command::StartChild(start(
            SessionId::new(),
            "spawn",
            Delivery::Parent
        ))),
        ErrorCode::ParentUnavailable
    );
    assert_eq!(
        world.reject(with(StartOptions::default(), "nope")),
        ErrorCode::UnknownProvider
    );
    assert_eq!(
        world.reject(with(
            StartOptions {
                persona: Some("p".into()),
                ..StartOptions::default()
            },
            "spawn"
        )),
        ErrorCode::CapabilityUnsupported
    );
    assert_eq!(
        world.reject(with(
            StartOptions {
                tool_filter: Some(ToolRestriction::Deny(vec![])),
                ..StartOptions::default()
            },
            "process"
        )),
        ErrorCode::CapabilityUnsupported
    );
    assert_eq!(
        world.reject(with(
            StartOptions {
                max_depth: Some(0),
                ..StartOptions::default()
            },
            "spawn"
        )),
        ErrorCode::DepthExceeded
    );
    assert_eq!(
        world.reject(with(
            StartOptions {
                max_depth: Some(1 << 53),
                ..StartOptions::default()
            },
            "spawn"
        )),
        ErrorCode::InvalidDepth
    );
    let mut reused = start(root, "spawn", Delivery::Parent);
    reused.child = child;
    assert_eq!(
        world.reject(Command::StartChild(reused)),
        ErrorCode::BadRequest
    );
    let mut unlabeled = start(root, "spawn", Delivery::Parent);
    unlabeled.label.clear();
    assert_eq!(
        world.reject(Command::StartChild(unlabeled)),
        ErrorCode::BadRequest
    );
    // A depth cap the child meets exactly is accepted.
    world.run(with(
        StartOptions {
            max_depth: Some(1),
            ..StartOptions::default()
        },
        "spawn",
    ));
}

#[test]
fn a_persona_must_parse_and_name_only_registered_variables() {
    let mut world = World::new();
    world.register_capable("persona");
    let root = world.root();
    let with = |persona: &str| {
        let mut request = start(root, "persona", Delivery::Caller);
        request.options.persona = Some(persona.into());
        Command::StartChild(request)
    };
    assert_eq!(
        world.reject(with("Hello {{stranger}}")),
        ErrorCode::InvalidPersona
    );
    assert_eq!(
        world.reject(with("Hello {{user")),
        ErrorCode::InvalidPersona
    );
    let mut unsupported = start(root, "spawn", Delivery::Caller);
    unsupported.options.persona = Some("Hello {{stranger}}".into());
    assert_eq!(
        world.reject(Command::StartChild(unsupported)),
        ErrorCode::CapabilityUnsupported,
        "the capability is checked first"
    );
    world.run(with("You assist {{ user }}."));
}

#[test]
fn an_output_schema_outside_the_subset_is_rejected_at_start() {
    let mut world = World::new();
    world.register_capable("schema");
    let root = world.root();
    let with = |schema: serde_json::Value| {
        let mut request = start(root, "schema", Delivery::Caller);
        request.options.output_schema = Some(schema);
        Command::StartChild(request)
    };
    assert_eq!(
        world.reject(with(serde_json::json!({"type": "array"}))),
        ErrorCode::InvalidOutputSchema
    );
    let recorded = world.run(with(serde_json::json!({"type": "object"})));
    assert!(matches!(
        recorded[2].1,
        Event::ActivationRequested {
            output_schema: Some(_),
            ..
        }
    ));
}

#[test]
fn tool_filters_name_only_host_tools_and_narrow_down_the_lineage() {
    let mut world = World::new();
    let root = world.root();
    let filter = |restriction| StartOptions {
        tool_filter: Some(restriction),
        ..StartOptions::default()
    };
    for unknown in [
        ToolRestriction::Allow(vec!["read_file".into(), "rm_rf".into()]),
        ToolRestriction::Deny(vec!["".into()]),
    ] {
        assert_eq!(
            world.reject(Command::StartChild(with_options(
                root,
                "spawn",
                filter(unknown)
            ))),
            ErrorCode::UnknownTool
        );
    }
    assert!(
        world.state.sessions.len() == 1,
        "a rejection records nothing"
    );
    let child = with_options(
        root,
        "spawn",
        filter(ToolRestriction::Deny(vec!["shell".into()])),
    );
    let child_id = child.child;
    world.run(Command::StartChild(child));
    let grandchild = with_options(
        child_id,
        "spawn",
        filter(ToolRestriction::Allow(vec![
            "shell".into(),
            "read_file".into(),
        ])),
    );
    let grandchild_id = grandchild.child;
    world.run(Command::StartChild(grandchild));
    let lineage = world.state.tool_lineage(grandchild_id);
    assert_eq!(lineage.len(), 2);
    assert!(ToolRestriction::permits_in(
        lineage.iter().copied(),
        "read_file"
    ));
    // Allowed by the grandchild's own filter, denied above it.
    assert!(!ToolRestriction::permits_in(
        lineage.iter().copied(),
        "shell"
    ));
    assert!(!ToolRestriction::permits_in(
        lineage.iter().copied(),
        "write_file"
    ));
    assert!(world.state.tool_lineage(root).is_empty());
}

#[test]
fn local_children_inherit_the_parents_options_with_the_request_merged_over() {
    let mut world = World::new();
    world.register_capable("capable");
    let root = SessionId::new();
    let root_options = AgentOptions {
        provider: Some("openai".into()),
        model: Some("gpt-5".into()),
        reasoning_effort: Some("low".into()),
        max_output_tokens: Some(2000),
    };
    world.run(Command::OpenRoot {
        session: root,
        label: "root".into(),
        agent_options: Some(root_options.clone()),
        claim: None,
    });
    assert_eq!(recorded_options(&world, root), Some(root_options.clone()));
    let effort = StartOptions {
        agent_options: Some(AgentOptions {
            reasoning_effort: Some("high".into()),
            ..AgentOptions::default()
        }),
        ..StartOptions::default()
    };
    let child = with_options(root, "capable", effort);
    let child_id = child.child;
    world.run(Command::StartChild(child));
    let expected = AgentOptions {
        reasoning_effort: Some("high".into()),
        ..root_options.clone()
    };
    assert_eq!(recorded_options(&world, child_id), Some(expected.clone()));
    // The grandchild inherits the child's effective options, not the root's.
    let grandchild = start(child_id, "capable", Delivery::Parent);
    let grandchild_id = grandchild.child;
    world.run(Command::StartChild(grandchild));
    assert_eq!(recorded_options(&world, grandchild_id), Some(expected));
}

#[test]
fn external_children_merge_over_the_providers_route_defaults() {
    let mut world = World::new();
    world.run(Command::RegisterProvider {
        registration: Event::ProviderRegistered {
            name: "sdk".into(),
            capabilities: SubagentCapabilities::ALL,
            inherits_parent_context: false,
            route_defaults: Some(AgentRoute {
                provider: "openai".into(),
                model: "gpt-5".into(),
            }),
            continuable: false,
            one_shot: true,
        },
    });
    let root = SessionId::new();
    world.run(Command::OpenRoot {
        session: root,
        label: "root".into(),
        agent_options: Some(AgentOptions {
            reasoning_effort: Some("low".into()),
            ..AgentOptions::default()
        }),
        claim: None,
    });
    let ceiling = StartOptions {
        agent_options: Some(AgentOptions {
            max_output_tokens: Some(512),
            ..AgentOptions::default()
        }),
        ..StartOptions::default()
    };
    let child = with_options(root, "sdk", ceiling);
    let child_id = child.child;
    world.run(Command::StartChild(child));
    // The parent's effort is not inherited across the external boundary.
    assert_eq!(
        recorded_options(&world, child_id),
        Some(AgentOptions {
            provider: Some("openai".into()),
            model: Some("gpt-5".into()),
            reasoning_effort: None,
            max_output_tokens: Some(512),
        })
    );
}

#[test]
fn model_selection_rejects_routes_outside_it_and_bad_options() {
    let mut world = World::new();
    world.register_capable("capable");
    let root = world.root();
    let route = |provider: Option<&str>, model: &str| StartOptions {
        agent_options: Some(AgentOptions {
            provider: provider.map(str::to_owned),
            model: Some(model.to_owned()),
            ..AgentOptions::default()
        }),
        ..StartOptions::default()
    };
    // Outside the allowed routes, and a model with no provider to pair with.
    for options in [route(Some("openai"), "gpt-4"), route(None, "gpt-5")] {
        assert_eq!(
            world.reject(Command::StartChild(with_options(root, "capable", options))),
            ErrorCode::RouteNotAllowed
        );
    }
    // Disabled selection refuses even an otherwise allowed route.
    let mut disabled = with_options(root, "capable", route(Some("openai"), "gpt-5"));
    disabled.settings = std::sync::Arc::new(StartSettings {
        model_selection: ModelSelectionSettings::default(),
        ..settings()
    });
    assert_eq!(
        world.reject(Command::StartChild(disabled)),
        ErrorCode::RouteNotAllowed
    );
    for bad in [
        AgentOptions {
            max_output_tokens: Some(0),
            ..AgentOptions::default()
        },
        AgentOptions {
            reasoning_effort: Some(String::new()),
            ..AgentOptions::default()
        },
        AgentOptions {
            model: Some("gpt 5".into()),
            ..AgentOptions::default()
        },
    ] {
        let options = StartOptions {
            agent_options: Some(bad),
            ..StartOptions::default()
        };
        assert_eq!(
            world.reject(Command::StartChild(with_options(root, "capable", options))),
            ErrorCode::BadRequest
        );
    }
    assert_eq!(world.state.sessions.len(), 1, "rejections record nothing");
    world.run(Command::StartChild(with_options(
        root,
        "capable",
        route(Some("openai"), "gpt-5"),
    )));
}

#[test]
fn a_depth_cap_counts_the_durable_lineage() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    let capped = |parent, max_depth| {
        with_options(
            parent,
            "spawn",
            StartOptions {
                max_depth: Some(max_depth),
                ..StartOptions::default()
            },
        )
    };
    // The grandchild is at depth 2.
    assert_eq!(
        world.reject(Command::StartChild(capped(child, 1))),
        ErrorCode::DepthExceeded
    );
    world.run(Command::StartChild(capped(child, 2)));
}

/// The effective options recorded in the child's descriptor.
fn recorded_options(world: &World, child: SessionId) -> Option<AgentOptions> {
    world.state.sessions[&child].agent_options.clone()
}

#[test]
fn a_start_a_tool_call_asks_for_names_its_parent_s_running_turn() {
    use subagent_core::{OutOfOrder, SubagentError, SubagentRunId, ToolCallRef};
    let mut world = World::new();
    let root = world.root();
    let parent = world.start(root, "spawn", Delivery::Parent);
    let asked = |parent, turn: u64, call_id: &str| {
        let mut request = start(parent, "spawn", Delivery::Parent);
        request.requested_by = Some(ToolCallRef {
            turn,
            call_id: call_id.into(),
        });
        Command::StartChild(request)
    };
    // A root runs no turns; nor does a child before its activation runs one.
    assert_eq!(
        world.reject(asked(root, 1, "call-1")),
        ErrorCode::OutOfOrder
    );
    assert_eq!(
        world.reject(asked(parent, 1, "call-1")),
        ErrorCode::OutOfOrder
    );
    world.run(Command::PublishActivation {
        child: parent,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    world.run(Command::BeginTurn { session: parent });
    assert_eq!(
        world.refuse(asked(parent, 2, "call-1")),
        SubagentError::OutOfOrder {
            session: parent,
            reason: OutOfOrder::OtherTurn {
                entry: 2,
                running: 1
            }
        },
        "a call of another turn"
    );
    assert_eq!(
        world.reject(asked(parent, 1, "")),
        ErrorCode::BadRequest,
        "a call with no id"
    );
    let not_open = |call_id: &str| SubagentError::OutOfOrder {
        session: parent,
        reason: OutOfOrder::CallNotOpen {
            call_id: call_id.into(),
        },
    };
    assert_eq!(
        world.refuse(asked(parent, 1, "call-1")),
        not_open("call-1"),
        "a call the turn never made"
    );
    world.call(parent, "call-0", "subagent");
    world.returned(parent, "call-0");
    assert_eq!(
        world.refuse(asked(parent, 1, "call-0")),
        not_open("call-0"),
        "a call that already returned"
    );
    // An open call of the running turn: the child's request names it.
    world.call(parent, "call-1", "subagent");
    let recorded = world.run(asked(parent, 1, "call-1"));
    let named = recorded.iter().find_map(|(_, event)| match event {
        Event::ActivationRequested { requested_by, .. } => requested_by.clone(),
        _ => None,
    });
    assert_eq!(
        named,
        Some(ToolCallRef {
            turn: 1,
            call_id: "call-1".into()
        })
    );
}
