//! `publish` and `plan`: verify the source, then per destination resolve the bundle path,
//! probe storage, plan, and (unless dry run) lock, re-plan under the lock, and execute
//! through the journal. Shared by the CLI and the HTTP server.

use super::common::{ExitCode, Outcome, Pending, check_recovery, journal_refused, pending};
use crate::backend::releases::ReleaseStore;
use crate::backend::{self, BundleStore, types};
use crate::config::{Config, Destination, PathMapping};
use crate::error::{ConfigError, Error, Result};
use crate::execute::{ExecContext, Progress, execute};
use crate::hash::ContentHash;
use crate::journal::{Journal, JournalView};
use crate::model::{Decision, Owner};
use crate::plan::Overrides;
use crate::plan::PlanFailed;
use crate::plan::saved::{PlanFile, SavedDestination, refuse_stale};
use crate::plan::{DestinationPlan, PlanInput, Republication, Storage, plan_destination};
use crate::progress::{Bytes, Ticker};
use crate::report::{DestinationReport, Report, Status, Summary};
use crate::source::Source;
use crate::source::hash_source;
use crate::state::{RecordedOutput, StateFile};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

/// What to publish and how.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// Destination ids to publish to; empty means all.
    pub destinations: Vec<String>,
    /// Plan only; write nothing anywhere.
    pub dry_run: bool,
    /// `--force`.
    pub force: bool,
    /// `--allow-delete N`: the deletion guard (`mass_delete`) lifted up to N deletions.
    pub allow_delete: Option<u64>,
    /// `publish --plan FILE` (SPEC §19): publish only where planning again under the lock
    /// gives this saved plan; elsewhere the conflict `stale_plan`.
    pub saved_plan: Option<std::sync::Arc<PlanFile>>,
    /// `plan --out FILE`: keep what was planned for each destination, for the plan file
    /// ([`Outcome::saved`]).
    pub save_plan: bool,
    /// Journal file (already resolved).
    pub journal: PathBuf,
    /// How long to wait for a destination lock.
    pub lock_timeout: Duration,
    /// Who publishes (`cli:<user>` or `token:<name>`).
    pub actor: String,
    /// `publish` or `plan`, for the report.
    pub command: String,
    /// `publish --stage` (SPEC §19): build and verify each release, hold it for
    /// `distributor promote` instead of activating it (releases destinations only).
    pub stage: bool,
}

/// Publishes (or plans) a verified source to the configured destinations.
pub fn publish(config: &Config, source: &Source, opts: &PublishOptions) -> Result<Outcome> {
    publish_with_progress(config, source, opts, None)
}

/// [`publish`], telling `progress` how staging goes (the CLI draws a progress bar).
pub fn publish_with_progress(
    config: &Config,
    source: &Source,
    opts: &PublishOptions,
    progress: Option<&dyn Progress>,
) -> Result<Outcome> {
    let selected = config.select(&opts.destinations)?;
    if opts.stage
        && let Some(d) = selected.iter().find(|d| d.releases.is_none())
    {
        return Err(Error::Usage(format!(
            "--stage: destination '{}' has no releases block; only a destination with releases stages a release for `distributor promote` (select others with --destination)",
            d.id
        )));
    }
    // A dry run reads the journal without writing anything, to say what a real run would
    // (exit 4 while recovery is pending, SPEC §16).
    let (mut journal, view) = if opts.dry_run {
        (None, JournalView::open(&opts.journal)?)
    } else {
        (Some(Journal::open(&opts.journal)?), None)
    };
    let mut reports = Vec::new();
    let mut codes: Vec<ExitCode> = Vec::new();
    let mut invalid_source: Option<String> = None;
    let mut concurrent_change = false;
    let mut saved = Vec::new();
    for dest in selected {
        if let Some(why) = &invalid_source {
            let mut r = failed_report(config, dest, source, why.clone());
            r.message = format!("not attempted: {why}");
            r.error_kind = Some("invalid_source");
            reports.push(r);
            continue;
        }
        let (report, code) = match publish_one(
            config,
            dest,
            source,
            opts,
            match journal.as_mut() {
                Some(j) => Journaling::Real(j),
                None => Journaling::DryRun(view.as_ref()),
            },
            progress,
            &mut saved,
        ) {
            Ok(x) => x,
            Err(PlanFailed { plan, error: e }) => {
                if matches!(e.root(), Error::Source(_)) {
                    invalid_source = Some(e.to_string());
                }
                concurrent_change |= e.is_concurrent_change();
                let code = e.exit_code();
                let mut r = match plan {
                    Some(plan) => DestinationReport::of_error(*plan, &e),
                    None => failed_report(config, dest, source, e.to_string()),
                };
                if r.status == Status::Failed {
                    r.error_kind = Some(e.kind());
                }
                (r, code)
            }
        };
        reports.push(report);
        codes.push(code);
    }
    // A destination can fail with a config error of its own (a template that renders an
    // unsafe path): that is 2, after 1 and before 4 and 3, never lost as 0.
    let exit_code = ExitCode::overall(codes);
    let summary = Summary::of(&reports);
    let all_planned = reports.iter().all(|r| r.status != Status::Failed);
    let saved = (opts.save_plan && all_planned).then(|| PlanFile {
        plan_format_version: crate::plan::saved::PLAN_FORMAT_VERSION,
        pipeline_id: config.pipeline_id.clone(),
        planned_at: crate::clock::now(),
        source: source.source_ref(),
        force: opts.force,
        allow_delete: opts.allow_delete,
        destinations: saved,
    });
    Ok(Outcome {
        report: Report {
            report_version: 1,
            command: opts.command.clone(),
            dry_run: opts.dry_run,
            pipeline_id: config.pipeline_id.clone(),
            source: source.source_ref(),
            destinations: reports,
            summary,
            plan_file: None,
        },
        exit_code,
        concurrent_change,
        saved,
    })
}

