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
        }
    }

    /// `<bundle>/.distributor-staging/<op>`.
    pub fn dir(&self, bundle: &Path) -> PathBuf {
        bundle.join(STAGING_DIR).join(&self.operation_id)
    }

    /// Paths moved aside: overwritten or deleted.
    pub fn moves(&self) -> impl Iterator<Item = &str> {
        self.actions
            .iter()
            .filter(|a| !a.kind.ends_with("_create"))
            .map(|a| a.path.as_str())
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

    /// Reads `plan.json` from a staging directory.
    pub fn read(op_dir: &Path) -> Result<StagedOperation> {
        let path = op_dir.join(PLAN_FILE);
        let bytes = fs::read(&path).ctx("read", &path)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Failed(format!("{}: not a distributor plan: {e}", path.display())))
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
    let op_dir = op.dir(bundle);
    if !fs::symlink_metadata(&op_dir).is_ok_and(|m| m.is_dir()) {
        return local::remove_staging(bundle, &op.operation_id);
    }
    let new_root = op_dir.join("new");
    let old_root = op_dir.join("old");
    let lexists = |p: &Path| fs::symlink_metadata(p).is_ok();
    // 1. Remove new content this operation placed.
    for a in op.actions.iter().rev() {
        let p = bundle.join(&a.path);
        let Ok(md) = fs::symlink_metadata(&p) else {
            continue;
        };
        let placed = match a.kind.as_str() {
            "file_create" => !lexists(&new_root.join(&a.path)),
            "link_create" => true,
            "file_overwrite" | "link_overwrite" => lexists(&old_root.join(&a.path)),
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
        let _ = fs::remove_dir(bundle.join(d));
    }
    // 3. Put moved-aside content back, never over something else.
    for a in op.actions.iter().filter(|a| !a.kind.ends_with("_create")) {
        let from = old_root.join(&a.path);
        if !lexists(&from) {
            continue;
        }
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
        local::check_inside(bundle, &a.path)?;
        local::rename_into(&from, bundle, &a.path)?;
    }
    local::sync_filesystem(bundle)?;
    failpoint::hit("undo_before_remove_staging");
    // 4. Drop staging.
    local::remove_staging(bundle, &op.operation_id)
}
