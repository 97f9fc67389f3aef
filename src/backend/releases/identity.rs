//! Releases known by identity (docs/operations.md, "Release identity"): a release is the
//! directory distributor made or verified, known by its device and inode (kept in the log
//! entry that activated or staged it, in the staging entry of the operation building it,
//! and in a rollback's or promote's staging record for the release it activates) and by
//! its own state, which names the operation that built it.
//!
//! Before every activation, carry, and removal, what the name holds now is opened from
//! the `releases.dir` handle without following a symlink and compared with that identity,
//! its owner, and (where no identity is recorded) its state. A mismatch is
//! `release_moved`: nothing is activated, carried or removed there.
//!
//! Must never: believe a release by its name alone, or judge a directory through a
//! symlink.

use super::{LogView, ReleaseStore};
use crate::backend::local::Bundle;
use crate::backend::local::log::Entry;
use crate::error::{Error, ReleasesError, Result};
use crate::fs::{Dir, Identity, is_redirect};
use crate::state::{State, StateFile};

impl LogView {
    /// The entry that built release `name`: its own operation's activation or stage.
    pub(super) fn built_by(&self, name: &str) -> Option<&Entry> {
        self.log.entries.iter().find(|e| {
            e.operation_id == name
                && (e.release_activated.as_deref() == Some(name)
                    || e.release_staged.as_deref() == Some(name))
        })
    }

    /// The device and inode the log records for release `name`: the first entry that
    /// activated or staged it with one (the entry that built it; a later rollback or
    /// promote records the identity it verified, the same one). `None` for a release no
    /// entry records one for (logged by an earlier version, or never logged).
    pub fn identity_of(&self, name: &str) -> Option<Identity> {
        (self.log.entries.iter())
            .filter(|e| {
                e.release_activated.as_deref() == Some(name)
                    || e.release_staged.as_deref() == Some(name)
            })
            .find_map(|e| e.release_identity)
    }

    /// Whether `state` (its sha256 `sha256`) names release `name`, the operation that
    /// built it. One of its owner records names that operation, and none names an
    /// operation whose release the log records as built after it: in a shared root a
    /// release carries the other owners' records, all of releases built before it, so the
    /// release's own operation is the one of the last write. An adopted release keeps the
    /// records of the publications in place (their operations built no release): it is
    /// named by the adoption's entry, whose post-state must be exactly this state.
    pub fn state_names(&self, state: &State, sha256: &str, name: &str) -> bool {
        let built = self.built_by(name);
        if let Some(adopt) = built.filter(|e| e.command == "adopt") {
            return adopt.post_state_sha256.as_deref() == Some(sha256);
        }
        if !state.owners.iter().any(|o| o.operation_id == name) {
            return false;
        }
        let Some(at) = built.map(|e| e.seq) else {
            return true;
        };
        (state.owners.iter())
            .filter(|o| o.operation_id != name)
            .all(|o| self.built_by(&o.operation_id).is_none_or(|e| e.seq < at))
    }

    /// What the state names, in words, for a message.
    fn named(state: &State) -> String {
        let ops: Vec<&str> = state
            .owners
            .iter()
            .map(|o| o.operation_id.as_str())
            .collect();
        if ops.is_empty() {
            "no operation".to_string()
        } else {
            format!("operation {}", ops.join(", "))
        }
    }
}

impl From<Identity> for crate::record::RecordDir {
    fn from(i: Identity) -> Self {
        crate::record::RecordDir {
            dev: i.dev,
            ino: i.ino,
        }
    }
}

impl From<crate::record::RecordDir> for Identity {
    fn from(r: crate::record::RecordDir) -> Self {
        Identity {
            dev: r.dev,
            ino: r.ino,
        }
    }
}

/// What a release is expected to be when its name is opened again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected {
    /// Its device and inode, when recorded.
    pub identity: Option<Identity>,
    /// Read its state and check that it names the release: always where no identity is
    /// recorded (then the state is all there is to go by).
    pub state: bool,
}

