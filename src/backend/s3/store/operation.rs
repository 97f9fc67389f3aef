//! One operation in an s3 bundle path (SPEC §14): the steps from its staging record to
//! its cleanup, and what this process knows of that one operation while it runs (what it
//! uploaded, the staging keys it wrote, its commit), so its own later steps need not read
//! that back. Made by the store's `operation`; dropped with the operation.

use super::{DECISION, Listed, REPLACED, S3Store, STAGING, lock};
use crate::backend::types::{Placed, Staged};
use crate::backend::{Committed, ReplacedState};
use crate::error::{Error, Result, StepError};
use crate::failpoint;
use crate::hash::ContentHash;
use crate::record::{
    ActionKind, PLAN_FILE, POST_STATE_FILE, PRE_STATE_FILE, STATE_TMP_FILE, StagedOperation,
};
use crate::state::STATE_FILE;
use bytes::Bytes;
use object_store::{PutMode, UpdateVersion};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// What finishing a commit left ([`S3Store::finish_commit`]): the state object's sha256
/// and ETag, and the state object it replaced, if any.
#[derive(Debug)]
pub(super) struct Finished {
    pub(super) state_sha256: String,
    pub(super) state_etag: Option<String>,
    pub(super) replaced: Option<ReplacedState>,
}

/// What this process wrote into its own operation's staging entry ([`S3Store::written`]).
#[derive(Debug, Default)]
struct Written {
    op: String,
    post: Vec<u8>,
    /// `state.json`, once the `commit` decision was created by this process.
    committed: Option<Vec<u8>>,
}

/// One operation in an s3 bundle path. It reads and writes the destination through its
/// store; its own `put`, `copy`, `delete` and `delete_all` also note the staging keys it
/// created and has not deleted.
#[derive(Debug)]
pub(super) struct S3Operation<'s> {
    store: &'s S3Store,
    /// What this operation uploaded: bundle-relative key -> ETag the store returned.
    placed: Mutex<HashMap<String, String>>,
    /// Whether this operation passed its commit point here, in this process (its log
    /// entry cannot exist yet).
    committed_here: AtomicBool,
    /// The state object this operation's commit wrote: the operation, the state's sha256
    /// and the ETag the conditional PUT returned. Finishing the operation believes it
    /// instead of reading the state object back: the PUT succeeded on the planned ETag
    /// while the lease was held, so it is the committed state.
    committed_state: Mutex<Option<(String, String, String)>>,
    /// The staging keys (`.distributor/staging/…`) this operation created and has not
    /// deleted, so removing its entry when it finishes needs no listing of it.
    staged: Mutex<BTreeSet<String>>,
    /// What this operation wrote into its staging, so its own steps need not read it
    /// back: the operation, its `post-state.json` (from `begin`), and its `state.json`
    /// once `commit_state` created the `commit` decision.
    written: Mutex<Option<Written>>,
}

impl std::ops::Deref for S3Operation<'_> {
    type Target = S3Store;

    fn deref(&self) -> &S3Store {
        self.store
    }
}

