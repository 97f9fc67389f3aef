//! Saved plans (SPEC §19): `plan --out FILE` writes what it planned for each destination,
//! and `publish --plan FILE` plans again under each destination's lock and publishes only
//! where the new plan is the saved one; elsewhere the conflict `stale_plan`.
//!
//! A plan file holds the source's identity, whether `--force` (and `--allow-delete`) was
//! given, and per destination the sha256 of its effective settings, the pre-state's
//! sha256, the decision, the conflicts (kind, path, owner) and the actions (kind, path,
//! size, sha256, link target, what is replaced): what a reviewer approves. Times and
//! operation ids are not compared. It never holds credentials or tokens (the settings are
//! only hashed, and they hold none).
//!
//! Must never: publish anything a plan file did not list, or take a plan file for another
//! pipeline, destination or source as this one's.

use super::{Conflict, DestinationPlan};
use crate::config::{Config, Destination, PathMapping};
use crate::error::{Error, Result};
use crate::hash::sha256_hex;
use crate::model::{Decision, FileOp, SourceRef};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// `plan_format_version` of the plan files this build writes and reads.
pub(crate) const PLAN_FORMAT_VERSION: u32 = 1;

/// A saved plan, as `plan --out` writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanFile {
    /// Always [`PLAN_FORMAT_VERSION`].
    pub plan_format_version: u32,
    /// The pipeline planned.
    pub pipeline_id: String,
    /// When it was planned (informative; not compared).
    pub planned_at: String,
    /// The source planned: id, `created_at`, digest.
    pub source: SourceRef,
    /// `--force` was given: a publication of this plan is forced.
    pub force: bool,
    /// `--allow-delete N` was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_delete: Option<u64>,
    /// One entry per destination planned, in config order.
    pub destinations: Vec<SavedDestination>,
}

/// What was planned for one destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SavedDestination {
    /// Destination id.
    pub destination_id: String,
    /// The bundle path the source maps to.
    pub bundle_path: String,
    /// sha256 of the destination's effective settings ([`settings_sha256`]).
    pub settings_sha256: String,
    /// sha256 of the state planned against; `None`: no state.
    pub pre_state_sha256: Option<String>,
    /// The decision.
    pub decision: Decision,
    /// The conflicts.
    pub conflicts: Vec<SavedConflict>,
    /// Every action that writes or deletes (unchanged and retained paths are not actions).
    pub actions: Vec<SavedAction>,
}

/// A conflict as a plan file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SavedConflict {
    /// Kind.
    pub kind: String,
    /// Path, if any.
    pub path: Option<String>,
    /// Owner (`pipeline/destination`), if any.
    pub owner: Option<String>,
}

/// An action as a plan file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SavedAction {
    /// `file_create`, `file_overwrite`, `file_delete`, `link_create`, `link_overwrite`,
    /// `link_delete`.
    pub kind: String,
    /// Bundle-relative path.
    pub path: String,
    /// Size (files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// sha256 (files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Link target (links).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// What storage held there when planned: `file` or `link`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

impl SavedDestination {
    /// The entry of `plan` for `dest`, planned against a state whose sha256 is
    /// `pre_state_sha256`.
    pub(crate) fn of(
        config: &Config,
        dest: &Destination,
        plan: &DestinationPlan,
        pre_state_sha256: Option<String>,
    ) -> SavedDestination {
        let mut actions = Vec::new();
        for f in &plan.files {
            let kind = match f.op {
                FileOp::Create => "file_create",
                FileOp::Overwrite => "file_overwrite",
                FileOp::Delete => "file_delete",
                FileOp::Unchanged | FileOp::Retain => continue,
            };
            actions.push(SavedAction {
                kind: kind.into(),
                path: f.path.clone(),
                size: Some(f.size),
                sha256: Some(f.sha256.hex()),
                target: None,
                replaces: f.replaces.map(|r| r.as_str().into()),
            });
        }
        for l in &plan.links {
            let kind = match l.op {
                FileOp::Create => "link_create",
                FileOp::Overwrite => "link_overwrite",
                FileOp::Delete => "link_delete",
                FileOp::Unchanged | FileOp::Retain => continue,
            };
            actions.push(SavedAction {
                kind: kind.into(),
                path: l.path.clone(),
                size: None,
                sha256: None,
                target: Some(l.target.clone()),
                replaces: l.replaces.map(|r| r.as_str().into()),
            });
        }
        SavedDestination {
            destination_id: plan.destination_id.clone(),
            bundle_path: plan.bundle_path.to_string_lossy().into_owned(),
            settings_sha256: settings_sha256(config, dest),
            pre_state_sha256,
            decision: plan.decision,
            conflicts: plan.conflicts.iter().map(SavedConflict::of).collect(),
            actions,
        }
    }

