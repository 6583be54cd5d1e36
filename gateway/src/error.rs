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
        }
    }

    /// A malformed request (`gateway/bad-request`).
    pub(crate) fn bad_request(message: impl Into<String>) -> GatewayError {
        GatewayError::Runtime(SubagentError::BadRequest(message.into()))
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
        let message = self.to_string();
        let mut response = (
            status,
            axum::Json(ErrorBody {
                code,
                message: &message,
            }),
        )
            .into_response();
        if code == ErrorCode::GatewayUnauthenticated {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

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
        | C::AcpCancelUnanswered => StatusCode::BAD_GATEWAY,
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
