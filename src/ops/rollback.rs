//! `distributor rollback` (SPEC §15): activates an earlier release of a destination with
//! `releases` in one atomic step. It is planned and reported like a publication (decision
//! `rollback`: the files and links that change for readers), journaled as an operation
//! whose source is the release's and whose previous source is the one rolled back from,
//! and carried out through the storage interface like one: the staging record, the swap
//! of the `path` symlink (the commit point), the activation log (which holds the rolled
//! back digest: publishing it again is the conflict `rolled_back`), then retention.
//!
//! The target is checked before anything changes: it must exist and hold exactly what its
//! state records (every file read whole). In a shared root only the current owner's
//! records come back: a new release is built from the current one with that owner's
//! files taken from the target, planned and executed like a publication of them.

use crate::backend::StoreRead;
use crate::backend::releases::{Purpose, ReleaseStore};
use crate::config::{Config, Destination};
use crate::error::{Error, ReleasesError, Result};
use crate::execute::{ExecContext, StagedOperation, execute};
use crate::journal::{Journal, query};
use crate::model::{Decision, Owner, SourceRef, StateMode};
use crate::ops::activation::{
    Activation, Opening, open_releases, run_activation, source_shown, state_change,
};
use crate::ops::common::{Activations, Outcome, journal_or_view, releases_destinations};
use crate::ops::publish::plan_rollback;
use crate::plan::PlanFailed;
use crate::plan::{DestinationPlan, Previous};
use crate::report::{DestinationReport, Status};
use crate::source::{LinkEntry, Manifest, OutputEntry, Source};
use crate::state::{State, StateFile};
use std::path::PathBuf;
use std::time::Duration;

/// What to roll back and how.
#[derive(Debug, Clone)]
pub(crate) struct RollbackOptions {
    /// Destination ids; empty means every destination with `releases`.
    pub destinations: Vec<String>,
    /// The release (the operation id that built it) to activate; default: the one active
    /// before the current one.
    pub to: Option<String>,
    /// Plan only; write nothing anywhere.
    pub dry_run: bool,
    /// Journal file (already resolved).
    pub journal: PathBuf,
    /// How long to wait for a destination lock.
    pub lock_timeout: Duration,
    /// Who rolls back.
    pub actor: String,
    /// Why (`--reason`, `DISTRIBUTOR_REASON`, `X-Distributor-Reason`), bounded; `None`
    /// when none was given.
    pub reason: Option<String>,
}

