//! Structured logs on stderr: one JSON object per line, for every request (method, path,
//! status, pipeline, token name, destination decisions, duration) and for the server's
//! lifecycle (listening, shutdown). A bearer secret is never passed here: handlers record
//! the token's configured *name* only.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use std::io::Write;
use std::time::Instant;

/// What a handler learned about a request, attached to its response for the log line.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct RequestLog {
    /// Pipeline id from the path, when the route has one.
    pub pipeline: Option<String>,
    /// Name of the token that authenticated (or was refused for this pipeline).
    pub token: Option<String>,
    /// Whether the upload was a dry run.
    pub dry_run: Option<bool>,
    /// Milliseconds the upload waited for a slot (`--max-concurrent-uploads`).
    pub queued_ms: Option<u64>,
    /// Body bytes received.
    pub upload_bytes: Option<u64>,
    /// Per destination: id, decision and status from the report.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub destinations: Vec<DestinationLog>,
    /// Error kind of an error reply.
    pub error_kind: Option<String>,
}

/// One destination's outcome in a request log line.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DestinationLog {
    /// Destination id.
    pub destination: String,
    /// Planned decision.
    pub decision: String,
    /// Report status.
    pub status: String,
    /// Operation id when journaled.
    pub operation_id: Option<String>,
}

/// Writes one JSON line to stderr. A closed stderr is not worth failing a request for.
pub(crate) fn emit(mut line: Value) {
    if let Value::Object(map) = &mut line {
        map.insert(
            "ts".into(),
            Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        );
    }
    let mut text = line.to_string();
    text.push('\n');
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// A lifecycle event (`listening`, `shutdown`, `stopped`, `spool_cleanup_failed`, ...).
pub(crate) fn event(name: &str, fields: Value) {
    let mut line = json!({"event": name});
    if let (Value::Object(l), Value::Object(f)) = (&mut line, fields) {
        l.extend(f);
    }
    emit(line);
}

/// Middleware: times the request and logs one line when the response is ready.
pub(crate) async fn log_requests(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().to_string();
    // The path only: query strings hold nothing secret today, but the path is what
    // operators search by, and it keeps lines short.
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    let info = resp
        .extensions()
        .get::<RequestLog>()
        .cloned()
        .unwrap_or_default();
    let mut line = json!({
        "event": "request",
        "method": method,
        "path": path,
        "status": resp.status().as_u16(),
        "duration_ms": (start.elapsed().as_secs_f64() * 1000.0 * 10.0).round() / 10.0,
    });
    if let (Value::Object(l), Ok(Value::Object(i))) = (&mut line, serde_json::to_value(&info)) {
        l.extend(i.into_iter().filter(|(_, v)| !v.is_null()));
    }
    emit(line);
    resp
}

/// Middleware: replies that are errors but not JSON (axum's own 404/405 and extractor
/// rejections) are rewritten as `{"error": {"kind", "message"}}` so every
/// error a client sees has one shape.
pub(crate) async fn json_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (kind, message) = match status {
        StatusCode::PAYLOAD_TOO_LARGE => (
            "too_large",
            "the request body is larger than --max-upload-bytes".to_string(),
        ),
        StatusCode::NOT_FOUND => ("not_found", "no such route; see GET /v1/health".to_string()),
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            "this route does not accept that method".to_string(),
        ),
        s => (
            if s.is_client_error() {
                "bad_request"
            } else {
                "internal"
            },
            s.canonical_reason().unwrap_or("error").to_string(),
        ),
    };
    let info = resp.extensions().get::<RequestLog>().cloned();
    let body = json!({"error": {"kind": kind, "message": message}});
    let mut out = (status, axum::Json(body)).into_response();
    let mut info = info.unwrap_or_default();
    info.error_kind.get_or_insert_with(|| kind.to_string());
    out.extensions_mut().insert(info);
    out
}

/// The reply for a panic inside a handler (tower-http's catch-panic layer).
pub(crate) fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response<Body> {
    let body = json!({"error": {"kind": "internal", "message": "the server failed while handling this request"}});
    let mut out = (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response();
    out.extensions_mut().insert(RequestLog {
        error_kind: Some("internal".into()),
        ..RequestLog::default()
    });
    out
}
