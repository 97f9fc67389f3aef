//! The destination lock of an s3 bundle path: a lease object (SPEC §14).
//!
//! `<prefix>/.distributor.lock` is created with `If-None-Match: *` and holds host, pid,
//! actor, operation id, fencing epoch, lease length, a random `nonce` per acquisition (so
//! no two bodies, and no two ETags, are alike) and who the holder is on its machine (boot
//! id, PID namespace, process start time). A thread renews it every
//! `lease_seconds / 3` by a conditional write on its ETag. Its holder stops writing
//! `lease_seconds - 10 s` after its last successful renewal, by its monotonic clock
//! ([`Lease::check`], before every write). Another host judges it expired only by the
//! store's clock: the store's `Date` later than the lease's `Last-Modified` +
//! `lease_seconds` + 10 s; it then takes it over by a conditional write on the ETag it
//! saw, with the epoch incremented. A lease whose holder is a process of this machine
//! that is gone (same boot, same PID namespace, no such pid or another start time) is
//! taken over at once.

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

/// What the lease object holds. The fields after `lease_seconds` are absent from leases
/// written before they existed; such a lease is only ever taken over once it expired.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LeaseBody {
    host: String,
    pid: u32,
    actor: String,
    #[serde(default)]
    operation_id: Option<String>,
    epoch: u64,
    lease_seconds: u64,
    /// Random, new with each acquisition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nonce: Option<String>,
    /// `/proc/sys/kernel/random/boot_id` of the holder's machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    boot_id: Option<String>,
    /// The inode of the holder's `/proc/self/ns/pid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pid_namespace: Option<u64>,
    /// The holder's start time: field 22 of `/proc/<pid>/stat` (clock ticks since boot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start_time: Option<u64>,
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

/// This machine as a lease records its holder: boot id, PID namespace, this process's
/// start time. `None` for what cannot be read (no `/proc`).
fn boot_id() -> Option<String> {
    let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// What `/proc/<pid>/stat` says of the process's start time.
#[derive(Debug, PartialEq, Eq)]
enum Started {
    /// Field 22: clock ticks after boot.
    At(u64),
    /// No such process.
    Gone,
    /// Could not be read or understood: nothing is concluded.
    Unknown,
}

fn start_time(pid: u32) -> Started {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => parse_start_time(&s).map_or(Started::Unknown, Started::At),
        // ESRCH: it exited while its entry was read.
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) =>
        {
            Started::Gone
        }
        Err(_) => Started::Unknown,
    }
}

/// Field 22 of a `/proc/<pid>/stat` line. The second field, the command name, is in
/// parentheses and may hold spaces and parentheses itself: fields are counted after the
/// last `)`, where field 3 begins.
fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Whether the process a lease records is one of this machine that no longer exists: the
/// lease names this boot and this PID namespace, and its pid is gone or started at another
/// time. A lease that does not record all three is never judged so.
fn holder_gone(b: &LeaseBody, boot: Option<&str>, ns: Option<u64>) -> bool {
    let (Some(their_boot), Some(their_ns), Some(their_start)) =
        (b.boot_id.as_deref(), b.pid_namespace, b.start_time)
    else {
        return false;
    };
    if boot != Some(their_boot) || ns != Some(their_ns) {
        return false;
    }
    match start_time(b.pid) {
        Started::Gone => true,
        Started::At(t) => t != their_start,
        Started::Unknown => false,
    }
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
    // A lease of a process of this machine that is gone is never renewed again: it is as
    // good as expired (a kill -9, then `recover`).
    let orphaned = theirs
        .as_ref()
        .is_some_and(|b| holder_gone(b, boot_id().as_deref(), pid_namespace()));
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
        let pid = std::process::id();
        let mut body = LeaseBody {
            host: host(),
            pid,
            actor: actor(),
            operation_id: None,
            epoch: 1,
            lease_seconds: backend.location.lease_seconds,
            nonce: None,
            boot_id: boot_id(),
            pid_namespace: pid_namespace(),
            start_time: match start_time(pid) {
                Started::At(t) => Some(t),
                Started::Gone | Started::Unknown => None,
            },
        };
        loop {
            body.nonce = Some(uuid::Uuid::new_v4().to_string());
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
                            // Expired: take it over on the ETag seen.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_counted_after_the_command_name() {
        let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 12345 67 18446744073709551615";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time("4242 (x) S 1"), None);
        let mine = start_time(std::process::id());
        assert!(matches!(mine, Started::At(_)), "{mine:?}");
    }

    #[test]
    fn only_a_lease_of_this_boot_and_namespace_whose_process_is_gone_is_orphaned() {
        let (boot, ns) = (boot_id(), pid_namespace());
        let Started::At(my_start) = start_time(std::process::id()) else {
            panic!("no /proc")
        };
        let body = |pid: u32, start: u64| LeaseBody {
            host: host(),
            pid,
            actor: "a".into(),
            operation_id: None,
            epoch: 1,
            lease_seconds: 60,
            nonce: Some("n".into()),
            boot_id: boot.clone(),
            pid_namespace: ns,
            start_time: Some(start),
        };
        // This process: alive.
        let me = body(std::process::id(), my_start);
        assert!(!holder_gone(&me, boot.as_deref(), ns));
        // The same pid started at another time: a reused pid, the holder is gone.
        assert!(holder_gone(
            &body(std::process::id(), my_start + 1),
            boot.as_deref(),
            ns
        ));
        // No such pid (above pid_max).
        let gone = body(u32::MAX - 1, 1);
        assert!(holder_gone(&gone, boot.as_deref(), ns));
        // Another boot, another namespace, or an older lease without the fields: never.
        assert!(!holder_gone(&gone, Some("another-boot"), ns));
        assert!(!holder_gone(&gone, boot.as_deref(), ns.map(|n| n + 1)));
        let old = LeaseBody {
            boot_id: None,
            pid_namespace: None,
            start_time: None,
            ..gone.clone()
        };
        assert!(!holder_gone(&old, boot.as_deref(), ns));
    }

    #[test]
    fn leases_written_before_the_nonce_still_read() {
        let old = br#"{"host":"h","pid":7,"actor":"ci","operation_id":null,"epoch":3,"lease_seconds":60}"#;
        let b: LeaseBody = serde_json::from_slice(old).unwrap();
        assert_eq!((b.epoch, b.nonce, b.start_time), (3, None, None));
    }
}
