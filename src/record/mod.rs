//! The records an operation leaves in a destination: the contract between the executor
//! (`execute/`), which writes them, and the backends, which keep them and act on them
//! (stage, move aside, place, undo), beneath both. [`staging`] is the staging record
//! (`plan.json`); this module holds what it records of where the destination is: an object
//! store's location ([`S3Location`]) and a releases destination's settings and release
//! names ([`ReleasesRecord`]).

pub mod paths;
pub mod staging;

pub use staging::{
    ActionKind, NEW, NEW_TREES, OLD, Origin, PLAN_FILE, POST_STATE_FILE, PRE_STATE_FILE,
    RELEASE_FILE, RecordDir, STATE_TMP_FILE, StagedAction, StagedOperation, StagingLayout,
};

use serde::{Deserialize, Serialize};

/// Where an object-store destination (s3 or azure) lives: everything needed to reach it
/// again, recorded with each operation so `recover --journal` works without the config.
/// Never credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Location {
    /// `s3` or `azure`: which dialect of the object-store backend speaks to it.
    pub backend: String,
    /// The endpoint (None: AWS; on azure the account's blob endpoint, None: Azure's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The region (s3; empty on azure).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
    /// The storage account (azure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The storage emulator (azure `use_emulator`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_emulator: bool,
    /// Whether plain http was allowed.
    #[serde(default)]
    pub allow_http: bool,
    /// Virtual-hosted-style requests.
    #[serde(default)]
    pub virtual_hosted_style: bool,
    /// Lease length in seconds.
    pub lease_seconds: u64,
}

/// What an operation's staging record keeps of a releases destination, so `recover` can
/// reach it and judge the operation from the journal or the record alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasesRecord {
    /// The settings in force.
    #[serde(flatten)]
    pub settings: crate::config::ReleaseSettings,
    /// The release `path` named when the operation began (none: `path` did not exist):
    /// while `path` still names it, the operation did not pass its commit point.
    pub active_before: Option<String>,
    /// The earlier release a rollback activates (SPEC §15); none for a publication, which
    /// activates the release it builds, named by its operation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activates: Option<String>,
    /// The device and inode of the release a rollback or promote activates, as verified
    /// before the operation began: at the commit point its name must still hold that
    /// directory (docs/operations.md, "Release identity"). Absent in records written
    /// before it was kept (the release's state is checked instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activates_identity: Option<RecordDir>,
    /// `releases adopt`: the release is built from the plain directory at `path`, which
    /// the commit point exchanges with the symlink.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopts: bool,
    /// A rollback: the release whose activation it undoes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undoes: Option<String>,
    /// `releases adopt`: the device and inode of the plain directory it locked at `path`,
    /// the only directory it exchanges, and later empties (SPEC §17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopts_dir: Option<[u64; 2]>,
    /// `publish --stage` (SPEC §19): the release is built and verified but not activated;
    /// its commit point is its state file, made durable (`path` is never swapped).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stages: bool,
}

impl ReleasesRecord {
    /// The release operation `op` activates.
    pub fn target<'a>(&'a self, op: &'a str) -> &'a str {
        self.activates.as_deref().unwrap_or(op)
    }
}
