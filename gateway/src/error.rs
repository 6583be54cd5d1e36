//! [`GatewayError`]: every refusal the gateway answers with, as the JSON
//! body `{code, message}` and the HTTP status of [`status_of`], the one
//! code → status table (the README prints it).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use subagent_core::{ErrorCode, SubagentError};
use subagent_replay::ReplayError;
use thiserror::Error;

/// A refusal or failure of one request.
#[derive(Debug, Error)]
pub enum GatewayError {
    /// The runtime refused or failed (its code is the answer's code).
    #[error(transparent)]
    Runtime(#[from] SubagentError),
    /// A replay read failed.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// No bearer token, or not the gateway's.
    #[error("a valid bearer token is required")]
    Unauthenticated,
    /// A browser origin that is not on the allow-list.
    #[error("origin {0:?} is not allowed")]
    ForbiddenOrigin(String),
    /// No such route.
    #[error("no route {0}")]
    NotFound(String),
    /// The route does not take this method.
    #[error("the route does not accept {0}")]
    MethodNotAllowed(String),
    /// The body is larger than the limit.
    #[error("the request body is larger than {limit} bytes")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The request did not finish within the limit.
    #[error("the request did not finish within {limit_ms} ms")]
    Timeout {
        /// The limit in milliseconds.
        limit_ms: u128,
    },
    /// The request URI is longer than the HTTP server accepts: hyper's 414,
    /// answered before routing by [`crate::serve`].
    #[error("the request URI is longer than {limit} bytes")]
    UriTooLong {
        /// The limit in bytes.
        limit: usize,
    },
    /// The request has too many headers, or a head longer than the HTTP
    /// server reads: hyper's 431, answered before routing by
    /// [`crate::serve`].
    #[error("the request has more than {headers} headers, or a head that did not end within {bytes} bytes")]
    HeadersTooLarge {
        /// The most headers a request may have.
        headers: usize,
        /// The most bytes a request's head (request line and headers) may
        /// take.
        bytes: usize,
    },
}

impl GatewayError {
    /// The stable code of the answer.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            GatewayError::Runtime(error) => error.code(),
            GatewayError::Replay(error) => error.code(),
            GatewayError::Unauthenticated => ErrorCode::GatewayUnauthenticated,
            GatewayError::ForbiddenOrigin(_) => ErrorCode::GatewayForbiddenOrigin,
            GatewayError::NotFound(_) => ErrorCode::GatewayNotFound,
            GatewayError::MethodNotAllowed(_) => ErrorCode::GatewayMethodNotAllowed,
            GatewayError::PayloadTooLarge { .. } => ErrorCode::GatewayPayloadTooLarge,
            GatewayError::Timeout { .. } => ErrorCode::GatewayTimeout,
            GatewayError::UriTooLong { .. } => ErrorCode::GatewayUriTooLong,
            GatewayError::HeadersTooLarge { .. } => ErrorCode::GatewayHeadersTooLarge,
        }
    }

    /// A malformed request (`gateway/bad-request`).
    pub(crate) fn bad_request(message: impl Into<String>) -> GatewayError {
        GatewayError::Runtime(SubagentError::BadRequest(message.into()))
    }

    /// The bytes of this refusal's JSON body, `{code, message}`: the body
    /// of its response, and of the refusals `refusal` writes for hyper, byte
    /// for byte.
    pub(crate) fn body(&self) -> Vec<u8> {
        let body = ErrorBody {
            code: self.code(),
            message: &self.to_string(),
        };
        // A code and a string always serialize; the fallback keeps even an
        // impossible failure a JSON refusal with its code.
        serde_json::to_vec(&body).unwrap_or_else(|_| {
            format!("{{\"code\":\"{}\",\"message\":\"\"}}", body.code).into_bytes()
        })
    }
}

