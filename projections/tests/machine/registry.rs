//! Roots and providers (`machine/registry.rs`): a provider name is
//! registered once and removed only while registered; route defaults need
//! the agent-options capability and a model; only a session the log knows
//! as a root is reopened, and reopening records nothing; a root's or a
//! child's label is not empty and holds no control character.

use subagent_core::{AgentRoute, Delivery, ErrorCode, Event, SessionId, SubagentCapabilities};
use subagent_projections::machine::{decide, Command};

use crate::world::{start, World};

#[test]
fn provider_registration_is_unique_and_removal_needs_a_registered_name() {
    let mut world = World::new();
    let duplicate = Event::ProviderRegistered {
        name: "spawn".into(),
        capabilities: SubagentCapabilities::default(),
        inherits_parent_context: false,
        route_defaults: None,
        continuable: true,
        one_shot: false,
    };
    assert_eq!(
        world.reject(Command::RegisterProvider {
            registration: duplicate
        }),
        ErrorCode::DuplicateProvider
    );
    assert_eq!(
        world.reject(Command::RemoveProvider {
            name: "nope".into()
        }),
        ErrorCode::UnknownProvider
    );
    world.run(Command::RemoveProvider {
        name: "spawn".into(),
    });
    let root = world.root();
    assert_eq!(
        world.reject(Command::StartChild(start(root, "spawn", Delivery::Parent))),
        ErrorCode::UnknownProvider
    );
}

#[test]
fn route_defaults_need_the_agent_options_capability() {
    let world = World::new();
    let registration = |capabilities, model: &str| Command::RegisterProvider {
        registration: Event::ProviderRegistered {
            name: "routed".into(),
            capabilities,
            inherits_parent_context: false,
            route_defaults: Some(AgentRoute {
                provider: "openai".into(),
                model: model.into(),
            }),
            continuable: false,
            one_shot: true,
        },
    };
    assert_eq!(
        world.reject(registration(SubagentCapabilities::default(), "gpt-5")),
        ErrorCode::BadRequest
    );
    assert_eq!(
        world.reject(registration(SubagentCapabilities::ALL, "")),
        ErrorCode::BadRequest
    );
    assert!(decide(
        &world.state,
        registration(SubagentCapabilities::ALL, "gpt-5")
    )
    .is_ok());
}

#[test]
fn only_a_known_root_session_is_reopened_and_reopening_records_nothing() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Caller);
    assert!(world.run(Command::ReopenRoot { session: root }).is_empty());
    assert_eq!(
        world.reject(Command::ReopenRoot { session: child }),
        ErrorCode::Unauthorized
    );
    assert_eq!(
        world.reject(Command::ReopenRoot {
            session: SessionId::new()
        }),
        ErrorCode::ParentUnavailable
    );
}

#[test]
fn a_label_is_not_empty_and_holds_no_control_character() {
    let mut world = World::new();
    let root = world.root();
    for label in ["", "a\nforged line", "title\u{1b}]0;x\u{7}", "c1\u{9b}"] {
        assert_eq!(
            world.reject(Command::OpenRoot {
                session: SessionId::new(),
                label: label.into(),
                agent_options: None,
                claim: None,
            }),
            ErrorCode::BadRequest,
            "root {label:?}"
        );
        let mut child = start(root, "spawn", Delivery::Parent);
        child.label = label.into();
        assert_eq!(
            world.reject(Command::StartChild(child)),
            ErrorCode::BadRequest,
            "child {label:?}"
        );
    }
    // Any other text is a label: spaces, punctuation, any script.
    for label in ["research · 2", "résumé 検索", "a\u{200b}b"] {
        let decided = decide(
            &world.state,
            Command::OpenRoot {
                session: SessionId::new(),
                label: label.into(),
                agent_options: None,
                claim: None,
            },
        );
        assert!(decided.is_ok(), "{label:?}: {decided:?}");
    }
}
