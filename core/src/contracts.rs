//! The published request-side contracts of `types.ts` in Rust: agent options,
//! capabilities, start options, delivery, tool restrictions, catalog and
//! descendant entries, message sources and interrupt authority.
//!
//! Live objects of the TypeScript API (`Agent`, `AbortSignal`) have no place
//! here: the runtime holds them. Core keeps only their durable identities.
//!
//! Over 500 lines because it is a table: one type per contract of
//! `types.ts`, each with its wire form; its tests are in `contracts_tests.rs`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::content::ContentBlock;
use crate::error::SubagentError;
use crate::ids::SessionId;

/// The largest integer a JSON number represents exactly (2^53 - 1).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Host-agent overrides: provider, model, reasoning effort, output-token ceiling.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentOptions {
    /// The model provider (route half one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model (route half two).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Reasoning effort, e.g. `low`, `medium`, `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Output-token ceiling for one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
}

impl AgentOptions {
    /// `self` merged over `base`: every field set in `self` wins.
    #[must_use]
    pub fn merged_over(&self, base: &AgentOptions) -> AgentOptions {
        AgentOptions {
            provider: self.provider.clone().or_else(|| base.provider.clone()),
            model: self.model.clone().or_else(|| base.model.clone()),
            reasoning_effort: self
                .reasoning_effort
                .clone()
                .or_else(|| base.reasoning_effort.clone()),
            max_output_tokens: self.max_output_tokens.or(base.max_output_tokens),
        }
    }

    /// Checks the values a caller set: names are non-empty and free of
    /// whitespace, and the token ceiling is a positive safe integer.
    ///
    /// # Errors
    /// `gateway/bad-request` naming the offending field.
    pub fn validate(&self) -> Result<(), SubagentError> {
        for (field, value) in [
            ("provider", &self.provider),
            ("model", &self.model),
            ("reasoningEffort", &self.reasoning_effort),
        ] {
            if let Some(value) = value {
                if value.is_empty() || value.chars().any(char::is_whitespace) {
                    return Err(SubagentError::BadRequest(format!(
                        "agentOptions.{field} must be a non-empty name without spaces"
                    )));
                }
            }
        }
        match self.max_output_tokens {
            Some(0) => Err(SubagentError::BadRequest(
                "agentOptions.maxOutputTokens must be positive".into(),
            )),
            Some(tokens) if tokens > MAX_SAFE_INTEGER => Err(SubagentError::BadRequest(
                "agentOptions.maxOutputTokens is above 2^53 - 1".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// A static provider/model route (`agentRouteDefaults`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AgentRoute {
    /// Model provider.
    pub provider: String,
    /// Model name.
    pub model: String,
}

/// Which start-time options a provider supports. Each flag matches one
/// [`StartOptions`] field; `depth_limit` matches `max_depth`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentCapabilities {
    /// `agentOptions` is accepted.
    pub agent_options: bool,
    /// `outputSchema` is accepted.
    pub output_schema: bool,
    /// `maxDepth` is accepted.
    pub depth_limit: bool,
    /// `toolFilter` is accepted.
    pub tool_filter: bool,
    /// `persona` is accepted.
    pub persona: bool,
}

impl SubagentCapabilities {
    /// Every capability.
    pub const ALL: SubagentCapabilities = SubagentCapabilities {
        agent_options: true,
        output_schema: true,
        depth_limit: true,
        tool_filter: true,
        persona: true,
    };

    /// Checks every requested option against these capabilities.
    ///
    /// # Errors
    /// `subagent/capability-unsupported` naming the first requested option
    /// (in the order of the flags) the provider lacks.
    pub fn check(&self, provider: &str, options: &StartOptions) -> Result<(), SubagentError> {
        let needs = [
            (
                options.agent_options.is_some(),
                self.agent_options,
                "agentOptions",
            ),
            (
                options.output_schema.is_some(),
                self.output_schema,
                "outputSchema",
            ),
            (options.max_depth.is_some(), self.depth_limit, "depthLimit"),
            (
                options.tool_filter.is_some(),
                self.tool_filter,
                "toolFilter",
            ),
            (options.persona.is_some(), self.persona, "persona"),
        ];
        match needs
            .into_iter()
            .find(|(requested, supported, _)| *requested && !supported)
        {
            Some((_, _, capability)) => Err(SubagentError::CapabilityUnsupported {
                provider: provider.to_owned(),
                capability,
            }),
            None => Ok(()),
        }
    }
}

/// Child tool scoping: an allow list or a deny list of tool names.
///
/// A restriction applies to the child it was given to and, through the
/// lineage, to every descendant: a child can never see a tool its parent
/// cannot (see [`ToolRestriction::permits_in`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ToolRestriction {
    /// Only these tools remain visible and executable.
    Allow(Vec<String>),
    /// These tools vanish and refuse to execute.
    Deny(Vec<String>),
}

impl ToolRestriction {
    /// The names the restriction lists.
    #[must_use]
    pub fn names(&self) -> &[String] {
        match self {
            ToolRestriction::Allow(names) | ToolRestriction::Deny(names) => names,
        }
    }

    /// Checks every listed name against the host's tools, loudly.
    ///
    /// # Errors
    /// `subagent/unknown-tool` naming the first name the host does not
    /// provide (an empty name included).
    pub fn check_names(
        &self,
        known: &std::collections::BTreeSet<String>,
    ) -> Result<(), SubagentError> {
        match self.names().iter().find(|name| !known.contains(*name)) {
            Some(unknown) => Err(SubagentError::UnknownTool(unknown.clone())),
            None => Ok(()),
        }
    }

    /// Whether this restriction alone leaves `tool` visible and executable.
    #[must_use]
    pub fn permits(&self, tool: &str) -> bool {
        match self {
            ToolRestriction::Allow(names) => names.iter().any(|name| name == tool),
            ToolRestriction::Deny(names) => !names.iter().any(|name| name == tool),
        }
    }

    /// Whether `tool` survives every restriction of a lineage (the child's
    /// own and each ancestor's): restrictions only ever narrow.
    #[must_use]
    pub fn permits_in<'a>(
        lineage: impl IntoIterator<Item = &'a ToolRestriction>,
        tool: &str,
    ) -> bool {
        lineage
            .into_iter()
            .all(|restriction| restriction.permits(tool))
    }
}

/// The optional, capability-gated start options of `SubagentStartRequest`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartOptions {
    /// Requires `agentOptions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_options: Option<AgentOptions>,
    /// Object-rooted JSON Schema; requires `outputSchema`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Absolute delegation-depth cap (≤ 2^53 - 1); requires `depthLimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
    /// Requires `toolFilter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_filter: Option<ToolRestriction>,
    /// Per-child persona template; requires `persona`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<String>,
}

