//! Error kinds of the library and the exit code each maps to.
//!
//! Every failure that can reach an operator is an [`Error`] with a kind; `main.rs` maps the
//! kind to the exit code of SPEC §10 in one place. Library code never exits the process.

use std::path::PathBuf;

mod input;
mod releases;
mod store;

pub use input::{FileProblem, InputError};
pub use releases::ReleasesError;
pub use store::{StepError, StoreError, StoreFailure};

/// Result alias used across the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The process exit code of a run (SPEC §10). The numbers are the process boundary's;
/// everything inside speaks of the variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum ExitCode {
    /// 0: success, unchanged and skipped included.
    #[default]
    Success = 0,
    /// 1: an error (I/O, invalid source, failed execution, diverged recovery).
    Failed = 1,
    /// 2: usage or invalid config.
    Usage = 2,
    /// 3: a destination had a conflict (verify: drift found).
    Conflict = 3,
    /// 4: recovery required.
    RecoveryRequired = 4,
}

impl ExitCode {
    /// The number the process exits with.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Whether it is 0.
    pub fn is_success(self) -> bool {
        self == ExitCode::Success
    }

    /// The exit code of a run from its destinations' codes (SPEC §10: several at once,
    /// 1, then 4, then 3): 1 before 2 (a destination's own config error) before 4
    /// before 3; 0 when all are 0.
    pub fn overall(codes: impl IntoIterator<Item = ExitCode>) -> ExitCode {
        codes
            .into_iter()
            .max_by_key(|c| match c {
                ExitCode::Success => 0,
                ExitCode::Conflict => 1,
                ExitCode::RecoveryRequired => 2,
                ExitCode::Usage => 3,
                ExitCode::Failed => 4,
            })
            .unwrap_or_default()
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        std::process::ExitCode::from(code.code())
    }
}

