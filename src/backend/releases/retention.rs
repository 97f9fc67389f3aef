//! Retention (SPEC §15): which releases are kept (the active one, the one before it,
//! those a staged operation or a held rollback needs), the removal of the others, and
//! its log entry; and the placement fingerprints of the active release taken after it.

use super::{Expected, Link, LogView, ReleaseStore, carry, log, path_changed, staged_releases};
use crate::backend::types::{Fingerprint, StagingEntry};
use crate::error::{IoContext, Result};
use crate::fs::{Dir, split};
use rustix::fs::FileType;

/// How a verdict kept because `path` changed while retention ran begins (the rest says
/// how `path` changed).
const STOPPED: &str = "kept: retention stopped, path_changed: ";
/// How a verdict kept because the release's name holds another directory begins
/// (docs/operations.md, "Release identity").
const MOVED: &str = "kept: release_moved: ";

/// Who a prune's log entry names: the actor, the pipeline and the journal that ran it.
#[derive(Debug, Clone, Copy)]
pub struct PruneBy<'a> {
    /// Who ran it.
    pub actor: &'a str,
    /// The pipeline.
    pub pipeline_id: &'a str,
    /// The journal that recorded it.
    pub journal_id: Option<&'a str>,
}

impl ReleaseStore {
    /// Why retention removes nothing now, if it does not: `path_changed`, bad log
    /// entries, an old activation log that cannot be migrated.
    pub fn retention_blocked(&self, view: &LogView) -> Option<String> {
        if let Some(why) = &self.path_changed {
            return Some(format!("path_changed: {why}"));
        }
        if let Some(why) = self.release_moved() {
            return Some(format!("release_moved: {why}"));
        }
        view.untrusted()
    }

    /// The release directories `releases.dir` holds (operation ids), sorted.
    pub fn releases(&self) -> Result<std::collections::BTreeSet<String>> {
        let Some(root) = &self.root else {
            return Ok(Default::default());
        };
        Ok(root
            .dir()
            .entries()
            .ctx("list", &self.settings.dir)?
            .into_iter()
            .filter(|(n, k)| *k == FileType::Directory && uuid::Uuid::parse_str(n).is_ok())
            .map(|(n, _)| n)
            .collect())
    }

    /// Decides retention (SPEC §15) for every release, and unless `dry_run` removes the
    /// ones it does not keep. Needs the lock unless `dry_run`. The active release and the
    /// one before it come from the log; while `path` is not what the last logged
    /// activation made, or the log has bad entries, every release is kept. `progress`
    /// hears of each release removed.
    pub fn prune(
        &self,
        dry_run: bool,
        progress: crate::progress::Ticker<'_>,
    ) -> Result<Vec<log::Verdict>> {
        let root = self.root()?;
        let view = self.log_view()?;
        let mut in_use = std::collections::BTreeSet::new();
        for e in root.staging_entries()? {
            if let StagingEntry::Operation(op) | StagingEntry::Unfinished(op) = e {
                if let Ok(Some(r)) = root.read_record(&op)
                    && let Some(before) = r.releases.and_then(|r| r.active_before)
                {
                    in_use.insert(before);
                }
                in_use.insert(op);
            }
        }
        let present = self.releases()?;
        if let Some(why) = self.retention_blocked(&view) {
            if !dry_run {
                eprintln!(
                    "warning: {}: retention removed nothing: {why}",
                    self.path.display()
                );
            }
            return Ok(present
                .into_iter()
                .map(|r| log::Verdict {
                    activated_at: (view.activations.iter())
                        .rfind(|a| a.release == r)
                        .map(|a| a.activated_at.clone()),
                    release: r,
                    keep: true,
                    reason: format!("kept: retention removes nothing while {why}"),
                    staged_at: None,
                })
                .collect());
        }
        let verdicts = log::decide(
            &view.activations,
            &present,
            view.active(),
            &in_use,
            self.settings.keep,
            self.settings.max_age_seconds(),
            chrono::Utc::now().timestamp(),
        );
        let mut verdicts = verdicts;
        log::judge_staged(
            &mut verdicts,
            &staged_releases(&view),
            &in_use,
            self.settings.stage_max_age_seconds(),
            chrono::Utc::now().timestamp(),
        );
        if dry_run {
            // What the real run would keep: a name holding another directory.
            for v in verdicts.iter_mut().filter(|v| !v.keep) {
                if let Err(why) =
                    self.open_release_checked(&v.release, removable(&view, v), &view)?
                {
                    v.keep = true;
                    v.reason = format!("{MOVED}{why}");
                }
            }
        } else {
            self.remove_doomed(&mut verdicts, &view, progress)?;
        }
        Ok(verdicts)
    }