/// A delegation tool call of a parent's turn: what a child an agent
/// started records as its request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRef {
    /// The parent's turn.
    pub turn: u64,
    /// The call's id in that turn (its `ToolCalled`).
    pub call_id: String,
}

/// The task of one delegation, less the live parent and cancellation that the
/// runtime carries beside it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentStartRequest {
    /// Short display label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The child's user message.
    pub prompt: Vec<ContentBlock>,
    /// Capability-gated options.
    #[serde(flatten)]
    pub options: StartOptions,
}

/// One managed child execution and its result delivery policy
/// (`SubagentActivationSpec` without its live parent and cancellation token,
/// which the runtime carries beside it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentActivationSpec {
    /// Registered provider to use.
    pub provider: String,
    /// Short task label retained in the parent catalog.
    pub label: String,
    /// Optional caller-reserved identity for a local child; external
    /// providers allocate their own ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<SessionId>,
    /// Task and provider-supported options (its `label` is ignored in favour
    /// of the spec's).
    pub request: SubagentStartRequest,
    /// Parent-model notification or a program-owned result.
    pub delivery: Delivery,
}

impl SubagentActivationSpec {
    /// A spec whose task is one text prompt, with no start options and no
    /// reserved child id.
    #[must_use]
    pub fn with_text_prompt(provider: &str, label: &str, prompt: &str, delivery: Delivery) -> Self {
        SubagentActivationSpec {
            provider: provider.to_owned(),
            label: label.to_owned(),
            child_id: None,
            request: SubagentStartRequest {
                label: None,
                prompt: vec![ContentBlock::text(prompt)],
                options: StartOptions::default(),
            },
            delivery,
        }
    }
}

/// A provider's detached contribution to one continuable child's creation:
/// data only, never a capability.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContinuableCreateSpec {
    /// Completed-turn prefix of the parent's history to seed the child with,
    /// contiguous from the start, lossless JSON; absent for a fresh child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<Vec<Value>>,
}

/// Observe-only detail of a published run, carried by `subagent/start`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentRunInfo {
    /// Shared with the paired `subagent/end`.
    pub run_id: crate::ids::SubagentRunId,
    /// Provider recorded at creation.
    pub provider: String,
    /// The child's id.
    pub id: SessionId,
    /// Whether the child is an in-process (local) agent.
    pub local: bool,
}

/// Observe-only outcome of a settled run, carried by `subagent/end`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentRunEndInfo {
    /// Shared with the paired `subagent/start`.
    pub run_id: crate::ids::SubagentRunId,
    /// Same provider as the start.
    pub provider: String,
    /// The child's id.
    pub id: SessionId,
    /// Whether the child is an in-process (local) agent.
    pub local: bool,
    /// The terminal stop reason.
    pub stop_reason: crate::result::SubagentStopReason,
    /// The final assistant output by the output-selection rule, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_assistant_message: Option<Vec<ContentBlock>>,
}

/// Who receives a child's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// The parent model is notified through its inbox.
    Parent,
    /// The program that started the activation awaits the result; no notice.
    Caller,
}

/// How a child executes, as recorded at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionMode {
    /// A local child with a durable inbox and cold resume.
    Continuable,
    /// One execution with one result; no follow-ups.
    OneShot,
}

