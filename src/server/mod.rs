//! `distributor serve`: the HTTP upload server (SPEC §12).
//!
//! Producers POST a tar (or gzip tar) of a bundle; the server authenticates the bearer
//! token ([`auth`]), streams the body into a private spool directory under the upload
//! limits ([`spool`], [`limits`]), judging its pace as it arrives so that slow clients
//! cannot hold the upload slots ([`pace`]), unpacks it entry by entry refusing anything a
//! bundle cannot hold ([`extract`]), and publishes it with [`crate::ops::publish::publish`] on
//! a blocking thread ([`routes`]): the same engine, locks and journal as the CLI. It never
//! writes to a destination itself. Every request is logged as one JSON line ([`logging`]).
//!
//! Start-up refuses bad configs, duplicate pipeline ids, and pipelines without tokens
//! unless `--allow-unauthenticated` (then only on a loopback address). SIGTERM or SIGINT
//! stops accepting connections, lets in-flight requests and publications finish, and
//! returns normally (exit 0).

pub(crate) mod auth;
pub(crate) mod error;
pub(crate) mod extract;
pub(crate) mod limits;
pub(crate) mod logging;
pub(crate) mod pace;
pub(crate) mod routes;
pub(crate) mod spool;

use crate::config::Config;
use crate::error::{ConfigError, Error, IoContext, Result};
use crate::journal::Journal;
use crate::ops::common::resolve_journal;
use auth::Tokens;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use limits::Limits;
use routes::Pipeline;
use serde_json::json;
use spool::Spool;
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;

/// How to run the server.
#[derive(Debug, Clone)]
pub(crate) struct ServeOptions {
    /// One config file per pipeline.
    pub configs: Vec<PathBuf>,
    /// Address to listen on (`127.0.0.1:8080`, `[::1]:0`, `localhost:8080`).
    pub listen: String,
    /// Upload limits.
    pub limits: Limits,
    /// Spool directory; None: a fresh one under the system temp dir.
    pub spool: Option<PathBuf>,
    /// Serve pipelines without tokens (loopback addresses only).
    pub allow_unauthenticated: bool,
    /// Journal for every pipeline (else each resolves its own, as the CLI does).
    pub journal: Option<PathBuf>,
    /// How long a publication waits for a destination lock.
    pub lock_timeout: Duration,
    /// Uploads handled at once; more wait for a slot before their body is read.
    pub max_concurrent_uploads: usize,
    /// Where `/metrics` listens (SPEC §20); `None`: `--no-metrics`.
    pub metrics_listen: Option<String>,
}

/// Shared by every request.
#[derive(Debug)]
pub(crate) struct AppState {
    /// Served pipelines by id.
    pub pipelines: HashMap<String, Arc<Pipeline>>,
    /// Every token of every pipeline.
    pub tokens: Tokens,
    /// Upload limits.
    pub limits: Limits,
    /// The spool.
    pub spool: Spool,
    /// Whether the server was started `--allow-unauthenticated`.
    pub allow_unauthenticated: bool,
    /// Lock timeout for publications.
    pub lock_timeout: Duration,
    /// One permit per upload being received, unpacked or published
    /// (`--max-concurrent-uploads`).
    pub upload_slots: Arc<tokio::sync::Semaphore>,
    /// How many permits `upload_slots` holds in all.
    pub max_concurrent_uploads: usize,
    /// What `/metrics` serves (SPEC §20).
    pub metrics: crate::metrics::ServeMetrics,
}