/// The JSON body of every refusal.
#[derive(Serialize)]
struct ErrorBody<'a> {
    code: ErrorCode,
    message: &'a str,
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let code = self.code();
        let status = status_of(code);
        if status.is_server_error() {
            tracing::error!(%code, error = %self, "request failed");
        }
        let mut response = (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(JSON_MEDIA_TYPE),
            )],
            self.body(),
        )
            .into_response();
        if code == ErrorCode::GatewayUnauthenticated {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(self.retry_after_secs()),
            );
        }
        response
    }
}

impl GatewayError {
    /// Whole seconds until a retry may succeed, at least 1: when the
    /// runtime is being reopened, until its next reopen is due (rounded
    /// up), else 1.
    fn retry_after_secs(&self) -> u64 {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(error) = source {
            if let Some(recovering) =
                error.downcast_ref::<subagent_runtime::supervisor::Recovering>()
            {
                let millis = u64::try_from(recovering.retry_in.as_millis()).unwrap_or(u64::MAX);
                return millis.div_ceil(1000).clamp(1, 60);
            }
            source = error.source();
        }
        1
    }
}

/// The media type of every refusal's body.
pub(crate) const JSON_MEDIA_TYPE: &str = "application/json";

/// The HTTP status of each code. Exhaustive on purpose: a new code does not
/// compile until it has a status here (and a row in the README's table).
#[must_use]
pub fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        C::BadRequest
        | C::ReplayPositionPastHead
        | C::ReplayBadImport
        | C::ReplayLineTooLong
        | C::ReplayNotEmpty
        | C::ReplayDirectoryNotEmpty => StatusCode::BAD_REQUEST,
        C::GatewayUnauthenticated => StatusCode::UNAUTHORIZED,
        C::Unauthorized | C::GatewayForbiddenOrigin => StatusCode::FORBIDDEN,
        C::GatewayNotFound | C::ReplayUnknownSession => StatusCode::NOT_FOUND,
        C::GatewayMethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        C::ParentUnavailable
        | C::NotResumable
        | C::AdmissionClosed
        | C::RootHeld
        | C::TreeElsewhere
        | C::OutOfOrder
        | C::DuplicateProvider
        | C::StoreConflict
        | C::StoreFenced
        | C::StoreLeaseHeld => StatusCode::CONFLICT,
        C::GatewayPayloadTooLarge | C::EventTooLarge | C::StoreEventTooLarge => {
            StatusCode::PAYLOAD_TOO_LARGE
        }
        C::GatewayUriTooLong => StatusCode::URI_TOO_LONG,
        C::GatewayHeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        C::AttachmentInvalid
        | C::InvalidTimeZone
        | C::StoreInvalidLease
        | C::CapabilityUnsupported
        | C::UnknownProvider
        | C::InvalidOutputSchema
        | C::InvalidDepth
        | C::DepthExceeded
        | C::UnknownTool
        | C::InvalidPersona
        | C::RouteNotAllowed => StatusCode::UNPROCESSABLE_ENTITY,
        C::DeliveryUnavailable
        | C::Closed
        | C::StoreClosed
        | C::StoreLocked
        | C::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        C::GatewayTimeout => StatusCode::GATEWAY_TIMEOUT,
        // A child agent over ACP failed: the upstream of this request.
        C::AcpSpawn
        | C::AcpInitializeTimeout
        | C::AcpSessionTimeout
        | C::AcpProtocol
        | C::AcpExited
        | C::AcpCancelUnanswered
        | C::AcpOutputTooLarge
        | C::AcpIdleTimeout => StatusCode::BAD_GATEWAY,
        // The client went away before acceptance; nobody reads the answer.
        C::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        C::Internal
        | C::Aggregate
        | C::ReplayImpossibleHistory
        | C::ReplayIo
        | C::StoreCorrupt
        | C::StoreUnsupportedSchema
        | C::StoreUnsupportedFormat
        | C::StoreEmptyAppend
        | C::StoreRepeatedStream
        | C::StoreMisplacedEvent
        | C::StoreDuplicateEventId
        | C::StoreDamaged
        | C::StoreNotALog
        | C::StoreReadOnly
        | C::StoreNumberingExhausted
        | C::StoreCorruptIndex
        | C::StoreIo => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
