//! One s3 bundle path (a key prefix), opened: the storage interface's steps as object
//! requests (SPEC §14).
//!
//! | step | requests |
//! |---|---|
//! | `read_state` | `GET <prefix>/.distributor.json` (its ETag kept for the commit) |
//! | `probe`, `list_files` | one listing of the prefix; "matches" = recorded size and ETag |
//! | `staging_entries` | one listing of `.distributor/staging/`, one of an earlier version's `.distributor-staging/` (still read; its operations are worked on where they are) |
//! | `begin` | `pre-state.json`, `post-state.json`, then `plan.json` (create-once) under `.distributor/staging/<op>/` |
//! | `stage` | hash the source file; a replaced key is copied aside to `old/<i>` first; then `PUT` to its final key with `x-amz-checksum-sha256`, `If-None-Match: *` (new) or `If-Match` (replaced); large files multipart, completed only after the whole file's sha256 matched |
//! | `move_aside` | nothing: a deleted key is deleted only after the `commit` decision, so no undo ever needs it back |
//! | `commit_state` | `state.json` (the state with each output's ETag), `decision` = `commit` (create-once), the deletes, then the state object with `If-Match` on the ETag planned against |
//! | `undo` | `decision` = `abort` (create-once; `commit` there means roll forward instead), restore from `old/`, delete what the operation wrote (checked by content) |
//! | `clean_up` | finish the deletes and the state object if they are not done, add the operation's entry to the destination log (`.distributor/log/<seq>.json`, create-once: [`log`]), then remove the staging entry, its `decision` last |
//! | `roll_forward` | `recover`'s `clean_up`: a state object that is neither the pre- nor the post-state is first copied to `.distributor/replaced/<op>.json` (create-once, never deleted), then overwritten with `If-Match` on the ETag read (SPEC §17); the log entry names it |
//! | `read_log`, `quarantine_log` | the destination log (SPEC §18, [`log`]) |

use super::lease::{LOCK_OBJECT, Lease, Outcome};
use super::{S3Backend, block_on, store_error};
use crate::backend::BundleStore;
use crate::backend::StoreRead;
use crate::backend::types::StateBytes;
use crate::error::{Result, StepError};
use crate::failpoint;
use crate::hash::ContentHash;
use crate::record::{PLAN_FILE, StagedOperation};
use crate::state::{STATE_FILE, StateFile};
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod log;
mod operation;
mod read;
mod upload;

use operation::S3Operation;

/// The staging directory under the prefix (SPEC §22).
const STAGING: &str = crate::backend::local::records::STAGING;
/// Where versions before SPEC §22 kept it: still read (`status`, `recover`), never
/// written by a new operation.
const LEGACY_STAGING: &str = crate::backend::local::LEGACY_STAGING_DIR;
/// The decision record's name in an operation's staging.
const DECISION: &str = "decision";
/// Where a state object that a roll-forward overwrote is kept (SPEC §17), never deleted.
const REPLACED: &str = ".distributor/replaced";
/// What a listing showed of one key.
#[derive(Debug, Clone)]
struct Listed {
    size: u64,
    etag: Option<String>,
}

