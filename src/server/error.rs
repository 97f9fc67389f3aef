//! The error reply of the HTTP API: a status code and `{"error": {"kind", "message"}}`
//! (SPEC §12). Every refusal the server makes is one of these; the kind is a stable,
//! machine-readable word, the message says what to change.

use super::logging::RequestLog;
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable kind.
    pub kind: &'static str,
    /// What went wrong and what to change.
    pub message: String,
}

impl ApiError {
    /// An error with any status.
    pub(crate) fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
        }
    }

    /// 400 for a bad archive (entries, paths, truncation, garbage).
    pub(crate) fn bad_bundle(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_bundle", message)
    }

    /// 400 for a bad manifest or content that does not match it.
    pub(crate) fn invalid_source(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_source", message)
    }

    /// 413 for any upload limit passed.
    pub(crate) fn too_large(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    }

    /// 500 for failures of the server itself.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// The JSON body of this error.
    pub(crate) fn body(&self) -> serde_json::Value {
        json!({"error": {"kind": self.kind, "message": self.message}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body())).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"distributor\""),
            );
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // RFC 9110 §15.5.9: the server has given up on this request's body, and the
            // rest of it is not read, so the connection cannot carry another request.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp.extensions_mut().insert(RequestLog {
            error_kind: Some(self.kind.to_string()),
            ..RequestLog::default()
        });
        resp
    }
}

/// Maps a library error met outside a publication (source, journal, I/O) to a reply.
pub(crate) fn from_library(e: &crate::Error, message: String) -> ApiError {
    use crate::Error;
    match e.root() {
        Error::Source(_) => ApiError::invalid_source(message),
        Error::Usage(_) | Error::Input(_) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_parameter", message)
        }
        Error::RecoveryRequired(_) => {
            ApiError::new(StatusCode::LOCKED, "recovery_required", message)
        }
        other => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, other.kind(), message),
    }
}
