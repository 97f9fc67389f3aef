//! The spool: where uploads are received and unpacked, one private directory per request
//! (`req-<uuid>`, mode 0700), removed when the request ends, whatever its outcome.
//!
//! The spool root is locked (`flock` on `.distributor-serve.lock`) for the server's life,
//! so two servers never share one and leftovers of a crashed server (`req-*` only) can be
//! removed at start. Without `--spool`, a fresh directory under the system temp dir is
//! used and removed at exit.

use super::error::ApiError;
use super::limits::Limits;
use super::logging;
use super::pace::{Cut, Pace};
use crate::error::{Error, IoContext, Result};
use axum::body::Body;
use axum::http::StatusCode;
use http_body_util::BodyExt;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio::io::AsyncWriteExt;

const LOCK_FILE: &str = ".distributor-serve.lock";
const REQUEST_PREFIX: &str = "req-";

/// The spool root of a running server.
#[derive(Debug)]
pub(crate) struct Spool {
    root: PathBuf,
    _lock: File,
    remove_on_close: bool,
}

impl Spool {
    /// Opens (creating) the spool at `dir`, or a fresh temporary one.
    pub(crate) fn open(dir: Option<&Path>) -> Result<Spool> {
        let (root, remove_on_close) = match dir {
            Some(d) => (d.to_path_buf(), false),
            None => (
                std::env::temp_dir().join(format!("distributor-spool-{}", uuid::Uuid::new_v4())),
                true,
            ),
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .ctx("create spool directory", &root)?;
        let lock_path = root.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .ctx("open spool lock", &lock_path)?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
            |_| {
                Error::Usage(format!(
                    "spool {} is in use by another distributor serve; give each server its own --spool",
                    root.display()
                ))
            },
        )?;
        let spool = Spool {
            root,
            _lock: lock,
            remove_on_close,
        };
        spool.remove_leftovers()?;
        Ok(spool)
    }

    /// The spool root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Removes `req-*` entries a previous server left behind (it held the lock, we do now).
    fn remove_leftovers(&self) -> Result<()> {
        for e in fs::read_dir(&self.root).ctx("list spool", &self.root)? {
            let e = e.ctx("list spool", &self.root)?;
            if e.file_name().to_string_lossy().starts_with(REQUEST_PREFIX) {
                remove_any(&e.path()).ctx("remove spool leftover", e.path())?;
            }
        }
        Ok(())
    }

    /// A fresh private directory for one request.
    pub(crate) fn request(&self) -> std::result::Result<RequestSpool, ApiError> {
        let dir = self
            .root
            .join(format!("{REQUEST_PREFIX}{}", uuid::Uuid::new_v4()));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| ApiError::internal(format!("spool: cannot create a directory: {e}")))?;
        let spool = RequestSpool { dir };
        fs::DirBuilder::new()
            .mode(0o700)
            .create(spool.bundle_dir())
            .map_err(|e| ApiError::internal(format!("spool: cannot create a directory: {e}")))?;
        Ok(spool)
    }

    /// Removes the spool root when this server created it.
    pub(crate) fn close(self) {
        if self.remove_on_close
            && let Err(e) = fs::remove_dir_all(&self.root)
        {
            logging::event(
                "spool_cleanup_failed",
                serde_json::json!({"path": self.root, "message": e.to_string()}),
            );
        }
    }
}

fn remove_any(p: &Path) -> std::io::Result<()> {
    if fs::symlink_metadata(p)?.is_dir() {
        fs::remove_dir_all(p)
    } else {
        fs::remove_file(p)
    }
}

/// One request's directory: `body` (the upload as received) and `bundle/` (unpacked).
/// Dropping it removes the directory.
#[derive(Debug)]
pub(crate) struct RequestSpool {
    dir: PathBuf,
}

impl RequestSpool {
    /// Where the body is written.
    pub(crate) fn body_path(&self) -> PathBuf {
        self.dir.join("body")
    }

    /// Where the bundle is unpacked.
    pub(crate) fn bundle_dir(&self) -> PathBuf {
        self.dir.join("bundle")
    }

    /// The request directory itself.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Streams `body` into [`Self::body_path`], counting bytes; passing
    /// `limits.max_upload_bytes` ends the request with 413 at once, without reading the
    /// rest. The body's pace is judged as it arrives ([`Pace`]): nothing for the idle
    /// timeout is a 400, too slow a rate or the deadline passed a 408. Returns the bytes
    /// received.
    pub(crate) async fn receive(
        &self,
        body: Body,
        limits: &Limits,
    ) -> std::result::Result<u64, ApiError> {
        let path = self.body_path();
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| ApiError::internal(format!("spool: cannot create a file: {e}")))?;
        let mut body = body;
        let mut pace = Pace::new(limits, Instant::now());
        loop {
            let from = Instant::now();
            let wake = tokio::time::Instant::from_std(pace.wake_at(from));
            let next = tokio::time::timeout_at(wake, body.frame()).await;
            let data = match next {
                Ok(None) => break,
                // A frame that is not data holds trailers: activity, but no bytes.
                Ok(Some(frame)) => frame.map_err(body_error)?.into_data().ok(),
                Err(_) => {
                    pace.record(from, Instant::now(), None)
                        .map_err(|cut| cut_off(cut, &pace, limits))?;
                    continue;
                }
            };
            let len = data.as_ref().map_or(0, |d| d.len() as u64);
            if pace.received().saturating_add(len) > limits.max_upload_bytes {
                return Err(over_limit(limits.max_upload_bytes));
            }
            pace.record(from, Instant::now(), Some(len))
                .map_err(|cut| cut_off(cut, &pace, limits))?;
            if let Some(data) = data {
                file.write_all(&data)
                    .await
                    .map_err(|e| ApiError::internal(format!("spool: cannot write: {e}")))?;
            }
        }
        file.flush()
            .await
            .map_err(|e| ApiError::internal(format!("spool: cannot write: {e}")))?;
        Ok(pace.received())
    }
}

/// The reply for a body cut off by its pace.
fn cut_off(cut: Cut, pace: &Pace, limits: &Limits) -> ApiError {
    let received = pace.received();
    match cut {
        Cut::Idle => ApiError::new(
            StatusCode::BAD_REQUEST,
            "upload_timeout",
            format!(
                "the request body stalled for {}s after {received} bytes (--upload-idle-timeout)",
                limits.idle_timeout.as_secs_f64()
            ),
        ),
        Cut::TooSlow { window_bytes } => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "upload_too_slow",
            format!(
                "the request body sent {window_bytes} bytes in {window}s, below the minimum of {} bytes/s (--upload-min-rate): {} bytes per {window}s window (--upload-rate-window); cut off after {received} bytes",
                limits.min_rate,
                pace.window_minimum(),
                window = pace.window().as_secs_f64(),
            ),
        ),
        Cut::Deadline => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "upload_deadline",
            format!(
                "the request body did not end within {}s (--upload-deadline); cut off after {received} bytes",
                limits.deadline.as_secs_f64()
            ),
        ),
    }
}

impl Drop for RequestSpool {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            logging::event(
                "spool_cleanup_failed",
                serde_json::json!({"path": self.dir, "message": e.to_string()}),
            );
        }
    }
}

fn over_limit(max: u64) -> ApiError {
    ApiError::too_large(format!(
        "the request body is larger than {max} bytes (--max-upload-bytes)"
    ))
}

fn body_error(e: axum::Error) -> ApiError {
    ApiError::bad_bundle(format!("the upload was interrupted: {}", e.into_inner()))
}
