//! Planning one destination: storage probed for what the source and the state name, then
//! the planner ([`crate::plan`]) run on it; and a plan file's entry for it (SPEC §19).

use super::PublishOptions;
use super::bundle_path;
use super::republication::{check_republication, probe_republication};
use super::view::{StateMemo, Unlocked, View};
use crate::backend::{BundleStore, types};
use crate::config::{Config, Destination};
use crate::error::Result;
use crate::journal::JournalView;
use crate::model::Owner;
use crate::plan::saved::{SavedDestination, refuse_stale};
use crate::plan::{
    DestinationPlan, Overrides, PlanInput, Republication, Storage, plan_destination,
};
use crate::progress::{Bytes, Ticker};
use crate::source::Source;
use crate::state::{RecordedOutput, StateFile};
use std::path::Path;

/// What planning a destination starts from, before its storage is read: the config and
/// the destination, the source, what the operator lifted (`--force`, `--allow-delete`)
/// and the journal's placement fingerprints, which prove unchanged files.
#[derive(Clone, Copy)]
pub(super) struct Planning<'a> {
    pub config: &'a Config,
    pub dest: &'a Destination,
    pub source: &'a Source,
    pub lift: Overrides,
    pub fingerprints: &'a types::Fingerprints<'a>,
}

/// What a plan is made from: [`Planning`], the bundle path, the state read there and the
/// view of its storage.
#[derive(Clone, Copy)]
pub(super) struct PlanInputs<'a> {
    pub planning: Planning<'a>,
    pub bundle: &'a Path,
    pub state: &'a StateFile,
    pub view: &'a View<'a>,
}

/// Plans one destination: probes storage and reads state (no writes); `progress` hears of
/// the paths probed.
pub(super) fn plan_one(
    planning: Planning,
    journal: Option<&JournalView>,
    progress: Ticker<'_>,
) -> Result<DestinationPlan> {
    let Planning {
        config,
        dest,
        source,
        ..
    } = planning;
    let bundle = bundle_path(config, dest, source)?;
    let opened = Unlocked::open(dest, &bundle)?;
    let mut memo = StateMemo::new(source);
    let key = bundle.to_string_lossy();
    memo.read_vouched(&opened.view(), |sha| match journal {
        Some(j) => j.committed_post_state(&key, sha),
        None => Ok(false),
    })?;
    plan_with(planning, &mut memo, &opened.view(), progress.on(&dest.id))
}

/// Plans from the state `memo` reads through `view`.
pub(super) fn plan_with(
    planning: Planning,
    memo: &mut StateMemo,
    view: &View,
    progress: Ticker<'_>,
) -> Result<DestinationPlan> {
    let bundle = bundle_path(planning.config, planning.dest, planning.source)?;
    let state = memo.read(view)?;
    let inputs = PlanInputs {
        planning,
        bundle: &bundle,
        state: &state,
        view,
    };
    plan_state(&inputs, progress)
}

/// Plans a shared root's rollback (SPEC §15): `source` holds the owner's records of the
/// release rolled back to, planned against what `store` (locked, or open for a dry run)
/// holds now; the owner's own newer record does not stop it, everything else of §5
/// applies (other owners' paths, unmanaged content).
pub(crate) fn plan_rollback(
    config: &Config,
    dest: &Destination,
    source: &Source,
    store: &dyn BundleStore,
) -> Result<DestinationPlan> {
    let view = View::Store(store);
    let state = StateMemo::new(source).read(&view)?;
    let fingerprints = types::Fingerprints::default();
    let storage = probe_for_plan(&view, source, &state, &fingerprints, Ticker::NONE)?;
    Ok(plan_destination(&PlanInput {
        pipeline_id: &config.pipeline_id,
        destination: dest,
        bundle_path: &dest.path,
        source,
        state: &state,
        storage: &storage,
        force: false,
        allow_delete: None,
        rollback: true,
    }))
}

