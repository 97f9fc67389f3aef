//! `status` and `verify`: read-only views of what destinations hold.
//!
//! `status` summarises each bundle path's state; `verify` compares storage with state and
//! lists missing, modified and unrecorded paths (exit 3 on drift). Neither writes.

use crate::backend::local::{self, LOCK_FILE, STAGING_DIR};
use crate::config::{Destination, PathMapping};
use crate::error::{IoContext, Result};
use crate::hash::hash_file;
use crate::model::{Owner, SourceRef, StateMode};
use crate::source::relative_link_target;
use crate::state::{STATE_FILE, StateFile};
use serde::Serialize;
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The bundle paths of a destination that exist: the path itself for fixed mapping, or
/// every directory under it holding a `.distributor.json` or a `.distributor-staging/` for
/// mapped destinations (an interrupted first publication has staging and no state yet, and
/// status must still show that it needs recovery).
pub fn bundle_paths(dest: &Destination) -> Result<Vec<PathBuf>> {
    if dest.path_mapping == PathMapping::Fixed {
        return Ok(vec![dest.path.clone()]);
    }
    let mut out = Vec::new();
    find_states(&dest.path, &mut out)?;
    out.sort();
    Ok(out)
}

fn find_states(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(_) => return Ok(()),
    };
    if fs::symlink_metadata(dir.join(STATE_FILE)).is_ok()
        || fs::symlink_metadata(dir.join(STAGING_DIR)).is_ok()
    {
        out.push(dir.to_path_buf());
        return Ok(());
    }
    for e in rd {
        let e = e.ctx("list", dir)?;
        if e.file_type().ctx("stat", e.path())?.is_dir() {
            find_states(&e.path(), out)?;
        }
    }
    Ok(())
}

/// One owner in a status entry.
#[derive(Debug, Serialize)]
pub struct OwnerStatus {
    /// Owner.
    pub owner: Owner,
    /// Its source.
    pub source: SourceRef,
    /// When it published.
    pub published_at: String,
    /// The operation.
    pub operation_id: String,
    /// Outputs it owns.
    pub outputs: usize,
    /// Links it owns.
    pub links: usize,
}

/// Status of one bundle path.
#[derive(Debug, Serialize)]
pub struct BundleStatus {
    /// Destination id.
    pub destination_id: String,
    /// Bundle path.
    pub bundle_path: String,
    /// `absent`, `invalid` or `valid`.
    pub state: &'static str,
    /// State mode when valid.
    pub state_mode: Option<StateMode>,
    /// Why it is invalid.
    pub invalid_reason: Option<String>,
    /// Owners when valid.
    pub owners: Vec<OwnerStatus>,
    /// Whether staging holds an unfinished operation.
    pub recovery_pending: bool,
}

/// Status of every bundle path of the selected destinations.
pub fn status(dests: &[&Destination]) -> Result<Vec<BundleStatus>> {
    let mut out = Vec::new();
    for d in dests {
        for bundle in bundle_paths(d)? {
            let state = local::read_state(&bundle)?;
            let mut s = BundleStatus {
                destination_id: d.id.clone(),
                bundle_path: bundle.to_string_lossy().into_owned(),
                state: "absent",
                state_mode: None,
                invalid_reason: None,
                owners: vec![],
                recovery_pending: !local::staging_entries(&bundle).is_empty(),
            };
            match state {
                StateFile::Absent => {}
                StateFile::Invalid(r) => {
                    s.state = "invalid";
                    s.invalid_reason = Some(r);
                }
                StateFile::Valid(st) => {
                    s.state = "valid";
                    s.state_mode = Some(st.mode);
                    s.owners = st
                        .owners
                        .iter()
                        .map(|r| OwnerStatus {
                            owner: r.owner.clone(),
                            source: r.source.clone(),
                            published_at: r.published_at.clone(),
                            operation_id: r.operation_id.clone(),
                            outputs: st.outputs.iter().filter(|o| *o.owner == r.owner).count(),
                            links: st.links.iter().filter(|l| *l.owner == r.owner).count(),
                        })
                        .collect();
                }
            }
            out.push(s);
        }
    }
    Ok(out)
}

