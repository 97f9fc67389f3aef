//! `distributor releases settings` (SPEC §15, issue 27): records a config's `releases`
//! settings (`keep`, `max_age`, `path`) in `releases.dir` in place of the recorded ones,
//! so that changing `releases.keep` is a command and not a hand edit of
//! `.distributor/releases.json`. Under the destination lock, journaled as an operation
//! (command `releases settings`, decision `settings`, event `settings_changed` saying
//! from what to what). It never removes or activates a release: the next retention
//! applies the new settings.

use crate::backend::releases::ReleaseStore;
use crate::backend::releases::log::RecordedSettings;
use crate::clock::now;
use crate::config::{Config, Destination};
use crate::error::{Error, Result};
use crate::journal::{Event, Journal, OperationRecord};
use crate::model::RecordedDecision;
use crate::ops::common::{
    ExitCode, ReleasesOptions, ReleasesReport, check_recovery, for_each_releases_destination,
};
use serde::Serialize;
use std::fmt::Write;

/// What to record and how.
pub(crate) type SettingsOptions = ReleasesOptions;

/// The report of `releases settings`.
pub(crate) type SettingsReport = ReleasesReport<DestinationSettings>;

/// One destination's settings.
#[derive(Debug, Serialize)]
pub(crate) struct DestinationSettings {
    /// Destination id.
    pub destination_id: String,
    /// Its `releases.dir`.
    pub releases_dir: String,
    /// `recorded` (already this config's), `changed` (or, in a dry run, would be),
    /// `none_yet` (nothing published: the first publication records them), `failed`.
    pub status: &'static str,
    /// The settings recorded before, as `path …, keep …, max_age …`.
    pub before: Option<String>,
    /// This config's settings.
    pub after: String,
    /// The journaled operation, when they were changed.
    pub operation_id: Option<String>,
    /// The error, when it failed.
    pub error: Option<String>,
}

fn show(s: &RecordedSettings) -> String {
    format!(
        "path {}, keep {}, max_age {}",
        s.path.display(),
        s.keep,
        s.max_age.as_deref().unwrap_or("(none)")
    )
}

/// What differs, as `keep 3 -> 5, max_age (none) -> 30d`.
fn changes(before: &RecordedSettings, after: &RecordedSettings) -> String {
    let age = |s: &RecordedSettings| s.max_age.clone().unwrap_or_else(|| "(none)".into());
    let mut out = Vec::new();
    if before.path != after.path {
        out.push(format!(
            "path {} -> {}",
            before.path.display(),
            after.path.display()
        ));
    }
    if before.keep != after.keep {
        out.push(format!("keep {} -> {}", before.keep, after.keep));
    }
    if before.max_age != after.max_age {
        out.push(format!("max_age {} -> {}", age(before), age(after)));
    }
    out.join(", ")
}

impl SettingsReport {
    /// The report as text.
    pub(crate) fn to_text(&self) -> String {
        let mut out = String::new();
        for d in &self.destinations {
            let what = match (d.status, self.dry_run) {
                ("changed", true) => "would record",
                ("changed", false) => "recorded",
                ("recorded", _) => "already recorded",
                ("none_yet", _) => "nothing published yet; the first publication records",
                _ => "failed",
            };
            let _ = writeln!(
                out,
                "destination {} (releases in {}): {what} {}",
                d.destination_id, d.releases_dir, d.after
            );
            if let (Some(b), "changed") = (&d.before, d.status) {
                let _ = writeln!(out, "  before: {b}");
            }
            if let Some(op) = &d.operation_id {
                let _ = writeln!(out, "  operation: {op}");
            }
            if let Some(e) = &d.error {
                let _ = writeln!(out, "  error: {e}");
            }
        }
        out
    }
}

/// Records the config's settings at the selected destinations; returns the report and
/// the exit code (0, or the worst error's).
pub(crate) fn record_settings(
    config: &Config,
    opts: &SettingsOptions,
) -> Result<(SettingsReport, ExitCode)> {
    for_each_releases_destination(
        config,
        opts,
        "releases settings",
        "releases settings records the releases block of a destination that has one",
        |dest, journal| {
            let mut d = DestinationSettings {
                destination_id: dest.id.clone(),
                releases_dir: (dest.releases.as_ref())
                    .map(|r| r.dir.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                status: "failed",
                before: None,
                after: String::new(),
                operation_id: None,
                error: None,
            };
            let mut codes = Vec::new();
            if let Err(e) = one(config, dest, opts, journal, &mut d) {
                codes.push(e.exit_code());
                d.status = "failed";
                d.error = Some(e.to_string());
            }
            (d, codes)
        },
    )
}

fn one(
    config: &Config,
    dest: &Destination,
    opts: &SettingsOptions,
    journal: Option<&mut Journal>,
    d: &mut DestinationSettings,
) -> Result<()> {
    let settings = dest.releases.as_ref().ok_or_else(|| {
        Error::Usage(format!(
            "destination '{}' has no releases block; there are no releases settings to record",
            dest.id
        ))
    })?;
    let after = RecordedSettings::of(&dest.path, settings);
    d.after = show(&after);
    let lock = (!opts.dry_run).then_some(crate::backend::LockRequest {
        timeout: opts.lock_timeout,
        create: false,
        actor: &opts.actor,
        history: journal
            .as_deref()
            .map(|j| j as &dyn crate::backend::History),
    });
    let Some(store) = ReleaseStore::open(&dest.path, settings, lock)? else {
        d.status = "none_yet";
        return Ok(());
    };
    let before = store.settings_recorded()?;
    d.before = before.as_ref().map(show);
    if before.is_none() {
        d.status = "none_yet";
        return Ok(());
    }
    if before.as_ref() == Some(&after) {
        d.status = "recorded";
        return Ok(());
    }
    d.status = "changed";
    let Some(journal) = journal else {
        return Ok(());
    };
    check_recovery(journal, &store)?;
    store.replace_settings()?;
    let detail = before
        .as_ref()
        .map_or_else(|| d.after.clone(), |b| changes(b, &after));
    let op_id = uuid::Uuid::new_v4().to_string();
    // None when no state file can be read: the row holds the empty text as pre and post.
    let state_sha = crate::backend::state_hash(&store)?.ok().flatten();
    let record = OperationRecord {
        operation_id: op_id.clone(),
        started_at: now(),
        command: "releases settings".into(),
        actor: opts.actor.clone(),
        reason: opts.reason.clone(),
        pipeline_id: config.pipeline_id.clone(),
        destination_id: dest.id.clone(),
        bundle_path: dest.path.to_string_lossy().into_owned(),
        state_mode: dest.state_mode,
        decision: RecordedDecision::Settings,
        takeover_mode: dest.takeover,
        previous_owner: None,
        previous_source: None,
        source: crate::model::SourceRef::default(),
        pre_state_sha256: state_sha,
        post_state_sha256: state_sha,
        takeovers_json: "[]".into(),
        plan_json: "{}".into(),
    };
    journal.finished_operation(
        &record,
        &[
            (Event::SettingsChanged, Some(&detail)),
            (Event::Completed, None),
        ],
        &[],
    )?;
    d.operation_id = Some(op_id);
    Ok(())
}
