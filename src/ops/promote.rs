//! `distributor promote` (SPEC §19): activates a release `publish --stage` built, in one
//! atomic step, through the one lifecycle (an activation that publishes nothing, as a
//! rollback's is: [`crate::ops::activation::run_activation`]). It is journaled and logged as a
//! publication of the staged source (decision `promote`): it lifts that owner's
//! `rolled_back` holds, and a later rollback undoes it.
//!
//! It promotes only while the active release is the one the staged release was built
//! against (the stage's log entry, `staged_against`); otherwise the conflict
//! `stale_stage` (not forceable: stage again). It is guarded like a publication: the
//! deletions it makes visible are judged against `guard` when it runs, and
//! `--allow-delete N` lifts `mass_delete`. The staged release is read whole and checked
//! against its state before `path` moves.
//!
//! Must never: activate a release no `stage` entry names, one promoted already, or one
//! built against another release than the active one.

use crate::backend::StoreRead;
use crate::backend::local::log::Entry;
use crate::backend::releases::{Purpose, ReleaseStore};
use crate::config::{Config, Destination};
use crate::error::{Error, ReleasesError, Result};
use crate::journal::Journal;
use crate::model::{ConflictKind, Decision, Owner, SourceRef};
use crate::ops::activation::{Activation, run_activation, source_shown, state_change};
use crate::ops::common::{Activations, Outcome, journal_or_view};
use crate::plan::PlanFailed;
use crate::plan::{Conflict, DestinationPlan, Previous};
use crate::report::{DestinationReport, Status};
use crate::state::{State, StateFile};
use std::path::PathBuf;
use std::time::Duration;

/// What to promote and how.
#[derive(Debug, Clone)]
pub(crate) struct PromoteOptions {
    /// `(destination id, staged operation id or its unique start)`, in order.
    pub targets: Vec<(String, String)>,
    /// Plan only; write nothing anywhere.
    pub dry_run: bool,
    /// `--allow-delete N`: the deletion guard (`mass_delete`) lifted up to N deletions.
    pub allow_delete: Option<u64>,
    /// Journal file (already resolved).
    pub journal: PathBuf,
    /// How long to wait for a destination lock.
    pub lock_timeout: Duration,
    /// Who promotes.
    pub actor: String,
    /// Why (`--reason`, `DISTRIBUTOR_REASON`, `X-Distributor-Reason`), bounded; `None`
    /// when none was given.
    pub reason: Option<String>,
}

