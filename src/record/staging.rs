//! The staging record: an operation's `plan.json`, kept in its staging entry
//! (`.distributor-staging/<op>/`) and in the journal, from which any journal, or none, can
//! finish or undo the operation (SPEC §13). It says what the operation writes, moves aside
//! and creates, which pre- and post-state it goes between, and how its staging names what
//! it holds.
//!
//! A record is read from the destination, where anyone who can write there may have put
//! one: [`StagedOperation::check`] refuses any that could make recovery leave its bundle
//! path. What the storage does with a record (stage, move aside, place, undo) is the
//! backend's; the executor builds a record from a plan (`execute/`).

use crate::error::{Error, Result};
use crate::model::Replaced;
use crate::model::{FileOp, RecordedDecision, SourceRef, StateMode, TakeoverMode};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `plan.json`: the operation's record in its staging directory.
pub const PLAN_FILE: &str = "plan.json";
/// Where staging keeps the files it writes, until they are placed.
pub const NEW: &str = "new";
/// Where staging keeps the content an operation replaces or deletes, until cleanup.
pub const OLD: &str = "old";
/// The state file written at the commit point, before it is renamed over `.distributor.json`.
pub const STATE_TMP_FILE: &str = "state.json";
/// Copy of the state file as it was before the operation (absent when there was none).
pub const PRE_STATE_FILE: &str = "pre-state.json";
/// Copy of the state file the operation commits.
pub const POST_STATE_FILE: &str = "post-state.json";
/// A releases operation that builds a release: the device and inode of the release
/// directory it made (`{"dev": D, "ino": I}`), written right after the directory was made
/// and before anything goes into it, so that only that directory is ever removed as its
/// half-built release (docs/operations.md, "Release identity").
pub const RELEASE_FILE: &str = "release.json";

/// What an action does to its path; the journal and `plan.json` spell it as below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// A new file where nothing was.
    FileCreate,
    /// A file replacing recorded content.
    FileOverwrite,
    /// A recorded file removed.
    FileDelete,
    /// A new link where nothing was.
    LinkCreate,
    /// A link replacing recorded content.
    LinkOverwrite,
    /// A recorded link removed.
    LinkDelete,
}

impl ActionKind {
    /// The kind for a file or link (`link`) action with operation `op`; `None` for the
    /// operations that write nothing.
    pub fn of(link: bool, op: FileOp) -> Option<ActionKind> {
        use ActionKind::*;
        Some(match (link, op) {
            (false, FileOp::Create) => FileCreate,
            (false, FileOp::Overwrite) => FileOverwrite,
            (false, FileOp::Delete) => FileDelete,
            (true, FileOp::Create) => LinkCreate,
            (true, FileOp::Overwrite) => LinkOverwrite,
            (true, FileOp::Delete) => LinkDelete,
            (_, FileOp::Unchanged | FileOp::Retain) => return None,
        })
    }

    /// The journal's spelling.
    pub fn as_str(self) -> &'static str {
        use ActionKind::*;
        match self {
            FileCreate => "file_create",
            FileOverwrite => "file_overwrite",
            FileDelete => "file_delete",
            LinkCreate => "link_create",
            LinkOverwrite => "link_overwrite",
            LinkDelete => "link_delete",
        }
    }

    /// A link action.
    pub fn is_link(self) -> bool {
        matches!(
            self,
            ActionKind::LinkCreate | ActionKind::LinkOverwrite | ActionKind::LinkDelete
        )
    }

    /// Writes new content at its path (creates and overwrites).
    pub fn writes(self) -> bool {
        !self.deletes()
    }

    /// Removes its path's content for good.
    pub fn deletes(self) -> bool {
        matches!(self, ActionKind::FileDelete | ActionKind::LinkDelete)
    }

    /// Moves recorded content aside first (overwrites and deletes).
    pub fn moves_aside(self) -> bool {
        !matches!(self, ActionKind::FileCreate | ActionKind::LinkCreate)
    }

    /// Writes a file (staged, then placed).
    pub fn writes_file(self) -> bool {
        matches!(self, ActionKind::FileCreate | ActionKind::FileOverwrite)
    }
}