/// A catalog entry's interpreted mode. `Unknown` marks a historical child whose
/// descriptor this version cannot interpret: it stays listed but grants no
/// continuation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CatalogMode {
    /// See [`SessionMode::Continuable`].
    Continuable,
    /// See [`SessionMode::OneShot`].
    OneShot,
    /// Descriptor unavailable or of an unknown version.
    Unknown,
}

impl From<SessionMode> for CatalogMode {
    fn from(mode: SessionMode) -> Self {
        match mode {
            SessionMode::Continuable => CatalogMode::Continuable,
            SessionMode::OneShot => CatalogMode::OneShot,
        }
    }
}

/// One entry of a parent's durable direct-child catalog: membership at
/// creation, never execution status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentCatalogEntry {
    /// The child's durable id.
    pub child_id: SessionId,
    /// The creation label.
    pub label: String,
    /// The provider recorded at creation.
    pub provider: String,
    /// Interpreted execution mode.
    pub mode: CatalogMode,
    /// Whether the child is an external one-shot execution.
    pub external: bool,
}

/// A listed child with an optional per-candidate diagnostic (a listing never
/// fails as a whole because one candidate cannot be interpreted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentListEntry {
    /// The catalog facts.
    #[serde(flatten)]
    pub entry: SubagentCatalogEntry,
    /// Why this candidate could not be fully interpreted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
}

/// One entry of a descendant listing, with its place in the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentDescendantListEntry {
    /// The listed child.
    #[serde(flatten)]
    pub entry: SubagentListEntry,
    /// Durable direct parent.
    pub parent_id: SessionId,
    /// Edges from the requested root; direct children are `1`.
    pub depth: u64,
}

/// Where an accepted inbox message came from. The kind is durable
/// attribution: a relay is words an agent chose, a settlement notice is the
/// runtime's account and is never credited to the child.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum MessageSource {
    /// The task a parent delegated (a child's initial prompt).
    #[serde(rename_all = "camelCase")]
    Delegation {
        /// The delegating parent.
        parent_session_id: SessionId,
    },
    /// A model-authored message between adjacent agents (`relay` form).
    #[serde(rename_all = "camelCase")]
    AgentMessage {
        /// The agent whose tool call produced it.
        sender_session_id: SessionId,
    },
    /// The runtime's status-only account of a continuable child settling
    /// (`notice` form).
    #[serde(rename_all = "camelCase")]
    SubagentSettled {
        /// One-line account of how the child ended.
        summary: String,
        /// The child that settled.
        sender_session_id: SessionId,
    },
    /// An external execution's automatic final report (`notice` form).
    #[serde(rename_all = "camelCase")]
    SubagentReport {
        /// The external child.
        sender_session_id: SessionId,
    },
    /// A human at the host.
    User,
    /// A browser-authored message relayed through the parent.
    #[serde(rename_all = "camelCase")]
    Browser {
        /// The caller-minted request identity.
        request_id: String,
        /// The validated IANA time zone, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        zone: Option<String>,
    },
}

/// How an accepted message reaches the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MessageDelivery {
    /// Taken by a later turn, in FIFO order.
    Queue,
    /// Taken at the nearest step boundary of a running turn.
    Steer,
}

/// The durable form of `SubagentInterruptAuthority`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum InterruptAuthority {
    /// A human client presenting the durable direct-parent address.
    #[serde(rename_all = "camelCase")]
    User {
        /// The claimed direct parent.
        parent_session_id: SessionId,
    },
    /// An exact live ancestor agent.
    #[serde(rename_all = "camelCase")]
    Ancestor {
        /// The ancestor's session.
        agent_session_id: SessionId,
    },
}

/// The current descriptor version; a descriptor of another version is
/// listed with mode `unknown`.
pub const DESCRIPTOR_VERSION: u32 = 1;

/// The detached facts a child session is created from and resumed with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentDescriptor {
    /// Descriptor format version.
    pub version: u32,
    /// The provider that created the child.
    pub provider: String,
    /// Execution mode.
    pub mode: SessionMode,
    /// Whether the child was seeded with the parent's completed-turn prefix.
    pub inherits_parent_context: bool,
    /// Effective agent options after merging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_options: Option<AgentOptions>,
    /// Effective tool restriction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_filter: Option<ToolRestriction>,
    /// Persona template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<String>,
    /// Accepted depth cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
}

impl SubagentDescriptor {
    /// Interprets a recorded descriptor; `None` when it is of another version
    /// or does not decode, which a catalog lists as mode `unknown`.
    #[must_use]
    pub fn interpret(recorded: &Value) -> Option<SubagentDescriptor> {
        // Read in place: a `&Value` is a deserializer, so nothing is cloned.
        let descriptor = SubagentDescriptor::deserialize(recorded).ok()?;
        (descriptor.version == DESCRIPTOR_VERSION).then_some(descriptor)
    }
}

#[cfg(test)]
#[path = "contracts_tests.rs"]
mod tests;
