//! Deployment settings a start is checked against, and the pure rules that
//! read them: the depth policy ([`resolve_max_depth`]), model selection
//! ([`ModelSelectionSettings`]) and the agent-options merge
//! ([`effective_agent_options`]).
//!
//! The runtime owns the current values; the state machine receives a
//! snapshot ([`StartSettings`]) inside each start command, so a decision is
//! a pure function of the log and the command.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contracts::{AgentOptions, AgentRoute, MAX_SAFE_INTEGER};
use crate::error::SubagentError;

/// A delegation tool's configured depth policy (`number | 'provider-managed'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DepthPolicy {
    /// An explicit absolute cap on the depth of children the tool starts.
    Limit(u64),
    /// External delegation whose provider enforces depth itself.
    ProviderManaged,
}

impl DepthPolicy {
    /// Reads the wire form: a non-negative safe integer or the string
    /// `"provider-managed"`.
    ///
    /// # Errors
    /// `subagent/invalid-depth` for a negative, fractional or unsafe number,
    /// or any other value.
    pub fn from_json(value: &Value) -> Result<DepthPolicy, SubagentError> {
        match value {
            Value::String(text) if text == "provider-managed" => Ok(DepthPolicy::ProviderManaged),
            Value::Number(_) => parse_max_depth(value).map(DepthPolicy::Limit),
            other => Err(SubagentError::InvalidDepth(other.clone())),
        }
    }
}

/// Reads a `maxDepth` number: a non-negative integer of at most 2^53 - 1.
///
/// # Errors
/// `subagent/invalid-depth` naming the rejected value.
pub fn parse_max_depth(value: &Value) -> Result<u64, SubagentError> {
    value
        .as_u64()
        .filter(|depth| *depth <= MAX_SAFE_INTEGER)
        .ok_or_else(|| SubagentError::InvalidDepth(value.clone()))
}

/// Resolves a delegation tool's depth policy against the user's setting
/// (`resolveMaxDepth`). The rule, branch by branch:
///
/// | configured          | user setting | result                     |
/// |---------------------|--------------|----------------------------|
/// | `ProviderManaged`   | any          | `None`: the provider owns it |
/// | `Limit(n)`          | `Some(u)`    | `Some(min(n, u))`: the stricter wins |
/// | `Limit(n)`          | `None`       | `Some(n)`                  |
/// | absent              | `Some(u)`    | `Some(u)`                  |
/// | absent              | `None`       | `None`: no cap             |
///
/// # Errors
/// `subagent/invalid-depth` when a limit or the setting is above 2^53 - 1.
pub fn resolve_max_depth(
    configured: Option<DepthPolicy>,
    user_setting: Option<u64>,
) -> Result<Option<u64>, SubagentError> {
    for depth in [user_setting, configured.and_then(DepthPolicy::limit)]
        .into_iter()
        .flatten()
    {
        if depth > MAX_SAFE_INTEGER {
            return Err(SubagentError::InvalidDepth(depth.into()));
        }
    }
    Ok(match (configured, user_setting) {
        (Some(DepthPolicy::ProviderManaged), _) => None,
        (Some(DepthPolicy::Limit(limit)), Some(setting)) => Some(limit.min(setting)),
        (Some(DepthPolicy::Limit(limit)), None) => Some(limit),
        (None, setting) => setting,
    })
}

impl DepthPolicy {
    fn limit(self) -> Option<u64> {
        match self {
            DepthPolicy::Limit(limit) => Some(limit),
            DepthPolicy::ProviderManaged => None,
        }
    }
}

/// Whether a caller may pick the child's model route, and which routes
/// (`SubagentModelSelectionSettings`). The default is disabled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelSelectionSettings {
    /// Whether a start may override the provider or model at all.
    pub enabled: bool,
    /// The exact routes an override may resolve to.
    #[serde(default)]
    pub allowed_routes: Vec<AgentRoute>,
}

