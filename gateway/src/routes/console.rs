//! The console: a page at `/` and its two assets, embedded in the binary
//! (`gateway/console/`, plain ES modules, no build step, nothing from a
//! CDN). They are the only routes that need no token (see
//! [`crate::access`]); the page asks for the token and keeps it for the tab.
//!
//! Every answer carries a strict Content-Security-Policy (scripts, styles
//! and connections from this origin only, images also from `blob:` and
//! `data:` for attachment previews, no framing, no forms posting
//! elsewhere), `nosniff` and `no-referrer`.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

/// `(path, content type, bytes)` of every asset.
const ASSETS: [(&str, &str, &str); 3] = [
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("../../console/index.html"),
    ),
    (
        "/console/app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/app.js"),
    ),
    (
        "/console/style.css",
        "text/css; charset=utf-8",
        include_str!("../../console/style.css"),
    ),
];

/// The policy of every console answer.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; \
     form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// Whether `path` is a console asset (served without the token).
pub(crate) fn is_asset(path: &str) -> bool {
    ASSETS.iter().any(|(asset, _, _)| *asset == path)
}

/// The asset at `path` (only called for the routes of [`ASSETS`]).
fn serve(path: &str) -> Response {
    let Some((_, content_type, body)) = ASSETS.iter().find(|(asset, _, _)| *asset == path) else {
        return crate::error::GatewayError::NotFound(path.to_owned()).into_response();
    };
    let mut response = (*body).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, *content_type),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `GET /`.
pub(crate) async fn page() -> Response {
    serve("/")
}

/// `GET /console/app.js`.
pub(crate) async fn script() -> Response {
    serve("/console/app.js")
}

/// `GET /console/style.css`.
pub(crate) async fn style() -> Response {
    serve("/console/style.css")
}
