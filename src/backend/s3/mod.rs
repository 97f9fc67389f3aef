//! Object-store destinations (`backend: s3`, SPEC §14), through the `object_store` crate:
//! SigV4, retries, conditional writes (`If-None-Match: *`, `If-Match`) and multipart
//! uploads are its work; what distributor adds is the protocol on top.
//!
//! - A bundle path is a key prefix, `s3://<bucket>/<prefix>`; state is the object
//!   `<prefix>/.distributor.json` (state version 2: each output's ETag).
//! - The lock is a lease object renewed by conditional writes and judged expired by the
//!   store's clock ([`lease`]); every request made while it is held is bounded by the
//!   time its holder has left ([`lease::Lease::send`]).
//! - The staging record and moved-aside copies live under
//!   `<prefix>/.distributor/staging/<op>/` (an earlier version's
//!   `<prefix>/.distributor-staging/<op>/` is still read); the commit is decided by
//!   creating `<op>/decision` once: `commit` by the publisher, `abort` by `recover`.
//! - The destination log (SPEC §18) is `<prefix>/.distributor/log/<seq>.json`, one entry
//!   per committed operation, created with `If-None-Match: *` after the commit point and
//!   before the staging entry goes (`store/log.rs`).
//! - New content goes straight to its final key with a conditional PUT carrying its
//!   sha256, so the store refuses a mismatch ([`store`]).
//!
//! The design, and what a reader of plain keys sees, are in `docs/internal/storage.md`
//! and `docs/operations.md`.

pub(crate) mod clock;
mod credentials;
mod dialect;
mod key;
mod lease;
mod store;

pub(crate) use dialect::{Clients, Dialect};
pub use key::ObjectKey;
pub use lease::{check_workable, check_workable_for};
pub use store::S3Store;

use crate::backend::{Backend, BundleStore};
use crate::config::S3Settings;
use crate::error::{Error, Result, StoreError, StoreFailure};
use object_store::aws::{AmazonS3Builder, Checksum};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use crate::record::S3Location;

impl S3Location {
    /// The location a destination's `s3:` settings name. The region, when not
    /// configured: `AWS_REGION`, else `AWS_DEFAULT_REGION`, else `us-east-1`.
    pub fn from_settings(s: &S3Settings) -> S3Location {
        if let Some(a) = &s.azure {
            return S3Location {
                backend: "azure".into(),
                endpoint: s.endpoint.clone(),
                region: String::new(),
                account: a.account.clone(),
                use_emulator: a.use_emulator,
                allow_http: s.allow_http,
                virtual_hosted_style: false,
                lease_seconds: s.lease_seconds,
            };
        }
        let region = s.region.clone().unwrap_or_else(|| {
            ["AWS_REGION", "AWS_DEFAULT_REGION"]
                .iter()
                .find_map(|v| std::env::var(v).ok().filter(|r| !r.is_empty()))
                .unwrap_or_else(|| "us-east-1".into())
        });
        S3Location {
            backend: "s3".into(),
            endpoint: s.endpoint.clone(),
            region,
            account: None,
            use_emulator: false,
            allow_http: s.allow_http,
            virtual_hosted_style: s.virtual_hosted_style,
            lease_seconds: s.lease_seconds,
        }
    }
}

/// What an s3 destination's objects get besides their bytes: `Content-Type` from
/// `s3.content_types`, else the MIME table; `Cache-Control` from the first matching
/// `s3.cache_control` rule. Without settings (recovery from a record) only the table.
#[derive(Debug, Clone, Default)]
pub struct Headers(Option<Arc<S3Settings>>);

impl Headers {
    /// The Content-Type of `rel`.
    pub fn content_type(&self, rel: &str) -> String {
        if let Some(t) = self.0.as_ref().and_then(|s| s.extra_content_type(rel)) {
            return t.to_string();
        }
        let name = rel.rsplit('/').next().unwrap_or(rel);
        mime_guess::from_path(name)
            .first_raw()
            .unwrap_or("application/octet-stream")
            .to_string()
    }

