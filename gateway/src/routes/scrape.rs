//! `GET /metrics`: the Prometheus scrape. Behind the token like every other
//! data route (the access guard runs first); each scrape sets the gauges
//! from the runtime and the open event streams, then renders every metric
//! of the process's recorder (see [`crate::metrics`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::metrics::CONTENT_TYPE;
use crate::server::Gateway;

/// The metrics in the Prometheus text format.
pub(crate) async fn metrics(State(gateway): State<Arc<Gateway>>) -> impl IntoResponse {
    // Answered while the runtime is being reopened too: the scrape is
    // how a monitor sees that it is.
    let runtime = gateway.supervised.runtime().ok();
    let body = gateway.metrics.render(runtime.as_ref());
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], body)
}
