//! The delegation tools: composed by the runtime for every session beside
//! the host's tools, and executed by the runtime itself when a session's
//! agent calls them through its turn's [`ToolPort`](crate::ToolPort). The
//! driver records each call (`ToolCalled`) and its result (`ToolReturned`)
//! as it does a host tool's; the events a call causes come between them.
//!
//! This module only maps a call's input to the runtime's own operations
//! (`start_activation` as the calling session, with delivery `parent`;
//! `list_agents`; `send_message`; `interrupt`, a wait, a drain) and their
//! refusals to an error result carrying the refusal's code. Every rule is
//! `decide`'s, through those operations, but for the control tool's scope
//! (the caller's own direct children), which is checked here before
//! anything is asked of the runtime.
//!
//! ```text
//! tools.rs   names, and the definitions composed from the offered providers
//! mod.rs     composition for a session, and execution of a call
//! tests.rs   each tool's schema against what its handler takes
//! ```

#[cfg(test)]
mod tests;
mod tools;

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use subagent_core::{
    AgentOptions, ContentBlock, Delivery, DepthPolicy, SessionId, StartOptions,
    SubagentActivationSpec, SubagentError, SubagentStartRequest, ToolCallRef, ToolRestriction,
};
use subagent_projections::{Activity, RunPhase};
use tokio_util::sync::CancellationToken;

pub use tools::{
    definitions, is_delegation, Offered, CONTROL, LIST_AGENTS, MAX_WAIT_SECONDS, NAMES,
    SEND_MESSAGE, SUBAGENT,
};

use crate::runtime::{InterruptAuthority, LiveAgent, SubagentRuntime};
use crate::tools::{ToolCall, ToolDefinition, ToolOutput};
use crate::BoxFuture;

/// The input of `subagent`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StartInput {
    provider: String,
    label: String,
    prompt: String,
    #[serde(default)]
    output_schema: Option<Value>,
    #[serde(default)]
    max_depth: Option<u64>,
    #[serde(default)]
    tool_filter: Option<ToolRestriction>,
    #[serde(default)]
    persona: Option<String>,
    #[serde(default)]
    agent_options: Option<ModelInput>,
}

/// The `agentOptions` of `subagent`, as strict as the schema says (the
/// runtime's own type takes unknown fields, for options of newer hosts).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ModelInput {
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    reasoning_effort: Option<String>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
}

impl From<ModelInput> for AgentOptions {
    fn from(input: ModelInput) -> AgentOptions {
        AgentOptions {
            provider: input.provider,
            model: input.model,
            reasoning_effort: input.reasoning_effort,
            max_output_tokens: input.max_output_tokens,
        }
    }
}

/// What `send_message`'s `to` says for the caller's parent, whose id an
/// agent is not told.
const PARENT: &str = "parent";

/// The input of `send_message`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageInput {
    to: String,
    text: String,
}

/// The input of the control tool.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ControlInput {
    action: Action,
    #[serde(default)]
    child: Option<String>,
    #[serde(default)]
    timeout_seconds: Option<u64>,
}

/// What the control tool does.
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Action {
    Interrupt,
    Wait,
    Close,
}

/// Refuses host `tools` that one of the delegation tools would hide: an
/// agent calling the name would reach the runtime's tool, never the host's.
///
/// # Errors
/// `gateway/bad-request` naming the first such tool.
pub(crate) fn refuse_shadowed(tools: &[ToolDefinition]) -> Result<(), SubagentError> {
    match tools.iter().find(|tool| is_delegation(&tool.name)) {
        Some(tool) => Err(SubagentError::BadRequest(format!(
            "the host's tool {} has the name of one of the runtime's delegation tools; rename it",
            tool.name
        ))),
        None => Ok(()),
    }
}

/// A refusal or failure as the call's error result: `code: message`.
fn refused(err: &SubagentError) -> ToolOutput {
    ToolOutput::error(format!("{}: {err}", err.code()))
}

/// A malformed input, as `gateway/bad-request`.
fn bad_input(tool: &str, err: impl std::fmt::Display) -> ToolOutput {
    refused(&SubagentError::BadRequest(format!("{tool}: {err}")))
}

/// `tool`'s input as `T`, or its refusal (`gateway/bad-request`).
fn parse<T: serde::de::DeserializeOwned>(tool: &str, input: &Value) -> Result<T, ToolOutput> {
    serde_json::from_value(input.clone()).map_err(|err| bad_input(tool, err))
}

