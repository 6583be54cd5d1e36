//! [`Probe`]: a scripted host that records the spec of every agent it
//! builds, so a test can check what a child was built with (its tools,
//! options and persona).

use std::sync::{Arc, Mutex};

use subagent_core::{SessionId, SubagentError};
use subagent_runtime::BoxFuture;
use subagent_runtime::{
    Agent, AgentHost, AgentSpec, ScriptedHost, ToolCall, ToolDefinition, ToolOutput,
};
use tokio_util::sync::CancellationToken;

/// `host`'s agents, tools and tool calls, with every agent spec recorded.
pub(crate) struct Probe {
    specs: Mutex<Vec<AgentSpec>>,
    host: ScriptedHost,
}

impl Probe {
    /// A probe over `host`, shared: hand a clone to the runtime and keep one.
    pub(crate) fn new(host: ScriptedHost) -> Arc<Probe> {
        Arc::new(Probe {
            specs: Mutex::new(Vec::new()),
            host,
        })
    }

    /// Every spec built so far, in the order the agents were built.
    pub(crate) fn specs(&self) -> Vec<AgentSpec> {
        self.specs.lock().unwrap().clone()
    }

    /// The spec of the first agent built for `session`; panics if none was.
    pub(crate) fn spec_of(&self, session: SessionId) -> AgentSpec {
        self.specs
            .lock()
            .unwrap()
            .iter()
            .find(|spec| spec.session == session)
            .cloned()
            .expect("an agent was built for the session")
    }
}

impl AgentHost for Probe {
    fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        self.specs.lock().unwrap().push(spec.clone());
        self.host.create(spec)
    }
    fn tools(&self) -> Vec<ToolDefinition> {
        self.host.tools()
    }
    fn execute_tool(
        &self,
        session: SessionId,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ToolOutput> {
        self.host.execute_tool(session, call, cancel)
    }
}
