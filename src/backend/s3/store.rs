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
use crate::backend::StoreRead;
use crate::backend::types::{Entry, Placed, Proof, StagingEntry, StateBytes, Storage};
use crate::backend::{BundleStore, Committed, ReplacedState, Verdict};
use crate::error::{Error, Result};
use crate::failpoint;
use crate::hash::ContentHash;
use crate::record::{
    ActionKind, PLAN_FILE, POST_STATE_FILE, PRE_STATE_FILE, STATE_TMP_FILE, StagedOperation,
};
use crate::state::{STATE_FILE, StateFile};
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as Key;
use object_store::{
    Attribute, Attributes, CopyMode, CopyOptions, ObjectStore, ObjectStoreExt, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, UpdateVersion,
};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod log;

/// The staging directory under the prefix (SPEC §22).
const STAGING: &str = crate::backend::local::records::STAGING;
/// Where versions before SPEC §22 kept it: still read (`status`, `recover`), never
/// written by a new operation.
const LEGACY_STAGING: &str = crate::backend::local::LEGACY_STAGING_DIR;
/// The decision record's name in an operation's staging.
const DECISION: &str = "decision";
/// Where a state object that a roll-forward overwrote is kept (SPEC §17), never deleted.
const REPLACED: &str = ".distributor/replaced";
/// The part size of a multipart upload (and, on Azure, of a copy through this host
/// past one PUT).
const PART: usize = 8 * 1024 * 1024;
/// Files up to this size go in one PUT; larger ones multipart. Measured on SeaweedFS and
/// moto (docs/performance.md): up to here a single PUT is as fast or faster than parts,
/// and costs 1 request instead of `size / PART + 5`.
const SINGLE_PUT: u64 = 64 * 1024 * 1024;
/// The bytes all single PUTs over [`PART`] may hold in memory at once (a single PUT is
/// read whole, hashed, then sent): four at the largest, what eight multipart uploads
/// with their parts in flight hold.
const SINGLE_PUT_BUDGET: u64 = 256 * 1024 * 1024;
/// Parts of one file sent at once.
const PARTS_IN_FLIGHT: usize = 4;
/// The part size of a copy past the single-copy limit.
const COPY_PART: u64 = 64 * 1024 * 1024;

/// The largest object one CopyObject copies (AWS: 5 GiB). Test builds may lower it
/// (`DISTRIBUTOR_S3_COPY_LIMIT`, bytes), so the part-by-part copy runs on small files.
fn single_copy_limit() -> u64 {
    const AWS: u64 = 5 * 1024 * 1024 * 1024;
    crate::failpoint::test_setting("DISTRIBUTOR_S3_COPY_LIMIT").unwrap_or(AWS)
}

/// The largest file sent in one PUT: [`SINGLE_PUT`]. Test builds may change it
/// (`DISTRIBUTOR_S3_SINGLE_PUT_LIMIT`, bytes), so multipart uploads run on small files
/// and the threshold can be measured.
fn single_put_limit() -> u64 {
    crate::failpoint::test_setting("DISTRIBUTOR_S3_SINGLE_PUT_LIMIT").unwrap_or(SINGLE_PUT)
}

/// A share of [`SINGLE_PUT_BUDGET`], held while a large single PUT's bytes are in
/// memory; returned when dropped.
struct Held(u64);

static BUDGET: (Mutex<u64>, std::sync::Condvar) = (Mutex::new(0), std::sync::Condvar::new());

impl Held {
    /// Waits until `bytes` (at most the whole budget) fit beside what others hold.
    fn take(bytes: u64) -> Held {
        let bytes = bytes.min(SINGLE_PUT_BUDGET);
        let (used, freed) = &BUDGET;
        let mut used = lock(used);
        while *used + bytes > SINGLE_PUT_BUDGET {
            used = freed.wait(used).unwrap_or_else(|e| e.into_inner());
        }
        *used += bytes;
        Held(bytes)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let (used, freed) = &BUDGET;
        *lock(used) -= self.0;
        freed.notify_all();
    }
}

/// What finishing a commit left ([`S3Store::finish_commit`]): the state object's sha256
/// and ETag, and the state object it replaced, if any.
#[derive(Debug)]
struct Finished {
    state_sha256: String,
    state_etag: Option<String>,
    replaced: Option<ReplacedState>,
}

/// What this process wrote into its own operation's staging entry ([`S3Store::written`]).
#[derive(Debug, Default)]
struct Written {
    op: String,
    post: Vec<u8>,
    /// `state.json`, once the `commit` decision was created by this process.
    committed: Option<Vec<u8>>,
}

