//! Error kinds of the library and the exit code each maps to.
//!
//! Every failure that can reach an operator is an [`Error`] with a kind; `main.rs` maps the
//! kind to the exit code of SPEC §10 in one place. Library code never exits the process.

use std::path::PathBuf;

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
    /// decides it. Usage and config errors are 2, a required recovery 4, anything else 1
    /// (3, a conflict, is a plan's outcome, never an error).
    pub fn exit_code(&self) -> ExitCode {
        match self.root() {
            Error::Usage(_) | Error::Config(_) => ExitCode::Usage,
            Error::RecoveryRequired(_) => ExitCode::RecoveryRequired,
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
            Error::Usage(_) => "usage",
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

/// A request to an object store that failed (SPEC §14, §21): what distributor was doing, on
/// which key, and the store's own error as the source. [`Error::Store`], exit 1.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.render())]
pub struct StoreError {
    /// What distributor was doing (`read`, `upload a part of`, `copy s3://b/p/a to`).
    pub action: String,
    /// The key concerned, as distributor shows it (`s3://bucket/prefix/key`,
    /// `az://container/prefix/key`).
    pub key: String,
    /// What the failure was, as distributor says it.
    pub failure: StoreFailure,
    /// The store's error.
    #[source]
    pub source: object_store::Error,
}

/// What an object store's failed request was, as [`StoreError`] says it.
#[derive(Debug)]
pub enum StoreFailure {
    /// The store could not be reached (`why` says how, and what to check).
    Unreachable {
        /// The store's dialect (`s3`, `azure`).
        store: &'static str,
        /// Why it could not be reached.
        why: String,
    },
    /// A first-contact error the store's dialect explains in full (no credentials, a
    /// bucket or container that does not exist): the whole message.
    Explained(String),
    /// The store refused a conditional write: the key changed since it was planned
    /// (kind `concurrent_change`).
    ConditionRefused,
    /// Anything else: the store's own text, cleaned of what must not be shown.
    Other {
        /// The store's dialect (`s3`, `azure`).
        store: &'static str,
        /// The store's error text.
        text: String,
    },
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        // Boxed: an object_store error is large, and every `Result` carries an `Error`.
        Error::Store(Box::new(e))
    }
}

impl StoreError {
    /// Whether the store refused a conditional write (kind `concurrent_change`).
    pub fn is_concurrent_change(&self) -> bool {
        matches!(self.failure, StoreFailure::ConditionRefused)
    }

    fn render(&self) -> String {
        let (action, key) = (&self.action, &self.key);
        match &self.failure {
            StoreFailure::Unreachable { store, why } => format!("{store}: {action} {key}: {why}"),
            StoreFailure::Explained(message) => message.clone(),
            StoreFailure::ConditionRefused => format!(
                "concurrent change: {action} {key}: changed by someone else since it was planned (the store refused a conditional write)"
            ),
            StoreFailure::Other { store, text } => format!("{store}: {action} {key}: {text}"),
        }
    }
}

/// A step of an operation (SPEC §13, §17) that refuses to go on because the destination,
/// or the operation's own staging, is not as it was planned or left: [`Error::Step`],
/// exit 1, kind `failed`. Each names the path or the key concerned; before the commit
/// point the operation is then undone, after it `recover` finishes it.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// What an action moves aside is not the kind of entry planning saw (local).
    #[error(
        "{} changed after planning (it is {now} now); distributor moves aside only the content it planned to",
        path.display()
    )]
    ChangedAfterPlanning {
        /// The path in the destination.
        path: PathBuf,
        /// What it is now (`a directory`, `a FIFO`).
        now: &'static str,
    },
    /// A path a file is placed at became occupied after planning: never replaced
    /// (local).
    #[error("{} appeared after planning; distributor does not replace it", path.display())]
    AppearedAfterPlanning {
        /// The path in the destination.
        path: PathBuf,
    },
    /// What was moved aside is not the entry checked before the move (local).
    #[error(
        "{} was replaced while distributor moved it aside; what was moved is kept in staging and put back by the rollback",
        path.display()
    )]
    ReplacedWhileMovedAside {
        /// The path in the destination.
        path: PathBuf,
    },
    /// Something not a directory in the emptied directories where a file goes (local).
    #[error(
        "{} appeared in a directory distributor is replacing with a file; only empty directories were removed there",
        path.display()
    )]
    AppearedWhereFileGoes {
        /// What appeared.
        path: PathBuf,
    },
    /// Something not a directory in a new release's directory where a file goes
    /// (releases).
    #[error("{} is in a directory distributor is replacing with a file", path.display())]
    InDirectoryReplaced {
        /// What is there.
        path: PathBuf,
    },
    /// A directory the operation makes, and must be new, exists already (an unfinished
    /// staging record, a release).
    #[error("{} exists already", path.display())]
    Exists {
        /// The directory.
        path: PathBuf,
    },
    /// A step of a release that this process is not building (after a restart, or a
    /// mix-up of operations).
    #[error("{}: release {op} is not being built by this process", dir.display())]
    NotBuilding {
        /// `releases.dir`.
        dir: PathBuf,
        /// The operation.
        op: String,
    },
    /// A file copied into a new release (where a hard link was refused) reads back as
    /// other bytes.
    #[error("{} does not read back as the {} it was copied from", to.display(), from.display())]
    CopyDiffers {
        /// The copy.
        to: PathBuf,
        /// What was copied.
        from: PathBuf,
    },
    /// An entry of the active release that is neither a file nor a link cannot be
    /// carried into the new release where a hard link is refused.
    #[error(
        "{} is {kind} and cannot be hard-linked into the new release ({error})",
        from.display()
    )]
    CannotCarry {
        /// The entry.
        from: PathBuf,
        /// What it is.
        kind: &'static str,
        /// Why the hard link was refused.
        error: std::io::Error,
    },
    /// The destination log cannot be written as it is (an old activation log not
    /// migrated): `outcome` says what that leaves.
    #[error("{why}; {outcome}")]
    LogUnwritable {
        /// What is wrong with the log.
        why: String,
        /// What was not done, and what is left.
        outcome: String,
    },
    /// `path` is a plain directory someone put there: never replaced (releases).
    #[error(
        "{} is a plain directory (path_changed); distributor never replaces one: move it away, then run the rollback again; nothing was activated",
        path.display()
    )]
    PlainDirectory {
        /// `path`.
        path: PathBuf,
    },
    /// An undo of an operation whose release `path` names: past its commit point.
    #[error(
        "{} names release {release}: the operation passed its commit point; it is rolled forward, not back",
        path.display()
    )]
    PassedCommit {
        /// `path`.
        path: PathBuf,
        /// The release it names.
        release: String,
    },
    /// An adoption whose staging record does not name the directory it locked.
    #[error(
        "{}: the adoption's record does not name the directory it locked; nothing was activated",
        path.display()
    )]
    AdoptionWithoutDirectory {
        /// `path`.
        path: PathBuf,
    },
    /// A write to a bundle path that was not locked (local).
    #[error("{}: a write without the destination lock", bundle.display())]
    WithoutLock {
        /// The bundle path.
        bundle: PathBuf,
    },
    /// A write to an object store opened for reading, without its lease.
    #[error("{} is opened for reading; writing needs its lock", bundle.display())]
    OpenedForReading {
        /// The bundle path.
        bundle: PathBuf,
    },
    /// A bundle-relative path that cannot be an object key (object store).
    #[error("{}: '{}' cannot be an object key: {error}", bundle.display(), rel.escape_debug())]
    InvalidKey {
        /// The bundle path.
        bundle: PathBuf,
        /// The path, relative to the bundle path.
        rel: String,
        /// Why the store's key rules refuse it.
        error: String,
    },
    /// Links on an object store, which has none.
    #[error("{}: links cannot be published to an object store ({path})", bundle.display())]
    LinkOnObjectStore {
        /// The bundle path.
        bundle: PathBuf,
        /// The link's path.
        path: String,
    },
    /// An object the operation staged is gone before its commit point (object store).
    #[error(
        "{}: {key} is gone: the operation stops before its commit point",
        bundle.display()
    )]
    StagedGone {
        /// The bundle path.
        bundle: PathBuf,
        /// The staged key, as distributor shows it.
        key: String,
    },
    /// An object the operation staged was changed since (object store).
    #[error(
        "{}: {key} was changed after it was staged: the operation stops before its commit point",
        bundle.display()
    )]
    ChangedAfterStaged {
        /// The bundle path.
        bundle: PathBuf,
        /// The staged key, as distributor shows it.
        key: String,
    },
    /// The planned post-state cannot become the state with its ETags (object store).
    #[error("{}: {why}", bundle.display())]
    PostState {
        /// The bundle path.
        bundle: PathBuf,
        /// Why.
        why: String,
    },
    /// An operation with no commit decision, to be finished (object store).
    #[error(
        "{}: operation {op} has no commit decision; it cannot be finished",
        bundle.display()
    )]
    NoCommitDecision {
        /// The bundle path.
        bundle: PathBuf,
        /// The operation.
        op: String,
    },
    /// A commit decision that holds neither decision (object store).
    #[error("{}: decision of operation {op} holds '{holds}'; inspect it by hand", bundle.display())]
    UnknownDecision {
        /// The bundle path.
        bundle: PathBuf,
        /// The operation.
        op: String,
        /// What it holds.
        holds: String,
    },
    /// An operation that decided commit without its staged state (object store).
    #[error(
        "{}: operation {op} decided commit but its {state_file} is missing; inspect {key} by hand",
        bundle.display()
    )]
    DecidedWithoutState {
        /// The bundle path.
        bundle: PathBuf,
        /// The operation.
        op: String,
        /// The staged state's file name in the staging (`record::STATE_TMP_FILE`).
        state_file: &'static str,
        /// The operation's staging, as distributor shows it.
        key: String,
    },
}

