//! The destination lock of an s3 bundle path: a lease object (SPEC §14).
//!
//! `<prefix>/.distributor.lock` is created with `If-None-Match: *` and holds host, pid,
//! actor, operation id, fencing epoch and lease length. A thread renews it every
//! `lease_seconds / 3` by a conditional write on its ETag. Its holder stops writing
//! `lease_seconds - 10 s` after its last successful renewal, by its monotonic clock
//! ([`Lease::check`], before every write). Another host judges it expired only by the
//! store's clock: the store's `Date` later than the lease's `Last-Modified` +
//! `lease_seconds` + 10 s; it then takes it over by a conditional write on the ETag it
//! saw, with the epoch incremented.

use super::{S3Backend, block_on, store_error};
use crate::error::{Error, Result};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The lease object's name under the prefix.
pub const LOCK_OBJECT: &str = ".distributor.lock";

/// How much later than its expiry, by the store's clock, a lease may be taken over.
const GRACE: Duration = Duration::from_secs(10);

/// What the lease object holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LeaseBody {
    host: String,
    pid: u32,
    actor: String,
    #[serde(default)]
    operation_id: Option<String>,
    epoch: u64,
    lease_seconds: u64,
}

#[derive(Debug)]
struct Held {
    etag: String,
    body: LeaseBody,
    /// When the last successful write of the lease was sent (monotonic).
    renewed: Instant,
    /// Why it is no longer held.
    lost: Option<String>,
}

#[derive(Debug)]
struct Inner {
    backend: S3Backend,
    key: Key,
    shown: String,
    lease: Duration,
    held: Mutex<Held>,
    stop: (Mutex<bool>, Condvar),
}