/// One s3 bundle path: the connection, the lease, and what was read of the destination
/// under it (listings, the state object, the log's tail). What one operation wrote is its
/// [`S3Operation`]'s.
#[derive(Debug)]
pub struct S3Store {
    backend: S3Backend,
    bundle: PathBuf,
    prefix: String,
    lease: Option<Lease>,
    /// The last listing: bundle-relative key -> size and ETag.
    listing: Mutex<Option<HashMap<String, Listed>>>,
    /// The state object as last read: its bytes and ETag.
    state: Mutex<Option<(Vec<u8>, Option<String>)>>,
    /// What [`BundleStore::read_state`] last returned while the lease was held, until
    /// this store writes the state object: nothing else writes it while the lease is
    /// held, and the commit is conditional on the ETag read besides. So planning and
    /// execution read it once.
    state_read: Mutex<Option<StateBytes>>,
    /// The staging keys (`.distributor/staging/…`, `.distributor-staging/…`) of the
    /// prefix's listing `probe` made, for the next `staging_entries` to use instead of
    /// listing them again; dropped by the first write.
    staging_seen: Mutex<Option<Vec<String>>>,
    /// Operations whose staging entry is an earlier version's `.distributor-staging/<op>/`
    /// (as [`BundleStore::staging_entries`] last listed them).
    legacy: Mutex<BTreeSet<String>>,
    /// The destination log's tail as journals know it (SPEC §18).
    cursor: crate::backend::LogCursor,
    /// The destination log's tail as the listing of the whole prefix made under the lease
    /// (`probe`) showed it, kept up to date by the entries this store writes: only the
    /// lease holder writes entries, so the log needs no listing of its own before this
    /// store's next entry (SPEC §18: a number found taken is still `concurrent_change`).
    log_listed: Mutex<Option<u64>>,
    /// Set once a log entry's seq was found taken by another operation's: no further
    /// entry is written through this store (SPEC §18).
    log_refused: std::sync::atomic::AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl S3Store {
    pub(super) fn new(
        backend: S3Backend,
        bundle: &Path,
        prefix: String,
        lease: Option<Lease>,
    ) -> S3Store {
        // The key journals keep the log's tail under: the store and the bundle path.
        let cursor = crate::backend::LogCursor::new(format!(
            "{}|{}",
            (backend.location.endpoint.as_deref())
                .or(backend.location.account.as_deref())
                .unwrap_or("aws"),
            bundle.display()
        ));
        S3Store {
            backend,
            bundle: bundle.to_path_buf(),
            prefix,
            lease,
            listing: Mutex::new(None),
            state: Mutex::new(None),
            state_read: Mutex::new(None),
            staging_seen: Mutex::new(None),
            legacy: Mutex::new(BTreeSet::new()),
            cursor,
            log_listed: Mutex::new(None),
            log_refused: Default::default(),
        }
    }

    /// The key of a bundle-relative path.
    fn key(&self, rel: &str) -> Result<Key> {
        Key::parse(format!("{}/{rel}", self.prefix)).map_err(|e| {
            StepError::InvalidKey {
                bundle: self.bundle.clone(),
                rel: rel.to_string(),
                error: e.to_string(),
            }
            .into()
        })
    }

    fn shown(&self, rel: &str) -> String {
        format!("{}/{rel}", self.bundle.display())
    }

    /// Where the staging entry of `op` is: `.distributor/staging/`, or for an entry an
    /// earlier version wrote (listed by [`BundleStore::staging_entries`]) the old
    /// `.distributor-staging/`.
    fn staging_of(&self, op: &str) -> String {
        let root = if lock(&self.legacy).contains(op) {
            LEGACY_STAGING
        } else {
            STAGING
        };
        format!("{root}/{op}")
    }

    fn staging_rel(&self, op: &str, name: &str) -> String {
        format!("{}/{name}", self.staging_of(op))
    }

    fn old_rel(&self, op: &str, i: usize) -> String {
        format!("{}/old/{i}", self.staging_of(op))
    }

    /// Where the id of a multipart upload (`name`: the action's index, or `old-<i>` /
    /// `restore-<i>` for a copy past the single-copy limit) is kept while it runs: the id,
    /// a newline, the bundle-relative key it uploads to.
    fn upload_rel(&self, op: &str, name: &str) -> String {
        format!("{}/uploads/{name}", self.staging_of(op))
    }

    /// Writing needs the lease, still live.
    fn writable(&self) -> Result<&Lease> {
        *lock(&self.staging_seen) = None;
        let lease = self
            .lease
            .as_ref()
            .ok_or_else(|| StepError::OpenedForReading {
                bundle: self.bundle.clone(),
            })?;
        lease.check()?;
        Ok(lease)
    }

    /// Runs requests: under the lease's bounds when it is held ([`Lease::send`]: none sent
    /// or retried with less than 5 s left, cut short at the holder's deadline), else
    /// plainly.
    fn send<F>(&self, requests: F) -> Result<F::Output>
    where
        F: std::future::Future,
        F::Output: Outcome,
    {
        match &self.lease {
            Some(lease) => lease.send(requests),
            None => Ok(block_on(requests)),
        }
    }

    fn client(&self) -> &dyn ObjectStore {
        self.backend.client.as_ref()
    }

    fn get(&self, rel: &str) -> Result<Option<(Bytes, Option<String>)>> {
        Ok(self
            .get_at_most(rel, u64::MAX)?
            .map(|g| g.expect("nothing is over u64::MAX bytes")))
    }

    /// [`S3Store::get`], but an object over `limit` bytes is not read: its size and ETag
    /// instead (`Err`).
    #[allow(clippy::type_complexity)]
    fn get_at_most(
        &self,
        rel: &str,
        limit: u64,
    ) -> Result<Option<std::result::Result<(Bytes, Option<String>), (u64, Option<String>)>>> {
        let key = self.key(rel)?;
        match self.send(self.client().get(&key))? {
            Ok(g) if g.meta.size > limit => Ok(Some(Err((g.meta.size, g.meta.e_tag.clone())))),
            Ok(g) => {
                let etag = g.meta.e_tag.clone();
                let bytes = self
                    .send(g.bytes())?
                    .map_err(|e| store_error("read", &self.shown(rel), e))?;
                Ok(Some(Ok((bytes, etag))))
            }
            // A missing bucket is not a missing object.
            Err(e @ object_store::Error::NotFound { .. })
                if self.backend.dialect.missing_container(&e) =>
            {
                Err(store_error("read", &self.shown(rel), e))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error("read", &self.shown(rel), e)),
        }
    }

    fn put(&self, rel: &str, bytes: Vec<u8>, mode: PutMode) -> Result<Option<String>> {
        let key = self.key(rel)?;
        if rel == STATE_FILE {
            *lock(&self.state_read) = None;
        }
        let r = self
            .send(self.client().put_opts(
                &key,
                PutPayload::from(bytes),
                PutOptions {
                    mode,
                    ..Default::default()
                },
            ))?
            .map_err(|e| store_error("write", &self.shown(rel), e))?;
        Ok(r.e_tag)
    }

    fn head(&self, rel: &str) -> Result<Option<Listed>> {
        match self.send(self.client().head(&self.key(rel)?))? {
            Ok(m) => Ok(Some(Listed {
                size: m.size,
                etag: m.e_tag,
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error("look up", &self.shown(rel), e)),
        }
    }

    fn delete(&self, rel: &str) -> Result<()> {
        match self.send(self.client().delete(&self.key(rel)?))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error("delete", &self.shown(rel), e)),
        }
    }

    /// Every key under `rel/` (bundle-relative; `""` for the whole prefix), with size and
    /// ETag.
    fn list_under(&self, rel: &str) -> Result<Vec<(String, Listed)>> {
        let base = if rel.is_empty() {
            format!("{}/", self.prefix)
        } else {
            format!("{}/{rel}/", self.prefix)
        };
        let metas = super::list(&self.backend, self.lease.as_ref(), &base)?;
        Ok(self.listed(metas))
    }

    /// A listing's objects as bundle-relative keys with size and ETag.
    fn listed(&self, metas: Vec<object_store::ObjectMeta>) -> Vec<(String, Listed)> {
        let strip = format!("{}/", self.prefix);
        metas
            .into_iter()
            .filter_map(|m| {
                let k = m.location.as_ref().strip_prefix(&strip)?.to_string();
                Some((
                    k,
                    Listed {
                        size: m.size,
                        etag: m.e_tag,
                    },
                ))
            })
            .collect()
    }

    /// Deletes keys in batches: object_store's `delete_stream` sends one `DeleteObjects`
    /// per 1,000 keys on S3 and one Blob Batch request per 256 on Azure (a single key
    /// would cost a request of its own). A key already gone counts as deleted.
    fn delete_all(&self, rels: Vec<String>) -> Result<()> {
        if rels.is_empty() {
            return Ok(());
        }
        let keys: Vec<Key> = rels.iter().map(|r| self.key(r)).collect::<Result<_>>()?;
        let mut deleted = self
            .client()
            .delete_stream(futures_util::stream::iter(keys.into_iter().map(Ok)).boxed());
        let done = self.send(async move {
            while let Some(r) = deleted.next().await {
                match r {
                    Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })?;
        done.map_err(|e| {
            let what = match rels.len() {
                1 => self.shown(&rels[0]),
                n => format!(
                    "{} (one of {n} keys deleted together)",
                    self.shown(&rels[0])
                ),
            };
            store_error("delete", &what, e)
        })
    }

    /// The state as last read, parsed: path -> (sha256, etag).
    fn recorded_etags(bytes: &[u8]) -> HashMap<String, (ContentHash, Option<String>)> {
        match StateFile::parse(bytes) {
            StateFile::Valid(s) => s
                .outputs
                .into_iter()
                .map(|o| (o.path, (o.sha256, o.etag)))
                .collect(),
            _ => HashMap::new(),
        }
    }

    fn state_now(&self) -> Result<Option<(Vec<u8>, Option<String>)>> {
        if lock(&self.state).is_none() {
            self.read_state()?;
        }
        Ok(lock(&self.state).clone())
    }

    /// GET the state object: its bytes, kept with its ETag for the commit.
    fn read_state_object(&self) -> Result<StateBytes> {
        let limit = crate::limits::state_bytes()?;
        let got = self.get_at_most(STATE_FILE, limit)?;
        if let Some(Err((size, etag))) = got {
            // Refused before its body is read; its ETag is kept for a forced replacement.
            *lock(&self.state) = Some((Vec::new(), etag));
            return Ok(StateBytes::Unusable(crate::limits::over(
                &self.shown(STATE_FILE),
                size,
                limit,
                crate::limits::STATE_VAR,
            )));
        }
        let got = got.map(|g| g.expect("over the limit returned above"));
        let out = match &got {
            Some((b, _)) => StateBytes::Bytes(b.to_vec()),
            None => StateBytes::Absent,
        };
        *lock(&self.state) = Some(match got {
            Some((b, e)) => (b.to_vec(), e),
            None => (Vec::new(), None),
        });
        Ok(out)
    }

    /// The decision record of `op`, if one was created.
    fn decision(&self, op: &str) -> Result<Option<String>> {
        Ok(self
            .get(&self.staging_rel(op, DECISION))?
            .map(|(b, _)| String::from_utf8_lossy(&b).trim().to_string()))
    }

    /// Removes an operation's staging entry once it is settled (committed and finished,
    /// or undone): `plan.json` first, so that whatever a crash leaves of the entry is an
    /// unfinished one, which recovery only removes; then the rest and the decision, in
    /// one batch.
    fn remove_entry(&self, op: &str) -> Result<()> {
        let all = self.list_entry(op)?;
        self.remove_listed_entry(op, all)
    }

    /// Every key of `op`'s staging entry (one listing).
    fn list_entry(&self, op: &str) -> Result<Vec<(String, Listed)>> {
        self.list_under(&self.staging_of(op))
    }

    /// [`S3Store::remove_entry`] with the entry's keys listed already.
    fn remove_listed_entry(&self, op: &str, all: Vec<(String, Listed)>) -> Result<()> {
        let plan = self.staging_rel(op, PLAN_FILE);
        let decision = self.staging_rel(op, DECISION);
        if all.iter().any(|(k, _)| *k == plan) {
            self.delete(&plan)?;
        }
        failpoint::hit("undo_before_remove_staging");
        // Once `plan.json` is gone the entry is unfinished, whatever else is left of it:
        // the rest and the decision go in one batch.
        let mut rest: Vec<String> = all
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| *k != plan && *k != decision)
            .collect();
        rest.push(decision);
        self.delete_all(rest)
    }

    /// Aborts the multipart uploads `op` recorded and did not finish (a run killed while
    /// uploading): their parts are invisible, but stored.
    fn abort_uploads(&self, op: &StagedOperation, entry: &[(String, Listed)]) -> Result<()> {
        let id = &op.operation_id;
        let s3 = self.backend.multipart.as_ref();
        let uploads = format!("{}/uploads/", self.staging_of(id));
        for (k, _) in entry.iter().filter(|(k, _)| k.starts_with(&uploads)) {
            let Some((record, _)) = self.get(k)? else {
                continue;
            };
            let record = String::from_utf8_lossy(&record).to_string();
            // Only keys of this operation: its actions' paths and its own staging.
            let Some((upload, rel)) = record.trim_end().split_once('\n') else {
                continue;
            };
            let ours = op.actions.iter().any(|a| a.path == rel)
                || rel.starts_with(&format!("{}/", self.staging_of(id)));
            if !ours {
                continue;
            }
            match self.send(s3.abort_multipart(&self.key(rel)?, &upload.to_string()))? {
                // Completed or aborted already.
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_error("abort the upload of", &self.shown(rel), e)),
            }
        }
        Ok(())
    }

    /// The listing entry of `rel` as planning saw it.
    fn planned(&self, rel: &str) -> Option<Listed> {
        lock(&self.listing)
            .as_ref()
            .and_then(|l| l.get(rel).cloned())
    }
}

impl crate::backend::RecordStore for S3Store {
    fn describe(&self, staged: &mut StagedOperation) {
        staged.store = Some(self.backend.location.clone());
    }

