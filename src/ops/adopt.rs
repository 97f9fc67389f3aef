//! `distributor releases adopt` (SPEC §15): turns the plain managed directory at a
//! releases destination's `path` into its first release. The managed files are
//! hard-linked into `<releases.dir>/<op>/` with the state, then the directory and a
//! symlink to the release change places in one `RENAME_EXCHANGE` (the commit point); the
//! old directory, now `.distributor-adopted-<op>` in `releases.dir`, is emptied of what
//! the release took over. Refused, with the list, while the directory holds anything its
//! state does not record: a release is a complete copy, and distributor neither adopts
//! nor deletes content it does not manage.

use crate::backend::StoreRead;
use crate::backend::releases::{Purpose, ReleaseStore};
use crate::config::{Config, Destination, ReleaseSettings};
use crate::error::{Error, ReleasesError, Result};
use crate::journal::Journal;
use crate::model::Decision;
use crate::ops::activation::{Activation, run_activation};
use crate::ops::common::{
    ExitCode, ReleasesOptions, ReleasesReport, check_recovery, for_each_releases_destination,
};
use crate::plan::DestinationPlan;
use crate::state::{STATE_FILE, State, StateFile};
use serde::Serialize;
use std::fmt::Write;

/// What to adopt and how.
pub(crate) type AdoptOptions = ReleasesOptions;

/// The adopt report (`releases adopt`).
pub(crate) type AdoptReport = ReleasesReport<DestinationAdopt>;

/// One destination's adoption.
#[derive(Debug, Serialize)]
pub(crate) struct DestinationAdopt {
    /// Destination id.
    pub destination_id: String,
    /// Its `path`.
    pub bundle_path: String,
    /// `planned`, `applied`, `skipped` (nothing to adopt), `refused` (unmanaged content)
    /// or `failed`.
    pub status: &'static str,
    /// The operation, whose id names the first release.
    pub operation_id: Option<String>,
    /// Managed files and links taken into the release.
    pub files: usize,
    /// Managed links.
    pub links: usize,
    /// What the state does not record (the refusal's list).
    pub unmanaged: Vec<String>,
    /// Why, in words.
    pub message: String,
}

impl AdoptReport {
    /// The report as text (at most 20 unmanaged paths per destination).
    pub(crate) fn to_text(&self) -> String {
        let mut out = String::new();
        for d in &self.destinations {
            let _ = writeln!(
                out,
                "destination {} -> {}: {}: {}",
                d.destination_id, d.bundle_path, d.status, d.message
            );
            for p in d.unmanaged.iter().take(20) {
                let _ = writeln!(out, "  unmanaged: {p}");
            }
            if d.unmanaged.len() > 20 {
                let _ = writeln!(
                    out,
                    "  ... and {} more (--json lists all)",
                    d.unmanaged.len() - 20
                );
            }
        }
        out
    }
}

/// Adopts the selected destinations; returns the report and the exit code (0; 3 when a
/// destination was refused for unmanaged content; the worst error's otherwise).
pub(crate) fn adopt(config: &Config, opts: &AdoptOptions) -> Result<(AdoptReport, ExitCode)> {
    for_each_releases_destination(
        config,
        opts,
        "releases adopt",
        "adopt makes the first release of a destination with a releases block",
        |dest, journal| {
            let mut d = DestinationAdopt {
                destination_id: dest.id.clone(),
                bundle_path: dest.path.to_string_lossy().into_owned(),
                status: "failed",
                operation_id: None,
                files: 0,
                links: 0,
                unmanaged: Vec::new(),
                message: String::new(),
            };
            let mut codes = Vec::new();
            match adopt_one(config, dest, opts, journal, &mut d) {
                Ok(()) if d.status == "refused" => codes.push(ExitCode::Conflict),
                Ok(()) => {}
                Err(e) => {
                    codes.push(e.exit_code());
                    d.status = "failed";
                    d.message = e.to_string();
                }
            }
            (d, codes)
        },
    )
}

