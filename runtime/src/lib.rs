//! # subagent-runtime
//!
//! The runtime hosts call: [`SubagentRuntime`] (the `ctx.subagents` facade of
//! the spec), its drivers, the seams a host plugs into ([`seam`]), the
//! deterministic [`scripted`] agent, and the shipped [`providers`].
//!
//! Every transition goes through one path (`engine`): a command is decided
//! against the projections, its events are appended atomically and durably,
//! folded in, and only then acknowledged. Drivers react by doing the IO
//! (creating agents, running turns, starting and disposing external runs)
//! and report each outcome as a new command.

mod activation;
mod capacity;
mod deployment;
mod drivers;
mod engine;
pub use engine::OpenStats;
pub mod providers;
mod runtime;
pub mod scripted;
pub mod seam;
mod tools;

pub use activation::SubagentActivation;
pub use capacity::CapacityLimits;
pub use runtime::{
    InboxMessage, InterruptAuthority, LiveAgent, Notice, ProviderRegistration, RecoveryReport,
    SubagentRuntime,
};
pub use scripted::{Script, ScriptedHost};
pub use seam::{
    Agent, AgentHost, AgentSpec, SubagentProvider, SubagentRun, ToolCall, ToolDefinition,
    ToolOutput, ToolPort,
};