fn failed_report(
    config: &Config,
    dest: &Destination,
    source: &Source,
    message: String,
) -> DestinationReport {
    DestinationReport {
        destination_id: dest.id.clone(),
        bundle_path: bundle_path(config, dest, source)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        state_mode: dest.state_mode,
        takeover_mode: dest.takeover,
        decision: None,
        status: Status::Failed,
        operation_id: None,
        previous: None,
        takeovers: vec![],
        conflicts: vec![],
        files: Default::default(),
        links: vec![],
        message,
        hooks: Vec::new(),
        lock_wait: None,
        error_kind: None,
        release_activated: None,
        releases_removed: Vec::new(),
        omitted_unchanged: None,
    }
}

/// The bundle path of `dest` for `source` (SPEC §2 path mapping).
pub fn bundle_path(config: &Config, dest: &Destination, source: &Source) -> Result<PathBuf> {
    Ok(match &dest.path_mapping {
        PathMapping::Fixed => dest.path.clone(),
        PathMapping::SourceId => dest.path.join(&source.manifest.id),
        PathMapping::Template(t) => {
            let rel = t
                .render(
                    &source.manifest.id,
                    source.created,
                    &config.pipeline_id,
                    &dest.id,
                )
                .map_err(|m| {
                    Error::from(ConfigError::Key {
                        file: config.file.clone(),
                        key: format!(
                            "destinations[{}].path_mapping.template",
                            config.index_of(dest)
                        ),
                        message: m,
                        at: String::new(),
                    })
                })?;
            dest.path.join(rel)
        }
    })
}

/// A bundle path as planning sees it: opened (locked, or for reading), not there yet, or
/// not usable at all (the planner's `unsafe_storage`).
enum View<'s> {
    Store(&'s dyn BundleStore),
    Missing,
    Unsafe(String),
    /// A record the backend read to open the destination (a releases destination's
    /// settings or log) is not distributor's (SPEC §17): the conflict `untrusted_record`.
    Untrusted(String),
}

/// A bundle path opened for reading, as planning outside the lock sees it.
struct Unlocked {
    store: Option<Box<dyn BundleStore>>,
    unsafe_reason: Option<String>,
    untrusted: Option<String>,
}

impl Unlocked {
    fn open(dest: &Destination, bundle: &Path) -> Result<Unlocked> {
        // One walk from the destination path: a symlink or a file on the way is the
        // planner's `unsafe_storage`.
        match backend::for_destination(dest)?.open(&dest.path, bundle) {
            Ok(store) => Ok(Unlocked {
                store,
                unsafe_reason: None,
                untrusted: None,
            }),
            Err(Error::Unsafe(why)) => Ok(Unlocked {
                store: None,
                unsafe_reason: Some(why),
                untrusted: None,
            }),
            Err(Error::Untrusted(why)) => Ok(Unlocked {
                store: None,
                unsafe_reason: None,
                untrusted: Some(why),
            }),
            Err(e) => Err(e),
        }
    }

    fn view(&self) -> View<'_> {
        if let Some(why) = &self.untrusted {
            return View::Untrusted(why.clone());
        }
        match (&self.store, &self.unsafe_reason) {
            (_, Some(why)) => View::Unsafe(why.clone()),
            (Some(s), None) => View::Store(s.as_ref()),
            (None, None) => View::Missing,
        }
    }
}

