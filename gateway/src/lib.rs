//! # subagent-gateway
//!
//! The spec's remote face: `prompt` and `interruptByParent` over HTTP, plus
//! the host operations a person needs to drive a runtime without writing
//! Rust (open, reopen and close a root; start and dispose a child), reads of
//! trees, transcripts and past state, the log as a live Server-Sent Events
//! stream, and Prometheus metrics (`GET /metrics`). [`router`] gives an
//! `axum::Router` over a [`SubagentRuntime`], so a host mounts it in its own
//! server; [`serve`] runs one (`subagents serve`).
//!
//! Deny by default: every route, the unknown ones included, first passes
//! the [`access`] guard (one Origin and one Authorization at most, an
//! Origin allow-list, then the bearer [`Token`]); bodies, JSON depth and
//! request time are bounded ([`limits`]); refusals are `{code, message}`
//! with the status of [`error::status_of`], hyper's own refusals of a
//! request head included ([`serve`]).
//!
//! Layout, one file per concern (routes one file per group of methods):
//!
//! | module | owns |
//! |---|---|
//! | [`token`] | the bearer token: environment or 0600 file, constant-time match |
//! | [`access`] | the guard: no repeated Origin or Authorization, Origin allow-list, then the token |
//! | [`limits`] | body size, JSON depth, request time |
//! | [`error`] | refusals as `{code, message}`, the code → status table |
//! | `refusal` | hyper's own refusals (400, 414, 431) as the same JSON |
//! | `routes::remote` | `prompt`, `interruptByParent` |
//! | `routes::roots` | open, reopen, close a root |
//! | `routes::children` | start and dispose a child of a held root |
//! | `routes::reads` | children, descendants, transcript, state at a position |
//! | `routes::events` | the log as Server-Sent Events, resumable by position |
//! | `routes::scrape` | `GET /metrics`, the Prometheus scrape |
//! | `metrics` | the one Prometheus recorder, the scrape's gauges, open streams |
//! | [`openapi`] | the OpenAPI 3.1 document and the one route list |

pub mod access;
pub mod error;
pub mod limits;
mod metrics;
pub mod openapi;
mod refusal;
mod routes;
mod server;
pub mod token;

pub use error::{status_of, GatewayError};
pub use limits::Limits;
pub use server::{router, serve, GatewayConfig};
pub use token::{Token, TokenError, TokenSource};

pub use subagent_runtime::SubagentRuntime;
