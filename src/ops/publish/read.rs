//! What is read of a destination before planning: its bundle path opened for reading, the
//! state file (parsed again only when its bytes change, and believed where the journal
//! committed exactly its bytes), and the journal's placement fingerprints.

use super::bundle_path;
use super::plan::{PlanInputs, Planning, plan_general, recorded_same};
use super::republication::{check_republication, probe_republication};
use super::view::{StateMemo, Unlocked};
use crate::backend::types;
use crate::config::{Config, Destination};
use crate::error::Result;
use crate::journal::Journal;
use crate::plan::{DestinationPlan, Overrides, Republication};
use crate::progress::Ticker;
use crate::source::Source;
use crate::state::StateFile;
use std::path::PathBuf;
use std::rc::Rc;

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
            memo.check_next_read();
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
    memo.forget_parsed();
    let mut fingerprints = types::Fingerprints::wanting_all(outputs);
    journal.fingerprints(&key, &mut fingerprints)?;
    let republished =
        match probe_republication(republication, store, &fingerprints, &bundle, Ticker::NONE)? {
            Some(plan) => {
                check_republication(&plan, store, || {
                    let state = memo.read(&unlocked.view())?;
                    let planning = Planning {
                        config,
                        dest,
                        source,
                        lift: Overrides::default(),
                        fingerprints: &fingerprints,
                    };
                    let inputs = PlanInputs {
                        planning,
                        bundle: &bundle,
                        state: &state,
                        view: &unlocked.view(),
                    };
                    plan_general(&inputs, Ticker::NONE)
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
