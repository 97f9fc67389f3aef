//! What is read of a destination before planning: its bundle path opened for reading, the
//! state file (parsed again only when its bytes change, and believed where the journal
//! committed exactly its bytes), and the journal's placement fingerprints.

use super::bundle_path;
use super::plan::{plan_general, recorded_same};
use super::republication::{check_republication, probe_republication};
use crate::backend::{self, BundleStore, types};
use crate::config::{Config, Destination};
use crate::error::{Error, Result};
use crate::hash::ContentHash;
use crate::journal::Journal;
use crate::plan::{DestinationPlan, Overrides, Republication};
use crate::progress::Ticker;
use crate::source::Source;
use crate::state::StateFile;
use std::path::{Path, PathBuf};
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

/// What is read of a destination before planning: its bundle path, the state file as it is
/// now (when the bundle path can be read at all), and the journal's placement fingerprints
/// of the files the source publishes again unchanged (they spare hashing them); for a
/// [`Republication`], whether storage still holds it.
pub(super) struct DestinationRead<'m> {
    pub(super) bundle: PathBuf,
    pub(super) unlocked: Unlocked,
    pub(super) memo: StateMemo,
    pub(super) state: Option<Rc<StateFile>>,
    pub(super) fingerprints: types::Fingerprints<'m>,
    pub(super) republished: Republished,
}

/// What a look at a [`Republication`] found.
pub(super) enum Republished {
    /// Not a republication.
    No,
    /// Storage holds it: its `unchanged` plan (the state was not kept: `state` is `None`).
    Held(Box<DestinationPlan>),
    /// Storage does not hold every path as recorded: the general planner says what
    /// changed (the state was read again for it).
    NotHeld,
}

/// Reads one destination (see [`DestinationRead`]).
pub(super) fn read_destination<'m>(
    config: &Config,
    dest: &Destination,
    source: &'m Source,
    journal: &Journal,
) -> Result<DestinationRead<'m>> {
    let bundle = bundle_path(config, dest, source)?;
    let unlocked = Unlocked::open(dest, &bundle)?;
    let mut memo = StateMemo::new(source);
    let key = bundle.to_string_lossy().into_owned();
    let committed = committed_republication(config, dest, source, journal, &unlocked, &key)?;
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

/// The state file this journal committed for this very source, still as written: a
/// republication that needs no read of it.
fn committed_republication<'m>(
    config: &Config,
    dest: &'m Destination,
    source: &'m Source,
    journal: &Journal,
    unlocked: &Unlocked,
    key: &str,
) -> Result<Option<Republication<'m>>> {
    Ok(match (&unlocked.unsafe_reason, unlocked.store.as_deref()) {
        (None, Some(store)) if Republication::may_be(dest) => match store.state_file_id()? {
            Some(file) => journal
                .republishable_state(key, &file)?
                .and_then(|c| Republication::committed(&config.pipeline_id, dest, source, &c)),
            None => None,
        },
        _ => None,
    })
}