/// Promotes each named staged release.
pub(crate) fn promote(config: &Config, opts: &PromoteOptions) -> Result<Outcome> {
    let mut selected = Vec::new();
    for (id, op) in &opts.targets {
        let dest = config.select(std::slice::from_ref(id))?.remove(0);
        if dest.releases.is_none() {
            return Err(Error::Usage(format!(
                "destination '{id}' has no releases block: only a releases destination stages and promotes releases (SPEC §19)"
            )));
        }
        if op.is_empty() || !op.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(Error::Usage(format!(
                "promote {id} '{op}': accepted is the staged operation's id, or its unique start (as `publish --stage` and `distributor status` show it)"
            )));
        }
        selected.push((dest, op.as_str()));
    }
    let (mut journal, view) = journal_or_view(opts.dry_run, &opts.journal)?;
    let mut activations = Activations::default();
    for (dest, op) in selected {
        let result = promote_one(config, dest, op, opts, journal.as_mut(), view.as_ref());
        activations.push(dest, result);
    }
    Ok(activations.outcome(config, "promote", opts.dry_run, opts.reason.as_deref()))
}
/// The stage entry of the staged release `prefix` names, from the destination log; a
/// clear error when no staged release matches, several do, it was promoted already, or
/// retention removed it.
fn find_stage(store: &ReleaseStore, dest: &Destination, prefix: &str) -> Result<Entry> {
    let view = store.log_view()?;
    if let Some(why) = view.untrusted() {
        return Err(Error::Failed(format!("{why}; nothing promoted")));
    }
    let entries = &view.log.entries;
    let stages: Vec<&Entry> = (entries.iter())
        .filter(|e| {
            e.release_staged
                .as_deref()
                .is_some_and(|r| r.starts_with(prefix))
        })
        .collect();
    let stage = match stages.as_slice() {
        [one] => *one,
        [] => {
            let other = (entries.iter()).rfind(|e| e.operation_id.starts_with(prefix));
            return Err(Error::Failed(match other {
                Some(e) => format!(
                    "operation {} is not a staged release of destination '{}' (its log entry is {}); `distributor status` lists staged releases",
                    e.operation_id,
                    dest.id,
                    e.describe()
                ),
                None => format!(
                    "no staged release {prefix} in {} (unknown operation); `distributor status` lists staged releases",
                    store.path().display()
                ),
            }));
        }
        many => {
            return Err(Error::Usage(format!(
                "'{prefix}' is the start of several staged releases ({}); give more of the operation id",
                many.iter()
                    .filter_map(|e| e.release_staged.as_deref())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    };
    let release = stage.operation_id.clone();
    if let Some(p) = (entries.iter())
        .find(|e| e.command == "promote" && e.release_activated.as_deref() == Some(&release))
    {
        return Err(ReleasesError::PromotedAlready {
            release,
            operation_id: p.operation_id.clone(),
            entry: p.describe(),
        }
        .into());
    }
    if !store.releases()?.contains(&release) {
        let pruned = (entries.iter()).find(|e| e.removed_releases.contains(&release));
        return Err(Error::Failed(format!(
            "staged release {release} is gone from {}{}; nothing promoted: stage again",
            store.record_base()?.path().display(),
            match pruned {
                Some(e) => format!(
                    " (pruned: retention removed it, {}; a staged release is kept for releases.stage_max_age)",
                    e.describe()
                ),
                None => " (removed by hand?)".to_string(),
            }
        )));
    }
    Ok(stage.clone())
}

/// Opens (and, unless a dry run, locks) a destination to promote a staged release to; one
/// without a `releases` block is a usage error.
fn open_for_promote(
    dest: &Destination,
    opts: &PromoteOptions,
    journal: Option<&Journal>,
    view: Option<&crate::journal::JournalView>,
) -> Result<ReleaseStore> {
    let settings = dest
        .releases
        .as_ref()
        .ok_or_else(|| Error::Usage(format!("destination '{}' has no releases block", dest.id)))?;
    let how = crate::backend::LockRequest {
        timeout: opts.lock_timeout,
        create: false,
        actor: &opts.actor,
        history: journal.map(|j| j as &dyn crate::backend::History),
    };
    let open = crate::ops::activation::Opening {
        lock: (!opts.dry_run).then_some(how),
        nothing_there: "nothing was staged there; nothing to promote",
        nothing_done: "nothing promoted",
    };
    crate::ops::activation::open_releases(dest, settings, &open, journal, view)
}

/// The conflict when what a promote builds on is not what the stage was staged against:
/// `path` changed by hand (`path_changed`), the active release's name holds another
/// directory (`release_moved`), or another release activated since (`stale_stage`,
/// `active` being the logged one).
fn judge_base(
    store: &ReleaseStore,
    stage: &Entry,
    active: Option<&str>,
    release: &str,
    plan: &mut DestinationPlan,
) {
    if let Some(why) = store.path_changed() {
        plan.conflicts.push(Conflict::new(
            ConflictKind::PathChanged,
            None,
            None,
            why.to_string(),
        ));
    } else if let Some(why) = store.release_moved() {
        plan.conflicts
            .push(Conflict::new(ConflictKind::ReleaseMoved, None, None, why));
    } else if active != stage.staged_against.as_deref() {
        let show = |r: Option<&str>| r.map_or("no release".to_string(), |r| format!("release {r}"));
        plan.conflicts.push(Conflict::new(
            ConflictKind::StaleStage,
            None,
            None,
            format!(
                "release {release} was staged against {}, but {} is active now (another publication, rollback or promote came in between); promoting it would undo that: stage again",
                show(stage.staged_against.as_deref()),
                show(active)
            ),
        ));
    }
}

/// A promote its conflicts refuse: its decision and message say so, and the refusal is
/// journaled (SPEC §16), as a publication's is, unless a dry run.
fn refuse(
    config: &Config,
    opts: &PromoteOptions,
    mut plan: DestinationPlan,
    journal: Option<&mut Journal>,
    source: &SourceRef,
) -> std::result::Result<DestinationReport, PlanFailed> {
    plan.decision = Decision::Conflict;
    let kinds: Vec<&str> = plan.conflicts.iter().map(|c| c.kind.as_str()).collect();
    plan.message = format!("not promoted: {}", kinds.join(", "));
    let op = match journal {
        Some(j) => Some(crate::ops::common::journal_refused(
            j,
            "promote",
            (&opts.actor, opts.reason.as_deref()),
            &config.pipeline_id,
            &plan,
            source.clone(),
        )?),
        None => None,
    };
    Ok(DestinationReport::from_plan(plan, Status::Conflict, op))
}

/// Plans and (unless a dry run) carries out the promote of one staged release.
fn promote_one(
    config: &Config,
    dest: &Destination,
    prefix: &str,
    opts: &PromoteOptions,
    journal: Option<&mut Journal>,
    view: Option<&crate::journal::JournalView>,
) -> std::result::Result<(DestinationReport, SourceRef), PlanFailed> {
    let store = open_for_promote(dest, opts, journal.as_deref(), view)?;
    let stage = find_stage(&store, dest, prefix)?;
    let release = stage.operation_id.clone();
    let (to, identity) = store.release_state(&release)?;
    let me = Owner::new(&config.pipeline_id, &dest.id);
    let active = store.log_view()?.active().map(str::to_string);
    let from = match store.read_state()?.parse() {
        StateFile::Valid(s) => Some(s),
        StateFile::Absent => None,
        StateFile::Invalid(why) => {
            return Err(Error::from(ReleasesError::InvalidActiveState {
                release: None,
                why,
                outcome: "; nothing promoted",
            })
            .into());
        }
        StateFile::Untrusted(why, _) => return Err(Error::Untrusted(why).into()),
    };
    let mut plan = plan(dest, &me, from.as_ref(), to, &release)?;
    let source = (plan.new_state.as_ref())
        .and_then(|s| s.owner(&me))
        .map(|o| o.source.clone())
        .ok_or_else(|| {
            Error::from(ReleasesError::NoRecordsOf {
                staged: true,
                release: release.clone(),
                owner: me.to_string(),
                outcome: "nothing promoted",
            })
        })?;
    // Judged when it runs (SPEC §19, §22): the path, the stage's base, the guard.
    judge_base(&store, &stage, active.as_deref(), &release, &mut plan);
    guard(dest, &me, from.as_ref(), opts.allow_delete, &mut plan);
    let mut journal = journal;
    if !plan.conflicts.is_empty() {
        let report = refuse(config, opts, plan, journal.as_deref_mut(), &source)?;
        return Ok((report, source));
    }
    let Some(journal) = journal else {
        return Ok((
            DestinationReport::from_plan(plan, Status::Planned, None),
            source,
        ));
    };
    // Read whole and checked against its state before `path` moves.
    if let Some(staged_state) = &plan.new_state {
        store.verify_release(&release, identity, staged_state)?;
    }
    let how = Activation {
        command: "promote",
        decision: Decision::Promote.into(),
        actor: &opts.actor,
        reason: opts.reason.as_deref(),
        pipeline_id: &config.pipeline_id,
    };
    let detail = |staged: &crate::execute::StagedOperation| promote_detail(&release, staged);
    let purpose = Purpose::Promote {
        release: release.clone(),
        identity,
    };
    match run_activation(&plan, journal, &store, purpose, &how, &detail) {
        Ok(op) => Ok((
            DestinationReport::from_plan(plan, Status::Applied, Some(op)),
            source,
        )),
        Err(e) => Err(PlanFailed::new(plan, e)),
    }
}

/// The journal's detail of a promote: the release promoted, and the one it deactivated.
fn promote_detail(release: &str, staged: &crate::execute::StagedOperation) -> String {
    format!(
        "release {release} promoted (staged by operation {release}); release {} deactivated",
        staged
            .releases
            .as_ref()
            .and_then(|r| r.active_before.as_deref())
            .unwrap_or("(none)")
    )
}

/// The deletion guard of a promote (SPEC §19): the deletions it makes visible, judged as
/// a publication's are.
fn guard(
    dest: &Destination,
    me: &Owner,
    from: Option<&State>,
    allow_delete: Option<u64>,
    plan: &mut DestinationPlan,
) {
    let deletes = plan.deletes();
    if deletes == 0 {
        return;
    }
    let g = dest.guard;
    let recorded = from.map_or(0, |s| s.recorded_of(me));
    if let Some(limit) = g.exceeded(deletes, recorded, allow_delete) {
        plan.conflicts.push(Conflict::new(
            ConflictKind::MassDelete,
            None,
            None,
            format!(
                "this promote deletes {deletes} recorded path(s), more than guard.max_delete allows: {limit}; if the deletions are meant, promote with --allow-delete {deletes}"
            ),
        ));
    }
    let empty =
        (plan.new_state.as_ref()).is_some_and(|s| !s.outputs.iter().any(|o| *o.owner == *me));
    if empty && !g.allow_empty {
        plan.conflicts.push(Conflict::new(
            ConflictKind::EmptySource,
            None,
            None,
            format!(
                "the staged release holds no outputs of {me}, and promoting it deletes {deletes} recorded path(s); set guard.allow_empty if that is meant"
            ),
        ));
    }
}

/// The plan of a promote: what readers of `path` see change among this owner's records
/// (other owners' are the active release's, since it was built against it), and the
/// staged release's state.
fn plan(
    dest: &Destination,
    me: &Owner,
    from: Option<&State>,
    to: State,
    release: &str,
) -> Result<DestinationPlan> {
    let previous = from.and_then(|s| s.owner(me)).map(|o| Previous {
        owner: o.owner.clone(),
        source: o.source.clone(),
    });
    let (files, links) = state_change(Some(me), from, &to);
    let source = to.owner(me).map(|o| o.source.clone());
    let message = format!(
        "promotes staged release {release} (source {})",
        source_shown(source.as_ref())
    );
    Ok(DestinationPlan {
        destination_id: dest.id.clone(),
        bundle_path: dest.path.clone(),
        state_mode: dest.state_mode,
        takeover_mode: dest.takeover,
        decision: Decision::Promote,
        previous,
        takeovers: vec![],
        conflicts: vec![],
        files,
        outputs_unchanged: None,
        links,
        message,
        new_state: Some(to),
    })
}