fn adopt_one(
    config: &Config,
    dest: &Destination,
    opts: &AdoptOptions,
    journal: Option<&mut Journal>,
    d: &mut DestinationAdopt,
) -> Result<()> {
    let settings = dest.releases.as_ref().ok_or_else(|| {
        Error::Usage(format!(
            "destination '{}' has no releases block; there is nothing to adopt into",
            dest.id
        ))
    })?;
    let lock = (!opts.dry_run).then_some(crate::backend::LockRequest {
        timeout: opts.lock_timeout,
        create: true,
        actor: &opts.actor,
        history: journal
            .as_deref()
            .map(|j| j as &dyn crate::backend::History),
    });
    let store = ReleaseStore::open(&dest.path, settings, lock)?;
    let Some(store) = store.filter(|s| s.is_plain()) else {
        d.status = "skipped";
        d.message = if dest.path.is_symlink() {
            "already a release: path is distributor's symlink".into()
        } else {
            "nothing at path: the first publication makes the first release".into()
        };
        return Ok(());
    };
    check_adoptable(&store, dest, settings, journal.as_deref())?;
    let state = managed_state(&store, dest)?;
    d.unmanaged = unmanaged(&store, &state)?;
    d.files = state.outputs.len();
    d.links = state.links.len();
    if !d.unmanaged.is_empty() {
        d.status = "refused";
        d.message = format!(
            "{} path(s) hold content its state does not record; a release is a complete copy, and distributor neither adopts nor deletes what it does not manage: move them away, or publish them, then adopt",
            d.unmanaged.len()
        );
        return Ok(());
    }
    let Some(journal) = journal else {
        d.status = "planned";
        d.message = format!(
            "would make a first release of {} files and {} links in {}, and swap {} for a symlink to it",
            d.files,
            d.links,
            settings.dir.display(),
            dest.path.display()
        );
        return Ok(());
    };
    let op = activate(config, dest, opts, journal, &store, state)?;
    d.status = "applied";
    d.message = format!(
        "release {op} holds its {} files and {} links; {} names it",
        d.files,
        d.links,
        dest.path.display()
    );
    d.operation_id = Some(op);
    Ok(())
}

/// Refuses to adopt a directory that an interrupted in-place publication left, that the
/// journal says wants recovery, or that stands on another filesystem than releases.dir.
fn check_adoptable(
    store: &ReleaseStore,
    dest: &Destination,
    settings: &ReleaseSettings,
    journal: Option<&Journal>,
) -> Result<()> {
    if !store.plain_staging()?.is_empty() {
        return Err(Error::RecoveryRequired(format!(
            "{} holds an interrupted in-place publication; run `distributor recover` first",
            dest.path.display()
        )));
    }
    if let Some(j) = journal {
        check_recovery(j, store)?;
    }
    // Known once releases.dir exists (a dry run before it does cannot tell).
    if let Ok(false) = store.same_filesystem() {
        return Err(ReleasesError::DifferentFilesystems {
            path: dest.path.clone(),
            dir: settings.dir.clone(),
        }
        .into());
    }
    Ok(())
}

/// The state of the plain directory, which must record what distributor manages there.
fn managed_state(store: &ReleaseStore, dest: &Destination) -> Result<State> {
    match store.read_state()?.parse() {
        StateFile::Valid(s) => Ok(s),
        StateFile::Absent => Err(ReleasesError::NothingManaged {
            path: dest.path.clone(),
        }
        .into()),
        StateFile::Invalid(why) => Err(ReleasesError::InvalidState {
            path: dest.path.clone(),
            why,
        }
        .into()),
        StateFile::Untrusted(why, _) => Err(Error::Untrusted(why)),
    }
}

/// What the directory holds that its state does not record (distributor's own files
/// aside): what a release cannot take over.
fn unmanaged(store: &ReleaseStore, state: &State) -> Result<Vec<String>> {
    let recorded: std::collections::HashSet<&str> = (state.outputs.iter())
        .map(|o| o.path.as_str())
        .chain(state.links.iter().map(|l| l.path.as_str()))
        .collect();
    let own = |p: &str| {
        p == STATE_FILE
            || p == crate::backend::local::LOCK_FILE
            || p.starts_with(&format!("{}/", crate::backend::local::STAGING_DIR))
            || p.starts_with(&format!("{}/", crate::backend::local::records::RECORD_DIR))
    };
    Ok((store.list_files()?.into_iter())
        .filter(|p| !own(p) && !recorded.contains(p.as_str()))
        .collect())
}

/// Makes the directory's managed content the first release, through the one activation
/// lifecycle; returns the operation id, which names the release.
fn activate(
    config: &Config,
    dest: &Destination,
    opts: &AdoptOptions,
    journal: &mut Journal,
    store: &ReleaseStore,
    state: State,
) -> Result<String> {
    let plan = DestinationPlan {
        destination_id: dest.id.clone(),
        bundle_path: dest.path.clone(),
        state_mode: dest.state_mode,
        takeover_mode: dest.takeover,
        decision: Decision::Unchanged,
        previous: None,
        takeovers: vec![],
        conflicts: vec![],
        files: vec![],
        outputs_unchanged: None,
        links: vec![],
        message: String::new(),
        new_state: Some(state),
    };
    let how = Activation {
        command: "adopt",
        decision: crate::model::RecordedDecision::Adopt,
        actor: &opts.actor,
        reason: opts.reason.as_deref(),
        pipeline_id: &config.pipeline_id,
    };
    let detail = |staged: &crate::execute::StagedOperation| {
        format!(
            "the plain directory {} became release {}",
            staged.bundle_path.display(),
            staged.operation_id
        )
    };
    run_activation(&plan, journal, store, Purpose::Adopt, &how, &detail)
}
