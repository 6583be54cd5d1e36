//! The state machine, command by command: what each command records, and
//! each rejection with its stable code. One test binary, one module per
//! concern of `projections/src/machine/`:
//! - `registry`: roots and providers;
//! - `starts`: starting a child, its options and every bad start (the start
//!   half of `lifecycle.rs` and the guards it calls);
//! - `lifecycle`: a continuable child's activation, from start to release;
//! - `turns`: turns, tool calls and steering;
//! - `runs`: external one-shot runs;
//! - `messaging`: messages, interrupts and admission;
//! - `prompts`: the spec's `prompt` (browser messages, idempotent retries);
//! - `recovery`: settling what a dead host left live;
//! - `hosts`: several hosts on a shared log: registries, ownership, takeover;
//!
//! and `world`, the harness they share (`common` holds what this crate's
//! other test binaries share with it).

#[path = "../common/mod.rs"]
mod common;
mod hosts;
mod lifecycle;
mod messaging;
mod prompts;
mod recovery;
mod registry;
mod runs;
mod starts;
mod turns;
mod world;