/// What a listing showed of one key.
#[derive(Debug, Clone)]
struct Listed {
    size: u64,
    etag: Option<String>,
}

/// One s3 bundle path.
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
    /// What this process wrote: bundle-relative key -> ETag the store returned.
    placed: Mutex<HashMap<String, String>>,
    /// Operations whose staging entry is an earlier version's `.distributor-staging/<op>/`
    /// (as [`BundleStore::staging_entries`] last listed them).
    legacy: Mutex<BTreeSet<String>>,
    /// The destination log's tail as journals know it (SPEC §18).
    cursor: crate::backend::LogCursor,
    /// The operation this process committed here (its log entry cannot exist yet).
    committed_here: Mutex<Option<String>>,
    /// The state object this process's own commit wrote: the operation, the state's
    /// sha256 and the ETag the conditional PUT returned. Finishing that operation believes
    /// it instead of reading the state object back: the PUT succeeded on the planned ETag
    /// while the lease was held, so it is the committed state.
    committed_state: Mutex<Option<(String, String, String)>>,
    /// The destination log's tail as the listing of the whole prefix made under the lease
    /// (`probe`) showed it, kept up to date by the entries this store writes: only the
    /// lease holder writes entries, so the log needs no listing of its own before this
    /// store's next entry (SPEC §18: a number found taken is still `concurrent_change`).
    log_listed: Mutex<Option<u64>>,
    /// The staging keys (`.distributor/staging/…`) this process created and has not
    /// deleted, so removing its own finished operation's entry needs no listing of it.
    staged: Mutex<BTreeSet<String>>,
    /// What this process wrote into its own operation's staging, so its own steps need
    /// not read it back: the operation, its `post-state.json` (from `begin`), and its
    /// `state.json` once `commit_state` created the `commit` decision.
    written: Mutex<Option<Written>>,
    /// Set once a log entry's seq was found taken by another operation's: no further
    /// entry is written through this store (SPEC §18).
    log_refused: std::sync::atomic::AtomicBool,
}

/// A multipart upload in flight: by the id recorded in staging (S3, whose unfinished
/// parts stay stored until aborted), or through object_store's upload (azure: nothing to
/// record or abort, and it keeps the object's Content-Type and Cache-Control).
enum Upload<'a> {
    Recorded {
        s3: &'a dyn super::dialect::Parts,
        id: object_store::MultipartId,
        record: String,
    },
    Unrecorded(Box<dyn object_store::MultipartUpload>),
}

type PartFuture<'a> = futures_util::future::BoxFuture<
    'a,
    object_store::Result<Option<object_store::multipart::PartId>>,
>;

