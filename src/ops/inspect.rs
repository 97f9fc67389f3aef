//! `status` and `verify`: read-only views of what destinations hold.
//!
//! `status` summarises each bundle path's state; `verify` compares storage with state and
//! lists missing, modified and unrecorded paths, and whether the state is what the
//! destination log says distributor made (`log_mismatch`); exit 3 on drift. Neither writes.

use crate::backend::local::records::RECORD_DIR;
use crate::backend::local::{LEGACY_STAGING_DIR, LOCK_FILE};
use crate::backend::releases::ReleaseStore;
use crate::backend::types::Proof;
use crate::backend::{self, BundleStore};
use crate::config::{Destination, PathMapping};
use crate::error::Result;
use crate::journal::JournalView;
use crate::model::{Owner, SourceRef, StateMode};
use crate::ops::common::{Pending, pending};
use crate::plan::Entry;
use crate::progress::{Bytes, Ticker};
use crate::source::relative_link_target;
use crate::state::{STATE_FILE, StateFile};
use serde::Serialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The bundle paths of a destination that exist: the path itself for fixed mapping, or
/// every directory under it holding a `.distributor.json` or a `.distributor-staging/` for
/// mapped destinations (an interrupted first publication has staging and no state yet, and
/// status must still show that it needs recovery).
pub(crate) fn bundle_paths(dest: &Destination) -> Result<Vec<PathBuf>> {
    if dest.path_mapping == PathMapping::Fixed {
        return Ok(vec![dest.path.clone()]);
    }
    backend::for_destination(dest)?.bundle_paths(&dest.path)
}

/// The bundle paths to report for `dest`: those in storage ([`bundle_paths`]) and those
/// the journal has an unfinished operation on (an operation killed before its staging
/// existed left nothing in storage to find it by).
fn reported_paths(dest: &Destination, view: Option<&JournalView>) -> Result<Vec<PathBuf>> {
    let mut paths = bundle_paths(dest)?;
    if dest.path_mapping != PathMapping::Fixed
        && let Some(v) = view
    {
        for (_, bundle) in v.unfinished()? {
            let bundle = PathBuf::from(bundle);
            if bundle.starts_with(&dest.path) && !paths.contains(&bundle) {
                paths.push(bundle);
            }
        }
        paths.sort();
    }
    if paths.is_empty() {
        // A mapped destination nothing was published to yet: reported as its configured
        // path, absent, so that every destination shows.
        paths.push(dest.path.clone());
    }
    Ok(paths)
}

/// A bundle path opened for reading (`None`: it does not exist).
fn open(dest: &Destination, bundle: &std::path::Path) -> Result<Option<Box<dyn BundleStore>>> {
    backend::for_destination(dest)?.open(&dest.path, bundle)
}

/// One owner in a status entry.
#[derive(Debug, Serialize)]
pub(crate) struct OwnerStatus {
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
pub(crate) struct BundleStatus {
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
    /// A record distributor does not believe (SPEC §17: `untrusted_record`): the path to
    /// remove and its owner. Exit 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untrusted_record: Option<String>,
    /// A releases destination whose active release's name holds another directory than
    /// the release the log activated (docs/operations.md, "Release identity"): which, and
    /// what it holds. Exit 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_moved: Option<String>,
    /// Whether an operation is unfinished (in the journal or in staging) and no live lock
    /// covers it: `distributor recover` is due.
    pub recovery_pending: bool,
    /// What is unfinished, when recovery is pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
    /// Another process is publishing here now: who holds the lock (an unfinished
    /// operation it covers is that process's work in progress).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy: Option<String>,
    /// Why this bundle path could not be read (the others are still reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The destination log's bad entries (SPEC §18), each naming its file (exit 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_error: Option<String>,
    /// A destination with releases: every release, oldest activation first, with when it
    /// was last activated and what retention would decide now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub releases: Option<Vec<crate::backend::releases::log::Verdict>>,
}

/// An entry of `status` or `verify`: one bundle path of a destination.
trait Reported {
    /// The entry of a bundle path nothing was read of yet.
    fn empty(dest: &Destination, bundle: &Path) -> Self;
    /// Marks it failed: state `error`, and why.
    fn failed(&mut self, why: String);
}

/// Runs `one` on every bundle path of the selected destinations (those
/// [`reported_paths`] gives), each from its [`Reported::empty`] entry. An error, in listing a
/// destination's bundle paths or at one of them, is reported on that entry
/// ([`Reported::failed`]) and the others are still read.
fn each_bundle<T: Reported>(
    dests: &[&Destination],
    view: Option<&JournalView>,
    mut one: impl FnMut(&Destination, &Path, &mut T) -> Result<()>,
) -> Vec<T> {
    let mut out = Vec::new();
    for d in dests {
        match reported_paths(d, view) {
            Ok(bundles) => {
                for bundle in bundles {
                    let mut entry = T::empty(d, &bundle);
                    if let Err(e) = one(d, &bundle, &mut entry) {
                        entry.failed(e.to_string());
                    }
                    out.push(entry);
                }
            }
            Err(e) => {
                let mut entry = T::empty(d, &d.path);
                entry.failed(e.to_string());
                out.push(entry);
            }
        }
    }
    out
}

impl Reported for BundleStatus {
    fn empty(d: &Destination, bundle: &Path) -> Self {
        BundleStatus {
            destination_id: d.id.clone(),
            bundle_path: bundle.to_string_lossy().into_owned(),
            state: "absent",
            state_mode: None,
            invalid_reason: None,
            owners: vec![],
            untrusted_record: None,
            release_moved: None,
            recovery_pending: false,
            recovery: None,
            busy: None,
            error: None,
            log_error: None,
            releases: None,
        }
    }

