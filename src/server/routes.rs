//! The HTTP routes (SPEC §12): health, destination status, and bundle upload. Handlers
//! authenticate, check parameters, spool and unpack the body, and hand the verified bundle
//! to [`crate::ops::publish::publish`] on a blocking thread: the same engine, locks and journal
//! as the CLI. They never touch a destination themselves.

use super::AppState;
use super::auth::{Credentials, unauthorized};
use super::error::{ApiError, from_library};
use super::extract::{Extracted, extract};
use super::logging::{DestinationLog, RequestLog};
use super::spool::RequestSpool;
use crate::config::Config;
use crate::ops::common::{ExitCode, Outcome};
use crate::ops::publish::{PublishOptions, publish};
use crate::report::Status;
use crate::source::{MANIFEST_FILE, Source};
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One served pipeline.
#[derive(Debug)]
pub(crate) struct Pipeline {
    /// Its configuration.
    pub config: Config,
    /// Its journal (resolved as the CLI resolves it).
    pub journal: PathBuf,
    /// No token configured and the server runs `--allow-unauthenticated`.
    pub open: bool,
}

/// Query parameters a producer may set.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct UploadParams {
    /// `dry_run=true`: plan only.
    pub dry_run: bool,
    /// `destination=ID` (repeatable); empty: all.
    pub destinations: Vec<String>,
}

/// Parameter names (or parts of them) that would let a producer choose ownership,
/// takeover, transfer or force: refused by name, whatever their value.
const FORBIDDEN: &[&str] = &[
    "force",
    "takeover",
    "owner",
    "transfer",
    "on_conflict",
    "destination_newer",
    "same_created",
    "reconciliation",
    "state_mode",
    "actor",
];

/// Parses the upload's query string.
pub(crate) fn parse_params(query: Option<&str>) -> Result<UploadParams, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| invalid_parameter(format!("the query string cannot be parsed: {e}")))?;
    let mut out = UploadParams::default();
    let mut seen_dry_run = false;
    for (key, value) in pairs {
        let lower = key.to_ascii_lowercase();
        match lower.as_str() {
            "dry_run" => {
                if std::mem::replace(&mut seen_dry_run, true) {
                    return Err(invalid_parameter("dry_run is given more than once".into()));
                }
                out.dry_run = match value.as_str() {
                    "" | "true" | "1" => true,
                    "false" | "0" => false,
                    v => {
                        return Err(invalid_parameter(format!(
                            "dry_run={v}: accepted are true or false"
                        )));
                    }
                };
            }
            "destination" => {
                if value.is_empty() {
                    return Err(invalid_parameter(
                        "destination= needs a destination id".into(),
                    ));
                }
                if !out.destinations.contains(&value) {
                    out.destinations.push(value);
                }
            }
            k if FORBIDDEN.iter().any(|f| k.contains(f)) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "forbidden_parameter",
                    format!(
                        "parameter '{key}' is refused: producers cannot choose ownership, takeover, transfer or force; the pipeline's configuration decides them"
                    ),
                ));
            }
            _ => {
                return Err(invalid_parameter(format!(
                    "unknown parameter '{key}'; accepted are dry_run and destination"
                )));
            }
        }
    }
    Ok(out)
}

fn invalid_parameter(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_parameter", message)
}

/// `GET /v1/health`.
pub(crate) async fn health() -> Response {
    Json(json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")})).into_response()
}

/// Unknown routes.
pub(crate) async fn not_found() -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; the API is POST /v1/pipelines/{id}/bundles, GET /v1/pipelines/{id}/destinations and GET /v1/health",
    )
    .into_response()
}

/// Attaches the log record to whatever the handler produced.
fn finish(result: Result<Response, ApiError>, mut log: RequestLog) -> Response {
    let mut resp = match result {
        Ok(r) => r,
        Err(e) => {
            log.error_kind = Some(e.kind.to_string());
            e.into_response()
        }
    };
    resp.extensions_mut().insert(log);
    resp
}

