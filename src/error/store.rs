//! What an operation's storage says: a request to an object store that failed
//! ([`StoreError`]) and a step of an operation that refuses ([`StepError`]).

use super::Error;
use std::path::PathBuf;

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
    /// A recorded file of the active release (or of a directory being adopted) that is
    /// not what its record says, where it would be copied into the new release: it is
    /// not carried, and nothing is activated.
    #[error(
        "{} is not as the state records it ({why}); it is not carried into the new release",
        from.display()
    )]
    NotAsRecorded {
        /// The entry.
        from: PathBuf,
        /// How it differs.
        why: String,
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