/// Probes storage and plans from a state already read.
pub(super) fn plan_state(inputs: &PlanInputs, progress: Ticker<'_>) -> Result<DestinationPlan> {
    let Planning {
        config,
        dest,
        source,
        fingerprints,
        ..
    } = inputs.planning;
    if let View::Store(store) = inputs.view
        && let Some(republication) =
            Republication::of(&config.pipeline_id, dest, source, inputs.state)
        && let Some(plan) =
            probe_republication(republication, *store, fingerprints, inputs.bundle, progress)?
    {
        // The cross-check is no progress of the run's own.
        check_republication(&plan, *store, || plan_general(inputs, Ticker::NONE))?;
        return Ok(plan);
    }
    plan_general(inputs, progress)
}

/// [`plan_state`] by the general probe and planner.
pub(super) fn plan_general(inputs: &PlanInputs, progress: Ticker<'_>) -> Result<DestinationPlan> {
    let Planning {
        config,
        dest,
        source,
        lift,
        fingerprints,
    } = inputs.planning;
    let storage = probe_for_plan(inputs.view, source, inputs.state, fingerprints, progress)?;
    Ok(plan_destination(&PlanInput {
        pipeline_id: &config.pipeline_id,
        destination: dest,
        bundle_path: inputs.bundle,
        source,
        state: inputs.state,
        storage: &storage,
        force: lift.force,
        allow_delete: lift.allow_delete,
        rollback: false,
    }))
}

/// False when `state` rules out an `unchanged` decision: that needs a record of this owner
/// holding this very source (the planner checks the rest). True is only a maybe.
pub(super) fn could_be_unchanged(state: &StateFile, me: &Owner, source: &Source) -> bool {
    match state {
        StateFile::Valid(s) => s.owners.iter().any(|r| {
            r.owner == *me && r.source.id == source.manifest.id && r.source.digest == source.digest
        }),
        StateFile::Absent | StateFile::Invalid(_) | StateFile::Untrusted(..) => false,
    }
}

/// For each output of the manifest, whether the state records it with the same size and
/// sha256: the files whose content the probe proves (by placement fingerprint or by
/// hashing), and the only ones placement fingerprints are read for.
pub(super) fn recorded_same(state: &StateFile, source: &Source) -> Vec<bool> {
    let recorded = match state {
        StateFile::Valid(s) => s.outputs.as_slice(),
        StateFile::Absent | StateFile::Invalid(_) | StateFile::Untrusted(..) => &[],
    };
    let new = source.manifest.outputs.as_slice();
    let mut out = vec![false; new.len()];
    let same = |r: &RecordedOutput, o: &crate::source::OutputEntry| {
        r.sha256 == o.sha256 && r.size == o.size
    };
    // State files list outputs sorted by path, and so do manifests that `distributor
    // manifest` wrote: then one merge finds the pairs, without hashing every path twice.
    if recorded.iter().map(|r| r.path.as_str()).is_sorted()
        && new.iter().map(|o| o.path.as_str()).is_sorted()
    {
        let (mut i, mut j) = (0, 0);
        while i < recorded.len() && j < new.len() {
            match recorded[i].path.cmp(&new[j].path) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    out[j] = same(&recorded[i], &new[j]);
                    i += 1;
                    j += 1;
                }
            }
        }
        return out;
    }
    let by_path: foldhash::HashMap<&str, usize> = (new.iter().enumerate())
        .map(|(j, o)| (o.path.as_str(), j))
        .collect();
    for r in recorded {
        if let Some(&j) = by_path.get(r.path.as_str()) {
            out[j] = same(r, &new[j]);
        }
    }
    out
}