    fn operation(&self) -> Box<dyn crate::backend::Steps + Sync + '_> {
        Box::new(S3Operation::new(self))
    }

    fn read_record(&self, op: &str) -> Result<Option<StagedOperation>> {
        let rel = self.staging_rel(op, PLAN_FILE);
        match self.get(&rel)? {
            Some((bytes, _)) => Ok(Some(StagedOperation::parse(
                &bytes,
                Path::new(&self.shown(&rel)),
                &self.bundle,
                op,
            )?)),
            None => Ok(None),
        }
    }

    fn remove_staging(&self, op: &str) -> Result<()> {
        self.writable()?;
        self.remove_entry(op)
    }

    fn remove_unfinished(&self, op: &str) -> Result<()> {
        self.writable()?;
        self.remove_entry(op)
    }
}

impl crate::backend::LogStore for S3Store {
    fn read_log(&self) -> Result<crate::backend::local::log::Log> {
        self.read_destination_log()
    }

    fn log_cursor(&self) -> &crate::backend::LogCursor {
        &self.cursor
    }

    fn quarantine_log(&self, seq: u64, by: crate::backend::local::log::Entry) -> Result<u64> {
        self.quarantine_entry(seq, by)
    }

    fn log_tail_now(&self) -> Result<u64> {
        self.log_tail()
    }

    fn read_paths(
        &self,
        entry: &crate::backend::local::log::Entry,
    ) -> Result<Option<std::result::Result<Vec<crate::record::paths::PathLine>, String>>> {
        self.read_entry_paths(entry)
    }

    fn restart_log(&self, after: u64, by: crate::backend::local::log::Entry) -> Result<u64> {
        self.restart_entry(after, by)
    }
}

impl BundleStore for S3Store {
    fn log(&self) -> Option<&dyn crate::backend::LogStore> {
        Some(self)
    }
}

/// Keys distributor keeps under a prefix for itself: never content.
fn is_reserved(rel: &str) -> bool {
    rel == LOCK_OBJECT
        || rel.starts_with(".distributor-staging/")
        || rel.starts_with(".distributor-probe-")
        || rel.starts_with(".distributor/")
}