impl std::fmt::Display for ActionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One action as undo needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedAction {
    /// What it does.
    pub kind: ActionKind,
    /// Bundle-relative path.
    pub path: String,
    /// Size of the file written (or, for a delete, the recorded one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// sha256 of the file written (or, for a delete, the recorded one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<crate::hash::ContentHash>,
    /// Link target, bundle-relative (links).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// What an overwrite or delete moves aside, as planned: a file or a link. Checked
    /// before it moves, and what `old/` holds for it must be that. Absent in records
    /// written before it was kept (either is accepted then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<Replaced>,
}

/// Who started an operation and what it decided: everything its journal row holds, so the
/// row can be written again by `recover` when the journal that started it is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// RFC 3339 start time (the owner record's `published_at`).
    pub started_at: String,
    /// `publish`.
    pub command: String,
    /// `cli:<user>` or `token:<name>`.
    pub actor: String,
    /// Why it was run (`--reason`, `DISTRIBUTOR_REASON`, `X-Distributor-Reason`; at most
    /// 1 KiB, no control characters); absent when none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Pipeline id.
    pub pipeline_id: String,
    /// State mode.
    pub state_mode: StateMode,
    /// The decision, or the operation when it is not a publication (`adopt`).
    pub decision: RecordedDecision,
    /// Takeover mode.
    pub takeover_mode: TakeoverMode,
    /// Previous owner, `pipeline/destination`.
    pub previous_owner: Option<String>,
    /// Previous source.
    pub previous_source: Option<SourceRef>,
    /// New source.
    pub source: SourceRef,
    /// The report's `takeovers` array.
    pub takeovers: serde_json::Value,
    /// The host that ran it (the destination log's `host`, which an entry `recover`
    /// writes keeps); absent in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The id of the journal that ran it (the destination log's `journal_id`, which an
    /// entry `recover` writes keeps); absent in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_id: Option<String>,
    /// How many outputs (files and links) the operation leaves as they were (the
    /// destination log's `counts.unchanged`), counted by [`StagedOperation::from_plan`];
    /// absent in records written before it was kept (their entries count 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_unchanged: Option<u64>,
}

/// What recovery needs to finish or undo an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedOperation {
    /// Operation id.
    pub operation_id: String,
    /// Destination id.
    pub destination_id: String,
    /// Bundle path.
    pub bundle_path: PathBuf,
    /// sha256 of the state file before (None: absent).
    pub pre_state_sha256: Option<String>,
    /// sha256 of the state file the operation writes.
    pub post_state_sha256: String,
    /// Who started it and what it decided.
    pub origin: Origin,
    /// Writing actions, in plan order.
    pub actions: Vec<StagedAction>,
    /// Directories that did not exist and may be created, outermost first.
    pub new_dirs: Vec<String>,
    /// How `new/` and `old/` name what they hold.
    #[serde(default)]
    pub staging_layout: StagingLayout,
    /// The object store holding the bundle path (endpoint, region), so `recover` can
    /// reach it from the journal alone; absent for local destinations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<super::S3Location>,
    /// The releases destination `bundle_path` is (SPEC §15): its settings and the release
    /// active when the operation began; absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub releases: Option<super::ReleasesRecord>,
    /// The record directory (`.distributor/`) the staging record is written in (SPEC
    /// §17): `recover` reports the operation `closed` only while that directory is still
    /// the one at its place, else `staging_moved`. Absent for object stores and records
    /// of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_dir: Option<RecordDir>,
    /// `new_dirs` as a set (not recorded).
    #[serde(skip)]
    pub new_dir_index: NewDirIndex,
}

/// Device and inode of a directory a record names: the record directory, or a release
/// (docs/operations.md, "Release identity").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordDir {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
}

/// Files staged per directory under `new/`: the staging threads take runs of up to this
/// many consecutive files (`parallel.rs`), so each thread mostly creates files in a
/// directory of its own instead of queueing on one directory's lock.
const NEW_BUCKET: usize = 256;

/// How an operation's staging names the files it stages (`new/`) and the content it moves
/// aside (`old/`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StagingLayout {
    /// By the index of the action in `actions`: `new/0/17` (a directory per 256 actions),
    /// `old/3`. A few directories at most, whatever the bundle's tree. Every operation is
    /// staged this way.
    Flat,
    /// By the action's bundle-relative path, under directories mirroring the bundle's.
    /// Written by distributor before flat staging (a `plan.json` without
    /// `staging_layout`); `recover` still reads it.
    #[default]
    Mirrored,
    /// Flat, except for the files in directories the operation creates: those are staged
    /// under `new/tree/`, at their bundle-relative path, so that each new directory that
    /// stands in one that exists (a *new tree*: in `new_dirs`, its parent not) is placed
    /// whole, with one rename. Local bundle paths stage this way.
    Trees,
}

