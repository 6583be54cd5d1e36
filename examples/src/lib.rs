//! # subagent-examples
//!
//! Runnable examples of embedding the runtime, one file each at the crate's
//! root (`cargo run --example NAME` from the workspace):
//!
//! | example | what it shows |
//! |---|---|
//! | `log` | the event log alone: an append, an idempotent retry, a conflict, a read, a subscription |
//! | `embed` | a host with its own `AgentHost`, a root, one spawned child, its result, disposal |
//! | `custom_provider` | a host-written external provider with its capability flags |
//! | `messages` | steering a running child, an interrupt, a cold resume after a restart |
//! | `observe` | lifecycle notices, the root's inbox, a catch-up subscription to the log |
//! | `replay` | the state at an earlier position, a diff, `verify`, from Rust |
//!
//! The tests check what each prints (`tests/examples.rs`), that the
//! README's Rust snippets are excerpts of these files (`tests/readme.rs`),
//! and that the `custom_provider` example's provider passes the provider
//! conformance suite (`tests/custom_provider_conforms.rs`).
