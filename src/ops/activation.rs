//! What the activations that publish nothing (rollback, promote, adoption) share: opening
//! a releases destination for one, and carrying one out through the journal like a
//! publication (staging record, commit point, activation log, retention).

use crate::backend::StoreRead;
use crate::backend::releases::{Purpose, ReleaseStore};
use crate::clock::now;
use crate::config::Destination;
use crate::error::{Error, ReleasesError, Result};
use crate::execute::{Origin, StagedOperation, Transaction, retain};
use crate::hash::sha256_hex;
use crate::journal::Journal;
use crate::model::{FileOp, Owner};
use crate::ops::common::check_recovery;
use crate::plan::{DestinationPlan, FileAction, LinkAction};
use crate::state::State;
use std::collections::BTreeMap;

/// How an activation that publishes nothing (a rollback, a promote) opens its
/// destination, and what its errors say.
pub(crate) struct Opening<'a> {
    /// The lock, unless a dry run.
    pub lock: Option<crate::backend::LockRequest<'a>>,
    /// After the path, when nothing is there.
    pub nothing_there: &'static str,
    /// After a `releases_mismatch`.
    pub nothing_done: &'static str,
}

/// Opens (and, unless a dry run, locks) a releases destination for an activation: refused
/// when nothing is there, when its recorded settings differ (`releases_mismatch`), and
/// while recovery is pending (the journal's, or for a dry run the one read only).
pub(crate) fn open_releases(
    dest: &Destination,
    settings: &crate::config::ReleaseSettings,
    open: &Opening<'_>,
    journal: Option<&Journal>,
    view: Option<&crate::journal::JournalView>,
) -> Result<ReleaseStore> {
    let store = ReleaseStore::open(&dest.path, settings, open.lock)?.ok_or_else(|| {
        ReleasesError::NothingThere {
            path: dest.path.clone(),
            what: open.nothing_there,
        }
    })?;
    if let Some(why) = store.mismatch()? {
        return Err(ReleasesError::Mismatch {
            why,
            outcome: open.nothing_done,
        }
        .into());
    }
    if let Some(j) = journal {
        check_recovery(j, &store)?;
    } else if let crate::ops::common::Pending::Recovery(what) =
        crate::ops::common::pending(view, store.path(), Some(&store))?
    {
        return Err(Error::RecoveryRequired(what));
    }
    Ok(store)
}

/// How an activation without a publication is journaled.
pub(crate) struct Activation<'a> {
    /// `rollback`, `adopt` or `promote`.
    pub command: &'a str,
    /// The journal's decision.
    pub decision: crate::model::RecordedDecision,
    /// Who runs it.
    pub actor: &'a str,
    /// Why, if given.
    pub reason: Option<&'a str>,
    /// The pipeline.
    pub pipeline_id: &'a str,
}

/// Carries out a planned activation that publishes nothing (a rollback, a promote, an
/// adoption: `purpose`, which the operation keeps and its staging record says) through
/// the journal: the staging record (and for an adoption the release, built from
/// the plain directory), the commit point, the event `activated` with `detail(op)`, the
/// activation log, retention, as `execute::execute` does for a publication; an error
/// before the commit point is undone.
pub(crate) fn run_activation(
    plan: &DestinationPlan,
    journal: &mut Journal,
    store: &ReleaseStore,
    purpose: Purpose,
    how: &Activation<'_>,
    detail: &dyn Fn(&StagedOperation) -> String,
) -> Result<String> {
    let op_id = uuid::Uuid::new_v4().to_string();
    let state = plan
        .new_state
        .clone()
        .ok_or_else(|| Error::Failed(format!("{} plan has no state", how.command)))?;
    let post = state.render();
    let pre = store.read_state()?;
    let pre = pre.bytes();
    // The source of the owner that runs it (a shared root's promote: not the first owner).
    let to_source = (state.owners.iter())
        .find(|o| {
            o.owner.pipeline_id == how.pipeline_id && o.owner.destination_id == plan.destination_id
        })
        .or(state.owners.first())
        .map(|o| o.source.clone());
    let origin = Origin {
        started_at: now(),
        command: how.command.into(),
        actor: how.actor.to_string(),
        reason: how.reason.map(str::to_string),
        pipeline_id: how.pipeline_id.to_string(),
        state_mode: plan.state_mode,
        decision: how.decision,
        takeover_mode: plan.takeover_mode,
        previous_owner: plan.previous.as_ref().map(|p| p.owner.to_string()),
        previous_source: plan.previous.as_ref().map(|p| p.source.clone()),
        source: to_source.ok_or_else(|| Error::Failed("the state has no owner".into()))?,
        takeovers: serde_json::json!([]),
        host: Some(crate::backend::local::log::host()),
        journal_id: None,
        outputs_unchanged: None,
    };
    // Nothing is staged, moved or placed from a source.
    let mut bare = plan.clone();
    bare.files.clear();
    bare.links.clear();
    let staged = StagedOperation::from_plan(
        &bare,
        &op_id,
        pre.map(sha256_hex),
        sha256_hex(&post),
        origin,
        &mut |_| Ok(true),
    )?;
    let tx = Transaction::begin_with(
        journal,
        store,
        staged,
        store.operation_with(purpose, Some(&state)),
    )?;
    let detail = detail(tx.staged());
    let (passed, ()) = tx.act(|op, _| {
        op.begin(pre, &post)?;
        Ok((op.commit()?, ()))
    })?;
    let bundle = plan.bundle_path.to_string_lossy();
    passed.finish(&[], Some(&detail), |journal| {
        retain(store, &state, &op_id, &bundle, journal)
    })
}

