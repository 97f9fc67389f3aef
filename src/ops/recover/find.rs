//! Where unfinished operations are found: the journal's unfinished operations (with the
//! storage their record names), and every staging entry in the config's destinations,
//! even one the journal never saw.

use super::one::journal_record;
use super::{FoundIn, Outcome, RecoverReport, RecoveredOperation};
use crate::backend::types::StagingEntry;
use crate::backend::{self, Backend};
use crate::config::PathMapping;
use crate::error::Result;
use crate::journal::Journal;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An operation to look at, before it is loaded.
#[derive(Debug, Default)]
pub(super) struct Candidate {
    pub(super) in_journal: bool,
    pub(super) in_staging: bool,
    /// Only an unfinished staging record (`.tmp-<op>`) was found.
    pub(super) unfinished_record: bool,
    /// Its staging entry is an earlier version's (`.distributor-staging/<op>/`).
    pub(super) legacy: bool,
    /// Base for the "no symlink on the way" walk of the lock.
    pub(super) base: Option<PathBuf>,
    /// The storage holding the bundle path when the path alone does not say (from the
    /// config or the record).
    pub(super) location: Option<Location>,
}

/// An object store or a releases destination, as a config or a record names it.
#[derive(Debug, Clone, Default)]
pub(super) struct Location {
    s3: Option<backend::s3::S3Location>,
    releases: Option<backend::releases::ReleasesRecord>,
}

impl Location {
    fn of_destination(dest: &crate::config::Destination) -> Option<Location> {
        match backend::kind_of(dest) {
            backend::Kind::ObjectStore(s) => Some(Location {
                s3: Some(backend::s3::S3Location::from_settings(s)),
                releases: None,
            }),
            backend::Kind::Releases(r) => Some(Location {
                s3: None,
                releases: Some(backend::releases::ReleasesRecord {
                    settings: r.clone(),
                    active_before: None,
                    activates: None,
                    activates_identity: None,
                    adopts: false,
                    undoes: None,
                    adopts_dir: None,
                    stages: false,
                }),
            }),
            backend::Kind::Local => None,
        }
    }

    pub(super) fn backend(l: Option<&Location>, bundle: &Path) -> Result<Box<dyn Backend>> {
        backend::for_record(
            bundle,
            l.and_then(|l| l.s3.as_ref()),
            l.and_then(|l| l.releases.as_ref()),
        )
    }
}

/// Adds to `found` the operations whose staging is in `dest`'s bundle paths (staging
/// distributor did not make goes to `report`, failed).
pub(super) fn search_staging(
    dest: &crate::config::Destination,
    found: &mut BTreeMap<PathBuf, BTreeMap<String, Candidate>>,
    report: &mut RecoverReport,
) -> Result<()> {
    let backend = backend::for_destination(dest)?;
    let backend = backend.as_ref();
    for bundle in staging_bundles(backend, &dest.path, &dest.path_mapping)? {
        let Some(store) = backend.open(&dest.path, &bundle)? else {
            continue;
        };
        let entries = store.staging_entries()?;
        let ops = found.entry(bundle.clone()).or_default();
        for entry in entries {
            let c = match &entry {
                StagingEntry::Operation(op) | StagingEntry::Unfinished(op) => {
                    ops.entry(op.clone()).or_default()
                }
                StagingEntry::Legacy(op) => ops.entry(op.clone()).or_default(),
                StagingEntry::Foreign(name, why) => {
                    report.operations.push(foreign(&bundle, name, why));
                    continue;
                }
                StagingEntry::Untrusted(name, why) => {
                    let mut r = foreign(&bundle, name, why);
                    r.outcome = Outcome::Untrusted;
                    r.message = why.clone();
                    report.operations.push(r);
                    continue;
                }
            };
            match entry {
                StagingEntry::Operation(_) => c.in_staging = true,
                StagingEntry::Legacy(_) => c.legacy = true,
                _ => c.unfinished_record = true,
            }
            c.base = Some(dest.path.clone());
            c.location = Location::of_destination(dest);
        }
    }
    Ok(())
}

/// The object store an operation's journal record names, if any.
pub(super) fn recorded_location(j: &Journal, op: &str) -> Result<Option<Location>> {
    Ok(journal_record(j, op)?.and_then(|s| {
        (s.store.is_some() || s.releases.is_some()).then_some(Location {
            s3: s.store,
            releases: s.releases,
        })
    }))
}

/// Bundle paths of a destination that may have staging: the path itself for fixed
/// mapping; for mapped destinations every bundle path below it.
fn staging_bundles(
    backend: &dyn Backend,
    base: &Path,
    mapping: &PathMapping,
) -> Result<Vec<PathBuf>> {
    if *mapping == PathMapping::Fixed {
        return Ok(vec![base.to_path_buf()]);
    }
    backend.bundle_paths(base)
}

/// A staging entry distributor did not make: reported failed, never touched.
fn foreign(bundle: &Path, name: &str, why: &str) -> RecoveredOperation {
    RecoveredOperation {
        operation_id: name.to_string(),
        bundle_path: bundle.to_string_lossy().into_owned(),
        pipeline_id: None,
        destination_id: None,
        decision: None,
        found_in: FoundIn::Staging,
        state_sha256: None,
        pre_state_sha256: None,
        post_state_sha256: None,
        outcome: Outcome::Failed,
        message: format!("{why}: inspect it and remove it by hand"),
        replaced_state: None,
    }
}