impl<'a> Upload<'a> {
    /// Sends the next part, `idx` (parts are numbered in the order they are sent, from 0);
    /// the future borrows nothing of the upload, so several can be in flight.
    fn put_part<'k>(&mut self, key: &'k Key, idx: usize, data: PutPayload) -> PartFuture<'k>
    where
        'a: 'k,
    {
        match self {
            Upload::Recorded { s3, id, .. } => {
                let (s3, id) = (*s3, id.clone());
                Box::pin(async move { s3.put_part(key, &id, idx, data).await.map(Some) })
            }
            Upload::Unrecorded(u) => {
                let sent = u.put_part(data);
                Box::pin(async move { sent.await.map(|()| None) })
            }
        }
    }

    async fn complete(
        &mut self,
        key: &Key,
        parts: Vec<Option<object_store::multipart::PartId>>,
    ) -> object_store::Result<object_store::PutResult> {
        match self {
            Upload::Recorded { s3, id, .. } => {
                s3.complete_multipart(key, id, parts.into_iter().flatten().collect())
                    .await
            }
            Upload::Unrecorded(u) => u.complete().await,
        }
    }

    async fn abort(&mut self, key: &Key) -> object_store::Result<()> {
        match self {
            Upload::Recorded { s3, id, .. } => s3.abort_multipart(key, id).await,
            Upload::Unrecorded(u) => u.abort().await,
        }
    }
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
            placed: Mutex::new(HashMap::new()),
            legacy: Mutex::new(BTreeSet::new()),
            cursor,
            committed_here: Mutex::new(None),
            committed_state: Mutex::new(None),
            log_listed: Mutex::new(None),
            staged: Mutex::new(BTreeSet::new()),
            written: Mutex::new(None),
            log_refused: Default::default(),
        }
    }

    /// The key of a bundle-relative path.
    fn key(&self, rel: &str) -> Result<Key> {
        Key::parse(format!("{}/{rel}", self.prefix)).map_err(|e| {
            Error::Failed(format!(
                "{}: '{}' cannot be an object key: {e}",
                self.bundle.display(),
                rel.escape_debug()
            ))
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
        let lease = self.lease.as_ref().ok_or_else(|| {
            Error::Failed(format!(
                "{} is opened for reading; writing needs its lock",
                self.bundle.display()
            ))
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
        self.created(rel);
        Ok(r.e_tag)
    }

    /// Notes a key this process created, when it is a staging key.
    fn created(&self, rel: &str) {
        if rel
            .strip_prefix(STAGING)
            .is_some_and(|r| r.starts_with('/'))
        {
            lock(&self.staged).insert(rel.to_string());
        }
    }

    /// Copies `from` (of `size` bytes) to `to` inside the store: one CopyObject up to the
    /// single-copy limit, else part by part (ranged reads uploaded as a multipart upload,
    /// its id kept in staging under `record` so a killed run's parts are aborted).
    fn copy(&self, from: &str, to: &str, size: u64, record: &str) -> Result<()> {
        self.copy_unnoted(from, to, size, record)?;
        self.created(to);
        Ok(())
    }

    /// [`S3Store::copy`], without noting what it created.
    fn copy_unnoted(&self, from: &str, to: &str, size: u64, record: &str) -> Result<()> {
        let what = |e| store_error(&format!("copy {} to", self.shown(from)), &self.shown(to), e);
        let (from_key, to_key) = (self.key(from)?, self.key(to)?);
        if !self.backend.dialect.copies_in_store() {
            return self.copy_through_host(&from_key, &to_key, size, &what);
        }
        if size <= single_copy_limit() {
            return self
                .send(self.client().copy_opts(
                    &from_key,
                    &to_key,
                    CopyOptions::default().with_mode(CopyMode::Overwrite),
                ))?
                .map_err(what);
        }
        let s3 = self.backend.multipart.as_ref();
        let id = self.send(s3.create_multipart(&to_key))?.map_err(what)?;
        self.put(
            record,
            format!("{id}\n{to}").into_bytes(),
            PutMode::Overwrite,
        )?;
        let copied = (|| -> Result<()> {
            let mut parts = Vec::new();
            let mut at = 0u64;
            while at < size {
                let end = (at + COPY_PART).min(size);
                let bytes = self
                    .send(self.client().get_range(&from_key, at..end))?
                    .map_err(what)?;
                parts.push(
                    self.send(s3.put_part(&to_key, &id, parts.len(), PutPayload::from(bytes)))?
                        .map_err(what)?,
                );
                at = end;
            }
            self.send(s3.complete_multipart(&to_key, &id, parts))?
                .map_err(what)?;
            Ok(())
        })();
        if copied.is_err() {
            let _ = self.send(s3.abort_multipart(&to_key, &id));
        }
        copied?;
        self.delete(record)
    }

    /// A copy that has finished when it returns, on a store whose own copy may still be
    /// running then (SPEC §21, azure): the object is read through this host and uploaded
    /// again with its Content-Type and Cache-Control, in one PUT up to [`PART`] bytes, else
    /// block by block. Nothing needs aborting after a failure: uncommitted blocks are the
    /// store's to drop.
    fn copy_through_host(
        &self,
        from: &Key,
        to: &Key,
        size: u64,
        what: &dyn Fn(object_store::Error) -> Error,
    ) -> Result<()> {
        let client = self.client();
        let read = self.send(client.get(from))?.map_err(what)?;
        let attributes = read.attributes.clone();
        let size = size.max(read.meta.size);
        if size <= PART as u64 {
            let bytes = self.send(read.bytes())?.map_err(what)?;
            let put = PutOptions {
                attributes,
                ..Default::default()
            };
            self.send(client.put_opts(to, PutPayload::from(bytes), put))?
                .map_err(what)?;
            return Ok(());
        }
        drop(read);
        let opts = PutMultipartOptions {
            attributes,
            ..Default::default()
        };
        let mut upload = self
            .send(client.put_multipart_opts(to, opts))?
            .map_err(what)?;
        let mut at = 0u64;
        while at < size {
            let end = (at + COPY_PART).min(size);
            let bytes = self.send(client.get_range(from, at..end))?.map_err(what)?;
            self.send(upload.put_part(PutPayload::from(bytes)))?
                .map_err(what)?;
            at = end;
        }
        self.send(upload.complete())?.map_err(what)?;
        Ok(())
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
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                lock(&self.staged).remove(rel);
                Ok(())
            }
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
        if done.is_ok() {
            let mut staged = lock(&self.staged);
            for r in &rels {
                staged.remove(r);
            }
        }
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

    /// Creates the decision record of `op` holding `word`, once; what it holds then.
    fn decide(&self, op: &str, word: &str) -> Result<String> {
        let rel = self.staging_rel(op, DECISION);
        match self.put(&rel, format!("{word}\n").into_bytes(), PutMode::Create) {
            Ok(_) => Ok(word.to_string()),
            Err(e) if e.is_concurrent_change() => Ok(self.decision(op)?.unwrap_or_default()),
            Err(e) => Err(e),
        }
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

    /// Attributes of an uploaded object: Content-Type and Cache-Control.
    fn attributes(&self, rel: &str) -> Attributes {
        let mut a = Attributes::new();
        a.insert(
            Attribute::ContentType,
            self.backend.headers.content_type(rel).into(),
        );
        if let Some(cc) = self.backend.headers.cache_control(rel) {
            a.insert(Attribute::CacheControl, cc.to_string().into());
        }
        a
    }

    /// Uploads `source` to `rel`, verified before visible: a single PUT only after the
    /// bytes read hashed to `want`, carrying their sha256 so the store checks them too; a
    /// multipart upload completed only after the whole file's sha256 matched. Returns
    /// the size and sha256 read, and the ETag when it was written.
    #[allow(clippy::too_many_arguments)]
    fn upload(
        &self,
        op: &str,
        i: usize,
        rel: &str,
        source: &Path,
        want: (u64, ContentHash),
        mode: PutMode,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<(u64, ContentHash, Option<String>)> {
        let mut file = crate::source::open_source(source)?;
        let read_err = |e: std::io::Error| Error::io("read", source, e);
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let key = self.key(rel)?;
        if want.0 <= single_put_limit() {
            // Large ones wait for their share of memory.
            let _held = (want.0 > PART as u64).then(|| Held::take(want.0 + 1));
            // One byte more than expected is enough to tell a file that grew.
            let mut data = Vec::with_capacity(want.0 as usize);
            read_hashing(
                &mut file,
                buf,
                &mut hasher,
                &mut size,
                on_bytes,
                &mut data,
                want.0 as usize + 1,
            )
            .map_err(read_err)?;
            let sha = ContentHash::from(hasher);
            if size != want.0 || sha != want.1 {
                return Ok((size, sha, None));
            }
            failpoint::hit("io_stage_write");
            let r = self
                .send(self.client().put_opts(
                    &key,
                    PutPayload::from(data),
                    PutOptions {
                        mode,
                        attributes: self.attributes(rel),
                        ..Default::default()
                    },
                ))?
                .map_err(|e| store_error("upload", &self.shown(rel), e))?;
            return Ok((size, sha, r.e_tag));
        }
        let attributes = self.attributes(rel);
        let upload = if self.backend.dialect.records_uploads() {
            // The low-level API, so the upload's id can be recorded in staging first: a
            // run killed mid-upload leaves parts that `undo` and `clean_up` abort by that id.
            let s3 = self.backend.multipart.as_ref();
            let id = self
                .send(s3.create_multipart_opts(
                    &key,
                    PutMultipartOptions {
                        attributes,
                        ..Default::default()
                    },
                ))?
                .map_err(|e| store_error("start uploading", &self.shown(rel), e))?;
            let record = self.upload_rel(op, &i.to_string());
            self.put(
                &record,
                format!("{id}\n{rel}").into_bytes(),
                PutMode::Overwrite,
            )?;
            Upload::Recorded { s3, id, record }
        } else {
            let opts = PutMultipartOptions {
                attributes,
                ..Default::default()
            };
            let parts = self
                .send(self.client().put_multipart_opts(&key, opts))?
                .map_err(|e| store_error("start uploading", &self.shown(rel), e))?;
            Upload::Unrecorded(parts)
        };
        let mut upload = upload;
        let abort = |upload: &mut Upload| {
            let _ = self.send(upload.abort(&key));
        };
        #[allow(clippy::type_complexity)]
        let result = (|| -> Result<(u64, ContentHash, Vec<Option<object_store::multipart::PartId>>)> {
            let (mut done, mut in_flight) = (Vec::new(), Vec::new());
            loop {
                let mut part = Vec::with_capacity(PART);
                read_hashing(
                    &mut file,
                    buf,
                    &mut hasher,
                    &mut size,
                    on_bytes,
                    &mut part,
                    PART,
                )
                .map_err(read_err)?;
                if part.is_empty() {
                    break;
                }
                let idx = done.len() + in_flight.len();
                in_flight.push(upload.put_part(&key, idx, PutPayload::from(part)));
                // A few parts in flight at once, so memory stays bounded.
                if in_flight.len() == PARTS_IN_FLIGHT {
                    done.extend(
                        self.send(futures_util::future::try_join_all(in_flight.drain(..)))?
                            .map_err(|e| store_error("upload a part of", &self.shown(rel), e))?,
                    );
                }
                if size > want.0 {
                    break;
                }
            }
            done.extend(
                self.send(futures_util::future::try_join_all(in_flight))?
                    .map_err(|e| store_error("upload a part of", &self.shown(rel), e))?,
            );
            Ok((size, ContentHash::from(hasher.clone()), done))
        })();
        let out = match result {
            Ok((size, sha, parts)) if size == want.0 && sha == want.1 => {
                // A completion is not conditional: a new key must still be free, a
                // replaced one still hold the ETag planned (checked just before).
                let now = self.head(rel)?.map(|l| l.etag);
                let still = match &mode {
                    PutMode::Create => now.is_none(),
                    PutMode::Update(v) => now.as_ref().is_some_and(|e| *e == v.e_tag),
                    PutMode::Overwrite => true,
                };
                if !still {
                    abort(&mut upload);
                    return Err(Error::ConcurrentChange(format!(
                        "upload {}: the key changed since it was planned",
                        self.shown(rel)
                    )));
                }
                failpoint::hit("io_stage_write");
                let r = self
                    .send(upload.complete(&key, parts))?
                    .map_err(|e| store_error("complete the upload of", &self.shown(rel), e))?;
                Ok((size, sha, r.e_tag))
            }
            Ok((size, sha, _)) => {
                abort(&mut upload);
                Ok((size, sha, None))
            }
            Err(e) => {
                abort(&mut upload);
                Err(e)
            }
        };
        // Finished or aborted: nothing left to abort later.
        if let Upload::Recorded { record, .. } = &upload {
            self.delete(record)?;
        }
        out
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
                    return Err(Error::Failed(format!(
                        "{}: operation {id} decided commit but its {STATE_TMP_FILE} is missing; inspect {} by hand",
                        self.bundle.display(),
                        self.shown(&self.staging_of(id))
                    )));
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
                .map(|(b, _)| Self::recorded_etags(&b))
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

impl crate::backend::StoreRead for S3Store {
    fn path(&self) -> &Path {
        &self.bundle
    }

    fn concurrency(&self) -> usize {
        self.backend.concurrency
    }

    fn capabilities(&self) -> crate::backend::Capabilities {
        self.backend.dialect.capabilities()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn read_state(&self) -> Result<StateBytes> {
        if self.lease.is_some()
            && let Some(read) = lock(&self.state_read).clone()
        {
            return Ok(read);
        }
        let out = self.read_state_object()?;
        if self.lease.is_some() {
            *lock(&self.state_read) = Some(out.clone());
        }
        Ok(out)
    }

    fn verdict(&self, op: &StagedOperation) -> Result<Verdict> {
        Ok(match self.decision(&op.operation_id)?.as_deref() {
            Some("commit") => Verdict::Forward,
            Some("abort") => Verdict::Back,
            Some(_) => Verdict::Diverged,
            None => {
                let now = self
                    .get(STATE_FILE)?
                    .map(|(b, _)| crate::hash::sha256_hex(&b));
                if now == op.pre_state_sha256 {
                    Verdict::Back
                } else {
                    Verdict::Diverged
                }
            }
        })
    }

    fn probe<'a>(
        &self,
        paths: &[(&'a str, Option<Proof<'a>>)],
        dirs_wanted: &foldhash::HashSet<&str>,
        progress: crate::progress::Ticker<'_>,
    ) -> Result<Storage<'a>> {
        let metas = super::list(
            &self.backend,
            self.lease.as_ref(),
            &format!("{}/", self.prefix),
        )?;
        if let Some(lease) = &self.lease {
            // Under the lease this listing also serves what would take listings of their
            // own: the check objects killed runs left, and the destination log's tail.
            self.backend
                .remove_stale_probes(&self.prefix, &metas, lease)?;
        }
        let all = self.listed(metas);
        if self.lease.is_some() {
            let tail = (all.iter())
                .filter_map(|(k, _)| log::listed_seq(k))
                .max()
                .unwrap_or(0);
            *lock(&self.log_listed) = Some(tail);
        }
        let staging: Vec<String> = (all.iter())
            .filter(|(k, _)| {
                [STAGING, LEGACY_STAGING]
                    .iter()
                    .any(|root| k.strip_prefix(root).is_some_and(|r| r.starts_with('/')))
            })
            .map(|(k, _)| k.clone())
            .collect();
        *lock(&self.staging_seen) = Some(staging);
        let listed: HashMap<String, Listed> =
            all.into_iter().filter(|(k, _)| !is_reserved(k)).collect();
        // Every "directory": each proper prefix of a key.
        let mut dirs: BTreeSet<&str> = BTreeSet::new();
        for k in listed.keys() {
            let mut at = 0;
            while let Some(i) = k[at..].find('/') {
                dirs.insert(&k[..at + i]);
                at += i + 1;
            }
        }
        let state = self.state_now()?;
        let recorded = state
            .as_ref()
            .map(|(b, _)| Self::recorded_etags(b))
            .unwrap_or_default();
        // Where a rewrite of the same bytes gets a new ETag (azure: an undo's restored
        // copy), a recorded file whose ETag changed but whose size did not is read and
        // hashed: the recorded content is proven by its sha256 instead.
        let mut rehashed: BTreeSet<&str> = BTreeSet::new();
        if !self.backend.dialect.etags_follow_content() {
            for &(p, proof) in paths {
                let (Some(l), Some(pr), Some((sha, etag))) =
                    (listed.get(p), proof, recorded.get(p))
                else {
                    continue;
                };
                if *etag != l.etag
                    && sha == pr.sha256
                    && self.content_sha256(p)?.is_some_and(|now| now == *sha)
                {
                    rehashed.insert(p);
                }
            }
        }
        let list_dir = |d: &str, list: bool| -> Entry<'static> {
            let (mut contents, mut subdirs) = (Vec::new(), Vec::new());
            if list {
                let under = format!("{d}/");
                contents = listed
                    .keys()
                    .filter(|k| k.starts_with(&under))
                    .cloned()
                    .collect();
                contents.sort();
                subdirs = dirs
                    .range::<str, _>((std::ops::Bound::Excluded(d), std::ops::Bound::Unbounded))
                    .take_while(|s| s.starts_with(&under))
                    .map(|s| s.to_string())
                    .collect();
            }
            Entry::Dir {
                contents,
                dirs: subdirs,
            }
        };
        let entry = |p: &'a str, proof: Option<Proof<'a>>| -> Entry<'a> {
            if let Some(l) = listed.get(p) {
                let proven = proof.filter(|pr| {
                    recorded.get(p).is_some_and(|(sha, etag)| {
                        sha == pr.sha256
                            && ((etag.is_some() && *etag == l.etag) || rehashed.contains(p))
                    })
                });
                Entry::File {
                    size: l.size,
                    sha256: proven.map(|pr| std::borrow::Cow::Borrowed(pr.sha256)),
                }
            } else if dirs.contains(p) {
                list_dir(p, dirs_wanted.contains(p))
            } else {
                Entry::Missing
            }
        };
        let proofs: foldhash::HashMap<&str, Option<Proof<'a>>> = paths.iter().copied().collect();
        let mut ancestors: foldhash::HashMap<&'a str, Entry<'a>> = Default::default();
        for d in crate::source::ancestors(paths.iter().map(|(p, _)| *p)) {
            let proof = proofs.get(d).copied().flatten();
            ancestors.insert(d, entry(d, proof));
        }
        let probed = paths
            .iter()
            .filter(|(p, _)| !ancestors.contains_key(p))
            .map(|&(p, proof)| (p, entry(p, proof)))
            .collect();
        *lock(&self.listing) = Some(listed);
        // One listing answers every path at once.
        progress.done(paths.len() as u64);
        Ok(Storage::new(None, ancestors, probed))
    }

    fn content_sha256(&self, rel: &str) -> Result<Option<ContentHash>> {
        let key = self.key(rel)?;
        let got = match self.send(self.client().get(&key))? {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(store_error("read", &self.shown(rel), e)),
        };
        let hasher = self
            .send(async {
                let mut stream = got.into_stream();
                let mut hasher = Sha256::new();
                while let Some(chunk) = stream.next().await {
                    hasher.update(&chunk?);
                }
                Ok::<_, object_store::Error>(hasher)
            })?
            .map_err(|e| store_error("read", &self.shown(rel), e))?;
        Ok(Some(ContentHash::from(hasher)))
    }

    fn list_files(&self) -> Result<Vec<String>> {
        let mut out: Vec<String> = self
            .list_under("")?
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| !k.starts_with(".distributor-probe-") && !k.starts_with(".distributor/"))
            .collect();
        out.sort();
        Ok(out)
    }

    fn dir_exists(&self, _rel: &str) -> Result<bool> {
        // There are no directories to create or remove.
        Ok(true)
    }

    fn locked_before(&self) -> Result<bool> {
        Ok(true)
    }

    fn lock_holder(&self) -> Result<Option<String>> {
        if self.lease.is_some() {
            return Ok(None);
        }
        super::lease::live_holder(&self.backend, &self.bundle, &self.prefix)
    }

    fn staging_entries(&self) -> Result<Vec<StagingEntry>> {
        // `.distributor/staging/`, then an earlier version's `.distributor-staging/`
        // (SPEC §22: still read), whose operations are then worked on where they are.
        // Object stores have no owners (SPEC §17): an entry there is not judged by the
        // journal that reads it, as §17's upgrade rule does for local destinations.
        // The keys `probe`'s listing of the whole prefix showed, when nothing was written
        // since; else one listing per place.
        let seen = lock(&self.staging_seen).take();
        let mut out = Vec::new();
        let mut legacy = BTreeSet::new();
        for root in [STAGING, LEGACY_STAGING] {
            let keys = match &seen {
                Some(keys) => (keys.iter())
                    .filter(|k| k.strip_prefix(root).is_some_and(|r| r.starts_with('/')))
                    .cloned()
                    .collect(),
                None => (self.list_under(root)?.into_iter())
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>(),
            };
            let mut ops: BTreeMap<String, bool> = BTreeMap::new();
            let name = |n: &str| match root {
                STAGING => n.to_string(),
                _ => format!("{root}/{n}"),
            };
            for k in keys {
                let rest = &k[root.len() + 1..];
                match rest.split_once('/') {
                    Some((op, file)) => {
                        let has_plan = ops.entry(op.to_string()).or_default();
                        *has_plan |= file == PLAN_FILE;
                    }
                    None => out.push(StagingEntry::Foreign(
                        name(rest),
                        format!("{} is an object distributor never writes", self.shown(&k)),
                    )),
                }
            }
            for (op, has_plan) in ops {
                let listed = |e: &StagingEntry| matches!(e, StagingEntry::Operation(o) | StagingEntry::Unfinished(o) if *o == op);
                if uuid::Uuid::parse_str(&op).is_err() {
                    out.push(StagingEntry::Foreign(
                        name(&op),
                        format!(
                            "{} is not named after an operation",
                            self.shown(&format!("{root}/{op}/"))
                        ),
                    ));
                    continue;
                } else if out.iter().any(listed) {
                    // In both places: the new one is worked on; the old stays for a person.
                    out.push(StagingEntry::Foreign(
                        name(&op),
                        format!(
                            "{} is an earlier version's staging of operation {op}, which {} holds too",
                            self.shown(&format!("{root}/{op}/")),
                            self.shown(&format!("{STAGING}/{op}/"))
                        ),
                    ));
                    continue;
                }
                if root == LEGACY_STAGING {
                    legacy.insert(op.clone());
                }
                out.push(if has_plan {
                    StagingEntry::Operation(op)
                } else {
                    StagingEntry::Unfinished(op)
                });
            }
        }
        *lock(&self.legacy) = legacy;
        Ok(out)
    }

    fn staging_holds_files(&self, op: &str) -> Result<bool> {
        Ok(!self.list_under(&self.staging_of(op))?.is_empty())
    }

    fn last_logged_operation(&self) -> Result<Option<crate::backend::LoggedOperation>> {
        Ok(self.read_destination_log()?.last_state_change())
    }
}

impl crate::backend::RecordStore for S3Store {
    fn describe(&self, staged: &mut StagedOperation) {
        staged.store = Some(self.backend.location.clone());
    }

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

impl crate::backend::Steps for S3Store {
    fn stage(
        &self,
        op: &StagedOperation,
        i: usize,
        source: &Path,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<(u64, ContentHash)> {
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
            source,
            want,
            mode,
            buf,
            on_bytes,
        )?;
        if let Some(etag) = etag {
            lock(&self.placed).insert(a.path.clone(), etag);
        }
        Ok((size, sha))
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

    fn place(&self, _op: &StagedOperation, _i: usize) -> Result<Option<Placed>> {
        // Uploaded to its final key already; the state's ETag proves it later.
        self.writable()?;
        Ok(None)
    }

    fn link(&self, op: &StagedOperation, i: usize) -> Result<()> {
        Err(Error::Failed(format!(
            "{}: links cannot be published to an object store ({})",
            self.bundle.display(),
            op.actions[i].path
        )))
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
                .ok_or_else(|| {
                    Error::Failed(format!(
                        "{}: {} is gone: the operation stops before its commit point",
                        self.bundle.display(),
                        self.shown(&staged)
                    ))
                })?
                .0
                .to_vec(),
        };
        if crate::hash::sha256_hex(&post) != op.post_state_sha256 {
            return Err(Error::Failed(format!(
                "{}: {} was changed after it was staged: the operation stops before its commit point",
                self.bundle.display(),
                self.shown(&staged)
            )));
        }
        // The state with each output's ETag: what this run wrote, else what the state
        // before recorded for the same content.
        let before = self.state_now()?;
        let planned_etag = before.as_ref().and_then(|(_, e)| e.clone());
        let had_state = before.as_ref().is_some_and(|(b, _)| !b.is_empty());
        let pre = before
            .as_ref()
            .map(|(b, _)| Self::recorded_etags(b))
            .unwrap_or_default();
        let placed = lock(&self.placed).clone();
        let final_state = crate::state::fill_etags(&post, |path, sha256| {
            placed.get(path).cloned().or_else(|| {
                pre.get(path)
                    .filter(|(s, _)| s == sha256)
                    .and_then(|(_, e)| e.clone())
            })
        })
        .map_err(|e| Error::Failed(format!("{}: {e}", self.bundle.display())))?;
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
        *lock(&self.committed_here) = Some(id.clone());
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
                return Err(Error::Failed(format!(
                    "{}: decision of operation {id} holds '{other}'; inspect it by hand",
                    self.bundle.display()
                )));
            }
        }
        let pre = match op.pre_state_sha256 {
            Some(_) => self
                .get(&self.staging_rel(id, PRE_STATE_FILE))?
                .map(|(b, _)| Self::recorded_etags(&b))
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
            return Err(Error::Failed(format!(
                "{}: operation {} has no commit decision; it cannot be finished",
                self.bundle.display(),
                op.operation_id
            )));
        }
        let finished = self.finish_commit(op, false)?;
        // The log entry (SPEC §18) exists before the staging entry goes: a missing entry
        // is always the last one, and `recover` (whose `roll_forward` comes here too)
        // writes it.
        self.log_operation(op, &finished)?;
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
            return Err(Error::Failed(format!(
                "{}: operation {} has no commit decision; it cannot be finished",
                self.bundle.display(),
                op.operation_id
            )));
        }
        let finished = self.finish_commit(op, true)?;
        self.log_operation(op, &finished)?;
        let entry = self.list_entry(&op.operation_id)?;
        self.abort_uploads(op, &entry)?;
        failpoint::hit("during_cleanup");
        self.writable()?;
        self.remove_listed_entry(&op.operation_id, entry)?;
        Ok(finished.replaced)
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
}

impl BundleStore for S3Store {
    fn log(&self) -> Option<&dyn crate::backend::LogStore> {
        Some(self)
    }
}

/// Reads from `file` into `out` until it holds `limit` bytes or the file ends, hashing
/// and counting what it reads.
fn read_hashing(
    file: &mut impl Read,
    buf: &mut [u8],
    hasher: &mut Sha256,
    size: &mut u64,
    on_bytes: &mut dyn FnMut(u64),
    out: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<()> {
    while out.len() < limit {
        let n = file.read(buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.extend_from_slice(&buf[..n]);
        *size += n as u64;
        on_bytes(n as u64);
    }
    Ok(())
}

/// Keys distributor keeps under a prefix for itself: never content.
fn is_reserved(rel: &str) -> bool {
    rel == LOCK_OBJECT
        || rel.starts_with(".distributor-staging/")
        || rel.starts_with(".distributor-probe-")
        || rel.starts_with(".distributor/")
}