impl ModelSelectionSettings {
    /// Checks a start's route. A start whose `requested` options name
    /// neither provider nor model keeps the inherited route and is not
    /// checked. One that names either needs selection enabled, and the
    /// merged route (`effective`) must equal an allowed route exactly.
    ///
    /// # Errors
    /// `subagent/route-not-allowed` naming the route and the reason.
    pub fn check(
        &self,
        requested: &AgentOptions,
        effective: &AgentOptions,
    ) -> Result<(), SubagentError> {
        if requested.provider.is_none() && requested.model.is_none() {
            return Ok(());
        }
        let route = format!(
            "{}/{}",
            effective.provider.as_deref().unwrap_or("?"),
            effective.model.as_deref().unwrap_or("?")
        );
        if !self.enabled {
            return Err(SubagentError::RouteNotAllowed(format!(
                "{route}: model selection is disabled"
            )));
        }
        let allowed = self.allowed_routes.iter().any(|allowed| {
            effective.provider.as_deref() == Some(allowed.provider.as_str())
                && effective.model.as_deref() == Some(allowed.model.as_str())
        });
        if allowed {
            Ok(())
        } else {
            Err(SubagentError::RouteNotAllowed(format!(
                "{route} is not among the allowed routes"
            )))
        }
    }
}

/// The options a child runs with: the request merged over the provider's
/// route defaults, merged over the base (the parent's effective options for
/// a local child, nothing for an external one, whose provider owns its
/// runtime defaults).
#[must_use]
pub fn effective_agent_options(
    requested: Option<&AgentOptions>,
    route_defaults: Option<&AgentRoute>,
    base: Option<&AgentOptions>,
) -> AgentOptions {
    let base = base.cloned().unwrap_or_default();
    let with_route = match route_defaults {
        Some(route) => AgentOptions {
            provider: Some(route.provider.clone()),
            model: Some(route.model.clone()),
            ..AgentOptions::default()
        }
        .merged_over(&base),
        None => base,
    };
    match requested {
        Some(requested) => requested.merged_over(&with_route),
        None => with_route,
    }
}

