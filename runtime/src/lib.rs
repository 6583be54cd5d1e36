//! # subagent-runtime
//!
//! The runtime hosts call: [`SubagentRuntime`] (the `ctx.subagents` facade of
//! the spec), its drivers, the seams a host plugs into ([`provider`] and [`agent`]), the
//! deterministic [`scripted`] agent, and the shipped [`providers`].
//!
//! Every transition goes through one path (`engine`): a command is decided
//! against the projections, its events are appended atomically and durably,
//! folded in, and only then acknowledged. Drivers react by doing the IO
//! (creating agents, running turns, starting and disposing external runs)
//! and report each outcome as a new command.
//!
//! Telemetry: every command, activation, turn, tool call and message
//! delivery is a `tracing` span named by `subagent_core::telemetry`
//! (exported when the host installs `tracing-opentelemetry`, as
//! [`otel::layer`] sets it up), and the engine counts starts, settlements,
//! refusals and append latency through the `metrics` facade.

mod activation;
pub mod agent;
mod capacity;
pub mod child_process;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod delegation;
mod drivers;
mod engine;
mod metrics;
pub mod otel;
pub mod provider;
pub mod providers;
mod runtime;
pub mod scripted;
mod settings;
pub mod supervisor;
mod telemetry;
mod tools;

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: what the seams' async methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub use engine::OpenStats;

pub use activation::SubagentActivation;
pub use agent::{
    Agent, AgentHost, AgentSpec, Announced, InputRoute, ToolCall, ToolDefinition, ToolOutput,
    ToolPort, TranscriptItem, TurnEnd, TurnInput,
};
pub use capacity::CapacityLimits;
pub use provider::{SubagentProvider, SubagentRun};
pub use runtime::{
    InboxMessage, InterruptAuthority, LiveAgent, Notice, ProviderRegistration, RecoveryReport,
    RootEntry, RuntimeGauges, SharedHost, SubagentRuntime,
};
pub use scripted::{Script, ScriptedHost};
pub use supervisor::{Health, RecoveryPolicy, Supervised};