/// The directory under `new/` that holds the new trees ([`StagingLayout::Trees`]); never
/// a number, so never a flat bucket.
pub const NEW_TREES: &str = "tree";

/// The directories an operation creates, as a set, made when first asked for (a
/// [`StagedOperation`] is compared and cloned as its recorded fields alone).
#[derive(Debug, Clone, Default)]
pub struct NewDirIndex(std::sync::OnceLock<foldhash::HashSet<String>>);

impl PartialEq for NewDirIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for NewDirIndex {}

/// A [`StagedOperation`] without its actions, serialized as the journal's `plan_json`
/// holds it (schema 8 journals the actions as rows of their own). Every field but
/// `actions`, with the same names and rules: `record_json_without_actions_drops_only_the_actions`
/// checks that it stays so.
#[derive(Serialize)]
struct WithoutActions<'a> {
    operation_id: &'a str,
    destination_id: &'a str,
    bundle_path: &'a std::path::Path,
    pre_state_sha256: &'a Option<String>,
    post_state_sha256: &'a str,
    origin: &'a Origin,
    new_dirs: &'a [String],
    staging_layout: StagingLayout,
    #[serde(skip_serializing_if = "Option::is_none")]
    store: &'a Option<super::S3Location>,
    #[serde(skip_serializing_if = "Option::is_none")]
    releases: &'a Option<super::ReleasesRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    record_dir: &'a Option<RecordDir>,
}

impl StagedOperation {
    /// This record as JSON without its `actions` (the journal's `plan_json`, schema 8).
    pub fn to_json_without_actions(&self) -> serde_json::Result<String> {
        let StagedOperation {
            operation_id,
            destination_id,
            bundle_path,
            pre_state_sha256,
            post_state_sha256,
            origin,
            actions: _,
            new_dirs,
            staging_layout,
            store,
            releases,
            record_dir,
            new_dir_index: _,
        } = self;
        serde_json::to_string(&WithoutActions {
            operation_id,
            destination_id,
            bundle_path,
            pre_state_sha256,
            post_state_sha256,
            origin,
            new_dirs,
            staging_layout: *staging_layout,
            store,
            releases,
            record_dir,
        })
    }

    /// Where the file written by action `i` is staged until it is placed, relative to the
    /// operation's staging entry: flat, `new/<i / 256>/<i>`; in a new tree,
    /// `new/tree/<path>`.
    pub fn staged_new(&self, i: usize) -> String {
        match self.staging_layout {
            StagingLayout::Trees if self.new_tree_of(&self.actions[i].path).is_some() => {
                format!("{NEW}/{NEW_TREES}/{}", self.actions[i].path)
            }
            StagingLayout::Flat | StagingLayout::Trees => format!("{NEW}/{}/{i}", i / NEW_BUCKET),
            StagingLayout::Mirrored => format!("{NEW}/{}", self.actions[i].path),
        }
    }