/// Everything that can go wrong in distributor, by kind.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Command-line usage error (exit 2).
    #[error("{0}")]
    Usage(String),
    /// An input refused before anything is locked or written: text over its bound or
    /// with a control character, a file an option names that is not a regular file or is
    /// too large (exit 2; kind `usage`).
    #[error("{0}")]
    Input(#[from] InputError),
    /// Invalid configuration (exit 2). The message names the file, the key path and what is
    /// accepted.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// Invalid source bundle or manifest (exit 1).
    #[error("invalid source: {0}")]
    Source(#[from] SourceError),
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
    #[error("{0}")]
    Journal(#[from] JournalError),
    /// A destination lock could not be taken in time (exit 1).
    #[error("{0}")]
    Lock(String),
    /// Recovery is required before publishing (exit 4).
    #[error("{0}")]
    RecoveryRequired(String),
    /// Anything else that failed while executing (exit 1).
    #[error("{0}")]
    Failed(String),
    /// A releases destination refuses an operation as it is (exit 1; kind `failed`).
    #[error("{0}")]
    Releases(#[from] ReleasesError),
    /// A step of an operation refused: the destination or the operation's staging is not
    /// as it was planned or left (exit 1; kind `failed`).
    #[error("{0}")]
    Step(#[from] StepError),
    /// A document distributor writes (a report, a manifest, a plan file) could not be
    /// rendered as JSON (exit 1; kind `failed`).
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A request to an object store (s3, azure) failed: the action, the key and the
    /// store's error (exit 1; kind `concurrent_change` when the store refused a
    /// conditional write, `failed` otherwise).
    #[error("{0}")]
    Store(Box<StoreError>),
    /// A record in a destination that distributor did not write (SPEC §17): the message
    /// names it, its owner and what to do (exit 1; a publication's conflict
    /// `untrusted_record`, exit 3).
    #[error("{0}")]
    Untrusted(String),
    /// The destination log is shorter than the journal in use saw it (docs/operations.md,
    /// "The log's continuity"): a command that changes the destination without a plan
    /// (rollback, promote, adopt, prune) refuses as a publication's conflict
    /// `log_missing` does (exit 3).
    #[error("log_missing: {0}")]
    LogMissing(String),
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

    /// A destination's setting refused where the destination is opened: a
    /// [`ConfigError::Setting`].
    pub fn setting(message: impl Into<String>) -> Self {
        Error::Config(ConfigError::Setting(message.into()))
    }

    /// An invalid source bundle: a [`SourceError::Invalid`].
    pub fn invalid_source(message: impl Into<String>) -> Self {
        Error::Source(SourceError::Invalid(message.into()))
    }

    /// The process exit code this error maps to (SPEC §10): the one place an error's kind
    /// decides it. Usage and config errors are 2, a required recovery 4, a log shorter
    /// than the journal saw it 3 (as the conflict `log_missing` of a plan), anything else 1
    /// (3 is otherwise a plan's outcome, never an error).
    pub fn exit_code(&self) -> ExitCode {
        match self.root() {
            Error::Usage(_) | Error::Input(_) | Error::Config(_) => ExitCode::Usage,
            Error::RecoveryRequired(_) => ExitCode::RecoveryRequired,
            Error::LogMissing(_) => ExitCode::Conflict,
            Error::Source(_)
            | Error::Io { .. }
            | Error::Unsafe(_)
            | Error::Journal(_)
            | Error::Lock(_)
            | Error::Failed(_)
            | Error::Releases(_)
            | Error::Step(_)
            | Error::Json(_)
            | Error::Store(_)
            | Error::Untrusted(_)
            | Error::ConcurrentChange(_)
            | Error::Committed { .. } => ExitCode::Failed,
        }
    }

    /// Short machine-readable kind, used by the HTTP API and JSON errors.
    pub fn kind(&self) -> &'static str {
        match self.root() {
            Error::Usage(_) | Error::Input(_) => "usage",
            Error::Config(_) => "config",
            Error::Source(_) => "invalid_source",
            Error::Io { .. } => "io",
            Error::Unsafe(_) => "unsafe_storage",
            Error::Journal(_) => "journal",
            Error::Lock(_) => "lock_timeout",
            Error::RecoveryRequired(_) => "recovery_required",
            Error::ConcurrentChange(_) => "concurrent_change",
            Error::Store(e) if e.is_concurrent_change() => "concurrent_change",
            Error::Untrusted(_) => "untrusted_record",
            Error::LogMissing(_) => "log_missing",
            Error::Releases(ReleasesError::Moved { .. }) => "release_moved",
            Error::Failed(_)
            | Error::Releases(_)
            | Error::Step(_)
            | Error::Json(_)
            | Error::Store(_)
            | Error::Committed { .. } => "failed",
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

    /// Whether this is a lost race (kind `concurrent_change`): a conditional write the
    /// store refused, a lease lost, a log entry's number found taken.
    pub fn is_concurrent_change(&self) -> bool {
        self.kind() == "concurrent_change"
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
pub(crate) trait IoContext<T> {
    /// Wraps an I/O error with what was being done and to which path.
    fn ctx(self, action: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, action: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| Error::io(action, path, e))
    }
}

/// A config file that cannot be used (SPEC §2), or a destination's setting refused where
/// the destination is opened: [`Error::Config`], exit 2. Each names the file or the
/// setting, the key path and what is accepted.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Larger than a config may be: refused before it is read.
    #[error(
        "config {}: is {size} bytes ({}); a config is at most {} ({limit} bytes) and is refused before it is read",
        file.display(),
        crate::units::human_size(*size),
        crate::units::human_size(*limit)
    )]
    TooLarge {
        /// The config file.
        file: PathBuf,
        /// Its size.
        size: u64,
        /// The most a config may be.
        limit: u64,
    },
    /// The file could not be read.
    #[error("config {}: cannot read: {error}", file.display())]
    Unreadable {
        /// The config file.
        file: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The value at a key path is refused.
    #[error("config {}: {key}: {message}{at}", file.display())]
    Key {
        /// The config file.
        file: PathBuf,
        /// The key path (`destinations[0].path`, `(top level)`).
        key: String,
        /// Why, and what is accepted.
        message: String,
        /// Where the value is written (` at line L column C`), or empty.
        at: String,
    },
    /// The file as a whole is refused (a pipeline served twice, a destination nothing
    /// can be published to).
    #[error("config {}: {message}", file.display())]
    File {
        /// The config file.
        file: PathBuf,
        /// Why, and what is accepted.
        message: String,
    },
    /// A destination's setting refused where the destination is opened (its `s3:` or
    /// `azure:` block, an endpoint): the message names the setting and what is accepted.
    #[error("{0}")]
    Setting(String),
}

/// What went wrong with the journal (SPEC §7): [`Error::Journal`], exit 1. Each names the
/// journal file.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The journal path names a directory.
    #[error(
        "journal {}: is a directory; the journal is a file (SQLite database), e.g. {}",
        path.display(),
        path.join("journal.sqlite3").display()
    )]
    IsADirectory {
        /// The journal path.
        path: PathBuf,
    },
    /// The file is not an SQLite database, or it is corrupt.
    #[error(
        "journal {}: is not a distributor journal (file is not an SQLite database, or it is corrupt)",
        path.display()
    )]
    NotADatabase {
        /// The journal file.
        path: PathBuf,
    },
    /// The journal's directory could not be made.
    #[error("journal {}: cannot create directory {}: {error}", path.display(), dir.display())]
    CreateDir {
        /// The journal file.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The journal file could not be created.
    #[error("journal {}: cannot create: {error}", path.display())]
    Create {
        /// The journal file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// SQLite failed.
    #[error("journal {}: {error}", path.display())]
    Sqlite {
        /// The journal file.
        path: PathBuf,
        /// SQLite's error.
        error: rusqlite::Error,
    },
    /// The database is refused as it is: another program's, a newer schema, a migration
    /// that failed, no WAL.
    #[error("journal {}: {message}", path.display())]
    Schema {
        /// The journal file.
        path: PathBuf,
        /// What is refused and why.
        message: String,
    },
    /// A row cannot be written as the schema wants it, or does not read back as written.
    #[error("journal {}: {message}", path.display())]
    Corrupt {
        /// The journal file.
        path: PathBuf,
        /// Which row and what is wrong with it.
        message: String,
    },
}

/// An invalid source bundle or manifest (SPEC §3): [`Error::Source`], exit 1, kind
/// `invalid_source`.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The manifest could not be read.
    #[error(
        "cannot read manifest {}: {error}{hint}{}",
        file.display(),
        origin.as_ref().map(|o| format!(" ({o})")).unwrap_or_default()
    )]
    ManifestUnreadable {
        /// The manifest file.
        file: PathBuf,
        /// Why.
        error: std::io::Error,
        /// What to do about it (`; write it with ...`), or empty.
        hint: String,
        /// Where the bundle directory was named (`source.path ...`), when the config
        /// named it.
        origin: Option<String>,
    },
    /// The manifest is not JSON, or breaks a rule of SPEC §3.
    #[error("manifest {}: {message}", file.display())]
    Manifest {
        /// The manifest file.
        file: PathBuf,
        /// What is wrong, and what is accepted.
        message: String,
    },
    /// An output whose bytes are not what the manifest lists.
    #[error(
        "output '{path}' changed: read {size} bytes with sha256 {sha256}, the manifest says {listed_size} bytes with sha256 {listed_sha256}"
    )]
    Changed {
        /// The output's path in the bundle.
        path: String,
        /// The size read.
        size: u64,
        /// The sha256 read, lowercase hex.
        sha256: String,
        /// The size the manifest lists.
        listed_size: u64,
        /// The sha256 the manifest lists.
        listed_sha256: String,
    },
    /// Anything else the bundle breaks (a symlink, a special file, a missing directory):
    /// the message names the file and the rule.
    #[error("{0}")]
    Invalid(String),
}

#[cfg(test)]
mod tests {
    use super::ExitCode;

    #[test]
    fn several_exit_codes_at_once_are_1_then_2_then_4_then_3() {
        use ExitCode::*;
        assert_eq!(ExitCode::overall([]), Success);
        assert_eq!(ExitCode::overall([Success, Success]), Success);
        assert_eq!(
            ExitCode::overall([Conflict, Failed, RecoveryRequired]),
            Failed
        );
        assert_eq!(
            ExitCode::overall([Conflict, Usage, RecoveryRequired]),
            Usage
        );
        assert_eq!(
            ExitCode::overall([Conflict, RecoveryRequired, Success]),
            RecoveryRequired
        );
        assert_eq!(ExitCode::overall([Success, Conflict]), Conflict);
        let numbers: Vec<u8> = [Success, Failed, Usage, Conflict, RecoveryRequired]
            .map(ExitCode::code)
            .to_vec();
        assert_eq!(numbers, [0, 1, 2, 3, 4]);
    }
}