    /// The Cache-Control of `rel`, if a rule matches.
    pub fn cache_control(&self, rel: &str) -> Option<&str> {
        self.0.as_ref().and_then(|s| s.cache_control_for(rel))
    }
}

/// An object-store destination's backend: one bucket (an azure container), its client,
/// the [`Dialect`] of its kind of store, and its settings. Everything above the client is
/// the same for every object store: the lease, the decision record, the conditional
/// commit, the staging records and the destination log.
#[derive(Debug, Clone)]
pub struct S3Backend {
    location: S3Location,
    bucket: String,
    concurrency: usize,
    headers: Headers,
    client: Arc<dyn ObjectStore>,
    multipart: Arc<dyn dialect::Parts>,
    dialect: &'static dyn Dialect,
    clock: clock::StoreClock,
}

/// The runtime every s3 request runs on: the storage interface is blocking, so each step
/// waits here for its requests (several threads may wait at once).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("distributor-s3")
            .enable_all()
            .build()
            .expect("the s3 runtime starts")
    })
}

/// Runs a future to completion on the s3 runtime.
pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    runtime().block_on(f)
}

/// The bucket (container) and key prefix of `s3://<bucket>/<prefix>` or
/// `az://<container>/<prefix>` ([`ObjectKey`]).
fn split_bundle_path(bundle: &Path) -> Option<(String, String)> {
    ObjectKey::parse(bundle).map(|k| (k.bucket().to_string(), k.prefix().to_string()))
}

/// What an object-store destination with settings `s` can do: its dialect's
/// capabilities.
pub fn capabilities(s: &S3Settings) -> crate::backend::Capabilities {
    let kind = if s.azure.is_some() { "azure" } else { "s3" };
    dialect::named(kind).map_or(crate::backend::Capabilities::OBJECT_STORE, |d| {
        d.capabilities()
    })
}

