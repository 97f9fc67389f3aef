//! The record of an operation kept beside its staging (`plan.json`) and in the journal,
//! and [`undo`], which rolls an operation back from what staging holds. Both the executor
//! (on an error) and `recover` (after a crash) use it, so there is one rollback.
//!
//! Undo decides per action from the filesystem, not from how far the run got: content is
//! removed only where this operation provably placed it (the path holds exactly the bytes or
//! link text the operation wrote, and staging no longer holds them), and moved-aside content
//! is put back exactly where it was, never over something else.

use crate::backend::local::{self, STAGING_DIR};
use crate::error::{Error, IoContext, Result};
use crate::failpoint;
use crate::hash::hash_file;
use crate::model::{FileOp, SourceRef};
use crate::plan::DestinationPlan;
use crate::source::relative_link_target;
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};

/// `plan.json`: the operation's record in its staging directory.
pub const PLAN_FILE: &str = "plan.json";
/// Copy of the state file as it was before the operation (absent when there was none).
pub const PRE_STATE_FILE: &str = "pre-state.json";
/// Copy of the state file the operation commits.
pub const POST_STATE_FILE: &str = "post-state.json";

/// One action as undo needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedAction {
    /// `file_create`, `file_overwrite`, `file_delete`, `link_create`, `link_overwrite`, `link_delete`.
    pub kind: String,
    /// Bundle-relative path.
    pub path: String,
    /// Size of the file written (or, for a delete, the recorded one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// sha256 of the file written (or, for a delete, the recorded one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Link target, bundle-relative (links).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
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
    /// Pipeline id.
    pub pipeline_id: String,
    /// State mode.
    pub state_mode: String,
    /// Decision.
    pub decision: String,
    /// Takeover mode.
    pub takeover_mode: String,
    /// Previous owner, `pipeline/destination`.
    pub previous_owner: Option<String>,
    /// Previous source.
    pub previous_source: Option<SourceRef>,
    /// New source.
    pub source: SourceRef,
    /// The report's `takeovers` array.
    pub takeovers: serde_json::Value,
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
}

impl StagedOperation {
    /// Builds the record of a plan about to run (reads which parent directories exist).
    pub fn from_plan(
        plan: &DestinationPlan,
        op: &str,
        pre: Option<String>,
        post: String,
        origin: Origin,
    ) -> StagedOperation {
        let mut actions = Vec::new();
        for f in &plan.files {
            if let Some(k) = kind("file", f.op) {
                actions.push(StagedAction {
                    kind: k,
                    path: f.path.clone(),
                    size: Some(f.size),
                    sha256: Some(f.sha256.clone()),
                    target: None,
                });
            }
        }
        for l in &plan.links {
            if let Some(k) = kind("link", l.op) {
                actions.push(StagedAction {
                    kind: k,
                    path: l.path.clone(),
                    size: None,
                    sha256: None,
                    target: Some(l.target.clone()),
                });
            }
        }
        let mut new_dirs: Vec<String> = Vec::new();
        for a in actions.iter().filter(|a| !a.kind.ends_with("_delete")) {
            for (i, b) in a.path.bytes().enumerate() {
                if b == b'/' {
                    let d = &a.path[..i];
                    if !new_dirs.iter().any(|x| x == d)
                        && fs::symlink_metadata(plan.bundle_path.join(d)).is_err()
                    {
                        new_dirs.push(d.to_string());
                    }
                }
            }
        }
        new_dirs.sort_by_key(|d| d.len());
        StagedOperation {
            operation_id: op.to_string(),
            destination_id: plan.destination_id.clone(),
            bundle_path: plan.bundle_path.clone(),
            pre_state_sha256: pre,
            post_state_sha256: post,
            origin,
            actions,
            new_dirs,
            staging_layout: StagingLayout::Flat,
        }
    }

    /// Where the file written by action `i` is staged until it is placed: flat,
    /// `new/<i / 256>/<i>`.
    pub fn staged_new(&self, op_dir: &Path, i: usize) -> PathBuf {
        match self.staging_layout {
            StagingLayout::Flat => op_dir
                .join("new")
                .join((i / NEW_BUCKET).to_string())
                .join(i.to_string()),
            StagingLayout::Mirrored => op_dir.join("new").join(&self.actions[i].path),
        }
    }