impl PublishOptions {
    /// What this run lifts: `--force`, `--allow-delete`.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            force: self.force,
            allow_delete: self.allow_delete,
        }
    }
}

/// Plans one destination: probes storage and reads state (no writes); `progress` hears of
/// the paths probed.
pub fn plan_one(
    config: &Config,
    dest: &Destination,
    source: &Source,
    lift: Overrides,
    fingerprints: &types::Fingerprints,
    journal: Option<&JournalView>,
    progress: Ticker<'_>,
) -> Result<DestinationPlan> {
    let bundle = bundle_path(config, dest, source)?;
    let opened = Unlocked::open(dest, &bundle)?;
    let mut memo = StateMemo::new(source);
    let key = bundle.to_string_lossy();
    memo.read_vouched(&opened.view(), |sha| match journal {
        Some(j) => j.committed_post_state(&key, sha),
        None => Ok(false),
    })?;
    plan_with(
        config,
        dest,
        source,
        lift,
        fingerprints,
        &mut memo,
        &opened.view(),
        progress.on(&dest.id),
    )
}

/// The state file as last read and parsed: planning again under the lock parses it again
/// only when its bytes changed.
struct StateMemo {
    last: Option<(ContentHash, Rc<StateFile>)>,
    /// How many outputs the state likely records (the manifest's count).
    outputs: usize,
    /// The sha256 of an untrusted state file the journal in use committed (SPEC §17
    /// "Upgrading"): believed.
    vouched: Option<ContentHash>,
    /// The state was read this very moment ([`StateMemo::read_vouched`]): the next read
    /// takes it as is, without hashing the file again to see whether it changed.
    just_read: bool,
}

impl StateMemo {
    /// Nothing read yet, for publishing `source`.
    fn new(source: &Source) -> StateMemo {
        StateMemo {
            last: None,
            outputs: source.manifest.outputs.len(),
            vouched: None,
            just_read: false,
        }
    }

    /// The state file parsed, again only when its bytes changed since the last read. The
    /// bytes are not kept (at a million outputs they are 150 MB): their sha256 is.
    fn read(&mut self, view: &View) -> Result<Rc<StateFile>> {
        let View::Store(s) = view else {
            // Nothing there, or not usable: nothing to parse.
            return Ok(Rc::new(StateFile::Absent));
        };
        if let Some((_, state)) = &self.last
            && std::mem::take(&mut self.just_read)
        {
            return Ok(Rc::clone(state));
        }
        if let Some((before, state)) = &self.last
            && s.state_sha256()? == Some(*before)
        {
            return Ok(Rc::clone(state));
        }
        let (parsed, sha) = s.read_state_parsed(self.outputs)?;
        let parsed = match parsed {
            StateFile::Untrusted(..) if sha.is_some() && sha == self.vouched => parsed.believed(),
            other => other,
        };
        let state = Rc::new(parsed.for_version(s.capabilities().state_version));
        self.last = sha.map(|sha| (sha, Rc::clone(&state)));
        Ok(state)
    }

    /// [`StateMemo::read`], then [`StateMemo::vouch`] where the state file is not
    /// believed: the state as planning takes it. The next read takes it as is.
    fn read_vouched(
        &mut self,
        view: &View,
        committed: impl FnOnce(&str) -> Result<bool>,
    ) -> Result<Rc<StateFile>> {
        let state = self.read(view)?;
        if !matches!(*state, StateFile::Untrusted(..)) {
            self.just_read = self.last.is_some();
            return Ok(state);
        }
        self.vouch(committed)?;
        self.just_read = self.last.is_some();
        Ok(self.last.as_ref().map_or(state, |(_, s)| Rc::clone(s)))
    }