impl<'s> S3Operation<'s> {
    pub(super) fn new(store: &'s S3Store) -> S3Operation<'s> {
        S3Operation {
            store,
            placed: Default::default(),
            committed_here: Default::default(),
            committed_state: Default::default(),
            staged: Default::default(),
            written: Default::default(),
        }
    }

    /// Whether this operation's log entry cannot exist yet: it was committed just now.
    fn fresh(&self) -> bool {
        self.committed_here.load(Ordering::Relaxed)
    }

    /// [`S3Store::put`], noting a staging key it created.
    pub(super) fn put(&self, rel: &str, bytes: Vec<u8>, mode: PutMode) -> Result<Option<String>> {
        let etag = self.store.put(rel, bytes, mode)?;
        self.created(rel);
        Ok(etag)
    }

    /// [`S3Store::copy`], noting a staging key it created.
    fn copy(&self, from: &str, to: &str, size: u64, record: &str) -> Result<()> {
        self.store.copy(from, to, size, record)?;
        self.created(to);
        Ok(())
    }

    /// [`S3Store::delete`], forgetting a staging key it deleted.
    pub(super) fn delete(&self, rel: &str) -> Result<()> {
        self.store.delete(rel)?;
        lock(&self.staged).remove(rel);
        Ok(())
    }

    /// [`S3Store::delete_all`], forgetting the staging keys it deleted.
    fn delete_all(&self, rels: Vec<String>) -> Result<()> {
        let ours: Vec<String> = (rels.iter()).filter(|r| is_staging(r)).cloned().collect();
        self.store.delete_all(rels)?;
        let mut staged = lock(&self.staged);
        for r in &ours {
            staged.remove(r);
        }
        Ok(())
    }

    /// Notes a key this operation created, when it is a staging key.
    fn created(&self, rel: &str) {
        if is_staging(rel) {
            lock(&self.staged).insert(rel.to_string());
        }
    }

    /// Creates the decision record of `op` holding `word`, once; what it holds then.
    fn decide(&self, op: &str, word: &str) -> Result<String> {
        let rel = self.staging_rel(op, DECISION);
        match self.put(&rel, format!("{word}\n").into_bytes(), PutMode::Create) {
            Ok(_) => Ok(word.to_string()),
            Err(e) if e.is_concurrent_change() => Ok(self.decision(op)?.unwrap_or_default()),
            Err(e) => Err(e),
        }
    }

    /// Makes storage show the committed state of `op` (`state.json`): the deletes, then
    /// the state object. Idempotent. A state object that is neither the state before nor
    /// the committed one is a lost race (`concurrent_change`), unless `replace` (`recover`
    /// rolling forward, SPEC §17): then it is copied to `.distributor/replaced/<op>.json`
    /// and overwritten, conditionally on the ETag read, and returned.
    fn finish_commit(&self, op: &StagedOperation, replace: bool) -> Result<Finished> {
        let id = &op.operation_id;
        // The state object this process's commit wrote: no read back.
        if !replace
            && let Some((_, sha, etag)) =
                (lock(&self.committed_state).as_ref()).filter(|(o, _, _)| o == id)
        {
            return Ok(Finished {
                state_sha256: sha.clone(),
                state_etag: Some(etag.clone()),
                replaced: None,
            });
        }
        // `state.json` as this process wrote it when it decided the commit, else read.
        let known = (lock(&self.written).as_ref())
            .filter(|w| w.op == *id)
            .and_then(|w| w.committed.clone());
        let final_state = match known {
            Some(bytes) => Bytes::from(bytes),
            None => match self.get(&self.staging_rel(id, STATE_TMP_FILE))? {
                Some((bytes, _)) => bytes,
                None => {
                    return Err(StepError::DecidedWithoutState {
                        bundle: self.bundle.clone(),
                        op: id.to_string(),
                        state_file: STATE_TMP_FILE,
                        key: self.shown(&self.staging_of(id)),
                    }
                    .into());
                }
            },
        };
        let now = self.get(STATE_FILE)?;
        let now_sha = now.as_ref().map(|(b, _)| crate::hash::sha256_hex(b));
        let final_sha = crate::hash::sha256_hex(&final_state);
        if now_sha.as_deref() == Some(final_sha.as_str()) {
            return Ok(Finished {
                state_sha256: final_sha,
                state_etag: now.and_then(|(_, etag)| etag),
                replaced: None,
            });
        }
        let mut replaced = None;
        if now_sha != op.pre_state_sha256 {
            if !replace {
                return Err(Error::ConcurrentChange(format!(
                    "{} is neither the state before operation {id} nor the state it committed; nothing was changed",
                    self.shown(STATE_FILE)
                )));
            }
            if let (Some((bytes, etag)), Some(sha)) = (&now, &now_sha) {
                replaced = Some(self.keep_replaced(id, bytes, sha, etag.clone())?);
            }
        }
        // Deleted keys still holding what the state before recorded.
        let pre = match op.pre_state_sha256 {
            Some(_) => self
                .get(&self.staging_rel(id, PRE_STATE_FILE))?
                .map(|(b, _)| S3Store::recorded_etags(&b))
                .unwrap_or_default(),
            None => HashMap::new(),
        };
        let mut gone = Vec::new();
        for a in op
            .actions
            .iter()
            .filter(|a| a.kind == ActionKind::FileDelete)
        {
            if let Some(l) = self.head(&a.path)?
                && pre.get(&a.path).and_then(|(_, e)| e.as_ref()) == l.etag.as_ref()
            {
                gone.push(a.path.clone());
            }
        }
        self.delete_all(gone)?;
        let mode = match now {
            Some((_, etag)) => PutMode::Update(UpdateVersion {
                e_tag: etag,
                version: None,
            }),
            None => PutMode::Create,
        };
        self.writable()?;
        let state_etag = self.put(STATE_FILE, final_state.to_vec(), mode)?;
        Ok(Finished {
            state_sha256: final_sha,
            state_etag,
            replaced,
        })
    }

    /// Keeps the bytes of a state object about to be overwritten (SPEC §17) at
    /// `.distributor/replaced/<op>.json`, created once (`If-None-Match: *`). A copy there
    /// from an earlier, interrupted `recover` is kept: when it holds these bytes, it is
    /// this copy; when it holds others (the state object was replaced again since), these
    /// go to `.distributor/replaced/<op>-<sha256>.json`. Nothing there is ever deleted.
    fn keep_replaced(
        &self,
        op: &str,
        bytes: &[u8],
        sha: &str,
        etag: Option<String>,
    ) -> Result<ReplacedState> {
        self.writable()?;
        let mut rel = format!("{REPLACED}/{op}.json");
        loop {
            match self.put(&rel, bytes.to_vec(), PutMode::Create) {
                Ok(_) => break,
                Err(e) if e.is_concurrent_change() => {
                    let kept = self.get(&rel)?.map(|(b, _)| crate::hash::sha256_hex(&b));
                    if kept.as_deref() == Some(sha) {
                        break;
                    }
                    let other = format!("{REPLACED}/{op}-{sha}.json");
                    if rel == other {
                        return Err(Error::ConcurrentChange(format!(
                            "{} changed while it was written; nothing else was changed",
                            self.shown(&rel)
                        )));
                    }
                    rel = other;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(ReplacedState {
            sha256: sha.to_string(),
            etag,
            copied_to: self.shown(&rel),
        })
    }
}

/// Whether `rel` is a key of `.distributor/staging/`.
fn is_staging(rel: &str) -> bool {
    rel.strip_prefix(STAGING)
        .is_some_and(|r| r.starts_with('/'))
}

impl crate::backend::Steps for S3Operation<'_> {
    fn begin(&self, op: &StagedOperation, pre: Option<&[u8]>, post: &[u8]) -> Result<()> {
        let lease = self.writable()?;
        lease.set_operation(&op.operation_id)?;
        failpoint::hit("before_staging_record");
        let id = &op.operation_id;
        if let Some(pre) = pre {
            self.put(
                &self.staging_rel(id, PRE_STATE_FILE),
                pre.to_vec(),
                PutMode::Create,
            )?;
        }
        self.put(
            &self.staging_rel(id, POST_STATE_FILE),
            post.to_vec(),
            PutMode::Create,
        )?;
        // The plan last: an entry without it changed nothing.
        self.put(
            &self.staging_rel(id, PLAN_FILE),
            op.to_json()?,
            PutMode::Create,
        )?;
        *lock(&self.written) = Some(Written {
            op: id.clone(),
            post: post.to_vec(),
            committed: None,
        });
        failpoint::hit("after_staging_record");
        Ok(())
    }

    fn stage(
        &self,
        op: &StagedOperation,
        i: usize,
        source: &crate::source::SourceFile<'_>,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<Staged> {
        self.writable()?;
        let a = &op.actions[i];
        let want = (a.size.unwrap_or_default(), a.sha256.unwrap_or_default());
        // Whatever stands at the key now, as planning saw it: copied aside first, then
        // replaced only if it is still that (If-Match); a new key only if still free.
        let mode = match self.planned(&a.path) {
            Some(l) => {
                let old = self.old_rel(&op.operation_id, i);
                let record = self.upload_rel(&op.operation_id, &format!("old-{i}"));
                self.copy(&a.path, &old, l.size, &record)?;
                PutMode::Update(UpdateVersion {
                    e_tag: l.etag,
                    version: None,
                })
            }
            None => PutMode::Create,
        };
        self.writable()?;
        let (size, sha, etag) = self.upload(
            &op.operation_id,
            i,
            &a.path,
            source.path(),
            want,
            mode,
            buf,
            on_bytes,
        )?;
        if let Some(etag) = etag {
            lock(&self.placed).insert(a.path.clone(), etag);
        }
        Ok(Staged {
            size,
            sha256: sha,
            as_staged: None,
        })
    }

    fn make_staged_durable(&self) -> Result<()> {
        // An acknowledged PUT is durable.
        Ok(())
    }

    fn move_aside(&self, op: &StagedOperation, i: usize) -> Result<()> {
        // Nothing is copied. An overwrite was copied aside when its new content was
        // uploaded. A deleted key is deleted only in `commit_state`, after the `commit`
        // decision exists: an operation that is undone (decision `abort`, created first)
        // never deleted anything, so a copy of a deleted key would never be read (`undo`
        // restores only what the operation wrote over).
        let _ = (op, i);
        self.writable()?;
        failpoint::hit("during_move_aside");
        Ok(())
    }

    fn remove_emptied_dir(&self, _rel: &str) -> Result<()> {
        Ok(())
    }

    fn place(
        &self,
        _op: &StagedOperation,
        _i: usize,
        _as_staged: Option<Placed>,
    ) -> Result<Option<Placed>> {
        // Uploaded to its final key already; the state's ETag proves it later.
        self.writable()?;
        Ok(None)
    }

    fn link(&self, op: &StagedOperation, i: usize) -> Result<()> {
        Err(StepError::LinkOnObjectStore {
            bundle: self.bundle.clone(),
            path: op.actions[i].path.clone(),
        }
        .into())
    }

    fn commit_state(&self, op: &StagedOperation) -> Result<Committed> {
        self.writable()?;
        let id = &op.operation_id;
        // The staged post-state, which must still be the planned one: as this process
        // wrote it in `begin` (a create-once PUT), else read back (an operation staged by
        // another run: `promote`).
        let staged = self.staging_rel(id, POST_STATE_FILE);
        let mine = (lock(&self.written).as_ref())
            .filter(|w| w.op == *id)
            .map(|w| w.post.clone());
        let post = match mine {
            Some(post) => post,
            None => self
                .get(&staged)?
                .ok_or_else(|| StepError::StagedGone {
                    bundle: self.bundle.clone(),
                    key: self.shown(&staged),
                })?
                .0
                .to_vec(),
        };
        if crate::hash::sha256_hex(&post) != op.post_state_sha256 {
            return Err(StepError::ChangedAfterStaged {
                bundle: self.bundle.clone(),
                key: self.shown(&staged),
            }
            .into());
        }
        // The state with each output's ETag: what this run wrote, else what the state
        // before recorded for the same content.
        let before = self.state_now()?;
        let planned_etag = before.as_ref().and_then(|(_, e)| e.clone());
        let had_state = before.as_ref().is_some_and(|(b, _)| !b.is_empty());
        let pre = before
            .as_ref()
            .map(|(b, _)| S3Store::recorded_etags(b))
            .unwrap_or_default();
        let placed = lock(&self.placed).clone();
        let final_state = crate::state::fill_etags(&post, |path, sha256| {
            placed.get(path).cloned().or_else(|| {
                pre.get(path)
                    .filter(|(s, _)| s == sha256)
                    .and_then(|(_, e)| e.clone())
            })
        })
        .map_err(|why| StepError::PostState {
            bundle: self.bundle.clone(),
            why,
        })?;
        self.put(
            &self.staging_rel(id, STATE_TMP_FILE),
            final_state.clone(),
            PutMode::Overwrite,
        )?;
        self.writable()?;
        // The decision: whoever creates it first decides.
        match self.decide(id, "commit")?.as_str() {
            "commit" => {
                if let Some(w) = lock(&self.written).as_mut().filter(|w| w.op == *id) {
                    w.committed = Some(final_state.clone());
                }
            }
            other => {
                return Err(Error::ConcurrentChange(format!(
                    "operation {id} was decided '{other}' by a recovery on another host before it could commit; it is rolled back there"
                )));
            }
        }
        failpoint::hit("io_state_fsync");
        // Deletes only while the lease is held, after the decision.
        self.writable()?;
        let deletes: Vec<String> = op
            .actions
            .iter()
            .filter(|a| a.kind == ActionKind::FileDelete)
            .map(|a| a.path.clone())
            .collect();
        self.delete_all(deletes)?;
        self.writable()?;
        failpoint::hit("io_state_rename");
        let mode = if had_state {
            PutMode::Update(UpdateVersion {
                e_tag: planned_etag,
                version: None,
            })
        } else {
            PutMode::Create
        };
        let etag = self.put(STATE_FILE, final_state.clone(), mode)?;
        self.committed_here
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let sha = crate::hash::sha256_hex(&final_state);
        // A store that returned no ETag: finishing reads the state object back for it.
        *lock(&self.committed_state) = etag.map(|e| (id.clone(), sha.clone(), e));
        Ok(Committed::passed_with_state(sha))
    }

    fn undo(&self, op: &StagedOperation) -> Result<()> {
        self.writable()?;
        let id = &op.operation_id;
        match self.decide(id, "abort")?.as_str() {
            "abort" => {}
            "commit" => {
                return Err(Error::ConcurrentChange(format!(
                    "operation {id} was decided 'commit' first: it is rolled forward, not back; run `distributor recover`"
                )));
            }
            other => {
                return Err(StepError::UnknownDecision {
                    bundle: self.bundle.clone(),
                    op: id.to_string(),
                    holds: other.to_string(),
                }
                .into());
            }
        }
        let pre = match op.pre_state_sha256 {
            Some(_) => self
                .get(&self.staging_rel(id, PRE_STATE_FILE))?
                .map(|(b, _)| S3Store::recorded_etags(&b))
                .unwrap_or_default(),
            None => HashMap::new(),
        };
        for (i, a) in op.actions.iter().enumerate().rev() {
            if !a.kind.writes_file() {
                continue;
            }
            self.writable()?;
            let old = self.old_rel(id, i);
            let now = self.head(&a.path)?;
            if let Some(copy) = self.head(&old)? {
                // Restored unless it still holds what the state before recorded.
                let recorded = pre.get(&a.path).and_then(|(_, e)| e.clone());
                if now.as_ref().and_then(|l| l.etag.clone()) != recorded || recorded.is_none() {
                    failpoint::hit("undo_restore");
                    let record = self.upload_rel(id, &format!("restore-{i}"));
                    self.copy(&old, &a.path, copy.size, &record)?;
                }
            } else if a.kind == ActionKind::FileCreate && now.is_some() {
                // Removed only when it holds what this operation wrote.
                if let Some((bytes, _)) = self.get(&a.path)?
                    && Some(ContentHash::of(&bytes)) == a.sha256
                {
                    failpoint::hit("undo_remove_placed");
                    self.delete(&a.path)?;
                }
            }
        }
        let entry = self.list_entry(id)?;
        self.abort_uploads(op, &entry)?;
        self.writable()?;
        self.remove_listed_entry(id, entry)
    }

    fn clean_up(&self, op: &StagedOperation) -> Result<()> {
        self.writable()?;
        // The `commit` decision this process created need not be read back.
        let mine = (lock(&self.written).as_ref())
            .is_some_and(|w| w.op == op.operation_id && w.committed.is_some());
        if !mine && self.decision(&op.operation_id)?.as_deref() != Some("commit") {
            return Err(StepError::NoCommitDecision {
                bundle: self.bundle.clone(),
                op: op.operation_id.clone(),
            }
            .into());
        }
        let finished = self.finish_commit(op, false)?;
        // The log entry (SPEC §18) exists before the staging entry goes: a missing entry
        // is always the last one, and `recover` (whose `roll_forward` comes here too)
        // writes it.
        self.log_operation(op, &finished, self.fresh())?;
        // This process's own operation: its entry holds what this process created there
        // (every create-once record, copy aside and upload record it wrote and did not
        // delete; a `decision` it found created is removed in any case), so it is not
        // listed. Whatever else a crash could leave there is an unfinished entry once
        // `plan.json` is gone, which `recover` removes.
        let entry = if mine {
            let under = format!("{}/", self.staging_of(&op.operation_id));
            (lock(&self.staged).iter())
                .filter(|k| k.starts_with(&under))
                .map(|k| {
                    let unlisted = Listed {
                        size: 0,
                        etag: None,
                    };
                    (k.clone(), unlisted)
                })
                .collect()
        } else {
            self.list_entry(&op.operation_id)?
        };
        self.abort_uploads(op, &entry)?;
        failpoint::hit("during_cleanup");
        self.writable()?;
        self.remove_listed_entry(&op.operation_id, entry)
    }

    fn roll_forward(&self, op: &StagedOperation) -> Result<Option<ReplacedState>> {
        self.writable()?;
        if self.decision(&op.operation_id)?.as_deref() != Some("commit") {
            return Err(StepError::NoCommitDecision {
                bundle: self.bundle.clone(),
                op: op.operation_id.clone(),
            }
            .into());
        }
        let finished = self.finish_commit(op, true)?;
        self.log_operation(op, &finished, self.fresh())?;
        let entry = self.list_entry(&op.operation_id)?;
        self.abort_uploads(op, &entry)?;
        failpoint::hit("during_cleanup");
        self.writable()?;
        self.remove_listed_entry(&op.operation_id, entry)?;
        Ok(finished.replaced)
    }
}
