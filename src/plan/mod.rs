//! The planner (SPEC §5): a pure function from (configuration, verified source, storage
//! listing, parsed state, `--force`) to a [`DestinationPlan`].
//!
//! It never touches the filesystem, the clock or randomness; the storage it sees is a
//! [`Storage`] listing gathered beforehand by the backend. Dry runs and real runs use it the
//! same way, so their reports agree. The executor only carries out what a plan says.

mod planner;
mod takeover;
mod unchanged;

pub mod saved;

pub use planner::{PlanInput, plan_destination};
pub use takeover::takeover_permitted;
pub use unchanged::{Republication, records_exactly};

use crate::hash::ContentHash;
use crate::model::{ConflictKind, Decision, FileOp, Owner, SourceRef, StateMode, TakeoverMode};
use crate::source::Manifest;
use crate::state::State;
use serde::Serialize;
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

/// What storage holds at one bundle-relative path, as the backend saw it. A proven hash
/// is borrowed (`'a`) when a placement fingerprint proved the file holds the hash it was
/// asked about, and owned when the file was hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry<'a> {
    /// Nothing there.
    Missing,
    /// A regular file. `sha256` is its content hash when the backend proved it (by
    /// hashing, or by distributor's own placement fingerprint); `None` when not examined.
    File {
        /// Size in bytes.
        size: u64,
        /// Proven content hash.
        sha256: Option<Cow<'a, ContentHash>>,
    },
    /// A symlink and its text.
    Symlink {
        /// Link text.
        target: String,
    },
    /// A directory and the paths under it (bundle-relative), recursively; listed only
    /// where a planned file or link goes.
    Dir {
        /// Files, symlinks and special files below it.
        contents: Vec<String>,
        /// Directories below it.
        dirs: Vec<String>,
    },
    /// A socket, FIFO or device.
    Special,
}

/// What the operator lifted for one run (SPEC §5.3, §19): `--force` overrides forceable
/// conflicts; `--allow-delete N` lifts the deletion guard (`mass_delete`) up to N
/// deletions, whatever `on_conflict` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--force`.
    pub force: bool,
    /// `--allow-delete N`.
    pub allow_delete: Option<u64>,
}

/// The backend's view of a bundle path: every planned path, every recorded path and all
/// their ancestors.
///
/// Paths are borrowed from the manifest and the state they were probed for. The probed
/// paths themselves are kept in the order they were probed (the manifest's outputs, its
/// links, the other recorded paths), which is the order the planner asks for them in: a
/// lookup tries the entry after the one last found first; a path found neither there nor
/// among the directories is searched for in the probed paths sorted by path (sorted once,
/// on the first such lookup).
#[derive(Debug, Clone, Default)]
pub struct Storage<'a> {
    /// Set when the bundle path itself (or a mapped directory on the way to it) is a
    /// symlink, a special file or a file: the reason.
    pub bundle_unsafe: Option<String>,
    /// Set when the config's `releases` settings differ from those its `releases.dir`
    /// records (SPEC §15): why.
    pub releases_mismatch: Option<String>,
    /// A record in the destination distributor does not believe (SPEC §17): the
    /// operator's message naming it and its owner.
    pub untrusted_record: Option<String>,
    /// Set when a releases destination's `path` is not the symlink the last logged
    /// activation made (SPEC §17): why.
    pub path_changed: Option<String>,
    /// Source digests rolled back from and not published past since, per owner (a
    /// releases destination's activation log, SPEC §15).
    pub rolled_back: Vec<Hold>,
    /// Entries by bundle-relative path (the directories on the way to the probed paths,
    /// or anything listed by hand). A path listed nowhere is treated as missing.
    pub entries: foldhash::HashMap<&'a str, Entry<'a>>,
    /// The probed paths' entries, in probe order (distinct from `entries`' paths).
    probed: Vec<(&'a str, Entry<'a>)>,
    /// Finds a path in `probed`.
    order: crate::ordered::InOrder,
}

impl<'a> Storage<'a> {
    /// A listing of `entries` (by path) and of the `probed` paths' entries in probe
    /// order; no path may be in both.
    pub fn new(
        bundle_unsafe: Option<String>,
        entries: foldhash::HashMap<&'a str, Entry<'a>>,
        probed: Vec<(&'a str, Entry<'a>)>,
    ) -> Storage<'a> {
        Storage {
            bundle_unsafe,
            releases_mismatch: None,
            untrusted_record: None,
            path_changed: None,
            rolled_back: Vec::new(),
            entries,
            probed,
            order: Default::default(),
        }
    }

    /// The entry at `path` (missing when not listed).
    pub fn get(&self, path: &str) -> &Entry<'a> {
        let (len, key) = (self.probed.len(), |i: usize| self.probed[i].0);
        if let Some(i) = self.order.next(len, key, path) {
            return &self.probed[i].1;
        }
        if let Some(e) = self.entries.get(path) {
            return e;
        }
        match self.order.search(len, key, path) {
            Some(i) => &self.probed[i].1,
            None => &Entry::Missing,
        }
    }
}

/// A rollback's hold (SPEC §15): the owner's source digest that was rolled back from;
/// publishing it again is the forceable conflict `rolled_back` until the owner publishes
/// something else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Hold {
    /// The owner whose publication was rolled back (`pipeline/destination`).
    pub owner: String,
    /// Its source digest.
    pub digest: String,
}