/// Authenticates and authorizes a request for `pipeline_id` (401, 403, 404).
fn authorize(
    state: &AppState,
    headers: &HeaderMap,
    pipeline_id: &str,
    log: &mut RequestLog,
) -> Result<(Arc<Pipeline>, String), ApiError> {
    log.pipeline = Some(pipeline_id.to_string());
    let creds = Credentials::from_headers(headers, &state.tokens)?;
    log.token = creds.token_names();
    let Some(pipeline) = state.pipelines.get(pipeline_id) else {
        // Only a caller with a valid token (or any caller of an open server) learns which
        // pipelines exist.
        if creds.presented && !creds.authenticated() {
            return Err(unauthorized("the bearer token is not valid"));
        }
        if creds.authenticated() || state.allow_unauthenticated {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_pipeline",
                format!("pipeline '{pipeline_id}' is not served here"),
            ));
        }
        return Err(unauthorized(
            "this pipeline requires 'Authorization: Bearer <token>'",
        ));
    };
    let caller = creds.authorize(pipeline_id, pipeline.open)?;
    log.token = caller.token_name.clone();
    Ok((Arc::clone(pipeline), caller.actor()))
}

/// `GET /v1/pipelines/{id}/destinations`: each destination's state summary.
pub(crate) async fn destinations(
    State(state): State<Arc<AppState>>,
    Path(pipeline_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let mut log = RequestLog::default();
    let result = async {
        let (pipeline, _) = authorize(&state, &headers, &pipeline_id, &mut log)?;
        let p = Arc::clone(&pipeline);
        let statuses = tokio::task::spawn_blocking(move || {
            let dests: Vec<_> = p.config.destinations.iter().collect();
            let view = crate::journal::JournalView::open(&p.journal)?;
            crate::error::Result::Ok(crate::ops::inspect::status(&dests, view.as_ref()))
        })
        .await
        .map_err(|e| ApiError::internal(format!("status failed: {e}")))?
        .map_err(|e| from_library(&e, e.to_string()))?;
        Ok(
            Json(json!({"pipeline_id": pipeline.config.pipeline_id, "destinations": statuses}))
                .into_response(),
        )
    }
    .await;
    finish(result, log)
}

/// `POST /v1/pipelines/{id}/bundles`: upload, unpack, verify, publish (or plan).
pub(crate) async fn upload(
    State(state): State<Arc<AppState>>,
    Path(pipeline_id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut log = RequestLog::default();
    let result = upload_inner(
        &state,
        &pipeline_id,
        query.as_deref(),
        &headers,
        body,
        &mut log,
    )
    .await;
    if let Err(e) = &result {
        state.metrics.rejected(e.kind);
    }
    finish(result, log)
}

async fn upload_inner(
    state: &Arc<AppState>,
    pipeline_id: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
    log: &mut RequestLog,
) -> Result<Response, ApiError> {
    let (pipeline, actor) = authorize(state, headers, pipeline_id, log)?;
    let reason = reason_header(headers)?;
    let params = parse_params(query)?;
    log.dry_run = Some(params.dry_run);
    check_destinations(&pipeline.config, &params.destinations)?;
    check_content_type(headers)?;
    let max = state.limits.max_upload_bytes;
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > max
    {
        return Err(ApiError::too_large(format!(
            "the request body is larger than {max} bytes (--max-upload-bytes)"
        )));
    }
    // A slot before anything is read or spooled: it bounds the spool's disk use. Waiting
    // requests hold only their connection.
    let waiting = std::time::Instant::now();
    let shutting_down = || ApiError::internal("the server is shutting down".to_string());
    let slot = match Arc::clone(&state.upload_slots).try_acquire_owned() {
        Ok(slot) => slot,
        Err(tokio::sync::TryAcquireError::Closed) => return Err(shutting_down()),
        Err(tokio::sync::TryAcquireError::NoPermits) => {
            crate::failpoint::hit("upload_waits_for_slot");
            Arc::clone(&state.upload_slots)
                .acquire_owned()
                .await
                .map_err(|_| shutting_down())?
        }
    };
    log.queued_ms = Some(waiting.elapsed().as_millis() as u64);
    let spool = state.spool.request()?;
    let received = spool.receive(body, &state.limits).await?;
    log.upload_bytes = Some(received);
    let hooked = Arc::clone(&pipeline);
    let job = PublishJob {
        pipeline,
        actor,
        reason,
        params,
        limits: state.limits,
        lock_timeout: state.lock_timeout,
    };
    // The spool moves into the blocking task: if the client goes away, the publication
    // still finishes and the spool is still removed after it.
    // The slot goes with it, and is given back once the spool is removed.
    let started = std::time::Instant::now();
    let outcome = tokio::task::spawn_blocking(move || {
        let outcome = job.run(spool);
        drop(slot);
        outcome
    })
    .await
    .map_err(|e| ApiError::internal(format!("the publication task failed: {e}")))??;
    log.destinations = outcome
        .report
        .destinations
        .iter()
        .map(|d| DestinationLog {
            destination: d.destination_id.clone(),
            decision: serde_plain(&d.decision),
            status: serde_plain(&d.status),
            operation_id: d.operation_id.clone(),
        })
        .collect();
    if !outcome.report.dry_run {
        state
            .metrics
            .publication(&outcome.report, started.elapsed());
    }
    let response = report_response(&outcome);
    // Hooks run after the reply (SPEC §19): their results go to the journal.
    if !outcome.report.dry_run {
        let mut report = outcome.report;
        tokio::task::spawn_blocking(move || {
            crate::hooks::run_for(&hooked.config, &mut report, &hooked.journal);
        });
    }
    Ok(response)
}

fn serde_plain<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

fn check_destinations(config: &Config, ids: &[String]) -> Result<(), ApiError> {
    for id in ids {
        if config.destination(id).is_none() {
            let known: Vec<&str> = config.destinations.iter().map(|d| d.id.as_str()).collect();
            return Err(invalid_parameter(format!(
                "destination '{id}' is not configured for pipeline '{}'; configured: {}",
                config.pipeline_id,
                known.join(", ")
            )));
        }
    }
    Ok(())
}

/// Accepts a tar or gzip tar by type, or no type; the format itself is recognised from the
/// body's first bytes. Other types are refused so that a form-encoded body (curl's `-d`,
/// which also strips newlines) fails with a hint instead of as a corrupt archive.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    const ACCEPTED: &[&str] = &[
        "application/x-tar",
        "application/tar",
        "application/gzip",
        "application/x-gzip",
        "application/tar+gzip",
        "application/octet-stream",
    ];
    let Some(v) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = v.to_str().unwrap_or("");
    let mime = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if ACCEPTED.contains(&mime.as_str()) {
        return Ok(());
    }
    Err(ApiError::bad_bundle(format!(
        "Content-Type '{}' is not accepted; send the bundle as application/x-tar or application/gzip (curl: --data-binary @bundle.tar -H 'Content-Type: application/x-tar')",
        text.escape_debug()
    )))
}