/// The file and link actions that take readers of `path` from the state `from` (none
/// before the first release) to `to`, in path order: of `owner`'s entries only, or of
/// every entry when `owner` is `None` (a single_owner rollback). What a rollback and a
/// promote change, since both only swap one release's tree for another's.
pub(crate) fn state_change(
    owner: Option<&Owner>,
    from: Option<&State>,
    to: &State,
) -> (Vec<FileAction>, Vec<LinkAction>) {
    let mine = |o: &Owner| owner.is_none_or(|me| *o == *me);
    let outputs = |s: &State| -> BTreeMap<String, (crate::hash::ContentHash, u64)> {
        (s.outputs.iter())
            .filter(|o| mine(&o.owner))
            .map(|o| (o.path.clone(), (o.sha256, o.size)))
            .collect()
    };
    let links = |s: &State| -> BTreeMap<String, String> {
        (s.links.iter())
            .filter(|l| mine(&l.owner))
            .map(|l| (l.path.clone(), l.target.clone()))
            .collect()
    };
    let file = |path: &String, op, (sha256, size): &(crate::hash::ContentHash, u64)| FileAction {
        path: path.clone(),
        op,
        size: *size,
        sha256: *sha256,
        replaces: None,
    };
    let link = |path: &String, op, target: &String| LinkAction {
        path: path.clone(),
        target: target.clone(),
        op,
        replaces: None,
    };
    let files = diff(
        &from.map(outputs).unwrap_or_default(),
        &outputs(to),
        |a, b| a.0 == b.0,
        file,
    );
    let link_actions = diff(
        &from.map(links).unwrap_or_default(),
        &links(to),
        |a, b| a == b,
        link,
    );
    (files, link_actions)
}

/// The actions that take the entries `old` to `new` (path to what the path holds), in
/// path order: each path of `new` created, overwritten or unchanged (`same` says whether
/// what it held stays), each path only in `old` deleted.
fn diff<V, A>(
    old: &BTreeMap<String, V>,
    new: &BTreeMap<String, V>,
    same: impl Fn(&V, &V) -> bool,
    action: impl Fn(&String, FileOp, &V) -> A,
) -> Vec<A> {
    let mut actions: Vec<(&String, A)> = (new.iter())
        .map(|(path, v)| {
            let op = match old.get(path) {
                Some(was) if same(was, v) => FileOp::Unchanged,
                Some(_) => FileOp::Overwrite,
                None => FileOp::Create,
            };
            (path, action(path, op, v))
        })
        .chain(
            (old.iter())
                .filter(|(p, _)| !new.contains_key(*p))
                .map(|(p, v)| (p, action(p, FileOp::Delete, v))),
        )
        .collect();
    actions.sort_by(|a, b| a.0.cmp(b.0));
    actions.into_iter().map(|(_, a)| a).collect()
}

/// A source as a rollback's or promote's plan message names it (`<id> created <time>`),
/// `?` when the state names none.
pub(crate) fn source_shown(source: Option<&crate::model::SourceRef>) -> String {
    source.map_or("?".to_string(), |s| {
        format!("{} created {}", s.id, s.created_at)
    })
}