/// Rolls back the selected destinations (all that have `releases` when none is named).
pub(crate) fn rollback(config: &Config, opts: &RollbackOptions) -> Result<Outcome> {
    let selected = releases_destinations(
        config,
        &opts.destinations,
        "rollback activates an earlier release of a destination with a releases block",
    )?;
    if let Some(to) = &opts.to
        && query::check_operation_id(to).is_err()
    {
        return Err(Error::Usage(format!(
            "--to {to}: accepted is the operation id that built a release (a UUID as `distributor history` shows it, or its unique start)"
        )));
    }
    // A dry run reads the journal without writing anything, to refuse (exit 4) where the
    // real rollback would: an unfinished operation no live lock covers (SPEC §16).
    let (mut journal, view) = journal_or_view(opts.dry_run, &opts.journal)?;
    let mut activations = Activations::default();
    for dest in selected {
        let result = rollback_one(config, dest, opts, journal.as_mut(), view.as_ref());
        activations.push(dest, result);
    }
    Ok(activations.outcome(config, "rollback", opts.dry_run, opts.reason.as_deref()))
}
/// The release `--to` names: a whole operation id as it is (a release that is gone is
/// refused later, saying so), else the one release, present or logged, whose id starts
/// with it, as `history show` and `recover --abandon` take ids.
fn release_named(store: &ReleaseStore, to: &str) -> Result<String> {
    if uuid::Uuid::parse_str(to).is_ok() {
        return Ok(to.to_string());
    }
    let mut known = store.releases()?;
    known.extend(store.activations()?.into_iter().map(|a| a.release));
    let start = to.to_ascii_lowercase();
    let matching: Vec<&String> = known.iter().filter(|r| r.starts_with(&start)).collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(Error::Usage(format!(
            "--to {to}: no release of {} has an operation id starting so; releases there: {}",
            store.path().display(),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.iter().cloned().collect::<Vec<_>>().join(", ")
            }
        ))),
        many => Err(Error::Usage(format!(
            "--to {to}: operation id start is ambiguous ({}); give more of it",
            many.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Opens (and, unless a dry run, locks) a destination to roll back; one without a
/// `releases` block is a usage error.
fn open_for_rollback(
    dest: &Destination,
    opts: &RollbackOptions,
    journal: Option<&Journal>,
    view: Option<&crate::journal::JournalView>,
) -> Result<ReleaseStore> {
    let settings = dest.releases.as_ref().ok_or_else(|| {
        Error::Usage(format!(
            "destination '{}' has no releases block: only a destination with releases can be rolled back (SPEC §15)",
            dest.id
        ))
    })?;
    let how = crate::backend::LockRequest {
        timeout: opts.lock_timeout,
        create: false,
        actor: &opts.actor,
        history: journal.map(|j| j as &dyn crate::backend::History),
    };
    let open = Opening {
        lock: (!opts.dry_run).then_some(how),
        nothing_there: "nothing was published there; nothing to roll back",
        nothing_done: "nothing rolled back",
    };
    open_releases(dest, settings, &open, journal, view)
}

/// Plans and (unless a dry run) carries out the rollback of one destination; returns its
/// report and the source of the release activated.
fn rollback_one(
    config: &Config,
    dest: &Destination,
    opts: &RollbackOptions,
    journal: Option<&mut Journal>,
    view: Option<&crate::journal::JournalView>,
) -> std::result::Result<(DestinationReport, SourceRef), PlanFailed> {
    let store = open_for_rollback(dest, opts, journal.as_deref(), view)?;
    let shared = dest.state_mode == StateMode::SharedRoot;
    // While `path` is not what the last logged activation made (SPEC §17), the active
    // release is the logged one, and only a rollback to a named release may run.
    let changed = store.path_changed().map(str::to_string);
    if let Some(why) = &changed {
        refuse_changed_path(why, opts, shared)?;
    }
    // While the active release's name holds another directory, likewise: only a rollback
    // to a named release, which plans from no state (docs/operations.md, "Release
    // identity").
    let moved = store.release_moved();
    if let Some(why) = &moved {
        refuse_moved_active(why, &store, opts, shared)?;
    }
    let current = current_release(&store, changed.is_some() || moved.is_some(), dest)?;
    let me = Owner::new(&config.pipeline_id, &dest.id);
    let owner = me.to_string();
    let who = shared.then_some(owner.as_str());
    let (target, undoes) = match &opts.to {
        Some(t) => (
            release_named(&store, t)?,
            store
                .latest_activation(who)?
                .unwrap_or_else(|| current.clone()),
        ),
        None => store.rollback_target(who)?,
    };
    if target == current && !shared && changed.is_none() {
        return Err(Error::from(ReleasesError::AlreadyActive {
            release: target,
            path: dest.path.clone(),
        })
        .into());
    }
    let (to, identity) = store.release_state(&target)?;
    if shared {
        return rollback_owner(
            config,
            dest,
            opts,
            journal,
            &store,
            &me,
            (to, identity),
            &target,
            &undoes,
        );
    }
    store.verify_release(&target, identity, &to)?;
    let from = match moved {
        Some(_) => None,
        None => Some(active_state(&store, changed.is_some(), &current)?),
    };
    let plan = plan(dest, from.as_ref(), to, &current, &target)?;
    let source = plan
        .new_state
        .as_ref()
        .and_then(|s| s.owners.first())
        .map(|o| o.source.clone())
        .expect("a release's state names its owner");
    let Some(journal) = journal else {
        return Ok((
            DestinationReport::from_plan(plan, Status::Planned, None),
            source,
        ));
    };
    let purpose = Purpose::Rollback {
        activate: Some((target.clone(), identity)),
        undoes: undoes.clone(),
    };
    let how = Activation {
        command: "rollback",
        decision: Decision::Rollback.into(),
        actor: &opts.actor,
        reason: opts.reason.as_deref(),
        pipeline_id: &config.pipeline_id,
    };
    match run_activation(&plan, journal, &store, purpose, &how, &rollback_detail) {
        Ok(op) => {
            let mut r = DestinationReport::from_plan(plan, Status::Applied, Some(op.clone()));
            r.releases_removed = query::releases_removed(journal, &op)?;
            r.release_activated = Some(target.clone());
            Ok((r, source))
        }
        Err(e) => Err(PlanFailed::new(plan, e)),
    }
}

/// While `path` is not what the last logged activation made (SPEC §17, `why`), only a
/// rollback to a named release may run, and not in a shared root.
fn refuse_changed_path(why: &str, opts: &RollbackOptions, shared: bool) -> Result<()> {
    if opts.to.is_none() {
        return Err(ReleasesError::PathChanged {
            why: why.to_string(),
            what: "a rollback steps back from the active release, which the log and path disagree about: name the release to activate with --to OP_ID",
        }
        .into());
    }
    if shared {
        return Err(ReleasesError::PathChanged {
            why: why.to_string(),
            what: "a shared root's rollback builds on the active release, which the log and path disagree about: put path back first",
        }
        .into());
    }
    Ok(())
}

/// While the active release's name holds another directory (`why`, `release_moved`),
/// only a single owner's rollback to a named release may run: refused as that conflict
/// otherwise.
fn refuse_moved_active(
    why: &str,
    store: &ReleaseStore,
    opts: &RollbackOptions,
    shared: bool,
) -> Result<()> {
    if opts.to.is_some() && !shared {
        return Ok(());
    }
    let name = store.log_view()?.active().unwrap_or_default().to_string();
    Err(crate::backend::releases::release_moved(
        store.record_base()?.path().join(name),
        why.to_string(),
        if shared {
            "a shared root's rollback builds on the active release: put it back first; nothing was rolled back"
        } else {
            "a rollback steps back from the active release: name the release to activate with --to OP_ID; nothing was rolled back"
        },
    ))
}

/// The release a rollback steps back from: the logged one while `path` has changed, else
/// the one `path` points at (the logged one when it points at none).
fn current_release(store: &ReleaseStore, path_changed: bool, dest: &Destination) -> Result<String> {
    let logged = store.log_view()?.active().map(str::to_string);
    match (path_changed, logged, store.active_release()) {
        (true, Some(l), _) => Ok(l),
        (_, _, Some(a)) => Ok(a.to_string()),
        (_, Some(l), None) => Ok(l),
        (_, None, None) => Err(ReleasesError::NoneActive {
            path: dest.path.clone(),
        }
        .into()),
    }
}

/// The state of the release `current`, which the rollback plans from: read from the
/// release itself while `path` has changed, else the state file `path` shows.
fn active_state(store: &ReleaseStore, path_changed: bool, current: &str) -> Result<State> {
    let active_state = match path_changed {
        true => match store.release_state(current) {
            Ok((s, _)) => StateFile::Valid(s),
            Err(e) => StateFile::Invalid(e.to_string()),
        },
        false => store.read_state()?.parse(),
    };
    match active_state {
        StateFile::Valid(s) => Ok(s),
        StateFile::Absent => Err(ReleasesError::ActiveWithoutState {
            release: current.to_string(),
        }
        .into()),
        StateFile::Invalid(why) => Err(ReleasesError::InvalidActiveState {
            release: Some(current.to_string()),
            why,
            outcome: "",
        }
        .into()),
        StateFile::Untrusted(why, _) => Err(Error::Untrusted(why)),
    }
}

/// The journal's detail of a rollback: the release activated again, the one rolled back
/// from, and the digest now held.
fn rollback_detail(staged: &StagedOperation) -> String {
    let r = staged.releases.as_ref();
    format!(
        "release {} activated again; rolled back from release {} (source digest {} is held: publishing it again is the conflict rolled_back)",
        r.map_or("?", |r| r.target(&staged.operation_id)),
        r.and_then(|r| r.active_before.as_deref()).unwrap_or("?"),
        staged
            .origin
            .previous_source
            .as_ref()
            .map_or("?", |s| s.digest.as_str())
    )
}

/// A shared root's rollback (SPEC §15): a new release in which only this owner's records
/// come from the release `target` (the owner's files read from there, checked against
/// their records first), planned like a publication of them, so other owners' later
/// publications stay and §5.2 decides any path another owner holds now.
#[allow(clippy::too_many_arguments)]
fn rollback_owner(
    config: &Config,
    dest: &Destination,
    opts: &RollbackOptions,
    journal: Option<&mut Journal>,
    store: &ReleaseStore,
    me: &Owner,
    (to, identity): (State, crate::backend::types::Identity),
    target: &str,
    undoes: &str,
) -> std::result::Result<(DestinationReport, SourceRef), PlanFailed> {
    let Some(record) = to.owner(me).cloned() else {
        return Err(Error::from(ReleasesError::NoRecordsOf {
            staged: false,
            release: target.to_string(),
            owner: me.to_string(),
            outcome: "nothing to roll back to",
        })
        .into());
    };
    let outputs: Vec<_> = (to.outputs.iter())
        .filter(|o| *o.owner == *me)
        .cloned()
        .collect();
    let links: Vec<_> = (to.links.iter())
        .filter(|l| *l.owner == *me)
        .cloned()
        .collect();
    let mine = State {
        version: to.version,
        mode: to.mode,
        owners: vec![record.clone()],
        outputs,
        links,
    };
    store.verify_release(target, identity, &mine)?;
    let created = chrono::DateTime::parse_from_rfc3339(&record.source.created_at).map_err(|e| {
        Error::Failed(format!(
            "release {target}: created_at {} of {me} does not parse ({e})",
            record.source.created_at
        ))
    })?;
    let source = Source {
        dir: dest
            .releases
            .as_ref()
            .map(|r| r.dir.join(target))
            .unwrap_or_default(),
        manifest: Manifest {
            manifest_version: 1,
            id: record.source.id.clone(),
            created_at: record.source.created_at.clone(),
            outputs: (mine.outputs.iter())
                .map(|o| OutputEntry {
                    path: o.path.clone(),
                    size: o.size,
                    sha256: o.sha256,
                })
                .collect(),
            links: (mine.links.iter())
                .map(|l| LinkEntry {
                    path: l.path.clone(),
                    target: l.target.clone(),
                })
                .collect(),
        }
        .into(),
        created,
        digest: record.source.digest.clone(),
    };
    let mut plan = plan_rollback(config, dest, &source, store)?;
    let source_ref = record.source.clone();
    match plan.decision {
        Decision::Rollback => {}
        Decision::Conflict => {
            let mut r = DestinationReport::from_plan(plan, Status::Conflict, None);
            r.message = format!("not rolled back: {}", r.message);
            return Ok((r, source_ref));
        }
        _ => {
            return Ok((
                DestinationReport::from_plan(plan, Status::Skipped, None),
                source_ref,
            ));
        }
    }
    let Some(journal) = journal else {
        return Ok((
            DestinationReport::from_plan(plan, Status::Planned, None),
            source_ref,
        ));
    };
    let ctx = ExecContext {
        pipeline_id: &config.pipeline_id,
        actor: &opts.actor,
        reason: opts.reason.as_deref(),
        progress: None,
        command: "rollback",
        purpose: Purpose::Rollback {
            activate: None,
            undoes: undoes.to_string(),
        },
    };
    match execute(&mut plan, &source, journal, store, &ctx) {
        Ok(op) => {
            let mut r = DestinationReport::from_plan(plan, Status::Applied, Some(op.clone()));
            r.releases_removed = query::releases_removed(journal, &op)?;
            r.release_activated = Some(op);
            Ok((r, source_ref))
        }
        Err(e) => Err(PlanFailed::new(plan, e)),
    }
}

/// The plan of a rollback: what readers of `path` see change, and the target's state.
fn plan(
    dest: &Destination,
    from: Option<&State>,
    to: State,
    current: &str,
    target: &str,
) -> Result<DestinationPlan> {
    if from.is_some_and(|f| f.mode != StateMode::SingleOwner) || to.mode != StateMode::SingleOwner {
        return Err(Error::Failed(
            "a single_owner destination holds shared_root state; not rolled back".into(),
        ));
    }
    let previous = from.and_then(|f| f.owners.first()).map(|o| Previous {
        owner: o.owner.clone(),
        source: o.source.clone(),
    });
    let (files, links) = state_change(None, from, &to);
    let to_source = to.owners.first().map(|o| o.source.clone());
    let message = format!(
        "rolls back from release {current} (source {}) to release {target} (source {})",
        source_shown(previous.as_ref().map(|p| &p.source)),
        source_shown(to_source.as_ref()),
    );
    Ok(DestinationPlan {
        destination_id: dest.id.clone(),
        bundle_path: dest.path.clone(),
        state_mode: dest.state_mode,
        takeover_mode: dest.takeover,
        decision: Decision::Rollback,
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
