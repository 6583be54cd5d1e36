//! # subagent-acp
//!
//! Real agents as children over the Agent Client Protocol (the crate
//! `agent-client-protocol`, pinned exactly): any agent with an ACP adapter
//! (Claude Code, Codex, Gemini CLI, Goose, …) runs as a durable,
//! replayable child.
//!
//! ```text
//! command.rs     AcpCommand: program, args, env, cwd, time limits
//! process.rs     the agent process: its own process group, a bounded stderr tail
//! connection.rs  the client side of one process: initialize, sessions, prompts, what the agent sends
//! intake.rs      the agent's stdout: bounded lines checked as JSON, updates handed over with backpressure
//! mapping.rs     ACP ↔ our vocabulary, no IO: stop reasons, content, updates → transcript steps
//! turn.rs        one session/prompt to its end, cancellation and its grace period
//! agent.rs       AcpAgent: a continuable child's agent, one ACP session
//! host.rs        AcpHost: builds AcpAgents for routed providers, lists and runs the ACP tools
//! provider.rs    AcpProvider: continuable children, and one-shot external runs
//! script.rs      the test agent's script format
//! error.rs       AcpError and its codes
//! bin/subagents-acp-test-agent  the deterministic ACP agent the tests and `make demo` run
//! ```
//!
//! A host wires it as:
//!
//! ```text
//! let command = AcpCommand::parse("npx @zed-industries/claude-agent-acp")?.cwd("./work");
//! let host = AcpHost::new(my_host).route("acp", command.clone());
//! let (runtime, _) = SubagentRuntime::open(log, Arc::new(host)).await?;
//! runtime.register_provider(Arc::new(AcpProvider::continuable("acp"))).await?;
//! runtime.register_provider(Arc::new(AcpProvider::one_shot("acp-once", command))).await?;
//! ```

mod agent;
mod command;
mod connection;
mod error;
mod host;
mod intake;
pub mod mapping;
mod process;
mod provider;
pub mod script;
mod turn;

pub use agent::AcpAgent;
pub use command::{AcpCommand, AcpTimeouts, EmptyCommand};
pub use connection::INBOUND_CAPACITY;
pub use error::AcpError;
pub use host::{acp_tools, AcpHost, MAX_READ_BYTES};
pub use intake::{LineFault, MAX_LINE_BYTES};
pub use process::STDERR_TAIL_BYTES;
pub use provider::AcpProvider;
