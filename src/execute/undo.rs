//! The record of an operation kept beside its staging (`plan.json`) and in the journal,
//! and [`undo`], which rolls an operation back from what staging holds. Both the executor
//! (on an error) and `recover` (after a crash) use it, so there is one rollback.
//!
//! Undo decides per action from the filesystem, not from how far the run got: content is
//! removed only where this operation provably placed it, and moved-aside content is put
//! back exactly where it was.

use crate::backend::local::{self, STAGING_DIR};
use crate::error::{Error, IoContext, Result};
use crate::failpoint;
use crate::model::FileOp;
use crate::plan::DestinationPlan;
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};

/// One action as undo needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedAction {
    /// `file_create`, `file_overwrite`, `file_delete`, `link_create`, `link_overwrite`, `link_delete`.
    pub kind: String,
    /// Bundle-relative path.
    pub path: String,
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
    ) -> Result<StagedOperation> {
        let mut actions = Vec::new();
        for f in &plan.files {
            if let Some(k) = kind("file", f.op) {
                actions.push(StagedAction {
                    kind: k,
                    path: f.path.clone(),
                });
            }
        }
        for l in &plan.links {
            if let Some(k) = kind("link", l.op) {
                actions.push(StagedAction {
                    kind: k,
                    path: l.path.clone(),
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
        Ok(StagedOperation {
            operation_id: op.to_string(),
            destination_id: plan.destination_id.clone(),
            bundle_path: plan.bundle_path.clone(),
            pre_state_sha256: pre,
            post_state_sha256: post,
            actions,
            new_dirs,
        })
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

    /// Writes `plan.json` into the operation's staging directory, durably.
    pub fn write(&self, bundle: &Path) -> Result<()> {
        let dir = self.dir(bundle);
        let path = dir.join("plan.json");
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| Error::Failed(e.to_string()))?;
        let f = fs::File::create(&path).ctx("create", &path)?;
        use std::io::Write;
        (&f).write_all(&bytes).ctx("write", &path)?;
        f.sync_all().ctx("fsync", &path)?;
        local::sync_dir(&dir)?;
        local::sync_dir(&bundle.join(STAGING_DIR))
    }

    /// Reads `plan.json` from a staging directory.
    pub fn read(op_dir: &Path) -> Result<StagedOperation> {
        let path = op_dir.join("plan.json");
        let bytes = fs::read(&path).ctx("read", &path)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Failed(format!("{}: {e}", path.display())))
    }
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

/// Rolls an operation back: removes what it placed, restores what it moved aside, removes
/// directories it created and its staging. Idempotent: running it again after a crash in
/// the middle reaches the same result.
pub fn undo(bundle: &Path, op: &StagedOperation) -> Result<()> {
    let op_dir = op.dir(bundle);
    let new_root = op_dir.join("new");
    let old_root = op_dir.join("old");
    let lexists = |p: &Path| fs::symlink_metadata(p).is_ok();
    // 1. Remove new content this operation placed.
    for a in op.actions.iter().rev() {
        let p = bundle.join(&a.path);
        let md = fs::symlink_metadata(&p).ok();
        let placed = match a.kind.as_str() {
            "file_create" => {
                md.as_ref().is_some_and(|m| m.is_file()) && !lexists(&new_root.join(&a.path))
            }
            "link_create" => md.as_ref().is_some_and(|m| m.file_type().is_symlink()),
            "file_overwrite" | "link_overwrite" => md.is_some() && lexists(&old_root.join(&a.path)),
            _ => false,
        };
        if placed && !md.as_ref().is_some_and(|m| m.is_dir()) {
            failpoint::hit("recover_during_undo");
            local::check_inside(bundle, &a.path)?;
            fs::remove_file(&p).ctx("remove placed", &p)?;
        }
    }
    // 2. Remove directories it created, deepest first, when empty.
    for d in op.new_dirs.iter().rev() {
        let _ = fs::remove_dir(bundle.join(d));
    }
    // 3. Put moved-aside content back.
    for a in op.actions.iter().filter(|a| !a.kind.ends_with("_create")) {
        let from = old_root.join(&a.path);
        if !lexists(&from) {
            continue;
        }
        let to = bundle.join(&a.path);
        if fs::symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
            let _ = fs::remove_dir(&to);
        }
        local::check_inside(bundle, &a.path)?;
        local::rename_into(&from, bundle, &a.path)?;
    }
    local::sync_filesystem(bundle)?;
    // 4. Drop staging.
    local::remove_staging(bundle, &op.operation_id)
}
