//! A destination as planning sees it: its bundle path opened for reading (or missing, or
//! unusable), and the state file parsed, again only when its bytes change.

use crate::backend::{self, BundleStore};
use crate::config::Destination;
use crate::error::{Error, Result};
use crate::hash::ContentHash;
use crate::source::Source;
use crate::state::StateFile;
use std::path::Path;
use std::rc::Rc;

/// A bundle path as planning sees it: opened (locked, or for reading), not there yet, or
/// not usable at all (the planner's `unsafe_storage`).
pub(super) enum View<'s> {
    Store(&'s dyn BundleStore),
    Missing,
    Unsafe(String),
    /// A record the backend read to open the destination (a releases destination's
    /// settings or log) is not distributor's (SPEC §17): the conflict `untrusted_record`.
    Untrusted(String),
}

/// A bundle path opened for reading, as planning outside the lock sees it.
pub(super) struct Unlocked {
    pub(super) store: Option<Box<dyn BundleStore>>,
    pub(super) unsafe_reason: Option<String>,
    untrusted: Option<String>,
}

impl Unlocked {
    pub(super) fn open(dest: &Destination, bundle: &Path) -> Result<Unlocked> {
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

    pub(super) fn view(&self) -> View<'_> {
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

/// The state file as last read and parsed: planning again under the lock parses it again
/// only when its bytes changed.
pub(super) struct StateMemo {
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
    pub(super) fn new(source: &Source) -> StateMemo {
        StateMemo {
            last: None,
            outputs: source.manifest.outputs.len(),
            vouched: None,
            just_read: false,
        }
    }

    /// The next read checks the file again instead of taking the state just read as is.
    pub(super) fn check_next_read(&mut self) {
        self.just_read = false;
    }

    /// Drops the parsed state (at a million outputs, 120 MB), keeping what the journal
    /// vouched for: the next read parses the file again.
    pub(super) fn forget_parsed(&mut self) {
        self.last = None;
        self.just_read = false;
    }

    /// The state file parsed, again only when its bytes changed since the last read. The
    /// bytes are not kept (at a million outputs they are 150 MB): their sha256 is.
    pub(super) fn read(&mut self, view: &View) -> Result<Rc<StateFile>> {
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
    pub(super) fn read_vouched(
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