    /// The directories under `new/` that staging needs (flat layout).
    pub fn new_buckets(&self, op_dir: &Path) -> Vec<PathBuf> {
        let mut buckets: Vec<usize> = self.file_writes().map(|(i, _)| i / NEW_BUCKET).collect();
        buckets.dedup();
        buckets
            .into_iter()
            .map(|b| op_dir.join("new").join(b.to_string()))
            .collect()
    }

    /// Where the content replaced or deleted by action `i` is kept until cleanup: flat,
    /// `old/<i>`.
    pub fn staged_old(&self, op_dir: &Path, i: usize) -> PathBuf {
        op_dir.join("old").join(match self.staging_layout {
            StagingLayout::Flat => i.to_string(),
            StagingLayout::Mirrored => self.actions[i].path.clone(),
        })
    }

    /// The actions that move content aside (overwrites and deletes), with their indexes.
    pub fn moves(&self) -> impl Iterator<Item = (usize, &StagedAction)> {
        self.actions
            .iter()
            .enumerate()
            .filter(|(_, a)| !a.kind.ends_with("_create"))
    }

    /// The actions that write a file (creates and overwrites), with their indexes, in plan
    /// order.
    pub fn file_writes(&self) -> impl Iterator<Item = (usize, &StagedAction)> {
        self.actions
            .iter()
            .enumerate()
            .filter(|(_, a)| a.kind == "file_create" || a.kind == "file_overwrite")
    }

    /// `<bundle>/.distributor-staging/<op>`.
    pub fn dir(&self, bundle: &Path) -> PathBuf {
        bundle.join(STAGING_DIR).join(&self.operation_id)
    }

    /// Paths written: created or overwritten.
    pub fn writes(&self) -> impl Iterator<Item = &str> {
        self.actions
            .iter()
            .filter(|a| !a.kind.ends_with("_delete"))
            .map(|a| a.path.as_str())
    }