/// A successful call's result: `value` as compact JSON text.
fn answered(value: &Value) -> ToolOutput {
    ToolOutput {
        output: vec![ContentBlock::text(value.to_string())],
        is_error: false,
        refused: false,
    }
}

impl SubagentRuntime {
    /// The delegation tools `session` is offered: composed from the
    /// providers its tree's host registered, so their wording and schema
    /// say what a start will accept.
    pub(crate) fn delegation_tools(&self, session: SessionId) -> Vec<ToolDefinition> {
        if !self.delegation_offered(session) {
            return Vec::new();
        }
        let state = self.inner.engine.state();
        let offered: Vec<Offered> = state
            .registry_for(session)
            .iter()
            .map(|record| Offered {
                name: record.name.clone(),
                capabilities: record.capabilities,
                inherits_parent_context: record.inherits_parent_context,
                continuable: record.continuable,
            })
            .collect();
        drop(state);
        let selection = self.inner.deployment.snapshot().model_selection.clone();
        let routes = selection.enabled.then_some(selection.allowed_routes);
        tools::definitions(&offered, routes.as_deref())
    }

    /// Executes `call` for `session` in its turn `turn` when it names a
    /// delegation tool (`None` otherwise: a host tool). `cancel` fires when
    /// the turn is interrupted or disposed; every wait races it.
    ///
    /// Boxed: a start runs a new driver, whose turns call this again.
    pub(crate) fn run_delegation_tool<'a>(
        &'a self,
        session: SessionId,
        turn: u64,
        call: &'a ToolCall,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Option<ToolOutput>> {
        Box::pin(async move {
            if is_delegation(&call.name) && !self.delegation_offered(session) {
                return Some(ToolOutput {
                    output: vec![ContentBlock::text(format!(
                        "tool {} is not available to this agent",
                        call.name
                    ))],
                    is_error: true,
                    refused: true,
                });
            }
            let caller = LiveAgent::new(session);
            let output = match call.name.as_str() {
                SUBAGENT => {
                    let requested_by = ToolCallRef {
                        turn,
                        call_id: call.call_id.clone(),
                    };
                    self.delegate(&caller, &call.input, requested_by, cancel)
                        .await
                }
                LIST_AGENTS => self.list_agents_tool(session, &call.input).await,
                SEND_MESSAGE => self.message_tool(&caller, &call.input, cancel).await,
                CONTROL => self.control_tool(&caller, &call.input, cancel).await,
                _ => return None,
            };
            Some(output)
        })
    }

    /// `subagent`: a start as `caller`, delivery `parent`, naming the call.
    async fn delegate(
        &self,
        caller: &LiveAgent,
        input: &Value,
        requested_by: ToolCallRef,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let input: StartInput = match parse(SUBAGENT, input) {
            Ok(input) => input,
            Err(refusal) => return refusal,
        };
        if input.prompt.trim().is_empty() {
            return bad_input(SUBAGENT, "the prompt is empty");
        }
        // The depth cap resolved against the user's setting
        // (`resolveMaxDepth`). A provider that takes no cap manages depth
        // itself; a cap asked of it is passed on, for `decide` to refuse.
        let takes_depth = self
            .inner
            .engine
            .state()
            .registry_for(caller.session())
            .iter()
            .any(|record| record.name == input.provider && record.capabilities.depth_limit);
        let max_depth = if takes_depth {
            match self.resolve_max_depth(input.max_depth.map(DepthPolicy::Limit)) {
                Ok(depth) => depth,
                Err(err) => return refused(&err),
            }
        } else {
            input.max_depth
        };
        let spec = SubagentActivationSpec {
            provider: input.provider,
            label: input.label,
            child_id: None,
            request: SubagentStartRequest {
                label: None,
                prompt: vec![ContentBlock::text(input.prompt)],
                options: StartOptions {
                    agent_options: input.agent_options.map(AgentOptions::from),
                    output_schema: input.output_schema,
                    max_depth,
                    tool_filter: input.tool_filter,
                    persona: input.persona,
                },
            },
            delivery: Delivery::Parent,
        };
        // The start's own signal, not the turn's: cancelled if the turn is
        // before the start is done (the start is then abandoned), never
        // after, so interrupting the caller later leaves the child be.
        let signal = CancellationToken::new();
        let start = self.start_requested(caller, spec, signal.clone(), Some(requested_by));
        tokio::pin!(start);
        let started = tokio::select! {
            biased;
            started = &mut start => started,
            () = cancel.cancelled() => {
                signal.cancel();
                start.await
            }
        };
        match started {
            // The handle is let go: the child lives on, and its result
            // reaches the caller as its completion notice.
            Ok(child) => answered(&json!({"childId": child.child_id(), "status": "started"})),
            Err(err) => refused(&err),
        }
    }

    /// `list_agents`: the continuable children running or inactive.
    async fn list_agents_tool(&self, session: SessionId, input: &Value) -> ToolOutput {
        if let Err(refusal) = parse::<Empty>(LIST_AGENTS, input) {
            return refusal;
        }
        let listed = self
            .inner
            .engine
            .read_durable(|state| state.list_agents(session))
            .await;
        match listed {
            Ok(agents) => answered(&Value::Array(
                agents
                    .into_iter()
                    .map(|(entry, activity)| {
                        json!({
                            "id": entry.entry.child_id,
                            "label": entry.entry.label,
                            "provider": entry.entry.provider,
                            "status": match activity {
                                Activity::Running => "running",
                                Activity::Idle => "idle",
                                Activity::Inactive => "inactive",
                            },
                        })
                    })
                    .collect(),
            )),
            Err(err) => refused(&err),
        }
    }

    /// `send_message`: to the caller's parent or a direct child.
    async fn message_tool(
        &self,
        caller: &LiveAgent,
        input: &Value,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let input: MessageInput = match parse(SEND_MESSAGE, input) {
            Ok(input) => input,
            Err(refusal) => return refusal,
        };
        if input.text.trim().is_empty() {
            return bad_input(SEND_MESSAGE, "the text is empty");
        }
        let target = if input.to == PARENT {
            let parent = self
                .inner
                .engine
                .state()
                .sessions
                .get(&caller.session())
                .and_then(|record| record.parent);
            match parent {
                Some(parent) => parent,
                None => {
                    return refused(&SubagentError::Unauthorized(format!(
                        "{} is a root: it has no parent",
                        caller.session()
                    )))
                }
            }
        } else {
            match SessionId::parse(&input.to) {
                Ok(target) => target,
                Err(err) => return refused(&err),
            }
        };
        match self
            .send_message(
                caller,
                target,
                vec![ContentBlock::text(input.text)],
                cancel.child_token(),
            )
            .await
        {
            Ok(message) => answered(&json!({"messageId": message, "status": "accepted"})),
            Err(err) => refused(&err),
        }
    }

    /// The control tool, on the caller's own direct children only.
    async fn control_tool(
        &self,
        caller: &LiveAgent,
        input: &Value,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let input: ControlInput = match parse(CONTROL, input) {
            Ok(input) => input,
            Err(refusal) => return refusal,
        };
        let child = match input.child.as_deref().map(SessionId::parse).transpose() {
            Ok(child) => child,
            Err(err) => return refused(&err),
        };
        if let Some(child) = child {
            let parent = self
                .inner
                .engine
                .state()
                .sessions
                .get(&child)
                .and_then(|record| record.parent);
            if parent != Some(caller.session()) {
                return refused(&SubagentError::Unauthorized(format!(
                    "{child} is not a direct child of {}",
                    caller.session()
                )));
            }
        }
        match (input.action, child) {
            (Action::Interrupt, Some(child)) => {
                match self
                    .interrupt_live_work(child, InterruptAuthority::Ancestor(caller))
                    .await
                {
                    // False: nothing was running to interrupt.
                    Ok(stopped) => answered(&json!({"childId": child, "interrupted": stopped})),
                    Err(err) => refused(&err),
                }
            }
            (Action::Close, Some(child)) => match self.drain_children(caller, &[child]).await {
                Ok(()) => answered(&json!({"childId": child, "status": "closed"})),
                Err(err) => refused(&err),
            },
            (Action::Wait, child) => {
                let seconds = input.timeout_seconds.unwrap_or(MAX_WAIT_SECONDS);
                if seconds > MAX_WAIT_SECONDS {
                    return bad_input(
                        CONTROL,
                        format!("timeoutSeconds is at most {MAX_WAIT_SECONDS}"),
                    );
                }
                self.wait_tool(
                    caller.session(),
                    child,
                    Duration::from_secs(seconds),
                    cancel,
                )
                .await
            }
            (Action::Interrupt | Action::Close, None) => {
                bad_input(CONTROL, "interrupt and close name a `child`")
            }
        }
    }

    /// `wait`: until `child` is not working (or, without one, until a
    /// direct child of `parent` that was working when the wait began is
    /// not, or none is working), the deadline passes, or the turn is
    /// cancelled; then where each child concerned stands (the named one, or
    /// those that stopped working during the wait). It looks again each
    /// time the log's head moves, once the projections have folded it.
    async fn wait_tool(
        &self,
        parent: SessionId,
        child: Option<SessionId>,
        limit: Duration,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let deadline = tokio::time::Instant::now() + limit;
        let mut head = self.log().watch_head();
        let working_before: Vec<SessionId> = self
            .children_now(parent)
            .into_iter()
            .filter(|standing| standing.working)
            .map(|standing| standing.id)
            .collect();
        loop {
            let now = self.children_now(parent);
            let concerned: Vec<&Standing> = now
                .iter()
                .filter(|standing| match child {
                    Some(child) => standing.id == child,
                    None => !standing.working && working_before.contains(&standing.id),
                })
                .collect();
            let done = match child {
                Some(_) => concerned.iter().all(|standing| !standing.working),
                None => !concerned.is_empty() || now.iter().all(|standing| !standing.working),
            };
            if done {
                return answered(&json!({"children": reports(&concerned), "timedOut": false}));
            }
            tokio::select! {
                changed = head.changed() => {
                    if changed.is_err() {
                        return refused(&SubagentError::Closed);
                    }
                    // A shared host's projections follow the log: what
                    // moved the head is in them only once folded.
                    let moved_to = *head.borrow_and_update();
                    if let Err(err) = self.inner.engine.folded_through(moved_to).await {
                        return refused(&err);
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    return answered(&json!({"children": reports(&concerned), "timedOut": true}));
                }
                () = cancel.cancelled() => return ToolOutput::error("interrupted"),
            }
        }
    }

    /// Where each direct child of `parent` stands now.
    fn children_now(&self, parent: SessionId) -> Vec<Standing> {
        let state = self.inner.engine.state();
        state
            .list_children(parent)
            .into_iter()
            .map(|entry| {
                let id = entry.entry.child_id;
                let (working, result) = match (state.activations.get(&id), state.runs.get(&id)) {
                    (Some(activation), _) => {
                        let live = activation.live.is_some();
                        let unsettled = activation.last_result.as_ref().map(|(epoch, _)| *epoch)
                            != Some(activation.epoch);
                        let parked_work = !state.pending_messages(id).is_empty();
                        (
                            activation.running_turn.is_some() || live && (unsettled || parked_work),
                            activation
                                .last_result
                                .as_ref()
                                .map(|(_, result)| result.clone()),
                        )
                    }
                    (None, Some(run)) => (
                        matches!(run.phase, RunPhase::Requested | RunPhase::Started),
                        run.result.clone(),
                    ),
                    (None, None) => (false, None),
                };
                Standing {
                    id,
                    label: entry.entry.label,
                    working,
                    result,
                }
            })
            .collect()
    }
}

/// Where one direct child stands, for a wait.
struct Standing {
    id: SessionId,
    label: String,
    /// Running a turn; live with its activation unsettled or messages
    /// waiting; or a run not settled.
    working: bool,
    /// Its activation's (or run's) settled result, if any: the end of its
    /// first turn; later turns are in its transcript.
    result: Option<subagent_core::SubagentResult>,
}

/// `concerned`, as the wait answers them.
fn reports(concerned: &[&Standing]) -> Vec<Value> {
    concerned
        .iter()
        .map(|standing| {
            let mut report = json!({
                "childId": standing.id,
                "label": standing.label,
                "working": standing.working,
            });
            if let Some(result) = &standing.result {
                report["stopReason"] = json!(result.stop_reason);
                report["output"] = json!(subagent_core::content::plain_text(&result.output));
                if let Some(structured) = &result.structured {
                    report["structured"] = structured.clone();
                }
                if let Some(diagnostic) = &result.diagnostic {
                    report["diagnostic"] = json!(diagnostic.to_string());
                }
            }
            report
        })
        .collect()
}

/// An input with no fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}