/// Drift found in one bundle path.
#[derive(Debug, Serialize)]
pub struct BundleDrift {
    /// Destination id.
    pub destination_id: String,
    /// Bundle path.
    pub bundle_path: String,
    /// `absent`, `invalid` or `valid`.
    pub state: &'static str,
    /// Why state is invalid.
    pub invalid_reason: Option<String>,
    /// Recorded paths not in storage.
    pub missing: Vec<String>,
    /// Recorded paths whose content, type or link target differs.
    pub modified: Vec<String>,
    /// Paths in storage no state records.
    pub unrecorded: Vec<String>,
}

impl BundleDrift {
    /// True when storage and state disagree (or state is invalid).
    pub fn drifted(&self) -> bool {
        self.state == "invalid"
            || !self.missing.is_empty()
            || !self.modified.is_empty()
            || !self.unrecorded.is_empty()
    }
}

/// Compares storage with state for every bundle path of the selected destinations.
pub fn verify(dests: &[&Destination]) -> Result<Vec<BundleDrift>> {
    let mut out = Vec::new();
    for d in dests {
        for bundle in bundle_paths(d)? {
            let mut v = BundleDrift {
                destination_id: d.id.clone(),
                bundle_path: bundle.to_string_lossy().into_owned(),
                state: "absent",
                invalid_reason: None,
                missing: vec![],
                modified: vec![],
                unrecorded: vec![],
            };
            match local::read_state(&bundle)? {
                StateFile::Absent => {}
                StateFile::Invalid(r) => {
                    v.state = "invalid";
                    v.invalid_reason = Some(r);
                }
                StateFile::Valid(st) => {
                    v.state = "valid";
                    let mut recorded: HashSet<&str> = HashSet::new();
                    for o in &st.outputs {
                        recorded.insert(&o.path);
                        let p = bundle.join(&o.path);
                        if !reached_without_symlinks(&bundle, &o.path) {
                            v.missing.push(o.path.clone());
                            continue;
                        }
                        match fs::symlink_metadata(&p) {
                            Err(_) => v.missing.push(o.path.clone()),
                            Ok(md) if !md.is_file() || md.len() != o.size => {
                                v.modified.push(o.path.clone())
                            }
                            Ok(_) => {
                                if hash_file(&p)?.1 != o.sha256 {
                                    v.modified.push(o.path.clone());
                                }
                            }
                        }
                    }
                    for l in &st.links {
                        recorded.insert(&l.path);
                        if !reached_without_symlinks(&bundle, &l.path) {
                            v.missing.push(l.path.clone());
                            continue;
                        }
                        match fs::read_link(bundle.join(&l.path)) {
                            Err(_) if fs::symlink_metadata(bundle.join(&l.path)).is_err() => {
                                v.missing.push(l.path.clone())
                            }
                            Err(_) => v.modified.push(l.path.clone()),
                            Ok(t)
                                if t.to_string_lossy()
                                    != relative_link_target(&l.path, &l.target) =>
                            {
                                v.modified.push(l.path.clone())
                            }
                            Ok(_) => {}
                        }
                    }
                    let mut all = Vec::new();
                    local::list_tree(&bundle, "", &mut all)?;
                    for p in all {
                        let top = p.split('/').next().unwrap_or(&p);
                        if top == STATE_FILE
                            || top == LOCK_FILE
                            || top == STAGING_DIR
                            || recorded.contains(p.as_str())
                        {
                            continue;
                        }
                        v.unrecorded.push(p);
                    }
                    v.missing.sort();
                    v.modified.sort();
                    v.unrecorded.sort();
                }
            }
            out.push(v);
        }
    }
    Ok(out)
}

/// True when every directory between `bundle` and `rel` is a real directory. A recorded
/// path that is only reachable through a symlink (or past a file) is not where state says:
/// verify, like the executor, never looks through a symlink, so it reports the path
/// missing and the symlink unrecorded.
fn reached_without_symlinks(bundle: &Path, rel: &str) -> bool {
    let mut cur = bundle.to_path_buf();
    let segs: Vec<&str> = rel.split('/').collect();
    for seg in &segs[..segs.len().saturating_sub(1)] {
        cur.push(seg);
        match fs::symlink_metadata(&cur) {
            Ok(md) if md.is_dir() => {}
            _ => return false,
        }
    }
    true
}