/// The header that says why an upload publishes (docs/audit.md), as `--reason` does.
pub(crate) const REASON_HEADER: &str = "x-distributor-reason";

/// `X-Distributor-Reason`, bounded as `--reason` is (at most 1 KiB of UTF-8, no control
/// characters): else a 400 `invalid_parameter` before anything is read or written.
fn reason_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(REASON_HEADER) else {
        return Ok(None);
    };
    let bad = |why: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_parameter", why);
    let text = std::str::from_utf8(v.as_bytes())
        .map_err(|_| bad("X-Distributor-Reason: accepted is UTF-8 text".to_string()))?;
    if text.is_empty() {
        return Ok(None);
    }
    crate::input::bounded_text("X-Distributor-Reason", text)
        .map(|t| Some(t.to_string()))
        .map_err(|e| bad(e.to_string()))
}

/// Everything the blocking half of an upload needs.
struct PublishJob {
    pipeline: Arc<Pipeline>,
    actor: String,
    reason: Option<String>,
    params: UploadParams,
    limits: super::limits::Limits,
    lock_timeout: Duration,
}

impl PublishJob {
    /// Unpacks, verifies and publishes; `spool` is removed when this returns.
    fn run(self, spool: RequestSpool) -> Result<Outcome, ApiError> {
        let bundle = spool.bundle_dir();
        let extracted = extract(&spool.body_path(), &bundle, &self.limits)?;
        // The body is no longer needed; free its space before publishing.
        let _ = std::fs::remove_file(spool.body_path());
        let source = open_source(&spool, &extracted)?;
        let opts = PublishOptions {
            destinations: self.params.destinations,
            dry_run: self.params.dry_run,
            force: false,
            allow_delete: None,
            saved_plan: None,
            save_plan: false,
            journal: self.pipeline.journal.clone(),
            lock_timeout: self.lock_timeout,
            actor: self.actor,
            reason: self.reason,
            command: "publish".to_string(),
            stage: false,
        };
        let mut outcome = publish(&self.pipeline.config, &source, &opts)
            .map_err(|e| from_library(&e, hide_spool(&e.to_string(), &spool)))?;
        for d in &mut outcome.report.destinations {
            d.message = hide_spool(&d.message, &spool);
        }
        Ok(outcome)
    }
}