    /// Creates the operation's staging directory and writes the copies of the pre- and
    /// post-state, then `plan.json`, durably and atomically, last: a staging directory
    /// without `plan.json` therefore never had anything staged or moved aside. The copies
    /// only help an operator resolve a diverged operation; the syncfs before the commit
    /// point makes them durable with everything else.
    pub fn write(&self, bundle: &Path, pre: Option<&[u8]>, post: &[u8]) -> Result<()> {
        let dir = self.dir(bundle);
        fs::create_dir(&dir).ctx("create staging", &dir)?;
        if let Some(pre) = pre {
            let p = dir.join(PRE_STATE_FILE);
            fs::write(&p, pre).ctx("write", &p)?;
        }
        let p = dir.join(POST_STATE_FILE);
        fs::write(&p, post).ctx("write", &p)?;
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| Error::Failed(e.to_string()))?;
        let tmp = dir.join(format!("{PLAN_FILE}.tmp"));
        write_synced(&tmp, &bytes)?;
        let path = dir.join(PLAN_FILE);
        fs::rename(&tmp, &path).ctx("rename", &path)?;
        local::sync_dir(&dir)?;
        local::sync_dir(&bundle.join(STAGING_DIR))
    }

    /// Reads `plan.json` from a staging directory, and refuses one that does not describe
    /// an operation staged right there (see [`StagedOperation::check`]).
    pub fn read(op_dir: &Path) -> Result<StagedOperation> {
        let path = op_dir.join(PLAN_FILE);
        let bytes = fs::read(&path).ctx("read", &path)?;
        let op: StagedOperation = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Failed(format!("{}: not a distributor plan: {e}", path.display()))
        })?;
        let bundle = op_dir.parent().and_then(Path::parent).unwrap_or(op_dir);
        if op_dir.file_name().and_then(|n| n.to_str()) != Some(op.operation_id.as_str()) {
            return Err(Error::Unsafe(format!(
                "{}: names operation {}, not the directory it is in; not recovered",
                path.display(),
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
            crate::source::check_safe_path(p).map_err(|e| {
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

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = fs::File::create(path).ctx("create", path)?;
    f.write_all(bytes).ctx("write", path)?;
    f.sync_all().ctx("fsync", path)
}

fn kind(prefix: &str, op: FileOp) -> Option<String> {
    let k = match op {
        FileOp::Create => "create",
        FileOp::Overwrite => "overwrite",
        FileOp::Delete => "delete",
        FileOp::Unchanged | FileOp::Retain => return None,
    };
    Some(format!("{prefix}_{k}"))
}

/// True when `p` holds exactly what action `a` writes: a regular file of its size and
/// sha256, or a symlink with its link text. Old records without size and digest only
/// check the type.
fn holds_new_content(p: &Path, md: &fs::Metadata, a: &StagedAction) -> Result<bool> {
    if a.kind.starts_with("link_") {
        if !md.file_type().is_symlink() {
            return Ok(false);
        }
        return Ok(match &a.target {
            Some(t) => {
                fs::read_link(p).ctx("read link", p)?.to_string_lossy()
                    == relative_link_target(&a.path, t)
            }
            None => true,
        });
    }
    if !md.is_file() {
        return Ok(false);
    }
    if a.size.is_some_and(|s| s != md.len()) {
        return Ok(false);
    }
    Ok(match &a.sha256 {
        Some(sha) => hash_file(p)?.1 == *sha,
        None => true,
    })
}

/// Rolls an operation back: removes what it placed, restores what it moved aside, removes
/// directories it created and its staging. Idempotent: running it again after a crash in
/// the middle reaches the same result. When the operation's staging directory is gone,
/// either nothing was done yet or a previous undo finished (staging goes last), so there is
/// nothing to do.
pub fn undo(bundle: &Path, op: &StagedOperation) -> Result<()> {
    op.check(bundle)?;
    let op_dir = op.dir(bundle);
    if !fs::symlink_metadata(&op_dir).is_ok_and(|m| m.is_dir()) {
        return local::remove_staging(bundle, &op.operation_id);
    }
    let lexists = |p: &Path| fs::symlink_metadata(p).is_ok();
    // 1. Remove new content this operation placed.
    for (i, a) in op.actions.iter().enumerate().rev() {
        let p = bundle.join(&a.path);
        let Ok(md) = fs::symlink_metadata(&p) else {
            continue;
        };
        let placed = match a.kind.as_str() {
            "file_create" => !lexists(&op.staged_new(&op_dir, i)),
            "link_create" => true,
            "file_overwrite" | "link_overwrite" => lexists(&op.staged_old(&op_dir, i)),
            _ => false,
        };
        if placed && !md.is_dir() && holds_new_content(&p, &md, a)? {
            failpoint::hit("undo_remove_placed");
            local::check_inside(bundle, &a.path)?;
            fs::remove_file(&p).ctx("remove placed", &p)?;
        }
    }
    // 2. Remove directories it created, deepest first, when empty.
    for d in op.new_dirs.iter().rev() {
        // Never through a symlink: that could remove an empty directory elsewhere.
        if local::check_dir_inside(bundle, d).is_ok() {
            let _ = fs::remove_dir(bundle.join(d));
        }
    }
    // 3. Put moved-aside content back, never over something else.
    for (i, a) in op.moves() {
        let from = op.staged_old(&op_dir, i);
        if !lexists(&from) {
            continue;
        }
        local::check_inside(bundle, &a.path)?;
        let to = bundle.join(&a.path);
        if fs::symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
            // A directory made for new content that step 1 removed: remove it when empty.
            let _ = fs::remove_dir(&to);
        }
        if lexists(&to) {
            return Err(Error::Failed(format!(
                "cannot restore '{}': {} holds content this operation did not place; the original is kept at {}",
                a.path,
                to.display(),
                from.display()
            )));
        }
        failpoint::hit("undo_restore");
        local::rename_into(&from, bundle, &a.path)?;
    }
    local::sync_filesystem(bundle)?;
    failpoint::hit("undo_before_remove_staging");
    // 4. Drop staging.
    local::remove_staging(bundle, &op.operation_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::sha256_hex;

    const OP: &str = "0b6f1a52-7d0e-4c1e-9a55-3f1f6c2e8d10";

    /// An operation that overwrote `a/x.txt` and created `b/y.txt`, in `layout`, as
    /// `plan.json` holds it (a mirrored plan is written without `staging_layout`, as
    /// distributor wrote it before flat staging).
    fn interrupted(bundle: &Path, layout: StagingLayout) -> StagedOperation {
        let file = |kind: &str, path: &str, content: &str| StagedAction {
            kind: kind.into(),
            path: path.into(),
            size: Some(content.len() as u64),
            sha256: Some(sha256_hex(content.as_bytes())),
            target: None,
        };
        let mut plan = serde_json::json!({
            "operation_id": OP,
            "destination_id": "latest",
            "bundle_path": bundle,
            "pre_state_sha256": null,
            "post_state_sha256": "0",
            "origin": {
                "started_at": "2026-12-03T08:00:00.000Z", "command": "publish",
                "actor": "cli:test", "pipeline_id": "weather", "state_mode": "single_owner",
                "decision": "replace_older", "takeover_mode": "same_pipeline",
                "previous_owner": null, "previous_source": null,
                "source": {"id": "s", "created_at": "2026-12-03T08:00:00Z", "digest": "sha256:0"},
                "takeovers": []
            },
            "actions": [file("file_overwrite", "a/x.txt", "new x"), file("file_create", "b/y.txt", "new y")],
            "new_dirs": ["b"],
        });
        if layout == StagingLayout::Flat {
            plan["staging_layout"] = "flat".into();
        }
        let op_dir = bundle.join(STAGING_DIR).join(OP);
        fs::create_dir_all(&op_dir).unwrap();
        fs::write(op_dir.join(PLAN_FILE), plan.to_string()).unwrap();
        let op = StagedOperation::read(&op_dir).unwrap();
        assert_eq!(op.staging_layout, layout);
        // Placed: the new x over the moved-aside original, and y in a new directory.
        let old = op.staged_old(&op_dir, 0);
        fs::create_dir_all(old.parent().unwrap()).unwrap();
        fs::write(&old, "original x").unwrap();
        fs::create_dir_all(bundle.join("a")).unwrap();
        fs::create_dir_all(bundle.join("b")).unwrap();
        fs::write(bundle.join("a/x.txt"), "new x").unwrap();
        fs::write(bundle.join("b/y.txt"), "new y").unwrap();
        op
    }

    #[test]
    fn flat_staging_names_content_by_action_index() {
        let tmp = tempfile::tempdir().unwrap();
        let op = interrupted(tmp.path(), StagingLayout::Flat);
        let op_dir = op.dir(tmp.path());
        assert_eq!(op.staged_old(&op_dir, 0), op_dir.join("old/0"));
        assert_eq!(op.staged_new(&op_dir, 1), op_dir.join("new/0/1"));
        assert_eq!(op.staged_new(&op_dir, 300), op_dir.join("new/1/300"));
        undo(tmp.path(), &op).unwrap();
        assert_rolled_back(tmp.path());
    }

    #[test]
    fn a_mirrored_staging_from_before_flat_staging_is_still_rolled_back() {
        let tmp = tempfile::tempdir().unwrap();
        let op = interrupted(tmp.path(), StagingLayout::Mirrored);
        let op_dir = op.dir(tmp.path());
        assert_eq!(op.staged_old(&op_dir, 0), op_dir.join("old/a/x.txt"));
        undo(tmp.path(), &op).unwrap();
        assert_rolled_back(tmp.path());
        // A second undo has nothing to do.
        undo(tmp.path(), &op).unwrap();
        assert_rolled_back(tmp.path());
    }

    /// Just before the operation: the original x back, the new directory and staging gone.
    fn assert_rolled_back(bundle: &Path) {
        assert_eq!(
            fs::read_to_string(bundle.join("a/x.txt")).unwrap(),
            "original x"
        );
        assert!(!bundle.join("b").exists());
        assert!(!bundle.join(STAGING_DIR).exists());
    }
}