    /// How `now` (the plan made again under the lock) differs from this saved entry, in
    /// words; `None` when it is the same plan.
    pub(crate) fn differences(&self, now: &SavedDestination) -> Option<String> {
        let mut why = Vec::new();
        if self.bundle_path != now.bundle_path {
            why.push(format!(
                "the bundle path was {}, now {}",
                self.bundle_path, now.bundle_path
            ));
        }
        if self.settings_sha256 != now.settings_sha256 {
            why.push("the destination's settings in the config changed".to_string());
        }
        if self.pre_state_sha256 != now.pre_state_sha256 {
            why.push(format!(
                "the state changed since (planned against {}, now {})",
                self.pre_state_sha256.as_deref().unwrap_or("no state"),
                now.pre_state_sha256.as_deref().unwrap_or("no state")
            ));
        }
        if self.decision != now.decision {
            why.push(format!(
                "the decision was {}, now {}",
                self.decision, now.decision
            ));
        }
        if self.conflicts != now.conflicts {
            why.push(format!(
                "the conflicts were {}, now {}",
                SavedConflict::list(&self.conflicts),
                SavedConflict::list(&now.conflicts)
            ));
        }
        if self.actions != now.actions {
            why.push(actions_differ(&self.actions, &now.actions));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

impl SavedConflict {
    fn of(c: &Conflict) -> SavedConflict {
        SavedConflict {
            kind: c.kind.to_string(),
            path: c.path.clone(),
            owner: c.owner.as_ref().map(ToString::to_string),
        }
    }

    fn list(cs: &[SavedConflict]) -> String {
        if cs.is_empty() {
            return "none".into();
        }
        let mut out = String::new();
        for (i, c) in cs.iter().enumerate().take(5) {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&c.kind);
            if let Some(p) = &c.path {
                let _ = write!(out, " at {p}");
            }
        }
        if cs.len() > 5 {
            let _ = write!(out, " and {} more", cs.len() - 5);
        }
        out
    }
}

/// The first few actions that differ, in words.
fn actions_differ(saved: &[SavedAction], now: &[SavedAction]) -> String {
    let saved_set: std::collections::HashSet<&SavedAction> = saved.iter().collect();
    let now_set: std::collections::HashSet<&SavedAction> = now.iter().collect();
    let gone: Vec<String> = (saved.iter())
        .filter(|a| !now_set.contains(a))
        .take(3)
        .map(|a| format!("{} {}", a.kind, a.path))
        .collect();
    let new: Vec<String> = (now.iter())
        .filter(|a| !saved_set.contains(a))
        .take(3)
        .map(|a| format!("{} {}", a.kind, a.path))
        .collect();
    let mut m = format!(
        "the actions differ ({} planned, {} now)",
        saved.len(),
        now.len()
    );
    if !gone.is_empty() {
        let _ = write!(m, "; no longer planned: {}", gone.join(", "));
    }
    if !new.is_empty() {
        let _ = write!(m, "; newly planned: {}", new.join(", "));
    }
    m
}

/// sha256 of what decides a destination's plan in its config: the pipeline, the
/// destination's id, backend, path, mapping, modes, transfer, takeover, s3 settings (no
/// credentials: the config holds none), releases and guard settings, verify's ignores.
pub(crate) fn settings_sha256(config: &Config, dest: &Destination) -> String {
    let mapping = match &dest.path_mapping {
        PathMapping::Fixed => "fixed".to_string(),
        PathMapping::SourceId => "source_id".to_string(),
        PathMapping::Template(t) => format!("template {t:?}"),
    };
    let s3 = dest.s3.as_ref().map(|s| {
        let mut block = serde_json::json!({
            "bucket": s.bucket,
            "prefix": s.prefix,
            "endpoint": s.endpoint,
            "region": s.region,
            "allow_http": s.allow_http,
            "virtual_hosted_style": s.virtual_hosted_style,
            "lease_seconds": s.lease_seconds,
            "concurrency": s.concurrency,
            "content_types": s.content_types,
            "cache_control": s.cache_control.iter().map(|r| (&r.glob, &r.value)).collect::<Vec<_>>(),
        });
        // Only azure's: an s3 destination's settings hash as before azure existed, so
        // its saved plans stay valid.
        if let Some(a) = &s.azure {
            block["azure"] = serde_json::json!((&a.account, a.use_emulator));
        }
        block
    });
    let settings = serde_json::json!({
        "pipeline_id": config.pipeline_id,
        "id": dest.id,
        "backend": dest.backend.to_string(),
        "path": dest.path,
        "path_mapping": mapping,
        "state_mode": dest.state_mode.to_string(),
        "reconciliation": dest.reconciliation.to_string(),
        "transfer": format!("{:?}", dest.transfer),
        "takeover": dest.takeover.to_string(),
        "s3": s3,
        "releases": dest.releases,
        "guard": format!("{:?}", dest.guard),
        "verify_ignore": dest.verify_ignore.patterns(),
    });
    sha256_hex(settings.to_string().as_bytes())
}

/// Reads and checks a plan file: a regular file of at most 64 MiB, opened without
/// following a symlink and without blocking ([`crate::input::read_bounded_file`];
/// docs/review-then-apply.md, "What a plan file may be"), whole, valid JSON of this format,
/// and (with `sha256`) exactly the file whose sha256 is given. Any error is a usage error
/// (exit 2) naming the file and what is accepted: nothing is planned or written.
pub(crate) fn read(file: &Path, sha256: Option<&str>) -> Result<(PlanFile, String)> {
    let bytes = crate::input::read_bounded_file(
        "--plan",
        file,
        crate::input::PLAN_FILE_BYTES,
        "a regular file `distributor plan --out` wrote, of at most 64 MiB, named by its own path (not through a symlink); nothing was planned or written",
    )?;
    let actual = sha256_hex(&bytes);
    if let Some(want) = sha256
        && !want.eq_ignore_ascii_case(&actual)
    {
        return Err(Error::Usage(format!(
            "--plan {}: its sha256 is {actual}, not the {want} --plan-sha256 names; nothing was planned or written",
            file.display()
        )));
    }
    let plan: PlanFile = serde_json::from_slice(&bytes).map_err(|e| {
        Error::Usage(format!(
            "--plan {}: not a plan file ({e}); accepted: a file `distributor plan --out` wrote, unchanged",
            file.display()
        ))
    })?;
    if plan.plan_format_version != PLAN_FORMAT_VERSION {
        return Err(Error::Usage(format!(
            "--plan {}: plan_format_version {} is not supported; accepted: {PLAN_FORMAT_VERSION} (plan again with this distributor)",
            file.display(),
            plan.plan_format_version
        )));
    }
    Ok((plan, actual))
}

impl PlanFile {
    /// The rendered file (pretty JSON, a final newline) and its sha256.
    pub(crate) fn render(&self) -> Result<(Vec<u8>, String)> {
        let mut bytes = serde_json::to_vec_pretty(self)?;
        bytes.push(b'\n');
        let sha = sha256_hex(&bytes);
        Ok((bytes, sha))
    }

    /// The saved entry of destination `id`.
    pub(crate) fn destination(&self, id: &str) -> Option<&SavedDestination> {
        self.destinations.iter().find(|d| d.destination_id == id)
    }

    /// Checks that this plan is for `config`'s pipeline and names only its destinations;
    /// returns the ids it names, in its order.
    pub(crate) fn destination_ids(&self, config: &Config, file: &Path) -> Result<Vec<String>> {
        if self.pipeline_id != config.pipeline_id {
            return Err(Error::Usage(format!(
                "--plan {}: planned for pipeline '{}', and {} is pipeline '{}'; accepted: a plan made with this config",
                file.display(),
                self.pipeline_id,
                config.file.display(),
                config.pipeline_id
            )));
        }
        let mut ids = Vec::new();
        for d in &self.destinations {
            if !config.destinations.iter().any(|c| c.id == d.destination_id) {
                return Err(Error::Usage(format!(
                    "--plan {}: plans destination '{}', which {} does not configure",
                    file.display(),
                    d.destination_id,
                    config.file.display()
                )));
            }
            ids.push(d.destination_id.clone());
        }
        if ids.is_empty() {
            return Err(Error::Usage(format!(
                "--plan {}: plans no destination",
                file.display()
            )));
        }
        Ok(ids)
    }
}

/// Writes a plan file whole or not at all: a temporary file beside it, synced, renamed
/// over it (readable by the reviewers: 0644).
pub(crate) fn write(out: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let name = out
        .file_name()
        .ok_or_else(|| Error::Usage(format!("--out {}: accepted is a file path", out.display())))?;
    let tmp = out.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let io = |e: std::io::Error, what: &str, p: &Path| {
        Error::Failed(format!(
            "--out {}: cannot {what} {}: {e}",
            out.display(),
            p.display()
        ))
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(|e| io(e, "create", &tmp))?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, out)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e, "write", out));
    }
    Ok(())
}

/// Turns `plan` into the refusal `stale_plan` (not forceable): nothing is written.
pub(crate) fn refuse_stale(plan: &mut DestinationPlan, why: &str) {
    plan.conflicts.push(Conflict::new(
        crate::model::ConflictKind::StalePlan,
        None,
        None,
        format!("the saved plan no longer holds: {why}; plan again and review"),
    ));
    plan.decision = Decision::Conflict;
    plan.message = "stale_plan: nothing written; not forceable".into();
    plan.files.clear();
    plan.links.clear();
    plan.outputs_unchanged = None;
    plan.new_state = None;
}