/// A held lease; renewed in the background until dropped, then deleted.
#[derive(Debug)]
pub struct Lease {
    inner: Arc<Inner>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

fn host() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Who this process is, as its local locks say it (SPEC §16: the CLI's actor), else the
/// uid: never `unknown`.
fn actor() -> String {
    crate::backend::local::holder::actor()
        .unwrap_or_else(|| format!("uid {}", rustix::process::getuid().as_raw()))
}

/// How long after its last renewal the holder still writes: `lease_seconds - 10 s`
/// (SPEC §14), but at least half the lease, so a short lease (10 to 19 s) still leaves
/// room to work. Either way the holder stops well before another host may judge the
/// lease expired (`lease_seconds + 10 s` after its last write, by the store's clock).
fn holder_limit(lease: Duration) -> Duration {
    lease.saturating_sub(GRACE).max(lease / 2)
}

/// Whether process `pid` of this host still exists.
fn process_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn body_bytes(b: &LeaseBody) -> PutPayload {
    let mut v = serde_json::to_vec_pretty(b).expect("a lease serializes");
    v.push(b'\n');
    PutPayload::from(v)
}

/// What a lease object found in place says.
enum Judged {
    /// It was removed meanwhile.
    Gone,
    /// Expired by the store's clock, or left by a process of this host that is gone: it
    /// may be taken over on this ETag, with the next epoch.
    Expired { e_tag: Option<String>, epoch: u64 },
    /// Held: by whom, and when it expires.
    Live(String),
}

/// Reads the lease at `key` and judges it by the store's clock (`lease`: the length to
/// assume when its content does not say).
fn judge(backend: &S3Backend, key: &Key, shown: &str, lease: Duration) -> Result<Judged> {
    backend.clock.reset();
    let got = match block_on(backend.client.get(key)) {
        Err(object_store::Error::NotFound { .. }) => return Ok(Judged::Gone),
        Err(e) => return Err(store_error("read the lease", shown, e)),
        Ok(g) => g,
    };
    let meta = got.meta.clone();
    let bytes = block_on(got.bytes()).map_err(|e| store_error("read the lease", shown, e))?;
    let theirs: Option<LeaseBody> = serde_json::from_slice(&bytes).ok();
    let their_lease = theirs.as_ref().map_or(lease, |b| {
        Duration::from_secs(b.lease_seconds.clamp(10, 3600))
    });
    let modified = SystemTime::from(meta.last_modified);
    let expires = modified + their_lease + GRACE;
    // A lease of a process of this host that is gone is never renewed again: it is as
    // good as expired (a kill -9, then `recover`).
    let orphaned = theirs
        .as_ref()
        .is_some_and(|b| b.host == host() && !process_alive(b.pid));
    let store_now = backend.clock.now();
    if orphaned || store_now.is_some_and(|now| now > expires) {
        return Ok(Judged::Expired {
            e_tag: meta.e_tag,
            epoch: theirs.as_ref().map_or(1, |b| b.epoch),
        });
    }
    let left = store_now
        .and_then(|n| expires.duration_since(n).ok())
        .map(|d| format!("it expires in {} s by the store's clock", d.as_secs()))
        .unwrap_or_else(|| "the store sent no Date to judge its age by".into());
    Ok(Judged::Live(match &theirs {
        Some(b) => format!(
            "held by {} pid {} ({}{}, epoch {}); {left}",
            b.host,
            b.pid,
            b.actor,
            b.operation_id
                .as_deref()
                .map(|o| format!(", operation {o}"))
                .unwrap_or_default(),
            b.epoch
        ),
        None => format!("held (its content is not a distributor lease); {left}"),
    }))
}

/// Whether a live lease covers the bundle path `bundle` (key prefix `prefix`) now (SPEC
/// §16 `busy`): who holds it. Reads the lease, writes nothing.
pub fn live_holder(backend: &S3Backend, bundle: &Path, prefix: &str) -> Result<Option<String>> {
    let key = Key::from(format!("{prefix}/{LOCK_OBJECT}"));
    let shown = format!("{}/{LOCK_OBJECT}", bundle.display());
    let lease = Duration::from_secs(backend.location.lease_seconds);
    Ok(match judge(backend, &key, &shown, lease)? {
        Judged::Live(why) => Some(format!("the lease {shown} is {why}")),
        Judged::Gone | Judged::Expired { .. } => None,
    })
}

impl Lease {
    /// Takes the lease of the bundle path `bundle` (key prefix `prefix`), waiting up to
    /// `timeout` for a live one to be released or to expire.
    pub fn acquire(
        backend: &S3Backend,
        bundle: &Path,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Lease> {
        let key = Key::from(format!("{prefix}/{LOCK_OBJECT}"));
        let shown = format!("{}/{LOCK_OBJECT}", bundle.display());
        let lease = Duration::from_secs(backend.location.lease_seconds);
        let deadline = Instant::now() + timeout;
        let client = &backend.client;
        let mut body = LeaseBody {
            host: host(),
            pid: std::process::id(),
            actor: actor(),
            operation_id: None,
            epoch: 1,
            lease_seconds: backend.location.lease_seconds,
        };
        loop {
            let sent = Instant::now();
            let put = block_on(client.put_opts(
                &key,
                body_bytes(&body),
                PutOptions {
                    mode: PutMode::Create,
                    ..Default::default()
                },
            ));
            let why_waiting = match put {
                Ok(r) => return Ok(Lease::held(backend, key, shown, lease, r.e_tag, body, sent)),
                Err(object_store::Error::AlreadyExists { .. }) => {
                    match judge(backend, &key, &shown, lease)? {
                        Judged::Gone => continue,
                        Judged::Live(why) => why,
                        Judged::Expired { e_tag, epoch } => {
                            // Expired by the store's clock: take it over on the ETag seen.
                            body.epoch = epoch + 1;
                            let sent = Instant::now();
                            let taken = block_on(client.put_opts(
                                &key,
                                body_bytes(&body),
                                PutOptions {
                                    mode: PutMode::Update(UpdateVersion {
                                        e_tag,
                                        version: None,
                                    }),
                                    ..Default::default()
                                },
                            ));
                            match taken {
                                Ok(r) => {
                                    return Ok(Lease::held(
                                        backend, key, shown, lease, r.e_tag, body, sent,
                                    ));
                                }
                                Err(object_store::Error::Precondition { .. })
                                | Err(object_store::Error::NotFound { .. }) => continue,
                                Err(e) => {
                                    return Err(store_error("take over the lease", &shown, e));
                                }
                            }
                        }
                    }
                }
                Err(e) => return Err(store_error("create the lease", &shown, e)),
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Lock(format!(
                    "lock {shown} is {why_waiting}; gave up after {} s (--lock-timeout)",
                    timeout.as_secs()
                )));
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(500)));
        }
    }

    fn held(
        backend: &S3Backend,
        key: Key,
        shown: String,
        lease: Duration,
        etag: Option<String>,
        body: LeaseBody,
        renewed: Instant,
    ) -> Lease {
        let inner = Arc::new(Inner {
            backend: backend.clone(),
            key,
            shown,
            lease,
            held: Mutex::new(Held {
                etag: etag.unwrap_or_default(),
                body,
                renewed,
                lost: None,
            }),
            stop: (Mutex::new(false), Condvar::new()),
        });
        let bg = Arc::clone(&inner);
        let renewer = std::thread::Builder::new()
            .name("distributor-lease".into())
            .spawn(move || bg.renew_until_stopped())
            .ok();
        Lease { inner, renewer }
    }

    /// Refuses to go on when the lease may no longer be held: lost to a conditional
    /// write, or not renewed for `lease_seconds - 10 s`. Called before every write.
    pub fn check(&self) -> Result<()> {
        let h = self.inner.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = &h.lost {
            return Err(Error::ConcurrentChange(format!(
                "lock {} was lost ({why}); nothing more is written: run `distributor recover`",
                self.inner.shown
            )));
        }
        let limit = holder_limit(self.inner.lease);
        let since = h.renewed.elapsed();
        if since >= limit {
            return Err(Error::ConcurrentChange(format!(
                "lock {} was last renewed {} s ago, past the {} s its holder may write for (lease_seconds {} less 10 s, at least half): another host may hold it now; nothing more is written: run `distributor recover`",
                self.inner.shown,
                since.as_secs(),
                limit.as_secs(),
                self.inner.lease.as_secs()
            )));
        }
        Ok(())
    }

    /// Records the operation the lease is held for (written with the next renewal, and
    /// now).
    pub fn set_operation(&self, op: &str) -> Result<()> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .body
            .operation_id = Some(op.to_string());
        self.inner.renew();
        self.check()
    }
}

