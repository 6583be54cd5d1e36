//! The guard every request passes first, the unknown routes included, so
//! nothing is revealed to a caller without the token: a request carrying
//! more than one `Origin` or more than one `Authorization` header is refused
//! (`gateway/bad-request`: which one counts would be a guess), then a request
//! carrying an `Origin` header off the allow-list is refused
//! (`gateway/forbidden-origin`), then a request without
//! `Authorization: Bearer <token>` is refused (`gateway/unauthenticated`).
//! The console's static page and assets
//! (`GET /`, `GET /console/...`, see `routes::console`) are the one
//! exception to the token: a browser navigating to the page cannot send it,
//! and they hold no data (the page asks for the token and sends it with
//! every API call). The Origin rule and the one-header rule still apply to them. The comparison is [`Token::matches`]
//! (constant-time); a presented token is never logged.
//!
//! There is no CORS layer on purpose: a cross-origin browser call gets no
//! `Access-Control-Allow-*` answer, so browsers keep it from reading
//! anything even before the allow-list refuses it.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::GatewayError;
use crate::token::Token;

/// The guard's configuration.
#[derive(Debug)]
pub struct Access {
    token: Token,
    allowed_origins: Vec<String>,
}

impl Access {
    /// A guard that admits `token`'s holder from no origin or one of
    /// `allowed_origins`.
    #[must_use]
    pub fn new(token: Token, allowed_origins: Vec<String>) -> Access {
        Access {
            token,
            allowed_origins,
        }
    }

    /// The refusal for a request with these headers, if any; a `public`
    /// request (a console asset, `/healthz`, `/readyz`) needs no token.
    fn check(&self, headers: &axum::http::HeaderMap, public: bool) -> Result<(), GatewayError> {
        let origin = single(headers, header::ORIGIN, "Origin")?;
        let authorization = single(headers, header::AUTHORIZATION, "Authorization")?;
        if let Some(origin) = origin {
            let allowed = origin.to_str().is_ok_and(|origin| {
                self.allowed_origins
                    .iter()
                    .any(|allowed| allowed.eq_ignore_ascii_case(origin))
            });
            if !allowed {
                let shown: String = String::from_utf8_lossy(origin.as_bytes())
                    .chars()
                    .take(200)
                    .collect();
                return Err(GatewayError::ForbiddenOrigin(shown));
            }
        }
        if public {
            return Ok(());
        }
        let presented = authorization
            .map(|value| value.as_bytes())
            .and_then(strip_bearer);
        match presented {
            Some(token) if self.token.matches(token) => Ok(()),
            _ => Err(GatewayError::Unauthenticated),
        }
    }
}

/// The one value of the header `name` (`shown` in a refusal), if present;
/// a request that carries it more than once is a bad request.
fn single<'h>(
    headers: &'h axum::http::HeaderMap,
    name: header::HeaderName,
    shown: &str,
) -> Result<Option<&'h axum::http::HeaderValue>, GatewayError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(GatewayError::bad_request(format!(
            "more than one {shown} header"
        )));
    }
    Ok(first)
}

/// The token of an `Authorization: Bearer <token>` value (the scheme is
/// case-insensitive).
fn strip_bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(rest)
}

/// The middleware: refuses or passes the request on.
pub(crate) async fn guard(
    State(access): State<Arc<Access>>,
    request: Request,
    next: Next,
) -> Response {
    let public = request.method() == axum::http::Method::GET
        && (crate::routes::console::is_asset(request.uri().path())
            || crate::routes::health::PATHS.contains(&request.uri().path()));
    match access.check(request.headers(), public) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}
