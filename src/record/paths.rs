//! A destination log entry's path list (docs/operations.md, "Path lists"):
//! `<seq>.paths.jsonl` beside `<seq>.json`, one JSON object per line for each path the
//! operation wrote, deleted or took over, so that `blame --destination-only` answers from
//! the destination alone. It is created before its entry, with the same create-once rules,
//! and the entry names it by sha256 and line count ([`PathsRef`]); a reader believes a list
//! only when its bytes have that sha256.
//!
//! Must never: hold anything the staging record does not (it is made from it alone), or
//! be believed without its entry's sha256.

use super::StagedOperation;
use serde::{Deserialize, Serialize};

/// How an entry names its path list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathsRef {
    /// Its file name beside the entry (`<seq>.paths.jsonl`).
    pub file: String,
    /// The sha256 of its exact bytes.
    pub sha256: String,
    /// How many lines (paths) it holds.
    pub lines: u64,
}

/// One line of a path list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathLine {
    /// The path, bundle-relative.
    pub path: String,
    /// What happened to it: `file_create`, `file_overwrite`, `file_delete`,
    /// `link_create`, `link_overwrite`, `link_delete`, or `take_over` (recorded content
    /// that changed owner and was not rewritten).
    pub what: String,
    /// The sha256 of the file written (or deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Its size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// A takeover's previous owner of this path (`pipeline/destination`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_owner: Option<String>,
    /// That owner's source id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_source_id: Option<String>,
}

/// The file name of entry `seq`'s path list.
pub fn file_name(seq: u64) -> String {
    format!("{seq:020}.paths.jsonl")
}

/// The path list of operation `op`: its actions, then the paths it took over without
/// rewriting them; `None` when it changed no path (an activation of an existing release,
/// a prune).
pub fn of_operation(op: &StagedOperation) -> Option<Vec<u8>> {
    let taken = taken_over(op);
    let mut lines: Vec<PathLine> = (op.actions.iter())
        .map(|a| {
            let from = taken.iter().find(|(p, _, _)| *p == a.path);
            PathLine {
                path: a.path.clone(),
                what: a.kind.as_str().to_string(),
                sha256: a.sha256.map(|h| h.hex()),
                size: a.size,
                previous_owner: from.map(|(_, o, _)| o.clone()),
                previous_source_id: from.map(|(_, _, s)| s.clone()),
            }
        })
        .collect();
    for (path, owner, source) in &taken {
        if !op.actions.iter().any(|a| a.path == *path) {
            lines.push(PathLine {
                path: path.clone(),
                what: "take_over".into(),
                sha256: None,
                size: None,
                previous_owner: Some(owner.clone()),
                previous_source_id: Some(source.clone()),
            });
        }
    }
    if lines.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(lines.len() * 128);
    for l in &lines {
        serde_json::to_writer(&mut out, l).ok()?;
        out.push(b'\n');
    }
    Some(out)
}

/// The paths the operation's takeovers name: `(path, from_owner, from_source_id)`.
fn taken_over(op: &StagedOperation) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for t in op.origin.takeovers.as_array().into_iter().flatten() {
        let owner = t["from_owner"].as_str().unwrap_or_default().to_string();
        let source = t["from_source_id"].as_str().unwrap_or_default().to_string();
        for p in t["paths"].as_array().into_iter().flatten() {
            if let Some(p) = p.as_str() {
                out.push((p.to_string(), owner.clone(), source.clone()));
            }
        }
    }
    out
}

/// Parses a path list whose bytes have the sha256 `want`; an error says why it is not
/// believed (another sha256: it was changed or replaced; a line that does not parse).
pub fn parse(bytes: &[u8], want: &PathsRef) -> Result<Vec<PathLine>, String> {
    let is = crate::hash::sha256_hex(bytes);
    if is != want.sha256 {
        return Err(format!(
            "{}: its sha256 is {is}, not the {} its entry names: it was changed after it was written, and is not believed",
            want.file, want.sha256
        ));
    }
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_slice(l).map_err(|e| format!("{} line {}: {e}", want.file, i + 1))
        })
        .collect()
}