impl Inner {
    fn renew_until_stopped(&self) {
        // Every third of the lease, and often enough that the holder's own limit
        // (`lease_seconds - 10 s` after the last renewal) leaves room for two tries.
        let every = (self.lease / 3)
            .min(holder_limit(self.lease) / 2)
            .max(Duration::from_secs(1));
        let (stopped, cv) = &self.stop;
        let mut stop = stopped.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let (s, _) = cv
                .wait_timeout(stop, every)
                .unwrap_or_else(|e| e.into_inner());
            stop = s;
            if *stop {
                return;
            }
            drop(stop);
            self.renew();
            stop = stopped.lock().unwrap_or_else(|e| e.into_inner());
        }
    }

    /// One renewal: a conditional write on the ETag last written.
    fn renew(&self) {
        let (etag, body) = {
            let h = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if h.lost.is_some() {
                return;
            }
            (h.etag.clone(), h.body.clone())
        };
        let sent = Instant::now();
        let r = block_on(self.backend.client.put_opts(
            &self.key,
            body_bytes(&body),
            PutOptions {
                mode: PutMode::Update(UpdateVersion {
                    e_tag: Some(etag),
                    version: None,
                }),
                ..Default::default()
            },
        ));
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match r {
            Ok(r) => {
                h.etag = r.e_tag.unwrap_or_default();
                h.renewed = sent;
            }
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::NotFound { .. }) => {
                h.lost = Some("another host took it over or removed it".into());
            }
            // A failed renewal is tried again; the lease runs out if none succeeds.
            Err(_) => {}
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        {
            let (stopped, cv) = &self.inner.stop;
            *stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
        }
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
        // Released only while still ours: the store's ETag is the one last written.
        let h = self.inner.held.lock().unwrap_or_else(|e| e.into_inner());
        if h.lost.is_some() {
            return;
        }
        let client = &self.inner.backend.client;
        if let Ok(meta) = block_on(client.head(&self.inner.key))
            && meta.e_tag.as_deref() == Some(h.etag.as_str())
        {
            let _ = block_on(client.delete(&self.inner.key));
        }
    }
}