/// The snapshot of deployment settings one start is decided against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StartSettings {
    /// The deployment's persona variables (`{{name}}` in a persona).
    pub persona_variables: BTreeMap<String, String>,
    /// The names of every tool the host provides; a filter may name only these.
    pub tools: BTreeSet<String>,
    /// Model selection.
    pub model_selection: ModelSelectionSettings,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn route(provider: &str, model: &str) -> AgentRoute {
        AgentRoute {
            provider: provider.into(),
            model: model.into(),
        }
    }

    #[test]
    fn resolve_max_depth_covers_every_branch() {
        let managed = Some(DepthPolicy::ProviderManaged);
        assert_eq!(resolve_max_depth(managed, Some(3)), Ok(None));
        assert_eq!(resolve_max_depth(managed, None), Ok(None));
        let limit = Some(DepthPolicy::Limit(5));
        assert_eq!(resolve_max_depth(limit, Some(3)), Ok(Some(3)));
        assert_eq!(
            resolve_max_depth(Some(DepthPolicy::Limit(2)), Some(3)),
            Ok(Some(2))
        );
        assert_eq!(resolve_max_depth(limit, None), Ok(Some(5)));
        assert_eq!(resolve_max_depth(None, Some(4)), Ok(Some(4)));
        assert_eq!(resolve_max_depth(None, None), Ok(None));
        assert_eq!(
            resolve_max_depth(Some(DepthPolicy::Limit(0)), Some(7)),
            Ok(Some(0))
        );
    }

    #[test]
    fn resolve_max_depth_rejects_unsafe_values() {
        let unsafe_depth = MAX_SAFE_INTEGER + 1;
        for (configured, setting) in [
            (Some(DepthPolicy::Limit(unsafe_depth)), None),
            (None, Some(unsafe_depth)),
            (Some(DepthPolicy::ProviderManaged), Some(unsafe_depth)),
        ] {
            let err = resolve_max_depth(configured, setting).unwrap_err();
            assert_eq!(err.code().as_str(), "subagent/invalid-depth");
        }
        assert_eq!(
            resolve_max_depth(Some(DepthPolicy::Limit(MAX_SAFE_INTEGER)), None),
            Ok(Some(MAX_SAFE_INTEGER))
        );
    }

    #[test]
    fn depth_policy_wire_form_is_checked() {
        assert_eq!(
            DepthPolicy::from_json(&json!("provider-managed")),
            Ok(DepthPolicy::ProviderManaged)
        );
        assert_eq!(DepthPolicy::from_json(&json!(3)), Ok(DepthPolicy::Limit(3)));
        for bad in [
            json!(-1),
            json!(1.5),
            json!(9_007_199_254_740_992_u64),
            json!("3"),
            json!(null),
            json!(true),
        ] {
            let err = DepthPolicy::from_json(&bad).unwrap_err();
            assert_eq!(err.code().as_str(), "subagent/invalid-depth", "{bad}");
        }
        assert_eq!(
            parse_max_depth(&json!(MAX_SAFE_INTEGER)),
            Ok(MAX_SAFE_INTEGER)
        );
    }

    #[test]
    fn route_overrides_need_selection_enabled_and_an_exact_allowed_route() {
        let disabled = ModelSelectionSettings::default();
        let enabled = ModelSelectionSettings {
            enabled: true,
            allowed_routes: vec![route("openai", "gpt-5"), route("anthropic", "opus")],
        };
        let effort_only = AgentOptions {
            reasoning_effort: Some("high".into()),
            ..AgentOptions::default()
        };
        let inherited = AgentOptions {
            provider: Some("local".into()),
            model: Some("small".into()),
            ..AgentOptions::default()
        };
        // No route override: nothing to check, even when disabled.
        assert_eq!(disabled.check(&effort_only, &inherited), Ok(()));
        let pick = AgentOptions {
            model: Some("gpt-5".into()),
            ..AgentOptions::default()
        };
        let picked = pick.merged_over(&AgentOptions {
            provider: Some("openai".into()),
            ..AgentOptions::default()
        });
        assert_eq!(
            disabled.check(&pick, &picked).unwrap_err().code().as_str(),
            "subagent/route-not-allowed"
        );
        assert_eq!(enabled.check(&pick, &picked), Ok(()));
        // The model alone matches, but the merged route does not.
        let crossed = pick.merged_over(&inherited);
        assert_eq!(
            enabled.check(&pick, &crossed).unwrap_err().code().as_str(),
            "subagent/route-not-allowed"
        );
        // A route with no provider at all is never an exact match.
        assert!(enabled.check(&pick, &pick).is_err());
    }

    #[test]
    fn options_merge_request_over_route_defaults_over_base() {
        let parent = AgentOptions {
            provider: Some("local".into()),
            model: Some("small".into()),
            reasoning_effort: Some("low".into()),
            max_output_tokens: Some(1000),
        };
        let defaults = route("openai", "gpt-5");
        let request = AgentOptions {
            reasoning_effort: Some("high".into()),
            ..AgentOptions::default()
        };
        assert_eq!(
            effective_agent_options(Some(&request), None, Some(&parent)),
            AgentOptions {
                reasoning_effort: Some("high".into()),
                ..parent.clone()
            }
        );
        assert_eq!(
            effective_agent_options(Some(&request), Some(&defaults), Some(&parent)),
            AgentOptions {
                provider: Some("openai".into()),
                model: Some("gpt-5".into()),
                reasoning_effort: Some("high".into()),
                max_output_tokens: Some(1000),
            }
        );
        assert_eq!(
            effective_agent_options(None, Some(&defaults), None),
            AgentOptions {
                provider: Some("openai".into()),
                model: Some("gpt-5".into()),
                ..AgentOptions::default()
            }
        );
        assert_eq!(
            effective_agent_options(None, None, None),
            AgentOptions::default()
        );
    }
}
