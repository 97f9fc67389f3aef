//! What a releases operation does (`Purpose`), said by its caller when it makes the
//! operation (`ReleaseStore::operation_for`) and kept in its staging record
//! (`releases_record`): a publication, a stage, a promote, a rollback or an adoption; the
//! rollback's default target; and the checks of an existing release about to be
//! activated again.

use super::identity::moved;
use super::{Expected, ReleaseStore, ReleasesRecord, build, log};
use crate::backend::OperationState;
use crate::backend::local::Bundle;
use crate::error::{Error, IoContext, ReleasesError, Result};
use crate::fs::{Identity, split};

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
        /// Its device and inode, as verified.
        identity: Identity,
    },
    /// A rollback that undoes the activation of release `undoes`: activating the existing
    /// release `activate` (a single owner), or building a new one (`None`: a shared root).
    Rollback {
        /// The earlier release it activates again, and its device and inode as verified,
        /// when it builds none.
        activate: Option<(String, Identity)>,
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
        self.operation_with(purpose, None)
    }

    /// [`ReleaseStore::operation_for`], given the state the operation commits, parsed
    /// (`post`): what the entries it carries over from the active release must be.
    pub fn operation_with<'s>(
        &'s self,
        purpose: Purpose,
        post: Option<&'s crate::state::State>,
    ) -> OperationState<'s> {
        OperationState::of(Box::new(build::ReleaseOperation {
            store: self,
            purpose,
            building: Default::default(),
            post,
        }))
    }

    /// What the staging record keeps of this destination (SPEC §15): its settings, the
    /// release active before, and what an operation of `purpose` activates, stages,
    /// undoes or adopts.
    pub fn releases_record(&self, purpose: &Purpose) -> ReleasesRecord {
        let (activates, undoes) = match purpose {
            Purpose::Rollback { activate, undoes } => (activate.clone(), Some(undoes.clone())),
            Purpose::Promote { release, identity } => (Some((release.clone(), *identity)), None),
            _ => (None, None),
        };
        let (activates, activates_identity) = activates.unzip();
        let activates_identity = activates_identity.map(crate::record::RecordDir::from);
        let adopts = *purpose == Purpose::Adopt;
        ReleasesRecord {
            settings: self.settings.clone(),
            active_before: self.active_release().map(str::to_string),
            activates,
            activates_identity,
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

    /// The state of release `name` and its device and inode: `name` must hold the
    /// release the log recorded (its device and inode, where recorded; owned by
    /// distributor's uid), with valid state naming it (docs/operations.md, "Release
    /// identity"); anything else under a logged name is `release_moved`.
    pub fn release_state(&self, name: &str) -> Result<(crate::state::State, Identity)> {
        let view = self.log_view()?;
        let want = Expected {
            identity: view.identity_of(name),
            state: false,
        };
        let path = self.settings.dir.join(name);
        let outcome = "nothing was activated";
        let dir = match self.open_release_checked(name, want, &view)? {
            Ok(d) => d,
            Err(_)
                if self
                    .root()?
                    .dir()
                    .stat_opt(name)
                    .ctx("stat", &path)?
                    .is_none() =>
            {
                return Err(ReleasesError::Gone {
                    release: name.to_string(),
                    dir: self.settings.dir.clone(),
                }
                .into());
            }
            Err(why) => return Err(moved(path, why, outcome)),
        };
        let identity = dir.identity().ctx("stat", &path)?;
        let logged = want.identity.is_some()
            || view.built_by(name).is_some()
            || view.activations.iter().any(|a| a.release == name);
        let bytes = Bundle::reading(&path, dir)?.read_state()?;
        let sha = bytes
            .bytes()
            .map(crate::hash::sha256_hex)
            .unwrap_or_default();
        match bytes.parse() {
            crate::state::StateFile::Valid(s) if view.state_names(&s, &sha, name) => {
                Ok((s, identity))
            }
            crate::state::StateFile::Valid(s) => Err(moved(
                path,
                format!(
                    "its .distributor.json names operation {}, not release {name}",
                    s.owners
                        .iter()
                        .map(|o| o.operation_id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                outcome,
            )),
            crate::state::StateFile::Absent if logged => Err(moved(
                path,
                "it holds no .distributor.json".to_string(),
                outcome,
            )),
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

    /// Checks that release `name`, still the directory `identity` names, holds exactly
    /// what `state` records: every output a regular file of its size and sha256 (read
    /// whole), every link its target. A failure lists the first paths that differ.
    pub fn verify_release(
        &self,
        name: &str,
        identity: Identity,
        state: &crate::state::State,
    ) -> Result<()> {
        let base = self.settings.dir.join(name);
        let want = Expected {
            identity: Some(identity),
            state: false,
        };
        let release = self.checked_or_moved(name, want, &self.view, "nothing was activated")?;
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