    /// A state file distributor did not write is believed when the journal committed
    /// exactly its bytes (an earlier version's state, SPEC §17): `committed` asks the
    /// journal of a sha256.
    fn vouch(&mut self, committed: impl FnOnce(&str) -> Result<bool>) -> Result<()> {
        let Some((sha, state)) = &self.last else {
            return Ok(());
        };
        if matches!(**state, StateFile::Untrusted(..)) && committed(&sha.hex())? {
            self.vouched = Some(*sha);
            let believed = (*state).as_ref().clone().believed();
            self.last = Some((*sha, Rc::new(believed)));
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn plan_with(
    config: &Config,
    dest: &Destination,
    source: &Source,
    lift: Overrides,
    fingerprints: &types::Fingerprints,
    memo: &mut StateMemo,
    view: &View,
    progress: Ticker<'_>,
) -> Result<DestinationPlan> {
    let bundle = bundle_path(config, dest, source)?;
    let state = memo.read(view)?;
    plan_state(
        config,
        dest,
        source,
        lift,
        fingerprints,
        &bundle,
        &state,
        view,
        progress,
    )
}

/// Plans a shared root's rollback (SPEC §15): `source` holds the owner's records of the
/// release rolled back to, planned against what `store` (locked, or open for a dry run)
/// holds now; the owner's own newer record does not stop it, everything else of §5
/// applies (other owners' paths, unmanaged content).
pub fn plan_rollback(
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
#[allow(clippy::too_many_arguments)]
fn plan_state(
    config: &Config,
    dest: &Destination,
    source: &Source,
    lift: Overrides,
    fingerprints: &types::Fingerprints,
    bundle: &Path,
    state: &StateFile,
    view: &View,
    progress: Ticker<'_>,
) -> Result<DestinationPlan> {
    let general = |progress| {
        plan_general(
            config,
            dest,
            source,
            lift,
            fingerprints,
            bundle,
            state,
            view,
            progress,
        )
    };
    if let View::Store(store) = view
        && let Some(republication) = Republication::of(&config.pipeline_id, dest, source, state)
        && let Some(plan) =
            probe_republication(republication, *store, fingerprints, bundle, progress)?
    {
        // The cross-check is no progress of the run's own.
        check_republication(&plan, *store, || general(Ticker::NONE))?;
        return Ok(plan);
    }
    general(progress)
}

/// [`plan_state`] by the general probe and planner.
#[allow(clippy::too_many_arguments)]
fn plan_general(
    config: &Config,
    dest: &Destination,
    source: &Source,
    lift: Overrides,
    fingerprints: &types::Fingerprints,
    bundle: &Path,
    state: &StateFile,
    view: &View,
    progress: Ticker<'_>,
) -> Result<DestinationPlan> {
    let storage = probe_for_plan(view, source, state, fingerprints, progress)?;
    Ok(plan_destination(&PlanInput {
        pipeline_id: &config.pipeline_id,
        destination: dest,
        bundle_path: bundle,
        source,
        state,
        storage: &storage,
        force: lift.force,
        allow_delete: lift.allow_delete,
        rollback: false,
    }))
}

/// Debug builds (every test run) check that the general planner decides what a
/// republication did, from the same storage: `general` is its plan (not made in release
/// builds). Outside the lock another process may change storage between the two looks:
/// a difference while one holds the lock, or has left an unfinished operation, is that
/// process's work, not a planner's disagreement.
fn check_republication(
    plan: &DestinationPlan,
    store: &dyn BundleStore,
    general: impl FnOnce() -> Result<DestinationPlan>,
) -> Result<()> {
    if cfg!(debug_assertions) {
        let mut listed = plan.clone();
        listed.files = plan.file_actions().map(|f| f.into_owned()).collect();
        listed.outputs_unchanged = None;
        let general = general()?;
        let busy = || -> Result<bool> {
            Ok(store.lock_holder()?.is_some() || !store.staging_entries()?.is_empty())
        };
        if listed != general && !busy()? {
            assert_eq!(
                listed, general,
                "a republication's plan differs from the planner's"
            );
        }
    }
    Ok(())
}

/// How many paths [`probe_republication`] probes at a time: enough to keep the probe's
/// threads busy, few enough that a chunk's listing is a few megabytes.
const REPUBLICATION_CHUNK: usize = 16_384;

/// The plan of a [`Republication`]: the manifest's paths probed in `store` a chunk at a
/// time, each chunk's listing checked and dropped. `None` when storage does not hold one
/// of its paths as recorded; the general planner then decides (and says what drifted).
fn probe_republication(
    republication: Republication,
    store: &dyn BundleStore,
    fingerprints: &types::Fingerprints,
    bundle: &Path,
    progress: Ticker<'_>,
) -> Result<Option<DestinationPlan>> {
    let source = republication.source();
    let m = &source.manifest;
    let total = 1 + m.outputs.len() + m.links.len();
    progress.start("paths probed", Some(total as u64), Bytes::Uncounted);
    let list_none = foldhash::HashSet::default();
    let state_file = [(crate::state::STATE_FILE, None)];
    if !Republication::state_file_holds(&store.probe(&state_file, &list_none, progress)?) {
        return Ok(None);
    }
    let mut paths = Vec::with_capacity(REPUBLICATION_CHUNK.min(m.outputs.len() + m.links.len()));
    for chunk in m.outputs.chunks(REPUBLICATION_CHUNK) {
        paths.clear();
        for o in chunk {
            // Proven by placement fingerprints alone: a file they do not prove is hashed
            // by the general probe, once.
            let Some(placed) = fingerprints.vouching(&o.path, &o.sha256) else {
                return Ok(None);
            };
            let proof = types::Proof {
                sha256: &o.sha256,
                placed: Some(placed),
                or_hash: false,
            };
            paths.push((o.path.as_str(), Some(proof)));
        }
        if !Republication::outputs_hold(&store.probe(&paths, &list_none, progress)?, chunk) {
            return Ok(None);
        }
    }
    for chunk in m.links.chunks(REPUBLICATION_CHUNK) {
        paths.clear();
        paths.extend(chunk.iter().map(|l| (l.path.as_str(), None)));
        if !Republication::links_hold(&store.probe(&paths, &list_none, progress)?, chunk) {
            return Ok(None);
        }
    }
    Ok(Some(republication.plan(bundle)))
}

/// False when `state` rules out an `unchanged` decision: that needs a record of this owner
/// holding this very source (the planner checks the rest). True is only a maybe.
fn could_be_unchanged(state: &StateFile, me: &Owner, source: &Source) -> bool {
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
fn recorded_same(state: &StateFile, source: &Source) -> Vec<bool> {
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
            s.probe(&paths, &dirs_wanted, progress)
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

/// What is read of a destination before planning: its bundle path, the state file as it is
/// now (when the bundle path can be read at all), and the journal's placement fingerprints
/// of the files the source publishes again unchanged (they spare hashing them); for a
/// [`Republication`], whether storage still holds it.
struct DestinationRead<'m> {
    bundle: PathBuf,
    unlocked: Unlocked,
    memo: StateMemo,
    state: Option<Rc<StateFile>>,
    fingerprints: types::Fingerprints<'m>,
    republished: Republished,
}

/// What a look at a [`Republication`] found.
enum Republished {
    /// Not a republication.
    No,
    /// Storage holds it: its `unchanged` plan (the state was not kept: `state` is `None`).
    Held(Box<DestinationPlan>),
    /// Storage does not hold every path as recorded: the general planner says what
    /// changed (the state was read again for it).
    NotHeld,
}

/// Reads one destination (see [`DestinationRead`]).
fn read_destination<'m>(
    config: &Config,
    dest: &Destination,
    source: &'m Source,
    journal: &Journal,
) -> Result<DestinationRead<'m>> {
    let bundle = bundle_path(config, dest, source)?;
    let unlocked = Unlocked::open(dest, &bundle)?;
    let mut memo = StateMemo::new(source);
    let key = bundle.to_string_lossy().into_owned();
    // The state file this journal committed for this very source, still as written: a
    // republication that needs no read of it.
    let committed = match (&unlocked.unsafe_reason, unlocked.store.as_deref()) {
        (None, Some(store)) if Republication::may_be(dest) => match store.state_file_id()? {
            Some(file) => journal
                .republishable_state(&key, &file)?
                .and_then(|c| Republication::committed(&config.pipeline_id, dest, source, &c)),
            None => None,
        },
        _ => None,
    };
    let mut state = match (&unlocked.unsafe_reason, &committed) {
        (None, None) => {
            let state = memo.read_vouched(&unlocked.view(), |sha| {
                journal.committed_post_state(&key, sha)
            })?;
            // Taken as is; later reads (under the lock) check the file again.
            memo.just_read = false;
            Some(state)
        }
        _ => None,
    };
    let outputs = &source.manifest.outputs;
    let republication = committed.or_else(|| {
        (state.as_deref()).and_then(|s| Republication::of(&config.pipeline_id, dest, source, s))
    });
    let (Some(republication), Some(store)) = (republication, unlocked.store.as_deref()) else {
        let mut fingerprints = types::Fingerprints::default();
        if let Some(state) = &state {
            fingerprints =
                types::Fingerprints::wanting_outputs(outputs, recorded_same(state, source));
            journal.fingerprints(&key, &mut fingerprints)?;
        }
        return Ok(DestinationRead {
            bundle,
            unlocked,
            memo,
            state,
            fingerprints,
            republished: Republished::No,
        });
    };
    // A republication is decided from the manifest, the fingerprints and storage alone:
    // the state's records (at a million files, 120 MB) go before the fingerprints are read.
    state = None;
    memo = StateMemo {
        vouched: memo.vouched,
        ..StateMemo::new(source)
    };
    let mut fingerprints = types::Fingerprints::wanting_all(outputs);
    journal.fingerprints(&key, &mut fingerprints)?;
    let republished =
        match probe_republication(republication, store, &fingerprints, &bundle, Ticker::NONE)? {
            Some(plan) => {
                check_republication(&plan, store, || {
                    let state = memo.read(&unlocked.view())?;
                    plan_general(
                        config,
                        dest,
                        source,
                        Overrides::default(),
                        &fingerprints,
                        &bundle,
                        &state,
                        &unlocked.view(),
                        Ticker::NONE,
                    )
                })?;
                Republished::Held(Box::new(plan))
            }
            None => {
                state = Some(memo.read(&unlocked.view())?);
                Republished::NotHeld
            }
        };
    Ok(DestinationRead {
        bundle,
        unlocked,
        memo,
        state,
        fingerprints,
        republished,
    })
}

/// The journal a run writes, or, for a dry run, the one it reads (if there is one).
enum Journaling<'j> {
    Real(&'j mut Journal),
    DryRun(Option<&'j JournalView>),
}

fn publish_one(
    config: &Config,
    dest: &Destination,
    source: &Source,
    opts: &PublishOptions,
    journaling: Journaling<'_>,
    progress: Option<&dyn Progress>,
    saved: &mut Vec<SavedDestination>,
) -> std::result::Result<(DestinationReport, ExitCode), PlanFailed> {
    let (journal, view) = match journaling {
        Journaling::Real(j) => (Some(j), None),
        Journaling::DryRun(v) => (None, v),
    };
    let Some(journal) = journal else {
        // Dry run: plan, and read the files a real run would write so both reach the
        // same verdict on the source. Unchanged files are proven by the journal's
        // placement fingerprints (read only) as in the real run, not hashed.
        let mut fingerprints = types::Fingerprints::default();
        if let Some(v) = view {
            let bundle = bundle_path(config, dest, source)?;
            fingerprints = types::Fingerprints::wanting_all(&source.manifest.outputs);
            v.fingerprints(&bundle.to_string_lossy(), &mut fingerprints)?;
        }
        // `plan` shows how probing and hashing go (SPEC §20).
        let progress = Ticker::to(progress).on(&dest.id);
        let mut plan = plan_one(
            config,
            dest,
            source,
            opts.overrides(),
            &fingerprints,
            view,
            progress,
        )?;
        if opts.save_plan || opts.saved_plan.is_some() {
            let store = Unlocked::open(dest, &plan.bundle_path)?.store;
            let entry = saved_entry(config, dest, &plan, store.as_deref())?;
            judge_saved(opts, source, &entry, &mut plan);
            saved.push(entry);
        }
        if progress.is_on() {
            let (files, bytes) = (plan.writes()).fold((0, 0), |(n, b), f| (n + 1, b + f.size));
            progress.start("files hashed", Some(files), Bytes::Of(bytes));
        }
        // Read the way a real run's staging reads them (`execute::stage`).
        let dirs = source.dirs(plan.writes().map(|f| f.path.as_str()))?;
        for f in plan.writes() {
            let (size, sha) = hash_source(&dirs.file(&f.path))?;
            progress.bytes(size);
            progress.done(1);
            if size != f.size || sha != f.sha256 {
                let e = crate::source::content_mismatch(&f.path, size, &sha, f.size, &f.sha256);
                return Err(PlanFailed::new(plan.clone(), e));
            }
        }
        // The journal (read only) and staging say whether recovery is pending: the real
        // run would refuse with exit 4, so the plan says so too; unless another process is
        // publishing there right now (`busy`).
        let store = Unlocked::open(dest, &plan.bundle_path)?.store;
        let busy = match pending(view, &plan.bundle_path, store.as_deref())? {
            Pending::Recovery(what)
                if !stands_during_recovery(plan.decision) && !untrusted(&plan) =>
            {
                return Err(PlanFailed::new(plan, Error::RecoveryRequired(what)));
            }
            Pending::Busy(who) => Some(who),
            _ => None,
        };
        let status = status_of(&plan, Status::Planned);
        let code = code_of(&plan);
        let mut report = DestinationReport::from_plan(plan, status, None);
        if let Some(who) = busy {
            report.message = format!(
                "busy: another distributor process is publishing here now ({who}); this plan may change when it finishes"
            );
        }
        if dest.s3.is_some() {
            // A real run checks once that the store honours conditional writes; a dry
            // run writes nothing, so it cannot (SPEC §14).
            if !report.message.is_empty() {
                report.message.push_str("; ");
            }
            report.message.push_str("conditional writes not verified");
        }
        return Ok((report, code));
    };
    let DestinationRead {
        bundle,
        unlocked,
        mut memo,
        state,
        fingerprints,
        republished,
    } = read_destination(config, dest, source, journal)?;
    let with_plan = |plan: &DestinationPlan, e: Error| PlanFailed::new(plan.clone(), e);
    // A held republication read the state (and dropped it).
    let read_state = state.is_some() || matches!(republished, Republished::Held(_));
    let locked_before = match &unlocked.store {
        Some(store) => read_state && store.locked_before()?,
        None => false,
    };
    // Once distributor has locked a bundle path, every decision but `unchanged` is looked
    // at again under the lock (below), so when the state file already rules `unchanged`
    // out, a look outside the lock would be thrown away: go straight to the lock and plan
    // once. A republication of the same source still gets its lock-free look.
    let me = Owner::new(config.pipeline_id.clone(), dest.id.clone());
    let rules_out_unchanged = state
        .as_ref()
        .is_some_and(|s| !could_be_unchanged(s, &me, source));
    // The lock-free look plans from the state just read (under the lock it is read again).
    let read = state.as_deref().unwrap_or(&StateFile::Absent);
    let look = unlocked.view();
    let (lift, prints) = (opts.overrides(), &fingerprints);
    let preview = match republished {
        Republished::Held(plan) => Some(*plan),
        _ if locked_before && rules_out_unchanged => None,
        Republished::NotHeld => Some(plan_general(
            config,
            dest,
            source,
            lift,
            prints,
            &bundle,
            read,
            &look,
            Ticker::NONE,
        )?),
        Republished::No => Some(plan_state(
            config,
            dest,
            source,
            lift,
            prints,
            &bundle,
            read,
            &look,
            Ticker::NONE,
        )?),
    };
    if let Some(p) = &preview {
        // Outside the lock, an unfinished operation may be one that another process (or
        // another request of `distributor serve`) is carrying out right now, and the
        // preview may have seen its half-placed files (a conflict that is not one). A
        // non-writing preview ends the run here only when no operation can have overlapped
        // it: recovery is clean and distributor never locked this bundle path (every
        // operation creates the lock file first and it is never removed). Otherwise wait
        // for the lock and look again. `unchanged` needs no second look: it holds only when
        // the state file (replaced atomically) records this very source and every recorded
        // path matches it, and an operation caught half-way has moved aside or placed
        // files, which makes the preview a repair, a writing decision that is confirmed
        // under the lock. So a republication of what is already there neither waits for
        // the lock nor probes twice.
        let nothing_to_wait_for = p.decision == Decision::Unchanged || !locked_before;
        let clean = |store: Option<&dyn BundleStore>| match store {
            Some(store) => check_recovery(journal, store).is_ok(),
            None => journal
                .unfinished_for(&bundle.to_string_lossy())
                .is_ok_and(|u| u.is_empty()),
        };
        // A saved plan is judged under the lock only.
        if !p.decision.writes()
            && nothing_to_wait_for
            && opts.saved_plan.is_none()
            && clean(unlocked.store.as_deref())
        {
            let (status, code) = (status_of(p, Status::Applied), code_of(p));
            let preview = preview.expect("looked at above");
            let op = journal_refusal(config, &preview, source, opts, journal)?;
            return Ok((DestinationReport::from_plan(preview, status, op), code));
        }
    }
    // A failure to lock or a pending recovery is reported with the planned decision; with
    // no preview, it is planned now. A lock timeout keeps the decision it would have made,
    // but never the lock-free look's conflicts: what that look saw may be the holder's
    // half-placed files, which are no conflicts (issue 27), so the lock error, naming the
    // holder, is all that is reported then.
    let mut planned = |e: Error| match &preview {
        Some(p) if matches!(e, Error::Lock(_)) && !p.conflicts.is_empty() => e.into(),
        Some(p) => with_plan(p, e),
        None => match plan_with(
            config,
            dest,
            source,
            opts.overrides(),
            &fingerprints,
            &mut memo,
            &unlocked.view(),
            Ticker::NONE,
        ) {
            Ok(p) if matches!(e, Error::Lock(_)) && !p.conflicts.is_empty() => e.into(),
            Ok(p) => with_plan(&p, e),
            Err(_) => e.into(),
        },
    };
    let backend = backend::for_destination(dest).map_err(&mut planned)?;
    let waiting = std::time::Instant::now();
    let lock = backend.lock(
        &dest.path,
        &bundle,
        crate::backend::LockRequest {
            timeout: opts.lock_timeout,
            create: true,
            actor: &opts.actor,
        },
    );
    let store = lock
        .and_then(|s| {
            s.ok_or_else(|| Error::Failed(format!("{} could not be created", bundle.display())))
        })
        .map_err(&mut planned)?;
    // How long the lock took, for `serve`'s metrics.
    let waited = waiting.elapsed();
    let stamp = |mut r: DestinationReport| {
        r.lock_wait = Some(waited);
        r
    };
    drop(unlocked);
    // Planned again below under the lock: the look outside it (at a million files, a
    // second plan and post-state: hundreds of megabytes) is not kept through execution.
    drop(preview);
    let store = store.as_ref();
    let mut plan = plan_with(
        config,
        dest,
        source,
        opts.overrides(),
        &fingerprints,
        &mut memo,
        &View::Store(store),
        Ticker::NONE,
    )?;
    if opts.saved_plan.is_some() {
        let entry = saved_entry(config, dest, &plan, Some(store))?;
        judge_saved(opts, source, &entry, &mut plan);
    }
    let report = |plan: DestinationPlan| {
        let (status, code) = (status_of(&plan, Status::Applied), code_of(&plan));
        Ok((
            stamp(DestinationReport::from_plan(plan, status, None)),
            code,
        ))
    };
    if stands_during_recovery(plan.decision) {
        return report(plan);
    }
    // An untrusted record is decided before the pending-recovery check (SPEC §17).
    if !untrusted(&plan) {
        check_recovery(journal, store).map_err(|e| with_plan(&plan, e))?;
    }
    if !plan.decision.writes() {
        let op = journal_refusal(config, &plan, source, opts, journal)?;
        let (status, code) = (status_of(&plan, Status::Applied), code_of(&plan));
        return Ok((stamp(DestinationReport::from_plan(plan, status, op)), code));
    }
    let mut command = "publish";
    if opts.stage {
        let releases = ReleaseStore::of(store).ok_or_else(|| {
            Error::Usage(format!(
                "--stage: destination '{}' has no releases block",
                dest.id
            ))
        })?;
        releases.set_stage();
        command = "stage";
    }
    let ctx = ExecContext {
        command,
        pipeline_id: &config.pipeline_id,
        actor: &opts.actor,
        progress,
    };
    let done = if opts.stage {
        Status::Staged
    } else {
        Status::Applied
    };
    match execute(&mut plan, source, journal, store, &ctx) {
        Ok(op) => {
            let mut r = stamp(DestinationReport::from_plan(plan, done, Some(op.clone())));
            if opts.stage {
                r.message = format!(
                    "staged as release {op}, not activated: `distributor promote --destination {} {op}` activates it",
                    dest.id
                );
            } else if store.capabilities().releases {
                r.releases_removed = crate::journal::query::releases_removed(journal, &op)?;
                r.release_activated = Some(op);
            }
            Ok((r, ExitCode::Success))
        }
        Err(e) => Err(PlanFailed::new(plan, e)),
    }
}

/// What was planned for `dest`, as a plan file holds it, with the sha256 of the state
/// `store` holds now (SPEC §19).
fn saved_entry(
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
fn judge_saved(
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

/// A publication refused for its conflicts is journaled (SPEC §16): the operation with
/// the conflicts (its `plan_json`), no actions and a terminal `refused` event, in one
/// transaction, so an audit shows who tried what and it never reads as unfinished. The
/// operation id, for a conflict; `None` for any other decision (nothing is journaled).
fn journal_refusal(
    config: &Config,
    plan: &DestinationPlan,
    source: &Source,
    opts: &PublishOptions,
    journal: &mut Journal,
) -> Result<Option<String>> {
    if plan.decision != Decision::Conflict {
        return Ok(None);
    }
    let op = journal_refused(
        journal,
        &opts.command,
        &opts.actor,
        &config.pipeline_id,
        plan,
        source.source_ref(),
    )?;
    Ok(Some(op))
}

/// Whether the plan refuses for a record distributor does not believe (SPEC §17): that
/// conflict is reported before any pending recovery.
fn untrusted(plan: &DestinationPlan) -> bool {
    (plan.conflicts.iter()).any(|c| c.kind == crate::model::ConflictKind::UntrustedRecord)
}

/// Whether a decision is reported even while recovery is due at its bundle path. SPEC §6
/// refuses (exit 4) a writing decision then. `unchanged` and `skip_destination_newer` write
/// nothing and hold whatever an interrupted operation left (the state records this very
/// source, every recorded path matching it, or a newer one), so they stand. A conflict is
/// refused like a writing decision: what it objects to may be the interrupted operation's
/// half-placed files, and recovery is what resolves them.
fn stands_during_recovery(decision: Decision) -> bool {
    matches!(
        decision,
        Decision::Unchanged | Decision::SkipDestinationNewer
    )
}

fn status_of(plan: &DestinationPlan, writing: Status) -> Status {
    match plan.decision {
        Decision::Conflict => Status::Conflict,
        Decision::Unchanged | Decision::SkipDestinationNewer => Status::Skipped,
        _ => writing,
    }
}

fn code_of(plan: &DestinationPlan) -> ExitCode {
    if plan.decision == Decision::Conflict {
        ExitCode::Conflict
    } else {
        ExitCode::Success
    }
}
