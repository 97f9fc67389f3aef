//! `distributor serve`: runs the HTTP upload server until SIGTERM or SIGINT.

use super::CommandOutput;
use crate::error::{Error, Result};
use crate::server::limits::{
    DEFAULT_MAX_CONCURRENT_UPLOADS, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_EXTRACTED_BYTES,
    DEFAULT_MAX_UPLOAD_BYTES, DEFAULT_UPLOAD_DEADLINE_SECS, DEFAULT_UPLOAD_IDLE_TIMEOUT_SECS,
    DEFAULT_UPLOAD_MIN_RATE, DEFAULT_UPLOAD_RATE_WINDOW_SECS, Limits,
};
use crate::server::{ServeOptions, serve};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Serve HTTP uploads of bundles: POST /v1/pipelines/{id}/bundles (see
/// docs/integrations/http-upload.md). Logs one JSON line per request on stderr; stops
/// gracefully on SIGTERM or SIGINT.
#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// Pipeline config file (YAML); repeat for each pipeline to serve.
    #[arg(long = "config", value_name = "F", required = true)]
    pub configs: Vec<PathBuf>,
    /// Address to listen on, HOST:PORT (port 0 picks a free port; the bound address is
    /// logged on stderr).
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// Largest request body accepted, in bytes (413 beyond it).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_UPLOAD_BYTES)]
    pub max_upload_bytes: u64,
    /// Most tar entries accepted in one upload (413 beyond it).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_ENTRIES)]
    pub max_entries: u64,
    /// Most file content unpacked from one upload, in bytes (413 beyond it).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_EXTRACTED_BYTES)]
    pub max_extracted_bytes: u64,
    /// Seconds an upload's body may send nothing before the request is abandoned (400);
    /// also the longest a request head may take before its connection is closed.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_UPLOAD_IDLE_TIMEOUT_SECS)]
    pub upload_idle_timeout: u64,
    /// Bytes per second an upload's body must average over each --upload-rate-window
    /// (the first window is a grace period); a slower upload is cut off with 408 and its
    /// spool removed, so slow clients cannot hold the upload slots.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_UPLOAD_MIN_RATE)]
    pub upload_min_rate: u64,
    /// Seconds of waiting for the client over which --upload-min-rate is averaged.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_UPLOAD_RATE_WINDOW_SECS)]
    pub upload_rate_window: u64,
    /// Seconds an upload's body may take in all, from when its slot is granted, however
    /// fast it goes (408 beyond it).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_UPLOAD_DEADLINE_SECS)]
    pub upload_deadline: u64,
    /// Uploads received, unpacked and published at once; more wait for a slot before
    /// their body is read (this bounds the spool's disk use).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONCURRENT_UPLOADS)]
    pub max_concurrent_uploads: u64,
    /// Directory for receiving and unpacking uploads (default: a fresh one in the system
    /// temp dir, removed at exit).
    #[arg(long, value_name = "DIR")]
    pub spool: Option<PathBuf>,
    /// Serve pipelines that have no server.upload_tokens, without authentication; only on
    /// a loopback address.
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// Journal file for every pipeline (else DISTRIBUTOR_JOURNAL, journal.path,
    /// $XDG_STATE_HOME/distributor/journal.sqlite3), as for publish.
    #[arg(long, value_name = "P")]
    pub journal: Option<PathBuf>,
    /// Seconds a publication waits for a destination lock.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub lock_timeout: f64,
    /// Address of the metrics listener (GET /metrics, Prometheus text format).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_listen: String,
    /// No metrics listener.
    #[arg(long, conflicts_with = "metrics_listen")]
    pub no_metrics: bool,
}

/// Runs the server; returns when it has stopped.
pub(super) fn run(a: ServeArgs) -> Result<CommandOutput> {
    let lock_timeout = super::lock_timeout(a.lock_timeout)?;
    for (flag, v) in [
        ("--max-upload-bytes", a.max_upload_bytes),
        ("--max-entries", a.max_entries),
        ("--max-extracted-bytes", a.max_extracted_bytes),
        ("--upload-idle-timeout", a.upload_idle_timeout),
        ("--max-concurrent-uploads", a.max_concurrent_uploads),
        ("--upload-min-rate", a.upload_min_rate),
        ("--upload-rate-window", a.upload_rate_window),
        ("--upload-deadline", a.upload_deadline),
    ] {
        if v == 0 {
            return Err(Error::Usage(format!("{flag} 0: accepted is a number >= 1")));
        }
    }
    if a.upload_rate_window > a.upload_deadline {
        return Err(Error::Usage(format!(
            "--upload-rate-window {} is longer than --upload-deadline {}: the rate would never be measured; accepted is a window no longer than the deadline",
            a.upload_rate_window, a.upload_deadline
        )));
    }
    serve(ServeOptions {
        configs: a.configs,
        listen: a.listen,
        limits: Limits {
            max_upload_bytes: a.max_upload_bytes,
            max_entries: a.max_entries,
            max_extracted_bytes: a.max_extracted_bytes,
            idle_timeout: Duration::from_secs(a.upload_idle_timeout),
            min_rate: a.upload_min_rate,
            rate_window: Duration::from_secs(a.upload_rate_window),
            deadline: Duration::from_secs(a.upload_deadline),
        },
        spool: a.spool,
        allow_unauthenticated: a.allow_unauthenticated,
        journal: a.journal,
        lock_timeout,
        max_concurrent_uploads: usize::try_from(a.max_concurrent_uploads)
            .unwrap_or(usize::MAX)
            .min(tokio::sync::Semaphore::MAX_PERMITS),
        metrics_listen: (!a.no_metrics).then_some(a.metrics_listen),
    })?;
    Ok(CommandOutput {
        report: None,
        stdout: String::new(),
        code: crate::error::ExitCode::Success,
        metrics: None,
    })
}