/// Opens the unpacked bundle as a [`Source`] and checks every output's content against the
/// manifest, so a bad upload is a 400 before any destination is planned.
fn open_source(spool: &RequestSpool, extracted: &Extracted) -> Result<Source, ApiError> {
    match extracted.files.get(MANIFEST_FILE) {
        Some(_) => {}
        None => {
            return Err(ApiError::invalid_source(format!(
                "the archive holds no {MANIFEST_FILE} at its root ({} entries read)",
                extracted.entries
            )));
        }
    }
    let source = Source::open(&spool.bundle_dir())
        .map_err(|e| ApiError::invalid_source(hide_spool(&e.to_string(), spool)))?;
    for o in &source.manifest.outputs {
        match extracted.files.get(&o.path) {
            Some((size, sha)) if *size == o.size && *sha == o.sha256 => {}
            Some((size, sha)) => {
                return Err(ApiError::invalid_source(format!(
                    "invalid source: output '{}': the upload holds {size} bytes with sha256 {sha}, the manifest says {} bytes with sha256 {}",
                    o.path, o.size, o.sha256
                )));
            }
            None => {
                return Err(ApiError::invalid_source(format!(
                    "invalid source: output '{}' is listed in the manifest but not in the archive",
                    o.path
                )));
            }
        }
    }
    Ok(source)
}

/// Error messages name files by their place in the bundle, not in the server's spool.
fn hide_spool(message: &str, spool: &RequestSpool) -> String {
    let bundle = format!("{}/", spool.bundle_dir().display());
    message
        .replace(&bundle, "")
        .replace(&spool.dir().display().to_string(), "<upload>")
}

/// The reply for a publication: the §11 report (fields in the CLI's order), with an
/// `error` member first when the status is not 200 (409 conflict, 423 recovery required,
/// 500 failed).
#[derive(serde::Serialize)]
struct ReportReply<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Value>,
    #[serde(flatten)]
    report: &'a crate::report::Report,
}

fn report_response(outcome: &Outcome) -> Response {
    let report = &outcome.report;
    let failed = report
        .destinations
        .iter()
        .any(|d| d.status == Status::Failed);
    let (status, kind) = match outcome.exit_code {
        // Another writer got there first (SPEC §14): the upload may be sent again.
        ExitCode::Failed if outcome.concurrent_change => {
            (StatusCode::CONFLICT, Some("concurrent_change"))
        }
        ExitCode::Failed => (StatusCode::INTERNAL_SERVER_ERROR, Some("failed")),
        // A destination whose own config cannot be used (a template rendering an unsafe
        // path): the server's configuration is at fault, not the upload.
        ExitCode::Usage => (StatusCode::INTERNAL_SERVER_ERROR, Some("config")),
        ExitCode::RecoveryRequired => (StatusCode::LOCKED, Some("recovery_required")),
        ExitCode::Conflict => (StatusCode::CONFLICT, Some("conflict")),
        ExitCode::Success if failed => (StatusCode::INTERNAL_SERVER_ERROR, Some("failed")),
        ExitCode::Success => (StatusCode::OK, None),
    };
    let error = kind.map(|kind| {
        let message = report
            .destinations
            .iter()
            .filter(|d| matches!(d.status, Status::Conflict | Status::Failed))
            .map(|d| format!("destination '{}': {}", d.destination_id, d.message))
            .collect::<Vec<_>>()
            .join("; ");
        json!({"kind": kind, "message": message})
    });
    (status, Json(ReportReply { error, report })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dry_run_and_destinations_are_accepted() {
        let p = parse_params(Some("dry_run=true&destination=a&destination=b")).unwrap();
        assert_eq!(
            p,
            UploadParams {
                dry_run: true,
                destinations: vec!["a".into(), "b".into()]
            }
        );
        assert_eq!(parse_params(None).unwrap(), UploadParams::default());
        assert!(!parse_params(Some("dry_run=false")).unwrap().dry_run);
    }

    #[test]
    fn ownership_parameters_are_forbidden() {
        for q in [
            "force=true",
            "takeover=any_managed",
            "takeover_mode=any_managed",
            "on_conflict=replace",
            "transfer.destination_newer=conflict",
            "owner=x/y",
            "FORCE=1",
        ] {
            let e = parse_params(Some(q)).unwrap_err();
            assert_eq!(e.kind, "forbidden_parameter", "{q}");
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn unknown_and_malformed_parameters_are_refused() {
        for q in [
            "colour=red",
            "dry_run=maybe",
            "destination=",
            "dry_run=1&dry_run=0",
        ] {
            let e = parse_params(Some(q)).unwrap_err();
            assert_eq!(e.kind, "invalid_parameter", "{q}");
        }
    }
}