/// Runs the server until SIGTERM or SIGINT; returns once in-flight publications finished.
pub(crate) fn serve(opts: ServeOptions) -> Result<()> {
    let (pipelines, tokens) = load_pipelines(&opts)?;
    let addr = resolve_listen(&opts.listen)?;
    let metrics_addr = match &opts.metrics_listen {
        Some(m) => Some(resolve_listen(m).map_err(|e| {
            Error::Usage(e.to_string().replacen("--listen", "--metrics-listen", 1))
        })?),
        None => None,
    };
    if opts.allow_unauthenticated && !addr.ip().is_loopback() {
        return Err(Error::Usage(format!(
            "--allow-unauthenticated listens only on a loopback address (127.0.0.1, ::1); {} is not",
            opts.listen
        )));
    }
    let spool = Spool::open(opts.spool.as_deref())?;
    let state = Arc::new(AppState {
        pipelines,
        tokens,
        limits: opts.limits,
        spool,
        allow_unauthenticated: opts.allow_unauthenticated,
        lock_timeout: opts.lock_timeout,
        upload_slots: Arc::new(tokio::sync::Semaphore::new(opts.max_concurrent_uploads)),
        max_concurrent_uploads: opts.max_concurrent_uploads,
        metrics: crate::metrics::ServeMetrics::new(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .ctx("start the async runtime", &opts.listen)?;
    let result = runtime.block_on(run(Arc::clone(&state), addr, metrics_addr));
    // Dropping the runtime waits for blocking tasks: a publication whose client went away
    // still finishes (and removes its spool) before the process exits.
    drop(runtime);
    match Arc::try_unwrap(state) {
        Ok(state) => state.spool.close(),
        Err(_) => logging::event(
            "spool_cleanup_skipped",
            json!({"message": "requests still held the spool at exit"}),
        ),
    }
    result
}

/// Loads every config, refusing duplicate pipeline ids and (without
/// `--allow-unauthenticated`) pipelines without tokens; opens each journal once so a bad
/// journal path fails here rather than on every upload.
fn load_pipelines(opts: &ServeOptions) -> Result<(HashMap<String, Arc<Pipeline>>, Tokens)> {
    if opts.configs.is_empty() {
        return Err(Error::Usage(
            "serve needs at least one --config (one per pipeline)".into(),
        ));
    }
    let mut pipelines: HashMap<String, Arc<Pipeline>> = HashMap::new();
    let mut tokens = Tokens::default();
    for file in &opts.configs {
        let config = Config::load(file)?;
        crate::hooks::check_programs(&config)?;
        if let Some(other) = pipelines.get(&config.pipeline_id) {
            return Err(ConfigError::File {
                file: file.to_path_buf(),
                message: format!(
                    "pipeline id '{}' is already served from {}; each pipeline may be served once",
                    config.pipeline_id,
                    other.config.file.display()
                ),
            }
            .into());
        }
        if config.upload_tokens.is_empty() && !opts.allow_unauthenticated {
            return Err(ConfigError::Key {
                file: file.to_path_buf(),
                key: "server.upload_tokens".into(),
                message: format!(
                    "pipeline '{}' has no upload token; add one (name and sha256 of the bearer token), or pass --allow-unauthenticated to serve it without tokens on a loopback address",
                    config.pipeline_id
                ),
                at: String::new(),
            }
            .into());
        }
        for t in &config.upload_tokens {
            tokens
                .add(&config.pipeline_id, &t.name, &t.sha256)
                .map_err(|message| ConfigError::File {
                    file: file.to_path_buf(),
                    message,
                })?;
        }
        let journal = resolve_journal(opts.journal.as_deref(), Some(&config))?;
        Journal::open(&journal)?;
        let open = config.upload_tokens.is_empty();
        pipelines.insert(
            config.pipeline_id.clone(),
            Arc::new(Pipeline {
                config,
                journal,
                open,
            }),
        );
    }
    Ok((pipelines, tokens))
}

fn resolve_listen(listen: &str) -> Result<SocketAddr> {
    if let Ok(a) = listen.parse::<SocketAddr>() {
        return Ok(a);
    }
    let usage = |why: String| {
        Error::Usage(format!(
            "--listen {listen}: {why}; accepted: HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:0"
        ))
    };
    let mut addrs = listen.to_socket_addrs().map_err(|e| usage(e.to_string()))?;
    addrs
        .next()
        .ok_or_else(|| usage("resolves to no address".into()))
}

/// The router: every route, the body limit, panic catching, JSON errors and request logs.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/health", get(routes::health))
        .route("/v1/pipelines/{pipeline_id}/bundles", post(routes::upload))
        .route(
            "/v1/pipelines/{pipeline_id}/destinations",
            get(routes::destinations),
        )
        .fallback(routes::not_found)
        // The upload handler checks the body's size itself, after the token (so a request
        // without a valid token is a 401 or 403 whatever its size), from Content-Length
        // and again while streaming.
        .layer(DefaultBodyLimit::disable())
        .layer(CatchPanicLayer::custom(logging::panic_response))
        .layer(middleware::from_fn(logging::json_errors))
        .layer(middleware::from_fn(logging::log_requests))
        .with_state(state)
}

/// `GET /metrics` on the metrics listener: the Prometheus text format.
async fn metrics(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

async fn run(
    state: Arc<AppState>,
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
) -> Result<()> {
    // Signal handlers go in before the address is announced, so a signal sent right
    // after start-up is a graceful shutdown, never the default kill.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::Failed(format!("cannot install the SIGTERM handler: {e}")))?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| Error::Failed(format!("cannot install the SIGINT handler: {e}")))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .ctx("listen on", addr.to_string())?;
    let bound = listener.local_addr().ctx("listen on", addr.to_string())?;
    // The metrics listener, its own (SPEC §20): only `/metrics`.
    let metrics_bound = match metrics_addr {
        Some(m) => {
            let l = tokio::net::TcpListener::bind(m)
                .await
                .ctx("listen for metrics on", m.to_string())?;
            let at = l.local_addr().ctx("listen for metrics on", m.to_string())?;
            let app = Router::new()
                .route("/metrics", get(metrics))
                .with_state(Arc::clone(&state));
            tokio::spawn(async move {
                let _ = axum::serve(l, app).await;
            });
            Some(at)
        }
        None => None,
    };
    let mut ids: Vec<&String> = state.pipelines.keys().collect();
    ids.sort();
    logging::event(
        "listening",
        json!({
            "address": bound.to_string(),
            "metrics_address": metrics_bound.map(|a| a.to_string()),
            "pipelines": ids,
            "spool": state.spool.root(),
            "max_upload_bytes": state.limits.max_upload_bytes,
            "max_entries": state.limits.max_entries,
            "max_extracted_bytes": state.limits.max_extracted_bytes,
            "upload_idle_timeout_secs": state.limits.idle_timeout.as_secs_f64(),
            "upload_min_rate": state.limits.min_rate,
            "upload_rate_window_secs": state.limits.rate_window.as_secs_f64(),
            "upload_deadline_secs": state.limits.deadline.as_secs_f64(),
            "max_concurrent_uploads": state.max_concurrent_uploads,
            "authentication": if state.tokens.is_empty() { "none" } else { "bearer" },
        }),
    );
    let shutdown = async move {
        let signal = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        logging::event(
            "shutdown",
            json!({"signal": signal, "message": "no new connections; finishing in-flight requests"}),
        );
    };
    // Each connection is served by hyper with a timer, so a client that stops sending its
    // request head is dropped after --upload-idle-timeout, as a stalled body is: neither
    // holds a connection, nor a graceful shutdown, forever.
    let app = router(Arc::clone(&state));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors, say: wait, and accept again.
                        logging::event("accept_failed", json!({"message": e.to_string()}));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let mut http = http1::Builder::new();
                http.timer(TokioTimer::new())
                    .header_read_timeout(state.limits.idle_timeout);
                let conn = http.serve_connection(
                    TokioIo::new(stream),
                    TowerToHyperService::new(app.clone()),
                );
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    // A client that goes away or times out ends its connection; nothing to
                    // report beyond the request log.
                    let _ = conn.await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    graceful.shutdown().await;
    logging::event("stopped", json!({"address": bound.to_string()}));
    Ok(())
}
