//! Helpers shared by this crate's integration test binaries (`machine/` and
//! `admissible.rs`).
// Each test binary compiles its own copy and may use only some of it.
#![allow(dead_code)]

use subagent_core::{Event, SubagentCapabilities};

/// The registration of a continuable provider called `name` with every
/// start capability, no route defaults, and no parent context.
pub(crate) fn capable_provider(name: &str) -> Event {
    Event::ProviderRegistered {
        name: name.into(),
        capabilities: SubagentCapabilities::ALL,
        inherits_parent_context: false,
        route_defaults: None,
        continuable: true,
        one_shot: false,
    }
}