    fn failed(&mut self, why: String) {
        self.state = "error";
        self.error = Some(why);
    }
}

/// Status of every bundle path of the selected destinations. An error at one bundle path
/// (or in listing a destination's bundle paths) is reported on its entry, with state
/// `error`, and the others are still read.
pub(crate) fn status(dests: &[&Destination], view: Option<&JournalView>) -> Vec<BundleStatus> {
    each_bundle(dests, view, |d, bundle, s| status_of(d, bundle, view, s))
}

/// Fills in the status of one bundle path.
fn status_of(
    d: &Destination,
    bundle: &Path,
    view: Option<&JournalView>,
    s: &mut BundleStatus,
) -> Result<()> {
    let store = open(d, bundle)?;
    let (state, untrusted) = read_state(store.as_deref(), bundle, view)?;
    s.untrusted_record = untrusted.or(untrusted_of(store.as_deref())?);
    s.release_moved = release_moved_of(store.as_deref());
    match pending(view, bundle, store.as_deref())? {
        Pending::Nothing => {}
        Pending::Busy(who) => s.busy = Some(who),
        Pending::Recovery(what) => {
            s.recovery_pending = true;
            s.recovery = Some(what);
        }
    }
    s.log_error = log_error(bundle, store.as_deref());
    s.releases = match store.as_deref().and_then(ReleaseStore::of) {
        Some(r) => Some(r.retention()?),
        None => None,
    };
    match state {
        StateFile::Absent | StateFile::Untrusted(..) => {}
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
    Ok(())
}

/// The destination log at a bundle path, read and judged as [`log_error`] reads it;
/// `None` where there is none to read.
pub(crate) fn read_log_at(
    bundle: &Path,
    store: Option<&dyn BundleStore>,
) -> Option<Result<crate::backend::local::log::Log>> {
    let store = store?;
    if let Some(r) = ReleaseStore::of(store) {
        return Some(r.log_view().map(|v| v.log));
    }
    if let Some(l) = store.log() {
        return Some(l.read_log());
    }
    crate::backend::local::log::read_below(bundle).ok()
}

/// Why the entry the journal in use last wrote (`written`: its seq and sha256) is not
/// those bytes in the log now, if it is not: that entry was changed after it was written.
fn written_entry_changed(
    log: &crate::backend::local::log::Log,
    written: Option<(u64, String)>,
) -> Option<String> {
    let (seq, sha) = written?;
    let entry = log.entries.iter().find(|e| e.seq == seq)?;
    let now = entry.stored_sha256.as_deref()?;
    (now != sha).then(|| {
        format!(
            "entry {seq} of the destination log is not the entry this journal wrote there (sha256 {now}, written as {sha}): it was changed after it was written"
        )
    })
}

/// The destination log's bad entries at a bundle path (a releases destination's in
/// `releases.dir`, an object store's under its prefix), in one sentence naming their files;
/// `None` when there are none.
fn log_error(bundle: &Path, store: Option<&dyn BundleStore>) -> Option<String> {
    let store = store?;
    if let Some(r) = ReleaseStore::of(store) {
        return match r.log_view() {
            Ok(v) => v.untrusted(),
            Err(e) => Some(e.to_string()),
        };
    }
    match store.log().map(|l| l.read_log()).transpose() {
        Ok(Some(l)) => return l.bad_message(),
        Ok(None) => {}
        Err(e) => return Some(e.to_string()),
    }
    match crate::backend::local::log::read_below(bundle).ok()? {
        Ok(l) => l.bad_message(),
        Err(e) => Some(e.to_string()),
    }
}

/// Drift found in one bundle path.
#[derive(Debug, Serialize)]
pub(crate) struct BundleDrift {
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
    /// How many more unrecorded paths `verify.ignore` hid (SPEC §16): not drift, counted
    /// so that a glob hiding more than meant shows.
    pub ignored: u64,
    /// A record distributor does not believe (SPEC §17: `untrusted_record`): the path to
    /// remove and its owner. Exit 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untrusted_record: Option<String>,
    /// A releases destination whose active release's name holds another directory than
    /// the release the log activated (docs/operations.md, "Release identity"): drift
    /// (exit 3); storage is not compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_moved: Option<String>,
    /// Recovery is due (as in `status`): storage was not compared, since an interrupted
    /// operation's half-placed files would read as drift.
    pub recovery_pending: bool,
    /// What is unfinished, when recovery is pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
    /// Another process is publishing here now (who holds the lock): not compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy: Option<String>,
    /// Why this bundle path could not be verified (the others still are).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The destination log's bad entries (SPEC §18), each naming its file (exit 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_error: Option<String>,
    /// The state is not at the operation the destination log's last state-changing entry
    /// names (SPEC §18): the destination was changed outside distributor. Drift (exit 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_mismatch: Option<String>,
    /// The destination log's hash chain breaks (docs/operations.md, "The hash chain"):
    /// the first entry whose `prev_entry_sha256` does not match. Drift (exit 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_chain_broken: Option<String>,
}

impl BundleDrift {
    /// True when storage and state disagree (or state is invalid, or is not what the
    /// destination log says distributor made).
    pub(crate) fn drifted(&self) -> bool {
        self.state == "invalid"
            || !self.missing.is_empty()
            || !self.modified.is_empty()
            || !self.unrecorded.is_empty()
            || self.log_mismatch.is_some()
            || self.log_chain_broken.is_some()
            || self.release_moved.is_some()
    }
}

impl Reported for BundleDrift {
    fn empty(d: &Destination, bundle: &Path) -> Self {
        BundleDrift {
            destination_id: d.id.clone(),
            bundle_path: bundle.to_string_lossy().into_owned(),
            state: "absent",
            invalid_reason: None,
            missing: vec![],
            modified: vec![],
            unrecorded: vec![],
            ignored: 0,
            untrusted_record: None,
            release_moved: None,
            recovery_pending: false,
            recovery: None,
            busy: None,
            error: None,
            log_error: None,
            log_mismatch: None,
            log_chain_broken: None,
        }
    }

    /// Nothing of a failed comparison is reported but the error.
    fn failed(&mut self, why: String) {
        *self = BundleDrift {
            state: "error",
            error: Some(why),
            destination_id: std::mem::take(&mut self.destination_id),
            bundle_path: std::mem::take(&mut self.bundle_path),
            invalid_reason: None,
            missing: vec![],
            modified: vec![],
            unrecorded: vec![],
            ignored: 0,
            untrusted_record: None,
            release_moved: None,
            recovery_pending: false,
            recovery: None,
            busy: None,
            log_error: None,
            log_mismatch: None,
            log_chain_broken: None,
        };
    }
}

/// Compares storage with state for every bundle path of the selected destinations. A
/// bundle path where recovery is pending, or another process is publishing, is not
/// compared (it says which); an error at one is reported on its entry, with state
/// `error`, and the others are still verified. `progress` hears of each recorded path
/// checked and each byte hashed.
pub(crate) fn verify(
    dests: &[&Destination],
    deep: bool,
    view: Option<&JournalView>,
    progress: Ticker<'_>,
) -> Vec<BundleDrift> {
    each_bundle(dests, view, |d, bundle, v| {
        verify_one(d, bundle, deep, view, v, progress.on(&d.id))
    })
}

/// The state file of `store`, and why it is not believed (SPEC §17) when neither its owner
/// and mode nor the journal (`view`: it committed exactly these bytes) vouch for it. An
/// untrusted state is reported as read, and not compared.
fn read_state(
    store: Option<&dyn BundleStore>,
    bundle: &Path,
    view: Option<&JournalView>,
) -> Result<(StateFile, Option<String>)> {
    let Some(s) = store else {
        return Ok((StateFile::Absent, None));
    };
    let (state, sha) = s.read_state_parsed(0)?;
    let state = state.for_version(s.capabilities().state_version);
    let StateFile::Untrusted(why, _) = &state else {
        return Ok((state, None));
    };
    let vouched = match (view, sha) {
        (Some(v), Some(sha)) => v.committed_post_state(&bundle.to_string_lossy(), &sha.hex())?,
        _ => false,
    };
    let why = (!vouched).then(|| why.clone());
    Ok((state.believed(), why))
}

/// Why the active release's name of a releases destination holds another directory than
/// the release (docs/operations.md, "Release identity"), if it does.
fn release_moved_of(store: Option<&dyn BundleStore>) -> Option<String> {
    store.and_then(ReleaseStore::of)?.release_moved()
}

/// The first record distributor does not believe in the staging of `store` (SPEC §17).
fn untrusted_of(store: Option<&dyn BundleStore>) -> Result<Option<String>> {
    Ok(store
        .map(crate::backend::local::untrusted_staging)
        .transpose()?
        .flatten())
}

/// Verifies one bundle path.
fn verify_one(
    d: &Destination,
    bundle: &Path,
    deep: bool,
    view: Option<&JournalView>,
    v: &mut BundleDrift,
    progress: Ticker<'_>,
) -> Result<()> {
    let store = open(d, bundle)?;
    let (state, untrusted) = read_state(store.as_deref(), bundle, view)?;
    v.untrusted_record = untrusted.or(untrusted_of(store.as_deref())?);
    v.release_moved = release_moved_of(store.as_deref());
    v.log_error = log_error(bundle, store.as_deref());
    let settled = match pending(view, bundle, store.as_deref())? {
        Pending::Nothing => true,
        Pending::Busy(who) => {
            v.busy = Some(who);
            false
        }
        Pending::Recovery(what) => {
            v.recovery_pending = true;
            v.recovery = Some(what);
            false
        }
    };
    // An untrusted record says nothing of what distributor published, nor does a
    // directory that is not the release: not compared.
    let compare_it = settled && v.untrusted_record.is_none() && v.release_moved.is_none();
    if compare_it && let Some(s) = store.as_deref() {
        v.log_mismatch = log_mismatch_of(s, &state)?;
        if v.log_mismatch.is_some() {
            v.log_mismatch = log_mismatch_again(d, bundle, view)?;
        }
        // A log shorter than the journal in use saw it (docs/operations.md, "The log's
        // continuity").
        if v.log_mismatch.is_none()
            && let (Some(view), Some(cursor)) = (view, s.log_cursor())
        {
            cursor.set_known(view.log_tail(cursor.location())?);
            v.log_mismatch = crate::backend::log_missing(s)?;
        }
        // The hash chain, and the last entry this journal wrote (docs/operations.md, "The
        // hash chain").
        if let Some(Ok(log)) = read_log_at(bundle, Some(s)) {
            v.log_chain_broken = log.chain_broken();
            if v.log_mismatch.is_none()
                && let (Some(view), Some(cursor)) = (view, s.log_cursor())
            {
                v.log_mismatch =
                    written_entry_changed(&log, view.log_entry_written(cursor.location())?);
            }
        }
    }
    match (state, store) {
        (StateFile::Absent, _) => {}
        (StateFile::Invalid(r), _) => {
            v.state = "invalid";
            v.invalid_reason = Some(r);
        }
        (StateFile::Valid(st), Some(store)) => {
            v.state = "valid";
            if compare_it {
                compare(store.as_ref(), &st, deep, &d.verify_ignore, v, progress)?;
            }
        }
        (StateFile::Valid(_), None) => unreachable!("a state was read from it"),
        (StateFile::Untrusted(..), _) => unreachable!("read_state gives what it believes"),
    }
    Ok(())
}

/// Why the state read from `store` is not what its destination log's last state-changing
/// entry made (SPEC §18 `log_mismatch`), if it is not. An invalid state is drift of its
/// own, and a log with nothing to compare with is never a mismatch.
fn log_mismatch_of(store: &dyn BundleStore, state: &StateFile) -> Result<Option<String>> {
    use crate::log_mismatch::{StateSays, judge};
    let says = match (ReleaseStore::of(store), state) {
        (Some(r), _) if !r.is_plain() => StateSays::Release(r.active_release()),
        (_, StateFile::Valid(st)) => StateSays::Owners(Some(st)),
        (_, StateFile::Absent) => StateSays::Owners(None),
        (_, StateFile::Invalid(_) | StateFile::Untrusted(..)) => return Ok(None),
    };
    Ok(store
        .last_logged_operation()?
        .and_then(|logged| judge(says, &logged)))
}

/// A mismatch found is judged once more, from the bundle path opened again: the state and
/// the log are read one after the other, without the lock, and a run that committed in
/// between would read as one. It stands when the second reading finds it too and no
/// process holds the lock (a run between its commit point and its log entry).
fn log_mismatch_again(
    d: &Destination,
    bundle: &Path,
    view: Option<&JournalView>,
) -> Result<Option<String>> {
    let Some(store) = open(d, bundle)? else {
        return Ok(None);
    };
    let (state, untrusted) = read_state(Some(store.as_ref()), bundle, view)?;
    if untrusted.is_some() {
        return Ok(None);
    }
    let found = log_mismatch_of(store.as_ref(), &state)?;
    if found.is_some() && store.lock_holder()?.is_some() {
        return Ok(None);
    }
    Ok(found)
}

/// Compares what `store` holds with the valid state `st`. Every recorded path is looked
/// up (never through a symlink: a recorded path only reachable through one is not where
/// state says, so it is missing and the symlink unrecorded) and every recorded file hashed.
fn compare(
    store: &dyn BundleStore,
    st: &crate::state::State,
    deep: bool,
    ignore: &crate::globs::PathGlobs,
    v: &mut BundleDrift,
    progress: Ticker<'_>,
) -> Result<()> {
    let mut paths: Vec<(&str, Option<Proof>)> = Vec::new();
    paths.extend(st.outputs.iter().map(|o| {
        let proof = Proof {
            sha256: &o.sha256,
            placed: None,
            or_hash: true,
        };
        (o.path.as_str(), Some(proof))
    }));
    paths.extend(st.links.iter().map(|l| (l.path.as_str(), None)));
    progress.start("files", Some(paths.len() as u64), Bytes::Counted);
    let storage = store.probe(&paths, &Default::default(), progress)?;
    // --deep on storage whose probe proves content by metadata alone (an object store's
    // ETag): every file it holds at the recorded size is read and hashed, a second pass.
    let downloads = deep && store.capabilities().proves_by_etag;
    if downloads && progress.is_on() {
        let (files, bytes) = (st.outputs.iter())
            .filter(|o| matches!(storage.get(&o.path), Entry::File { size, .. } if *size == o.size))
            .fold((0, 0), |(n, b), o| (n + 1, b + o.size));
        progress.start("files hashed", Some(files), Bytes::Of(bytes));
    }
    let mut recorded: HashSet<&str> = HashSet::new();
    for o in &st.outputs {
        recorded.insert(&o.path);
        match storage.get(&o.path) {
            Entry::Missing => v.missing.push(o.path.clone()),
            Entry::File { size, sha256 } if *size == o.size => {
                // --deep: the content itself, where the probe only compared metadata.
                let deep_sha = match deep {
                    true => store.content_sha256(&o.path)?,
                    false => None,
                };
                if downloads {
                    progress.bytes(o.size);
                    progress.done(1);
                }
                let sha = deep_sha.as_ref().or(sha256.as_deref());
                if sha != Some(&o.sha256) {
                    v.modified.push(o.path.clone());
                }
            }
            _ => v.modified.push(o.path.clone()),
        }
    }
    for l in &st.links {
        recorded.insert(&l.path);
        match storage.get(&l.path) {
            Entry::Missing => v.missing.push(l.path.clone()),
            Entry::Symlink { target } if *target == relative_link_target(&l.path, &l.target) => {}
            _ => v.modified.push(l.path.clone()),
        }
    }
    for p in store.list_files()? {
        let top = p.split('/').next().unwrap_or(&p);
        if top == STATE_FILE
            || top == LOCK_FILE
            || top == RECORD_DIR
            || top == LEGACY_STAGING_DIR
            || recorded.contains(p.as_str())
        {
            continue;
        }
        if ignore.is_match(&p) {
            v.ignored += 1;
            continue;
        }
        v.unrecorded.push(p);
    }
    v.missing.sort();
    v.modified.sort();
    v.unrecorded.sort();
    Ok(())
}
