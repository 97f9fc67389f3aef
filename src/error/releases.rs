//! What a releases destination (SPEC §15) refuses ([`ReleasesError`]).

use std::path::PathBuf;

/// A releases destination (SPEC §15) that refuses an operation on it as it is: a
/// rollback, a promote, an adoption, a prune. [`Error::Releases`](super::Error::Releases), exit 1, kind `failed`.
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
    /// A release's name no longer holds the release distributor made or verified (its
    /// device and inode, its owner, or its state naming it differ): `release_moved`
    /// (docs/operations.md, "Release identity").
    #[error(
        "release_moved: {} is not the release distributor made or verified there: {why}; {outcome}",
        dir.display()
    )]
    Moved {
        /// The release directory, by its name in `releases.dir`.
        dir: PathBuf,
        /// What the name holds instead.
        why: String,
        /// What was not done (`nothing was activated`).
        outcome: &'static str,
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