impl Expected {
    /// A release known by the identity `identity` (`None`: by its state alone).
    pub(crate) fn by(identity: Option<Identity>) -> Expected {
        Expected {
            identity,
            state: identity.is_none(),
        }
    }
}

impl ReleaseStore {
    /// [`check_release`] in this destination's `releases.dir`.
    pub(crate) fn open_release_checked(
        &self,
        name: &str,
        want: Expected,
        view: &LogView,
    ) -> Result<std::result::Result<Dir, String>> {
        check_release(self.root()?, &self.settings.dir, name, want, view)
    }

    /// [`ReleaseStore::open_release_checked`] as an error: `release_moved`, naming the
    /// directory, with `outcome` saying what was not done.
    pub(crate) fn checked_or_moved(
        &self,
        name: &str,
        want: Expected,
        view: &LogView,
        outcome: &'static str,
    ) -> Result<Dir> {
        self.open_release_checked(name, want, view)?
            .map_err(|why| moved(self.settings.dir.join(name), why, outcome))
    }
}

/// The error `release_moved` for the release directory `dir`.
pub(crate) fn moved(dir: std::path::PathBuf, why: String, outcome: &'static str) -> Error {
    ReleasesError::Moved { dir, why, outcome }.into()
}

/// Opens release `name` from the handle of `releases.dir` (`root`, at `base`), never
/// through a symlink, and checks that it is the release `want` describes: its device and
/// inode, owned by distributor's effective uid, and (where `want.state`) a trusted state
/// naming it. `Ok(Err(why))` when the name holds anything else (`release_moved`),
/// `Ok(Ok(dir))` with the handle opened.
pub(crate) fn check_release(
    root: &Bundle,
    base: &std::path::Path,
    name: &str,
    want: Expected,
    view: &LogView,
) -> Result<std::result::Result<Dir, String>> {
    let path = base.join(name);
    let dir = match root.dir().open_dir(name) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Err("nothing has that name now".to_string()));
        }
        Err(e) if is_redirect(&e) => {
            return Ok(Err(
                "it is not a directory (a symlink, or a file)".to_string()
            ));
        }
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let st = dir.fstat().map_err(|e| Error::io("stat", &path, e))?;
    let now = Identity::of(&st);
    if let Some(id) = want.identity
        && id != now
    {
        return Ok(Err(format!(
            "it is the directory of device {} inode {}, not the one distributor made or verified (device {} inode {})",
            now.dev, now.ino, id.dev, id.ino
        )));
    }
    let euid = crate::backend::local::records::euid();
    if st.st_uid != euid {
        return Ok(Err(format!(
            "it is owned by uid {}, not distributor's ({euid})",
            st.st_uid
        )));
    }
    if want.state
        && let Some(why) = state_mismatch(&path, name, &dir, view)?
    {
        return Ok(Err(why));
    }
    Ok(Ok(dir))
}

/// Why the state of release `name` (opened as `dir`, at `path`) does not name it, if it
/// does not.
fn state_mismatch(
    path: &std::path::Path,
    name: &str,
    dir: &Dir,
    view: &LogView,
) -> Result<Option<String>> {
    let handle = dir.try_clone().map_err(|e| Error::io("open", path, e))?;
    let bytes = Bundle::reading(path, handle)?.read_state()?;
    let sha = bytes.bytes().map(crate::hash::sha256_hex);
    Ok(match (bytes.parse(), sha) {
        (StateFile::Valid(s), Some(sha)) if view.state_names(&s, &sha, name) => None,
        (StateFile::Valid(s), _) => Some(format!(
            "its .distributor.json names {}, not release {name}",
            LogView::named(&s)
        )),
        (StateFile::Absent, _) => Some("it holds no .distributor.json".to_string()),
        (StateFile::Invalid(why), _) => {
            Some(format!("its .distributor.json is not valid state ({why})"))
        }
        (StateFile::Untrusted(why, _), _) => Some(why),
    })
}