fn probe_for_plan<'a>(
    view: &View,
    source: &'a Source,
    state: &'a StateFile,
    fingerprints: &'a types::Fingerprints<'_>,
    progress: Ticker<'_>,
) -> Result<Storage<'a>> {
    let m = &source.manifest;
    // Each path once: the manifest's and the state's paths are distinct within each (both
    // are validated), and a recorded path the manifest lists again is not added twice.
    // Outputs recorded with the same content are to be proven to hold it, by their
    // placement fingerprint where the journal has one.
    let wanted =
        (m.outputs.iter().map(|o| o.path.as_str())).chain(m.links.iter().map(|l| l.path.as_str()));
    let dirs_wanted: foldhash::HashSet<&str> = wanted.collect();
    let unwanted: Vec<&str> = match state {
        StateFile::Valid(s) => (s.outputs.iter().map(|o| o.path.as_str()))
            .chain(s.links.iter().map(|l| l.path.as_str()))
            .filter(|p| !dirs_wanted.contains(p))
            .collect(),
        StateFile::Absent | StateFile::Invalid(_) | StateFile::Untrusted(..) => Vec::new(),
    };
    // Sized exactly: at a million paths a doubling series would hold twice the list.
    let mut paths: Vec<(&str, Option<types::Proof>)> =
        Vec::with_capacity(m.outputs.len() + m.links.len() + unwanted.len() + 1);
    paths.extend(
        (m.outputs.iter())
            .zip(recorded_same(state, source))
            .map(|(o, same)| {
                let proof = same.then(|| types::Proof {
                    sha256: &o.sha256,
                    placed: fingerprints.vouching(&o.path, &o.sha256),
                    or_hash: true,
                });
                (o.path.as_str(), proof)
            })
            .chain(m.links.iter().map(|l| (l.path.as_str(), None))),
    );
    paths.extend(unwanted.into_iter().map(|p| (p, None)));
    // What stands at the state file's own path (a reserved name, in neither list): a
    // writing plan replaces it.
    paths.push((crate::state::STATE_FILE, None));
    match view {
        View::Store(s) => {
            progress.start("paths probed", Some(paths.len() as u64), Bytes::Counted);
            let mut storage = s.probe(&paths, &dirs_wanted, progress)?;
            storage.log_missing = crate::backend::log_missing(*s)?;
            Ok(storage)
        }
        // Nothing there yet: every path is missing.
        View::Missing => Ok(Storage::default()),
        View::Unsafe(why) => Ok(Storage::new(
            Some(why.clone()),
            Default::default(),
            Vec::new(),
        )),
        View::Untrusted(why) => {
            let mut storage = Storage::default();
            storage.untrusted_record = Some(why.clone());
            Ok(storage)
        }
    }
}

/// What was planned for `dest`, as a plan file holds it, with the sha256 of the state
/// `store` holds now (SPEC §19).
pub(super) fn saved_entry(
    config: &Config,
    dest: &Destination,
    plan: &DestinationPlan,
    store: Option<&dyn BundleStore>,
) -> Result<SavedDestination> {
    let pre = match store {
        Some(s) => s.state_sha256()?.map(|h| h.hex()),
        None => None,
    };
    Ok(SavedDestination::of(config, dest, plan, pre))
}

/// `publish --plan`: refuses `plan` with `stale_plan` unless `now` (its entry) is the
/// saved plan's entry for the destination, for the same source.
pub(super) fn judge_saved(
    opts: &PublishOptions,
    source: &Source,
    now: &SavedDestination,
    plan: &mut DestinationPlan,
) {
    let Some(saved) = &opts.saved_plan else {
        return;
    };
    let src = source.source_ref();
    let why = if saved.source != src {
        Some(format!(
            "it was made for source {} created {} ({}), and this is source {} created {} ({})",
            saved.source.id,
            saved.source.created_at,
            saved.source.digest,
            src.id,
            src.created_at,
            src.digest
        ))
    } else {
        match saved.destination(&now.destination_id) {
            None => Some("it does not plan this destination".to_string()),
            Some(entry) => entry.differences(now),
        }
    };
    if let Some(why) = why {
        refuse_stale(plan, &why);
    }
}