impl S3Backend {
    /// The backend of an object-store destination, from its location and upload settings:
    /// the one place a client is built (publish, `serve`, `recover --journal` all come
    /// here). The location's `backend` names the [`Dialect`] that builds it.
    pub fn new(
        bucket: &str,
        location: S3Location,
        concurrency: usize,
        headers: Headers,
    ) -> Result<S3Backend> {
        let dialect = dialect::named(&location.backend).ok_or_else(|| {
            Error::Failed(format!(
                "the record names the store kind '{}'; accepted: {}",
                location.backend,
                dialect::ALL
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let clock = clock::StoreClock::default();
        let Clients {
            client,
            multipart,
            location,
        } = dialect.connect(bucket, location, &clock)?;
        Ok(S3Backend {
            location,
            bucket: bucket.to_string(),
            concurrency: concurrency.max(1),
            headers,
            client,
            multipart,
            dialect,
            clock,
        })
    }

    /// The backend of an s3 destination's settings.
    pub fn from_settings(s: &S3Settings) -> Result<S3Backend> {
        S3Backend::new(
            &s.bucket,
            S3Location::from_settings(s),
            s.concurrency,
            Headers(Some(Arc::new(s.clone()))),
        )
    }

    /// The backend of an operation found in a journal or a staging record: the bucket
    /// its bundle path names, reached as the record's `location` says.
    pub fn for_key(key: &ObjectKey, location: &S3Location) -> Result<S3Backend> {
        S3Backend::new(key.bucket(), location.clone(), 16, Headers::default())
    }

    /// Where it lives, for the staging record and the journal.
    pub fn location(&self) -> &S3Location {
        &self.location
    }

    /// A key as messages show it: `s3://<bucket>/<key>`, `az://<container>/<key>`.
    fn shown(&self, key: &str) -> String {
        format!("{}{}/{key}", self.dialect.scheme(), self.bucket)
    }

    fn prefix_of(&self, bundle: &Path) -> Result<String> {
        match split_bundle_path(bundle) {
            Some((bucket, prefix)) if bucket == self.bucket => Ok(prefix),
            _ => Err(Error::Failed(format!(
                "{} is not a key prefix in bucket {}",
                bundle.display(),
                self.bucket
            ))),
        }
    }

    /// Refuses a store that ignores conditional writes (SPEC §14), once per real run of
    /// a destination, before anything of the publication is written, on an object of its
    /// own under the prefix.
    fn check_conditional_writes(&self, prefix: &str) -> Result<()> {
        let key = Key::from(format!(
            "{prefix}/.distributor-probe-{}",
            uuid::Uuid::new_v4()
        ));
        let client = &self.client;
        let put = |mode: PutMode| {
            block_on(client.put_opts(
                &key,
                PutPayload::from_static(b"distributor conditional-write check\n"),
                PutOptions {
                    mode,
                    ..Default::default()
                },
            ))
        };
        let where_ = format!("{}{}/{}", self.dialect.scheme(), self.bucket, key);
        let first = put(PutMode::Create).map_err(|e| store_error("create", &where_, e))?;
        let again = put(PutMode::Create);
        let stale = put(PutMode::Update(UpdateVersion {
            e_tag: Some("\"00000000000000000000000000000000\"".into()),
            version: None,
        }));
        // What else the store must be, checked while the probe object stands (azure: no
        // hierarchical namespace).
        let fit = self
            .dialect
            .check_store(client.as_ref(), prefix, &self.shown(prefix));
        let _ = block_on(client.delete(&key));
        fit?;
        let ignored = match (again, stale) {
            (
                Err(object_store::Error::AlreadyExists { .. }),
                Err(object_store::Error::Precondition { .. }),
            ) => None,
            (Ok(_), _) => {
                Some("a second PUT with If-None-Match: * succeeded over an existing object")
            }
            (_, Ok(_)) => Some("a PUT with If-Match on a wrong ETag succeeded"),
            (Err(a), Err(b)) => {
                let e = if matches!(a, object_store::Error::AlreadyExists { .. }) {
                    b
                } else {
                    a
                };
                return Err(store_error("check conditional writes on", &where_, e));
            }
        };
        if let Some(why) = ignored {
            return Err(Error::Failed(format!(
                "the store at {} ignores conditional writes ({why}, on {where_}); distributor cannot lock or commit safely there and refuses it. Stores known to honour them: {} (see docs/operations.md)",
                self.location
                    .endpoint
                    .as_deref()
                    .unwrap_or(self.dialect.default_store()),
                self.dialect.honouring()
            )));
        }
        let _ = first;
        Ok(())
    }
}

/// AWS S3 and S3-compatible stores (SPEC §14).
#[derive(Debug)]
pub(crate) struct Aws;

impl Dialect for Aws {
    fn name(&self) -> &'static str {
        "s3"
    }

    fn scheme(&self) -> &'static str {
        "s3://"
    }

    /// Credentials come from the AWS credential chain ([`credentials`]), resolved on the
    /// first request; `AWS_ENDPOINT_URL` overrides the configured endpoint.
    fn connect(
        &self,
        bucket: &str,
        mut location: S3Location,
        clock: &clock::StoreClock,
    ) -> Result<Clients> {
        let from_env = std::env::var("AWS_ENDPOINT_URL")
            .ok()
            .filter(|e| !e.is_empty());
        let named = if from_env.is_some() {
            " (from AWS_ENDPOINT_URL, which overrides s3.endpoint)"
        } else {
            ""
        };
        if let Some(ep) = from_env {
            location.endpoint = Some(ep);
        }
        if let Some(ep) = &location.endpoint
            && ep.starts_with("http://")
            && !location.allow_http
        {
            return Err(Error::setting(format!(
                "s3 endpoint {ep}{named} is plain http: set s3.allow_http: true to use it (accepted otherwise: an https:// endpoint)"
            )));
        }
        let fix = if location.endpoint.is_some() {
            "s3.endpoint (AWS_ENDPOINT_URL overrides it when set)"
        } else {
            "the destination's s3.region and bucket name (this is AWS S3: no s3.endpoint is set)"
        };
        // Credentials come from the AWS chain (profiles included), shared by the process;
        // nothing else is read from the environment: the rest is the destination's own
        // configuration (§14, §21).
        let mut builder = AmazonS3Builder::new().with_credentials(credentials::shared());
        builder = builder
            .with_bucket_name(bucket)
            .with_region(&location.region)
            .with_allow_http(location.allow_http)
            .with_virtual_hosted_style_request(location.virtual_hosted_style)
            .with_checksum_algorithm(Checksum::SHA256)
            .with_http_connector(clock::DateConnector::new(clock.clone(), fix));
        if let Some(ep) = &location.endpoint {
            // Virtual-hosted style names the bucket in the host.
            let ep = match (location.virtual_hosted_style, ep.split_once("://")) {
                (true, Some((scheme, host))) => format!("{scheme}://{bucket}.{host}"),
                _ => ep.clone(),
            };
            builder = builder.with_endpoint(ep);
        }
        let client = Arc::new(
            builder
                .build()
                .map_err(|e| Error::setting(format!("s3 destination s3://{bucket}: {e}")))?,
        );
        Ok(Clients {
            client: client.clone(),
            multipart: client,
            location,
        })
    }

    fn copies_in_store(&self) -> bool {
        // CopyObject has copied when it returns.
        true
    }

    fn etags_follow_content(&self) -> bool {
        true
    }

    fn records_uploads(&self) -> bool {
        // Parts of an unfinished multipart upload are stored (and billed) until aborted.
        true
    }

    fn explain(&self, action: &str, what: &str, e: &object_store::Error) -> Option<String> {
        if let Some(c) = find_source::<credentials::CredentialError>(e) {
            return Some(format!("s3: {action} {what}: {c}"));
        }
        if !chain_text(e).contains("NoSuchBucket") {
            return None;
        }
        let bucket = (what.strip_prefix("s3://"))
            .and_then(|w| w.split('/').next())
            .unwrap_or(what);
        Some(format!(
            "s3: {action} {what}: bucket {bucket} does not exist (the store says NoSuchBucket; or it is not visible to these credentials at this endpoint): create it first (e.g. `aws s3 mb s3://{bucket}`), or correct the bucket in the destination's path; distributor never creates buckets"
        ))
    }

    fn clean(&self, text: &str) -> String {
        credentials::without_metadata_address(text)
    }

    fn missing_container(&self, e: &object_store::Error) -> bool {
        chain_text(e).contains("NoSuchBucket")
    }

    fn honouring(&self) -> &'static str {
        "AWS S3, MinIO, Cloudflare R2"
    }
}

/// How old a check object must be, by the store's clock, before a run removes it: a
/// minute. Test builds may change it (`DISTRIBUTOR_S3_STALE_PROBE_SECONDS`), so a test
/// need not wait a minute for one to count as left by a killed run.
fn stale_probe_age() -> Duration {
    crate::failpoint::test_setting("DISTRIBUTOR_S3_STALE_PROBE_SECONDS")
        .map_or(Duration::from_secs(60), Duration::from_secs)
}

impl S3Backend {
    /// Removes check objects (`.distributor-probe-<uuid>`) a run killed during its check
    /// left behind at the prefix's top level: those older than a minute by the store's
    /// clock (a check in flight on another host takes milliseconds). `listed` is the
    /// listing of the whole prefix planning makes under the lease (no listing of its own).
    pub(super) fn remove_stale_probes(
        &self,
        prefix: &str,
        listed: &[object_store::ObjectMeta],
        lease: &lease::Lease,
    ) -> Result<()> {
        let Some(now) = self.clock.now() else {
            return Ok(());
        };
        let top = format!("{prefix}/.distributor-probe-");
        for m in listed {
            let key = m.location.as_ref();
            let modified = std::time::SystemTime::from(m.last_modified);
            if key
                .strip_prefix(&top)
                .is_some_and(|rest| !rest.contains('/'))
                && now
                    .duration_since(modified)
                    .is_ok_and(|age| age >= stale_probe_age())
            {
                match lease.send(self.client.delete(&m.location))? {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => {
                        return Err(store_error("delete", &self.shown(m.location.as_ref()), e));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Backend for S3Backend {
    fn capabilities(&self) -> crate::backend::Capabilities {
        self.dialect.capabilities()
    }

    fn name(&self) -> &'static str {
        self.dialect.name()
    }

    fn concurrency(&self) -> usize {
        self.concurrency
    }

    fn bundle_unsafe(&self, _base: &Path, _bundle: &Path) -> Option<String> {
        // Nothing to follow: keys are names, not a tree of handles.
        None
    }

    fn open(&self, _base: &Path, bundle: &Path) -> Result<Option<Box<dyn BundleStore>>> {
        let prefix = self.prefix_of(bundle)?;
        Ok(Some(Box::new(S3Store::new(
            self.clone(),
            bundle,
            prefix,
            None,
        ))))
    }

    fn lock(
        &self,
        _base: &Path,
        bundle: &Path,
        how: crate::backend::LockRequest<'_>,
    ) -> Result<Option<Box<dyn BundleStore>>> {
        let prefix = self.prefix_of(bundle)?;
        // A lease too short to work is refused before anything is written.
        lease::check_workable_for(self.dialect.name(), self.location.lease_seconds)?;
        self.check_conditional_writes(&prefix)?;
        let lease = lease::Lease::acquire(self, bundle, &prefix, how.timeout, how.actor)?;
        Ok(Some(Box::new(S3Store::new(
            self.clone(),
            bundle,
            prefix,
            Some(lease),
        ))))
    }

    fn bundle_paths(&self, base: &Path) -> Result<Vec<PathBuf>> {
        // The bundle paths below a mapped destination that hold state or staging: every
        // `.distributor.json`, `.distributor/staging/` or an earlier version's
        // `.distributor-staging/` under the prefix.
        let prefix = self.prefix_of(base)?;
        let keys = list(self, None, &format!("{prefix}/"))?;
        let mut found: Vec<PathBuf> = Vec::new();
        for m in keys {
            let key = m.location.as_ref();
            let Some(rel) = key.strip_prefix(&format!("{prefix}/")) else {
                continue;
            };
            let bundle_rel = if let Some(b) = rel.strip_suffix("/.distributor.json") {
                b
            } else if let Some((b, _)) = (rel.split_once("/.distributor/staging/"))
                .or_else(|| rel.split_once("/.distributor-staging/"))
            {
                b
            } else {
                continue;
            };
            let p = base.join(bundle_rel);
            if !found.contains(&p) {
                found.push(p);
            }
        }
        found.sort();
        Ok(found)
    }
}

/// Every object under `prefix` (which ends in `/`); under `lease`'s bounds when one is
/// held.
pub(crate) fn list(
    backend: &S3Backend,
    lease: Option<&lease::Lease>,
    prefix: &str,
) -> Result<Vec<object_store::ObjectMeta>> {
    use futures_util::TryStreamExt;
    let key = Key::from(prefix.trim_end_matches('/'));
    let listing = backend.client.list(Some(&key)).try_collect::<Vec<_>>();
    let mut listed = match lease {
        Some(l) => l.send(listing)?,
        None => block_on(listing),
    }
    .map_err(|e| store_error("list", &backend.shown(prefix), e))?;
    for m in &mut listed {
        m.e_tag = m.e_tag.take().map(quoted);
    }
    Ok(listed)
}

/// An ETag as a response header sends it, in quotes: Azure's listings send it bare, its
/// headers quoted, and the state records what an upload's response said, which the
/// listing must match (S3 quotes both).
fn quoted(etag: String) -> String {
    if etag.starts_with('"') || etag.starts_with("W/") {
        etag
    } else {
        format!("\"{etag}\"")
    }
}

/// The text of an error and all its sources.
pub(crate) fn chain_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// An object_store error as distributor reports it: what it was doing, on which key
/// (`what`, whose scheme names the store's [`Dialect`]). A failed condition is the error
/// kind `concurrent_change`. The first-contact errors are said plainly, each with what is
/// missing and how to fix it, instead of as the store's raw text: a store that cannot be
/// reached ([`clock::Unreachable`]), and what the dialect explains (no credentials, a
/// bucket or container that does not exist).
pub(crate) fn store_error(action: &str, what: &str, e: object_store::Error) -> Error {
    let dialect = dialect::of_shown(what);
    let store = dialect.name();
    let failure = if let Some(u) = find_source::<clock::Unreachable>(&e) {
        StoreFailure::Unreachable {
            store,
            why: u.to_string(),
        }
    } else if let Some(m) = dialect.explain(action, what, &e) {
        StoreFailure::Explained(m)
    } else if let object_store::Error::Precondition { .. }
    | object_store::Error::AlreadyExists { .. } = e
    {
        StoreFailure::ConditionRefused
    } else {
        StoreFailure::Other {
            store,
            text: dialect.clean(&with_cause(&e)),
        }
    };
    StoreError {
        action: action.to_string(),
        key: what.to_string(),
        failure,
        source: e,
    }
    .into()
}

/// The text of `e`, and its innermost cause after it when the text does not already
/// say it: object_store says "HTTP error: error sending request" where the cause is
/// "Connection refused (os error 111)" or "operation timed out".
fn with_cause(e: &object_store::Error) -> String {
    let text = e.to_string();
    let cause = clock::innermost(e);
    if cause.is_empty() || text.contains(&cause) {
        text
    } else {
        format!("{text} ({cause})")
    }
}

/// The first error of type `T` in `e`'s chain of sources.
pub(crate) fn find_source<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(t) = e.downcast_ref::<T>() {
            return Some(t);
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(source: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: Box::new(source),
        }
    }

    #[test]
    fn missing_credentials_read_as_such_with_the_chain() {
        let e = generic(credentials::CredentialError::NotFound(String::new()));
        let m = store_error("read", "s3://b/site/.distributor.json", e).to_string();
        assert!(m.contains("s3://b/site/.distributor.json"), "{m}");
        assert!(m.contains("no AWS credentials"), "{m}");
        for needle in ["AWS_ACCESS_KEY_ID", "AWS_PROFILE", "credential_process"] {
            assert!(m.contains(needle), "{needle}: {m}");
        }
        assert!(!m.contains("169.254"), "{m}");
    }

    #[test]
    fn raw_store_errors_never_show_the_metadata_address() {
        let e = generic(std::io::Error::other(
            "Error performing PUT http://169.254.169.254/latest/api/token in 2ms - Server returned non-2xx status code: 403 Forbidden",
        ));
        let m = store_error("read", "s3://b/site/.distributor.json", e).to_string();
        assert!(!m.contains("169.254"), "{m}");
        assert!(m.contains("the instance metadata service"), "{m}");
    }

    #[test]
    fn a_store_error_ends_with_its_innermost_cause() {
        #[derive(Debug, thiserror::Error)]
        #[error("HTTP error: error sending request")]
        struct Sending(#[source] std::io::Error);
        let refused = std::io::Error::from_raw_os_error(104);
        let cause = refused.to_string();
        let m = store_error("write", "s3://b/site/a.txt", generic(Sending(refused))).to_string();
        assert!(
            m.ends_with(&format!("error sending request ({cause})")),
            "{m}"
        );
        // A text that says its cause already is not given it twice.
        let e = generic(std::io::Error::other("Connection refused (os error 111)"));
        let m = store_error("write", "s3://b/site/a.txt", e).to_string();
        assert_eq!(m.matches("Connection refused").count(), 1, "{m}");
    }

    #[test]
    fn a_missing_bucket_is_said_without_xml() {
        let e = generic(std::io::Error::other(
            "Client error with status 404 Not Found: <?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code></Error>",
        ));
        let m = store_error("read", "s3://nope/site/.distributor.json", e).to_string();
        assert!(m.contains("bucket nope does not exist"), "{m}");
        assert!(m.contains("create it first"), "{m}");
        assert!(!m.contains('<'), "{m}");
    }
}
