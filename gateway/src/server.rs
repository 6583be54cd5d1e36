//! The gateway's shared state and its router: which route goes to which
//! handler, which layers wrap them, and [`serve`], which runs the router on
//! a listener until a shutdown signal and then closes the runtime.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::routing::{delete, get, post};
use axum::{Extension, Router};
use subagent_core::SessionId;
use subagent_runtime::{LiveAgent, SubagentRuntime, Supervised};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::access::{self, Access};
use crate::error::GatewayError;
use crate::limits::{self, BodyCap, Limits};
use crate::metrics::Metrics;
use crate::refusal::RefusalListener;
use crate::routes::{
    attachments, children, console, events, health, history, reads, remote, roots, scrape,
};
use crate::token::Token;

/// What a gateway needs besides its runtime.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// The bearer token every request must present.
    pub token: Token,
    /// Browser origins allowed to call (`scheme://host:port`, exact); a
    /// request that carries any other `Origin` is refused.
    pub allowed_origins: Vec<String>,
    /// Input and time bounds.
    pub limits: Limits,
}

/// The state every handler shares.
pub(crate) struct Gateway {
    /// The runtime, reopened after its log fails when the host supervises
    /// it ([`Supervised`]).
    pub(crate) supervised: Supervised,
    /// The roots this gateway opened or reopened and has not closed: the
    /// handles starts and disposals go through.
    roots: Mutex<HashMap<SessionId, LiveAgent>>,
    pub(crate) limits: Limits,
    /// Cancelled when the server shuts down: live event streams end.
    pub(crate) shutdown: CancellationToken,
    /// The process's Prometheus recorder and this gateway's count of open
    /// event streams (`GET /metrics`).
    pub(crate) metrics: Metrics,
}

impl Gateway {
    /// The serving runtime.
    ///
    /// # Errors
    /// `store/unavailable` (503 with `Retry-After`) while it is being
    /// reopened after its log failed; `subagent/closed` once closed.
    pub(crate) fn runtime(&self) -> Result<SubagentRuntime, GatewayError> {
        self.supervised.runtime().map_err(GatewayError::from)
    }

    pub(crate) fn roots(&self) -> MutexGuard<'_, HashMap<SessionId, LiveAgent>> {
        // A handler never panics while holding the lock; a poisoned map
        // still holds the right handles.
        self.roots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The gateway's routes over `runtime`. Mount it as it is (its paths start
/// with `/v1/`, but for the console's page and `/metrics`) or nest it under
/// a prefix. `shutdown` ends live event streams, so a graceful shutdown does
/// not wait for them.
///
/// The first router built in a process installs a Prometheus recorder as
/// the global `metrics` recorder, which `GET /metrics` renders; later
/// routers share it. A host that installed its own recorder first keeps
/// it: the runtime's counters go there, and `/metrics` reports the gauges.
pub fn router(
    runtime: impl Into<Supervised>,
    config: GatewayConfig,
    shutdown: CancellationToken,
) -> Router {
    let gateway = Arc::new(Gateway {
        supervised: runtime.into(),
        roots: Mutex::new(HashMap::new()),
        limits: config.limits.clone(),
        shutdown,
        metrics: Metrics::install(),
    });
    let access = Arc::new(Access::new(config.token, config.allowed_origins));
    let bounded = Router::new()
        .route(
            "/v1/prompt",
            post(remote::prompt).layer(Extension(BodyCap(config.limits.prompt_body_bytes))),
        )
        .route("/v1/interruptByParent", post(remote::interrupt_by_parent))
        .route("/v1/roots", post(roots::open).get(roots::list))
        .route("/v1/roots/{root}", delete(roots::close))
        .route("/v1/roots/{root}/reopen", post(roots::reopen))
        .route("/v1/roots/{root}/children", post(children::start))
        .route(
            "/v1/roots/{root}/children/{child}",
            delete(children::dispose),
        )
        .route("/v1/sessions/{session}/children", get(reads::children))
        .route(
            "/v1/sessions/{session}/descendants",
            get(reads::descendants),
        )
        .route("/v1/sessions/{session}/transcript", get(reads::transcript))
        .route("/v1/state", get(reads::state_at))
        .route("/v1/sessions/{session}/tree", get(history::tree))
        .route("/v1/diff", get(history::diff))
        .route("/v1/verify", get(history::verify))
        .route("/", get(console::page))
        .route("/console/app.js", get(console::script))
        .route("/console/style.css", get(console::style))
        .route("/v1/attachments/{id}", get(attachments::get))
        .route("/v1/openapi.json", get(reads::openapi))
        .route("/metrics", get(scrape::metrics))
        .route("/healthz", get(health::live))
        .route("/readyz", get(health::ready))
        .layer(axum::middleware::from_fn_with_state(
            config.limits.request_timeout,
            limits::time_limit,
        ));
    // The event stream is long-lived: no request time limit.
    let streaming = Router::new().route("/v1/events", get(events::stream));
    bounded
        .merge(streaming)
        .fallback(reads::no_route)
        .method_not_allowed_fallback(reads::wrong_method)
        .with_state(gateway)
        .layer(axum::middleware::from_fn_with_state(access, access::guard))
}

/// Serves `router` on `listener` until `signal` completes, then stops
/// accepting, cancels `shutdown` (ending live event streams), waits for the
/// requests in flight, and closes `runtime` (a [`Supervised`] one stops
/// being reopened first). A request whose head hyper
/// refuses before routing (400, 414, 431) is answered with the gateway's
/// JSON refusal too (`refusal`).
///
/// # Errors
/// The listener's IO error, or the runtime's close failure.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    runtime: impl Into<Supervised>,
    shutdown: CancellationToken,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let runtime = runtime.into();
    let ending = shutdown.clone();
    axum::serve(RefusalListener(listener), router)
        .with_graceful_shutdown(async move {
            signal.await;
            ending.cancel();
        })
        .await?;
    runtime.close().await?;
    Ok(())
}