/// The owner and source a destination held before this publication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Previous {
    /// Previous owner.
    pub owner: Owner,
    /// Previous source.
    pub source: SourceRef,
}

/// Paths that changed hands in a takeover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TakeoverEntry {
    /// Owner the paths came from.
    pub from_owner: Owner,
    /// That owner's source id.
    pub from_source_id: String,
    /// Paths now owned by the current owner.
    pub paths: Vec<String>,
}

/// One conflict (SPEC §5.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// Kind.
    pub kind: ConflictKind,
    /// Path concerned, if any.
    pub path: Option<String>,
    /// Owner concerned, if any.
    pub owner: Option<Owner>,
    /// Whether `--force` may override it.
    pub forceable: bool,
    /// What it means.
    pub message: String,
}

impl Conflict {
    /// Builds a conflict; `forceable` follows the kind.
    pub fn new(
        kind: ConflictKind,
        path: Option<&str>,
        owner: Option<&Owner>,
        message: impl Into<String>,
    ) -> Self {
        Conflict {
            kind,
            path: path.map(str::to_string),
            owner: owner.cloned(),
            forceable: kind.forceable(),
            message: message.into(),
        }
    }
}

/// What happens to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileAction {
    /// Bundle-relative path.
    pub path: String,
    /// Operation.
    pub op: FileOp,
    /// Size (new size, or the recorded size for delete and retain).
    pub size: u64,
    /// sha256 (new, or recorded for delete and retain).
    pub sha256: ContentHash,
    /// What storage held at the path when planned, for an overwrite or delete to check
    /// before it moves it aside (not reported).
    #[serde(skip)]
    pub replaces: Option<Replaced>,
}

/// What an overwrite or delete moves aside, as planning saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Replaced {
    /// A regular file.
    File,
    /// A symlink.
    Link,
}

impl Replaced {
    /// As serialized: `file`, `link`.
    pub fn as_str(self) -> &'static str {
        match self {
            Replaced::File => "file",
            Replaced::Link => "link",
        }
    }

    /// What `entry` is, when it is a file or a link.
    pub fn of(entry: &Entry) -> Option<Replaced> {
        match entry {
            Entry::File { .. } => Some(Replaced::File),
            Entry::Symlink { .. } => Some(Replaced::Link),
            _ => None,
        }
    }
}

/// What happens to one link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkAction {
    /// Bundle-relative path.
    pub path: String,
    /// Bundle-relative target.
    pub target: String,
    /// Operation.
    pub op: FileOp,
    /// What storage held at the path when planned (not reported).
    #[serde(skip)]
    pub replaces: Option<Replaced>,
}

/// The plan for one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationPlan {
    /// Destination id.
    pub destination_id: String,
    /// Resolved bundle path.
    pub bundle_path: PathBuf,
    /// Configured state mode.
    pub state_mode: StateMode,
    /// Configured takeover mode.
    pub takeover_mode: TakeoverMode,
    /// Decision.
    pub decision: Decision,
    /// Previous owner and source (shared root: the current owner's own record).
    pub previous: Option<Previous>,
    /// What changed hands.
    pub takeovers: Vec<TakeoverEntry>,
    /// Conflicts.
    pub conflicts: Vec<Conflict>,
    /// File actions, sorted by path.
    pub files: Vec<FileAction>,
    /// Set for an `unchanged` decision reached by a [`Republication`]: every output of this
    /// manifest is unchanged, in path order, and `files` (empty) does not list them one by
    /// one (at a million files, a row each is a hundred megabytes).
    pub outputs_unchanged: Option<Arc<Manifest>>,
    /// Link actions, sorted by path.
    pub links: Vec<LinkAction>,
    /// One-line reason.
    pub message: String,
    /// State after the publication, for writing decisions. The current owner's
    /// `published_at` and `operation_id` are filled in by the executor.
    pub new_state: Option<State>,
}

impl DestinationPlan {
    /// Every file action, as [`FileAction`] rows (those of `outputs_unchanged` made one by
    /// one).
    pub fn file_actions(&self) -> impl Iterator<Item = Cow<'_, FileAction>> {
        let unchanged = (self.outputs_unchanged.iter()).flat_map(|m| {
            m.outputs.iter().map(|o| {
                Cow::Owned(FileAction {
                    path: o.path.clone(),
                    op: FileOp::Unchanged,
                    size: o.size,
                    sha256: o.sha256,
                    replaces: Some(Replaced::File),
                })
            })
        });
        self.files.iter().map(Cow::Borrowed).chain(unchanged)
    }

    /// How many recorded files and links the plan deletes.
    pub fn deletes(&self) -> u64 {
        (self.files.iter().filter(|f| f.op == FileOp::Delete).count()
            + (self.links.iter())
                .filter(|l| l.op == FileOp::Delete)
                .count()) as u64
    }

    /// Files the plan writes (create or overwrite).
    pub fn writes(&self) -> impl Iterator<Item = &FileAction> {
        self.files
            .iter()
            .filter(|f| matches!(f.op, FileOp::Create | FileOp::Overwrite))
    }
}

#[cfg(test)]
mod tests;
