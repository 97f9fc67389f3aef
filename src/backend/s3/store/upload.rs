//! Uploading (SPEC §14): a file read, hashed and sent to its final key, verified before
//! it is visible (one PUT, or a multipart upload completed only after the whole file's
//! sha256 matched), and copies inside the store (a replaced key copied aside, restored by
//! an undo).

use super::{S3Operation, S3Store, lock};
use crate::backend::s3::store_error;
use crate::error::{Error, Result};
use crate::failpoint;
use crate::hash::ContentHash;
use object_store::path::Path as Key;
use object_store::{
    Attribute, Attributes, CopyMode, CopyOptions, ObjectStoreExt, PutMode, PutMultipartOptions,
    PutOptions, PutPayload,
};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

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

/// A multipart upload in flight: by the id recorded in staging (S3, whose unfinished
/// parts stay stored until aborted), or through object_store's upload (azure: nothing to
/// record or abort, and it keeps the object's Content-Type and Cache-Control).
enum Upload<'a> {
    Recorded {
        s3: &'a dyn crate::backend::s3::dialect::Parts,
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

impl S3Store {
    /// Copies `from` (of `size` bytes) to `to` inside the store: one CopyObject up to the
    /// single-copy limit, else part by part (ranged reads uploaded as a multipart upload,
    /// its id kept in staging under `record` so a killed run's parts are aborted).
    pub(super) fn copy(&self, from: &str, to: &str, size: u64, record: &str) -> Result<()> {
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
}

impl S3Operation<'_> {
    /// Uploads `source` to `rel`, verified before visible: a single PUT only after the
    /// bytes read hashed to `want`, carrying their sha256 so the store checks them too; a
    /// multipart upload completed only after the whole file's sha256 matched. Returns
    /// the size and sha256 read, and the ETag when it was written.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn upload(
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
        let file = crate::source::open_source(source)?;
        let mut read = Hashing {
            file,
            source,
            buf,
            hasher: Sha256::new(),
            size: 0,
            on_bytes,
        };
        let key = self.key(rel)?;
        if want.0 <= single_put_limit() {
            return self.put_whole(rel, &key, &mut read, want, mode);
        }
        self.put_in_parts(op, i, rel, &key, &mut read, want, mode)
    }

    /// A file of at most the single-PUT limit: read whole, and sent in one PUT only if
    /// it hashed to `want`.
    fn put_whole(
        &self,
        rel: &str,
        key: &Key,
        read: &mut Hashing<'_, impl Read>,
        want: (u64, ContentHash),
        mode: PutMode,
    ) -> Result<(u64, ContentHash, Option<String>)> {
        // Large ones wait for their share of memory.
        let _held = (want.0 > PART as u64).then(|| Held::take(want.0 + 1));
        // One byte more than expected is enough to tell a file that grew.
        let mut data = Vec::with_capacity(want.0 as usize);
        read.read_into(&mut data, want.0 as usize + 1)?;
        let sha = read.sha256();
        if read.size != want.0 || sha != want.1 {
            return Ok((read.size, sha, None));
        }
        failpoint::hit("io_stage_write");
        let r = self
            .send(self.client().put_opts(
                key,
                PutPayload::from(data),
                PutOptions {
                    mode,
                    attributes: self.attributes(rel),
                    ..Default::default()
                },
            ))?
            .map_err(|e| store_error("upload", &self.shown(rel), e))?;
        Ok((read.size, sha, r.e_tag))
    }

    /// A file past the single-PUT limit: a multipart upload, completed only if the whole
    /// file hashed to `want`, else aborted; its record in staging, if any, is removed
    /// once it is finished or aborted.
    #[allow(clippy::too_many_arguments)]
    fn put_in_parts(
        &self,
        op: &str,
        i: usize,
        rel: &str,
        key: &Key,
        read: &mut Hashing<'_, impl Read>,
        want: (u64, ContentHash),
        mode: PutMode,
    ) -> Result<(u64, ContentHash, Option<String>)> {
        let mut upload = self.start_upload(op, i, rel, key)?;
        let out = match self.send_parts(&mut upload, rel, key, read, want.0) {
            Ok((size, sha, parts)) if size == want.0 && sha == want.1 => {
                let e_tag = self.complete_upload(&mut upload, rel, key, parts, &mode)?;
                Ok((size, sha, e_tag))
            }
            Ok((size, sha, _)) => {
                let _ = self.send(upload.abort(key));
                Ok((size, sha, None))
            }
            Err(e) => {
                let _ = self.send(upload.abort(key));
                Err(e)
            }
        };
        // Finished or aborted: nothing left to abort later.
        if let Upload::Recorded { record, .. } = &upload {
            self.delete(record)?;
        }
        out
    }

    /// Starts the multipart upload of `rel`, recording its id in staging where the
    /// dialect leaves unfinished parts stored.
    fn start_upload(&self, op: &str, i: usize, rel: &str, key: &Key) -> Result<Upload<'_>> {
        let attributes = self.attributes(rel);
        if !self.backend.dialect.records_uploads() {
            let opts = PutMultipartOptions {
                attributes,
                ..Default::default()
            };
            let parts = self
                .send(self.client().put_multipart_opts(key, opts))?
                .map_err(|e| store_error("start uploading", &self.shown(rel), e))?;
            return Ok(Upload::Unrecorded(parts));
        }
        // The low-level API, so the upload's id can be recorded in staging first: a
        // run killed mid-upload leaves parts that `undo` and `clean_up` abort by that id.
        let s3 = self.backend.multipart.as_ref();
        let id = self
            .send(s3.create_multipart_opts(
                key,
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
        Ok(Upload::Recorded { s3, id, record })
    }

    /// Reads the file part by part and sends the parts, a few at once, stopping once it
    /// has read more than the `want` bytes expected. Returns the size and sha256 read and
    /// the parts sent.
    #[allow(clippy::type_complexity)]
    fn send_parts(
        &self,
        upload: &mut Upload<'_>,
        rel: &str,
        key: &Key,
        read: &mut Hashing<'_, impl Read>,
        want: u64,
    ) -> Result<(
        u64,
        ContentHash,
        Vec<Option<object_store::multipart::PartId>>,
    )> {
        let (mut done, mut in_flight) = (Vec::new(), Vec::new());
        loop {
            let mut part = Vec::with_capacity(PART);
            read.read_into(&mut part, PART)?;
            if part.is_empty() {
                break;
            }
            let idx = done.len() + in_flight.len();
            in_flight.push(upload.put_part(key, idx, PutPayload::from(part)));
            // A few parts in flight at once, so memory stays bounded.
            if in_flight.len() == PARTS_IN_FLIGHT {
                done.extend(
                    self.send(futures_util::future::try_join_all(in_flight.drain(..)))?
                        .map_err(|e| store_error("upload a part of", &self.shown(rel), e))?,
                );
            }
            if read.size > want {
                break;
            }
        }
        done.extend(
            self.send(futures_util::future::try_join_all(in_flight))?
                .map_err(|e| store_error("upload a part of", &self.shown(rel), e))?,
        );
        Ok((read.size, read.sha256(), done))
    }

    /// Completes a multipart upload whose parts hashed as planned, unless the key
    /// changed since it was planned (then the upload is aborted). Returns the ETag.
    fn complete_upload(
        &self,
        upload: &mut Upload<'_>,
        rel: &str,
        key: &Key,
        parts: Vec<Option<object_store::multipart::PartId>>,
        mode: &PutMode,
    ) -> Result<Option<String>> {
        // A completion is not conditional: a new key must still be free, a
        // replaced one still hold the ETag planned (checked just before).
        let now = self.head(rel)?.map(|l| l.etag);
        let still = match mode {
            PutMode::Create => now.is_none(),
            PutMode::Update(v) => now.as_ref().is_some_and(|e| *e == v.e_tag),
            PutMode::Overwrite => true,
        };
        if !still {
            let _ = self.send(upload.abort(key));
            return Err(Error::ConcurrentChange(format!(
                "upload {}: the key changed since it was planned",
                self.shown(rel)
            )));
        }
        failpoint::hit("io_stage_write");
        let r = self
            .send(upload.complete(key, parts))?
            .map_err(|e| store_error("complete the upload of", &self.shown(rel), e))?;
        Ok(r.e_tag)
    }
}

/// The file being uploaded, read through one buffer, hashed and counted as it is read.
struct Hashing<'b, R> {
    file: R,
    source: &'b Path,
    buf: &'b mut [u8],
    hasher: Sha256,
    size: u64,
    on_bytes: &'b mut dyn FnMut(u64),
}

impl<R: Read> Hashing<'_, R> {
    /// Reads into `out` until it holds `limit` bytes or the file ends.
    fn read_into(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<()> {
        while out.len() < limit {
            let n = self
                .file
                .read(self.buf)
                .map_err(|e| Error::io("read", self.source, e))?;
            if n == 0 {
                break;
            }
            self.hasher.update(&self.buf[..n]);
            out.extend_from_slice(&self.buf[..n]);
            self.size += n as u64;
            (self.on_bytes)(n as u64);
        }
        Ok(())
    }

    /// The sha256 of what was read so far.
    fn sha256(&self) -> ContentHash {
        ContentHash::from(self.hasher.clone())
    }
}
