//! The one fixture of the runtime's integration tests.
//!
//! Layout:
//! - `harness.rs`: [`Harness`], a test's log, runtime and root with the calls
//!   tests repeat (start, send, read, wait), and [`HarnessBuilder`], which
//!   varies that setup (host, limits, providers, log, root);
//! - `reads.rs`: reading any log back: records, a stream's events, counts,
//!   projections rebuilt from the records, and the inbox invariants;
//! - `wait.rs`: polling until background work has happened;
//! - `fixtures.rs`: what several test files share: the standard start specs,
//!   text content, and the delegation host and providers of the activation
//!   tests;
//! - `probe.rs`: [`Probe`], a scripted host that records every agent spec;
//! - `spans.rs`: the in-memory span exporter of the telemetry tests.
//!
//! Each test binary uses only some of it: dead code and unused re-exports are
//! allowed here, and only here.
#![allow(dead_code)]

mod fixtures;
mod harness;
mod probe;
mod reads;
mod spans;
mod wait;

#[allow(unused_imports)]
pub(crate) use fixtures::{delegation, delegation_host, spec, spec_with, text, PROMPT};
#[allow(unused_imports)]
pub(crate) use harness::{start, Harness, HarnessBuilder, IntoHost, ROOT_LABEL};
#[allow(unused_imports)]
pub(crate) use probe::Probe;
#[allow(unused_imports)]
pub(crate) use reads::{assert_inbox_invariants, count, events, fold, records, stream_events};
#[allow(unused_imports)]
pub(crate) use spans::{export_in_memory, string_attr};
#[allow(unused_imports)]
pub(crate) use wait::until;
