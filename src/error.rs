//! Error kinds of the library and the exit code each maps to.
//!
//! Every failure that can reach an operator is an [`Error`] with a kind; `main.rs` maps the
//! kind to the exit code of SPEC §10 in one place. Library code never exits the process.

use std::path::PathBuf;

/// Result alias used across the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in distributor, by kind.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Command-line usage error (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Invalid configuration (exit 2). The message names the file, the key path and what is
    /// accepted.
    #[error("{0}")]
    Config(String),
    /// Invalid source bundle or manifest (exit 1).
    #[error("invalid source: {0}")]
    Source(String),
    /// Filesystem error with the path it concerns (exit 1).
    #[error("{action} {path}: {source}")]
    Io {
        /// What distributor was doing.
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Storage refused for safety (a symlink out of the bundle path, a special file) (exit 1).
    #[error("unsafe storage: {0}")]
    Unsafe(String),
    /// The journal could not be used (exit 1).
    #[error("journal {path}: {message}")]
    Journal {
        /// Journal file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A destination lock could not be taken in time (exit 1).
    #[error("{0}")]
    Lock(String),
    /// Recovery is required before publishing (exit 4).
    #[error("{0}")]
    RecoveryRequired(String),
    /// Anything else that failed while executing (exit 1).
    #[error("{0}")]
    Failed(String),
    /// A record in a destination that distributor did not write (SPEC §17): the message
    /// names it, its owner and what to do (exit 1; a publication's conflict
    /// `untrusted_record`, exit 3).
    #[error("{0}")]
    Untrusted(String),
    /// A lost race on an object store: a conditional write refused, or the lease lost
    /// (exit 1; HTTP 409).
    #[error("concurrent change: {0}")]
    ConcurrentChange(String),
    /// An error after an operation passed its commit point: its content is live, and
    /// `recover` finishes what is left (SPEC §17: a report never says less than what
    /// happened). Its kind and exit code are those of the error it wraps.
    #[error("{source}")]
    Committed {
        /// The operation, whose content is live.
        operation_id: String,
        /// What failed after the commit point.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// Builds an [`Error::Io`] for `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// The process exit code this error maps to (SPEC §10).
    pub fn exit_code(&self) -> u8 {
        match self.root() {
            Error::Usage(_) | Error::Config(_) => 2,
            Error::RecoveryRequired(_) => 4,
            _ => 1,
        }
    }

    /// Short machine-readable kind, used by the HTTP API and JSON errors.
    pub fn kind(&self) -> &'static str {
        match self.root() {
            Error::Usage(_) => "usage",
            Error::Config(_) => "config",
            Error::Source(_) => "invalid_source",
            Error::Io { .. } => "io",
            Error::Unsafe(_) => "unsafe_storage",
            Error::Journal { .. } => "journal",
            Error::Lock(_) => "lock_timeout",
            Error::RecoveryRequired(_) => "recovery_required",
            Error::ConcurrentChange(_) => "concurrent_change",
            Error::Untrusted(_) => "untrusted_record",
            Error::Failed(_) | Error::Committed { .. } => "failed",
        }
    }

    /// The operation whose content is live although the run failed after its commit
    /// point, when it did.
    pub fn committed_operation(&self) -> Option<&str> {
        match self {
            Error::Committed { operation_id, .. } => Some(operation_id),
            _ => None,
        }
    }

    /// The error itself, or the one an [`Error::Committed`] wraps.
    pub fn root(&self) -> &Error {
        match self {
            Error::Committed { source, .. } => source.root(),
            e => e,
        }
    }
}

/// Extension to attach a path and action to `std::io::Result`.
pub trait IoContext<T> {
    /// Wraps an I/O error with what was being done and to which path.
    fn ctx(self, action: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, action: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| Error::io(action, path, e))
    }
}