    /// The new tree `path` lies in: its outermost ancestor that the operation creates,
    /// when its parent is one and the operation stages new trees
    /// ([`StagingLayout::Trees`]); `None` otherwise.
    pub fn new_tree_of<'p>(&self, path: &'p str) -> Option<&'p str> {
        if self.staging_layout != StagingLayout::Trees {
            return None;
        }
        let (parent, _) = path.rsplit_once('/')?;
        let dirs = self
            .new_dir_index
            .0
            .get_or_init(|| self.new_dirs.iter().cloned().collect());
        if !dirs.contains(parent) {
            return None;
        }
        let mut at = 0;
        loop {
            let end = parent[at..].find('/').map_or(parent.len(), |n| at + n);
            if dirs.contains(&parent[..end]) {
                return Some(&path[..end]);
            }
            at = end + 1;
        }
    }

    /// The new trees of this operation's staged files ([`StagingLayout::Trees`]), each
    /// once, outermost first, with the directories under `new/tree/` each needs (the
    /// tree's own and those below it that hold staged files), parents first.
    pub fn new_trees(&self) -> Vec<(String, Vec<String>)> {
        let mut trees: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (_, a) in self.file_writes() {
            let Some(root) = self.new_tree_of(&a.path) else {
                continue;
            };
            let dirs = trees.entry(root).or_default();
            let mut d = a.path.rsplit_once('/').map_or("", |(d, _)| d);
            while d.len() > root.len() && dirs.insert(d) {
                d = d.rsplit_once('/').map_or("", |(p, _)| p);
            }
        }
        trees
            .into_iter()
            .map(|(root, dirs)| {
                let mut dirs: Vec<String> = dirs.into_iter().map(String::from).collect();
                dirs.sort_by_key(|d| d.matches('/').count());
                (root.to_string(), dirs)
            })
            .collect()
    }

    /// The directories under `new/` that flat staging needs, relative to the operation's
    /// staging entry (files in new trees are staged under `new/tree/` instead).
    pub fn new_buckets(&self) -> Vec<String> {
        let mut buckets: Vec<usize> = self
            .file_writes()
            .filter(|(_, a)| self.new_tree_of(&a.path).is_none())
            .map(|(i, _)| i / NEW_BUCKET)
            .collect();
        buckets.dedup();
        buckets.into_iter().map(|b| format!("{NEW}/{b}")).collect()
    }

    /// Where the content replaced or deleted by action `i` is kept until cleanup, relative
    /// to the operation's staging entry: flat, `old/<i>`.
    pub fn staged_old(&self, i: usize) -> String {
        match self.staging_layout {
            StagingLayout::Flat | StagingLayout::Trees => format!("{OLD}/{i}"),
            StagingLayout::Mirrored => format!("{OLD}/{}", self.actions[i].path),
        }
    }

    /// The actions that move content aside (overwrites and deletes), with their indexes.
    pub fn moves(&self) -> impl Iterator<Item = (usize, &StagedAction)> {
        self.actions
            .iter()
            .enumerate()
            .filter(|(_, a)| a.kind.moves_aside())
    }

    /// The actions that write a file (creates and overwrites), with their indexes, in plan
    /// order.
    pub fn file_writes(&self) -> impl Iterator<Item = (usize, &StagedAction)> {
        self.actions
            .iter()
            .enumerate()
            .filter(|(_, a)| a.kind.writes_file())
    }

    /// Paths written: created or overwritten.
    pub fn writes(&self) -> impl Iterator<Item = &str> {
        self.actions
            .iter()
            .filter(|a| a.kind.writes())
            .map(|a| a.path.as_str())
    }

    /// The bytes of `plan.json`.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        serde_json::to_vec_pretty(self).map_err(Error::from)
    }

    /// The bytes [`to_json`](Self::to_json) returns, written to `w` as they are
    /// serialized (never held whole), then flushed.
    pub fn write_json<W: std::io::Write>(&self, mut w: W) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut w, self)?;
        w.flush()
    }

    /// Parses `plan.json` found in the staging entry `entry` of `bundle` (`file` names it
    /// in messages), and refuses one that does not describe an operation staged right
    /// there (see [`StagedOperation::check`]).
    pub fn parse(bytes: &[u8], file: &Path, bundle: &Path, entry: &str) -> Result<StagedOperation> {
        let op: StagedOperation = serde_json::from_slice(bytes).map_err(|e| {
            Error::Unsafe(format!(
                "{}: not a distributor staging record: {e}; not recovered",
                file.display()
            ))
        })?;
        if entry != op.operation_id {
            return Err(Error::Unsafe(format!(
                "{}: names operation {}, not the staging entry it is in; not recovered",
                file.display(),
                op.operation_id
            )));
        }
        op.check(bundle)?;
        Ok(op)
    }

    /// Refuses a record that could make recovery touch anything but its own bundle path:
    /// it must be for `bundle`, and every path in it must be a safe relative path (SPEC
    /// §3.2). A `plan.json` is read from the destination, where anyone who can write
    /// there may have put one.
    pub fn check(&self, bundle: &Path) -> Result<()> {
        if self.bundle_path != bundle {
            return Err(Error::Unsafe(format!(
                "operation {} is recorded for {}, but was found in {}; not recovered",
                self.operation_id,
                self.bundle_path.display(),
                bundle.display()
            )));
        }
        let paths = self
            .actions
            .iter()
            .map(|a| a.path.as_str())
            .chain(self.new_dirs.iter().map(String::as_str));
        for p in paths {
            crate::paths::check_safe_path(p).map_err(|e| {
                Error::Unsafe(format!(
                    "operation {}: '{}' is not a safe path ({e}); not recovered",
                    self.operation_id,
                    p.escape_debug()
                ))
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_kinds_are_spelled_as_the_journal_has_them() {
        use ActionKind::*;
        for k in [
            FileCreate,
            FileOverwrite,
            FileDelete,
            LinkCreate,
            LinkOverwrite,
            LinkDelete,
        ] {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert_eq!(serde_json::from_str::<ActionKind>(&json).unwrap(), k);
        }
        assert!(serde_json::from_str::<ActionKind>("\"file_move\"").is_err());
    }

    fn record(layout: StagingLayout) -> StagedOperation {
        let a = |kind, path: &str| StagedAction {
            kind,
            path: path.into(),
            size: Some(1),
            sha256: Some(crate::hash::ContentHash::default()),
            target: None,
            replaces: None,
        };
        StagedOperation {
            operation_id: "op".into(),
            destination_id: "d".into(),
            bundle_path: "/b".into(),
            pre_state_sha256: None,
            post_state_sha256: "0".into(),
            origin: Origin {
                started_at: String::new(),
                command: "publish".into(),
                actor: "cli:t".into(),
                reason: None,
                pipeline_id: "p".into(),
                state_mode: StateMode::SingleOwner,
                decision: crate::model::Decision::Create.into(),
                takeover_mode: TakeoverMode::SamePipeline,
                previous_owner: None,
                previous_source: None,
                source: SourceRef {
                    id: "s".into(),
                    created_at: String::new(),
                    digest: String::new(),
                },
                takeovers: serde_json::Value::Null,
                host: None,
                journal_id: None,
                outputs_unchanged: None,
            },
            actions: vec![
                a(ActionKind::FileOverwrite, "a/x.txt"),
                a(ActionKind::FileCreate, "b/y.txt"),
            ],
            new_dirs: vec!["b".into()],
            staging_layout: layout,
            store: None,
            releases: None,
            record_dir: Some(RecordDir { dev: 1, ino: 2 }),
            new_dir_index: Default::default(),
        }
    }

    /// The journal's `plan_json` is the record less its actions, every other field as
    /// `plan.json` has it (with and without the optional ones).
    #[test]
    fn record_json_without_actions_drops_only_the_actions() {
        let mut op = record(StagingLayout::Flat);
        op.pre_state_sha256 = Some("1".repeat(64));
        op.releases = Some(
            serde_json::from_value(serde_json::json!({
                "dir": "/r", "keep": 2, "active_before": "a", "undoes": "u"
            }))
            .unwrap(),
        );
        for op in [record(StagingLayout::Flat), op] {
            let mut whole: serde_json::Value =
                serde_json::from_slice(&op.to_json().unwrap()).unwrap();
            assert!(whole.as_object_mut().unwrap().remove("actions").is_some());
            let without: serde_json::Value =
                serde_json::from_str(&op.to_json_without_actions().unwrap()).unwrap();
            assert_eq!(without, whole);
        }
    }

    #[test]
    fn flat_staging_names_content_by_action_index() {
        let op = record(StagingLayout::Flat);
        assert_eq!(op.staged_old(0), "old/0");
        assert_eq!(op.staged_new(1), "new/0/1");
        assert_eq!(op.staged_new(300), "new/1/300");
        let op = record(StagingLayout::Mirrored);
        assert_eq!(op.staged_old(0), "old/a/x.txt");
        assert_eq!(op.staged_new(1), "new/b/y.txt");
    }

    /// Trees: a file in a directory the operation creates is staged at its path under
    /// `new/tree/`, in the outermost new directory standing in one that exists; the rest
    /// as flat staging has it.
    #[test]
    fn trees_staging_stages_files_of_new_directories_by_path() {
        let mut op = record(StagingLayout::Trees);
        let file = |path: &str| StagedAction {
            kind: ActionKind::FileCreate,
            path: path.into(),
            size: Some(1),
            sha256: Some(crate::hash::ContentHash::default()),
            target: None,
            replaces: None,
        };
        op.actions.extend([
            file("b/c/d/z.txt"),
            file("a/n/w.txt"),
            file("top.txt"),
            file("b/c/v.txt"),
        ]);
        op.new_dirs = vec!["b".into(), "a/n".into(), "b/c".into(), "b/c/d".into()];
        assert_eq!(op.staged_old(0), "old/0");
        assert_eq!(op.staged_new(0), "new/0/0", "a/x.txt: a exists");
        assert_eq!(op.staged_new(1), "new/tree/b/y.txt");
        assert_eq!(op.staged_new(2), "new/tree/b/c/d/z.txt");
        assert_eq!(op.staged_new(3), "new/tree/a/n/w.txt");
        assert_eq!(op.staged_new(4), "new/0/4");
        assert_eq!(op.new_tree_of("b/c/d/z.txt"), Some("b"));
        assert_eq!(op.new_tree_of("a/n/w.txt"), Some("a/n"));
        assert_eq!(op.new_tree_of("a/x.txt"), None);
        assert_eq!(op.new_tree_of("top.txt"), None);
        assert_eq!(
            op.new_trees(),
            vec![
                ("a/n".to_string(), vec![]),
                (
                    "b".to_string(),
                    vec!["b/c".to_string(), "b/c/d".to_string()]
                ),
            ]
        );
        assert_eq!(op.new_buckets(), vec!["new/0".to_string()]);
        // Recorded as `trees`; read back the same.
        let back: StagedOperation = serde_json::from_slice(&op.to_json().unwrap()).unwrap();
        assert_eq!(back.staging_layout, StagingLayout::Trees);
        assert_eq!(back.staged_new(2), "new/tree/b/c/d/z.txt");
        // Flat staging stages the same actions by index.
        op.staging_layout = StagingLayout::Flat;
        assert_eq!(op.staged_new(2), "new/0/2");
        assert!(op.new_trees().is_empty());
    }

    #[test]
    fn a_record_for_another_bundle_or_with_an_escaping_path_is_refused() {
        let op = record(StagingLayout::Flat);
        let bytes = op.to_json().unwrap();
        let mut written = Vec::new();
        op.write_json(&mut written).unwrap();
        assert_eq!(written, bytes, "write_json writes what to_json returns");
        let file = Path::new("/b/.distributor-staging/op/plan.json");
        assert!(StagedOperation::parse(&bytes, file, Path::new("/b"), "op").is_ok());
        let e = StagedOperation::parse(&bytes, file, Path::new("/c"), "op").unwrap_err();
        assert!(e.to_string().contains("recorded for /b"), "{e}");
        let e = StagedOperation::parse(&bytes, file, Path::new("/b"), "other").unwrap_err();
        assert!(e.to_string().contains("names operation op"), "{e}");
        for bad in ["../x", "/etc/x", "a/../../x", ""] {
            let mut op = record(StagingLayout::Flat);
            op.actions[1].path = bad.into();
            let e = StagedOperation::parse(&op.to_json().unwrap(), file, Path::new("/b"), "op");
            assert!(
                e.unwrap_err().to_string().contains("not a safe path"),
                "{bad}"
            );
        }
    }

    /// The origin's state mode, decision and takeover mode are written by their contract
    /// names, as they were when they were text; a name that is none of them is refused,
    /// naming the file and what is accepted.
    #[test]
    fn origin_names_are_written_as_text_and_unknown_ones_refused() {
        let mut op = record(StagingLayout::Flat);
        let file = Path::new("/b/.distributor-staging/op/plan.json");
        for (decision, name) in [
            (crate::model::Decision::Create.into(), "create"),
            (RecordedDecision::Adopt, "adopt"),
        ] {
            op.origin.decision = decision;
            let json = op.to_json().unwrap();
            let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
            assert_eq!(v["origin"]["state_mode"], "single_owner");
            assert_eq!(v["origin"]["decision"], name);
            assert_eq!(v["origin"]["takeover_mode"], "same_pipeline");
            let back = StagedOperation::parse(&json, file, Path::new("/b"), "op");
            assert_eq!(back.unwrap().origin, op.origin);
        }
        let mut v: serde_json::Value = serde_json::from_slice(&op.to_json().unwrap()).unwrap();
        v["origin"]["decision"] = "upload".into();
        let bogus = serde_json::to_vec(&v).unwrap();
        let e = StagedOperation::parse(&bogus, file, Path::new("/b"), "op")
            .unwrap_err()
            .to_string();
        for want in [
            "plan.json",
            "unknown value 'upload'",
            "accepted: create, unchanged",
            "promote, prune, adopt, settings",
        ] {
            assert!(e.contains(want), "{e}: lacks {want}");
        }
    }
}