    /// Removes the releases `verdicts` do not keep, `path` and each release's name
    /// checked again before each removal; a release kept after all says why.
    fn remove_doomed(
        &self,
        verdicts: &mut [log::Verdict],
        view: &LogView,
        progress: crate::progress::Ticker<'_>,
    ) -> Result<()> {
        let root = self.root()?;
        let doomed = verdicts.iter().filter(|v| !v.keep).count() as u64;
        progress.start(
            "releases removed",
            Some(doomed),
            crate::progress::Bytes::Uncounted,
        );
        let mut stopped: Option<String> = None;
        for v in verdicts.iter_mut().filter(|v| !v.keep) {
            crate::failpoint::hit("during_prune");
            // `path` again before each removal (SPEC §17): should it no longer be the
            // symlink the last logged activation made, nothing more is removed.
            if stopped.is_none() {
                stopped = match self.current() {
                    Ok(link) => path_changed(&link, view, &self.path),
                    Err(e) => Some(format!("{} cannot be read: {e}", self.path.display())),
                };
            }
            if let Some(why) = &stopped {
                v.keep = true;
                v.reason = format!("{STOPPED}{why}");
                continue;
            }
            // What the name holds now must be the release the log recorded
            // (docs/operations.md, "Release identity"); anything else is kept.
            match self.open_release_checked(&v.release, removable(view, v), view)? {
                Ok(release) => {
                    carry::remove_release(root.dir(), &v.release, &release)?;
                    progress.done(1);
                }
                Err(why) => {
                    v.keep = true;
                    v.reason = format!("{MOVED}{why}");
                    eprintln!(
                        "warning: {}: retention kept it: release_moved: {why}",
                        self.settings.dir.join(&v.release).display()
                    );
                }
            }
        }
        if let Some(why) = stopped {
            eprintln!(
                "warning: {}: retention stopped: path_changed: {why}",
                self.path.display()
            );
        }
        Ok(())
    }

    /// Adds the entry of prune operation `op` that removed `removed` to the log (SPEC
    /// §18: at most 50 named, and their count). Needs the lock.
    pub fn log_prune(
        &self,
        op: &str,
        by: &PruneBy<'_>,
        destination_id: &str,
        removed: &[String],
    ) -> Result<()> {
        use crate::backend::local::log::{self as dlog, Entry, MAX_REMOVED_NAMED};
        let mut e = Entry::new(op, "prune", "prune");
        e.actor = by.actor.to_string();
        e.journal_id = by.journal_id.map(str::to_string);
        let pipeline_id = by.pipeline_id;
        e.pipeline_id = pipeline_id.to_string();
        e.destination_id = destination_id.to_string();
        e.removed_releases = removed.iter().take(MAX_REMOVED_NAMED).cloned().collect();
        e.removed_count = Some(removed.len() as u64);
        e.counts.deleted = removed.len() as u64;
        dlog::append(self.root()?.dir(), e).map(|_| ())
    }

    /// Adds the entry of the retention that ran after operation `op`'s activation and
    /// removed `removed` (command `prune`, the activation's pipeline, destination and
    /// actor). Needs the lock.
    pub fn log_retention(&self, op: &str, removed: &[String]) -> Result<()> {
        let view = self.log_view()?;
        let Some(by) = view.log.entries.iter().rfind(|e| e.operation_id == op) else {
            return Ok(());
        };
        let who = PruneBy {
            actor: &by.actor,
            pipeline_id: &by.pipeline_id,
            journal_id: by.journal_id.as_deref(),
        };
        self.log_prune(op, &who, &by.destination_id, removed)
    }

    /// What retention would decide now for every release, oldest activation first
    /// (never-activated releases last): `status` and `prune --dry-run`.
    pub fn retention(&self) -> Result<Vec<log::Verdict>> {
        if self.root.is_none() {
            return Ok(Vec::new());
        }
        let verdicts = self.prune(true, crate::progress::Ticker::NONE)?;
        self.in_activation_order(verdicts)
    }

    /// `verdicts` ordered by last activation, oldest first; never-activated ones last.
    pub fn in_activation_order(&self, mut v: Vec<log::Verdict>) -> Result<Vec<log::Verdict>> {
        let log = self.activations()?;
        let last = |r: &str| log.iter().rposition(|a| a.release == r);
        v.sort_by_key(|x| (last(&x.release).is_none(), last(&x.release)));
        Ok(v)
    }

    /// Placement fingerprints of the active release's files, taken now (after the last
    /// link and unlink of the operation, pruning included: SPEC §13): `outputs` are the
    /// recorded outputs' paths and hashes.
    pub fn fingerprints(
        &self,
        outputs: &[(&str, crate::hash::ContentHash)],
    ) -> Result<Vec<(String, Fingerprint)>> {
        let root = self.root()?;
        let Link::Release(r) = self.current()? else {
            return Ok(Vec::new());
        };
        let release = root
            .dir()
            .open_dir(&r)
            .ctx("open", self.settings.dir.join(&r))?;
        // One lstat per file, on several threads (outputs come in path order: each thread
        // takes runs of one directory, opened once per run).
        let found = crate::parallel::try_map(
            outputs,
            foldhash::HashMap::<&str, Option<Dir>>::default,
            |&(rel, sha), dirs| {
                let (d, n) = split(rel);
                let dir = dirs.entry(d).or_insert_with(|| release.open_dir(d).ok());
                let Some(dir) = dir else { return Ok(None) };
                Ok(match dir.stat(n) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
                        Some((
                            rel.to_string(),
                            crate::backend::local::bundle::fingerprint(&st, sha),
                        ))
                    }
                    _ => None,
                })
            },
        )?;
        Ok(found.into_iter().flatten().collect())
    }
}

/// What a release retention removes must be: the device and inode the log recorded for
/// it, owned by distributor's uid, and a state naming it (docs/operations.md, "Release
/// identity").
fn removable(view: &LogView, v: &log::Verdict) -> Expected {
    Expected {
        identity: view.identity_of(&v.release),
        state: true,
    }
}

/// Why retention stopped before a removal, when `path` changed while it ran (SPEC §17):
/// from the verdicts [`ReleaseStore::prune`] returned.
pub fn stopped(verdicts: &[log::Verdict]) -> Option<String> {
    verdicts
        .iter()
        .find_map(|v| v.reason.strip_prefix(STOPPED).map(str::to_string))
}
