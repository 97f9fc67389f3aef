//! What a releases operation does (`Purpose`), said by its caller when it makes the
//! operation (`ReleaseStore::operation_for`) and kept in its staging record
//! (`releases_record`): a publication, a stage, a promote, a rollback or an adoption; the
//! rollback's default target; and the checks of an existing release about to be
//! activated again.

use super::{ReleaseStore, ReleasesRecord, build, log};
use crate::backend::OperationState;
use crate::backend::local::Bundle;
use crate::error::{Error, IoContext, ReleasesError, Result};
use crate::fs::split;

/// What one operation in a releases destination does (SPEC §15, §19), as its caller says
/// it: kept on the operation ([`ReleaseStore::operation_for`]), never on the store, and
/// written into its staging record by `describe`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Purpose {
    /// A publication: builds a release and activates it.
    #[default]
    Publish,
    /// A stage (`publish --stage`): builds and verifies a release, does not activate it.
    Stage,
    /// A promote: activates the staged release `release`, like a rollback activates an
    /// earlier one.
    Promote {
        /// The staged release.
        release: String,
    },
    /// A rollback that undoes the activation of release `undoes`: activating the existing
    /// release `activate` (a single owner), or building a new one (`None`: a shared root).
    Rollback {
        /// The earlier release it activates again, when it builds none.
        activate: Option<String>,
        /// The release whose activation it undoes.
        undoes: String,
    },
    /// The adoption of the plain directory at `path`.
    Adopt,
}

impl ReleaseStore {
    /// A new operation in this destination that does `purpose`: the object its steps go
    /// through (as [`crate::backend::RecordStore::operation`], which makes a publication's).
    pub fn operation_for(&self, purpose: Purpose) -> OperationState<'_> {
        OperationState::of(Box::new(build::ReleaseOperation {
            store: self,
            purpose,
            building: Default::default(),
        }))
    }

    /// What the staging record keeps of this destination (SPEC §15): its settings, the
    /// release active before, and what an operation of `purpose` activates, stages,
    /// undoes or adopts.
    pub fn releases_record(&self, purpose: &Purpose) -> ReleasesRecord {
        let (activates, undoes) = match purpose {
            Purpose::Rollback { activate, undoes } => (activate.clone(), Some(undoes.clone())),
            Purpose::Promote { release } => (Some(release.clone()), None),
            _ => (None, None),
        };
        let adopts = *purpose == Purpose::Adopt;
        ReleasesRecord {
            settings: self.settings.clone(),
            active_before: self.active_release().map(str::to_string),
            activates,
            stages: *purpose == Purpose::Stage,
            undoes,
            adopts,
            adopts_dir: adopts
                .then(|| self.active.as_ref()?.dir().identity().ok())
                .flatten()
                .map(|i| [i.dev, i.ino]),
        }
    }

    /// The operation of the latest activation (of `owner`, in a shared root).
    pub fn latest_activation(&self, owner: Option<&str>) -> Result<Option<String>> {
        Ok(log::latest(&self.activations()?, owner))
    }

    /// What a rollback undoes by default ([`log::rollback_target`]): `(target, undone
    /// operation)`; `owner` for a shared root.
    pub fn rollback_target(&self, owner: Option<&str>) -> Result<(String, String)> {
        let current = self
            .active_release()
            .ok_or_else(|| ReleasesError::NoneActive {
                path: self.path.clone(),
            })?;
        log::rollback_target(&self.activations()?, owner).ok_or_else(|| {
            ReleasesError::NoneBefore {
                path: self.path.clone(),
                release: current.to_string(),
                owner: owner.map(str::to_string),
                log: self.settings.dir.join(crate::backend::local::records::LOG),
            }
            .into()
        })
    }

    /// The state file of release `name`, which must exist and hold valid state.
    pub fn release_state(&self, name: &str) -> Result<crate::state::State> {
        let root = self.root()?;
        let release = match root.dir().open_dir(name) {
            Ok(d) => Bundle::reading(&self.settings.dir.join(name), d)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ReleasesError::Gone {
                    release: name.to_string(),
                    dir: self.settings.dir.clone(),
                }
                .into());
            }
            Err(e) => return Err(Error::io("open", self.settings.dir.join(name), e)),
        };
        match release.read_state()?.parse() {
            crate::state::StateFile::Valid(s) => Ok(s),
            crate::state::StateFile::Absent => Err(ReleasesError::TargetWithoutState {
                release: name.to_string(),
            }
            .into()),
            crate::state::StateFile::Invalid(why) => Err(ReleasesError::TargetInvalidState {
                release: name.to_string(),
                why,
            }
            .into()),
            crate::state::StateFile::Untrusted(why, _) => Err(Error::Untrusted(why)),
        }
    }

    /// Checks that release `name` holds exactly what `state` records: every output a
    /// regular file of its size and sha256 (read whole), every link its target. A failure
    /// lists the first paths that differ.
    pub fn verify_release(&self, name: &str, state: &crate::state::State) -> Result<()> {
        let root = self.root()?;
        let base = self.settings.dir.join(name);
        let release = root.dir().open_dir(name).ctx("open", &base)?;
        let mut bad = Vec::new();
        for o in &state.outputs {
            let (d, n) = split(&o.path);
            let ok = release
                .open_dir(d)
                .and_then(|dir| dir.open_file(n))
                .ok()
                .and_then(|(f, st)| {
                    let (size, sha) = crate::hash::hash_reader(f, &base.join(&o.path)).ok()?;
                    Some(size == o.size && st.st_size as u64 == o.size && sha == o.sha256)
                })
                .unwrap_or(false);
            if !ok {
                bad.push(o.path.clone());
            }
        }
        for l in &state.links {
            let (d, n) = split(&l.path);
            let want = crate::source::relative_link_target(&l.path, &l.target);
            let ok = release
                .open_dir(d)
                .and_then(|dir| dir.read_link(n))
                .is_ok_and(|t| t == want);
            if !ok {
                bad.push(l.path.clone());
            }
        }
        if bad.is_empty() {
            return Ok(());
        }
        Err(ReleasesError::FailsVerification {
            release: name.to_string(),
            paths: bad,
        }
        .into())
    }
}