/// A releases destination (SPEC §15) that refuses an operation on it as it is: a
/// rollback, a promote, an adoption, a prune. [`Error::Releases`], exit 1, kind `failed`.
#[derive(Debug, thiserror::Error)]
pub enum ReleasesError {
    /// Nothing was published (or staged) at the destination's path.
    #[error("{}: {what}", path.display())]
    NothingThere {
        /// The destination's path.
        path: PathBuf,
        /// What that means for the operation.
        what: &'static str,
    },
    /// The recorded releases settings are not the config's (`releases_mismatch`).
    #[error("releases_mismatch: {why}; {outcome}")]
    Mismatch {
        /// How they differ.
        why: String,
        /// What was not done.
        outcome: &'static str,
    },
    /// `path` and the destination log disagree about the active release
    /// (`path_changed`).
    #[error("path_changed: {why}; {what}")]
    PathChanged {
        /// How they disagree.
        why: String,
        /// Why the operation cannot go on, and what to do.
        what: &'static str,
    },
    /// No release is active: nothing to roll back.
    #[error("{}: no release is active; nothing to roll back", path.display())]
    NoneActive {
        /// The destination's path.
        path: PathBuf,
    },
    /// No release was active before the active one (as `owner` published it, in a
    /// shared root): nothing to roll back to.
    #[error(
        "{}: no release was active before {release}{} (see {}); nothing to roll back to",
        path.display(),
        owner.as_ref().map(|o| format!(" as {o} published it")).unwrap_or_default(),
        log.display()
    )]
    NoneBefore {
        /// The destination's path.
        path: PathBuf,
        /// The active release.
        release: String,
        /// The owner whose activations count, in a shared root.
        owner: Option<String>,
        /// The activation log.
        log: PathBuf,
    },
    /// The release to roll back to is not in the releases directory.
    #[error(
        "release {release} is gone from {} (retention removed it, or it never existed); cannot roll back to it",
        dir.display()
    )]
    Gone {
        /// The release.
        release: String,
        /// The releases directory.
        dir: PathBuf,
    },
    /// The release to roll back to holds no state file.
    #[error("release {release} holds no .distributor.json; cannot roll back to it")]
    TargetWithoutState {
        /// The release.
        release: String,
    },
    /// The release to roll back to holds a state file that is not valid state.
    #[error("release {release} holds invalid state ({why}); cannot roll back to it")]
    TargetInvalidState {
        /// The release.
        release: String,
        /// Why the state is not valid.
        why: String,
    },
    /// The release to activate does not hold what its state records.
    #[error(
        "release {release} fails verification: {} recorded path(s) missing or changed ({}{}); not activated",
        paths.len(),
        paths.iter().take(10).map(String::as_str).collect::<Vec<_>>().join(", "),
        if paths.len() > 10 { ", ..." } else { "" }
    )]
    FailsVerification {
        /// The recorded paths missing or changed.
        paths: Vec<String>,
        /// The release.
        release: String,
    },
    /// The release to activate is the active one.
    #[error("release {release} is already active at {}", path.display())]
    AlreadyActive {
        /// The release.
        release: String,
        /// The destination's path.
        path: PathBuf,
    },
    /// The active release holds no state file.
    #[error("the active release {release} holds no state")]
    ActiveWithoutState {
        /// The active release.
        release: String,
    },
    /// The active release's state file is not valid state.
    #[error(
        "the active release {}holds invalid state ({why}){outcome}",
        release.as_ref().map(|r| format!("{r} ")).unwrap_or_default()
    )]
    InvalidActiveState {
        /// The active release, when the message names it.
        release: Option<String>,
        /// Why the state is not valid.
        why: String,
        /// What was not done (`; nothing promoted`), or empty.
        outcome: &'static str,
    },
    /// The release (a staged one, for a promote) holds no records of the owner that
    /// would activate it.
    #[error(
        "{}release {release} holds no records of {owner}; {outcome}",
        if *staged { "staged " } else { "" }
    )]
    NoRecordsOf {
        /// Whether the release is a staged one.
        staged: bool,
        /// The release.
        release: String,
        /// The owner (`pipeline/destination`).
        owner: String,
        /// What was not done.
        outcome: &'static str,
    },
    /// A staged release was promoted already.
    #[error(
        "release {release} was promoted already, by operation {operation_id} ({entry}); to activate it again, `distributor rollback --to {release}`"
    )]
    PromotedAlready {
        /// The release.
        release: String,
        /// The promote that activated it.
        operation_id: String,
        /// That promote's log entry, described.
        entry: String,
    },
    /// An adoption's path and releases directory are on different filesystems.
    #[error(
        "{} and {} are on different filesystems; adoption exchanges the directory with a symlink in one rename, which needs one filesystem",
        path.display(),
        dir.display()
    )]
    DifferentFilesystems {
        /// The destination's path.
        path: PathBuf,
        /// Its releases directory.
        dir: PathBuf,
    },
    /// An adoption found no state file: nothing at the path is managed.
    #[error(
        "{} holds no .distributor.json: nothing there is managed; move it away, and the first publication makes the first release",
        path.display()
    )]
    NothingManaged {
        /// The destination's path.
        path: PathBuf,
    },
    /// An adoption found a state file that is not valid state.
    #[error("{}: .distributor.json is not valid state ({why}); not adopted", path.display())]
    InvalidState {
        /// The destination's path.
        path: PathBuf,
        /// Why the state is not valid.
        why: String,
    },
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
