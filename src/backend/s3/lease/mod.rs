//! The destination lock of an s3 bundle path: a lease object (SPEC §14 and its
//! amendments).
//!
//! `<prefix>/.distributor.lock` is created with `If-None-Match: *` and holds host, pid,
//! actor, operation id, fencing epoch, lease length, a random `nonce` per acquisition (so
//! no two bodies, and no two ETags, are alike) and who the holder is on its machine (boot
//! id, PID namespace, process start time). A thread renews it at least every
//! `lease_seconds / 3` by a conditional write on its ETag.
//!
//! The holder's *deadline* is `max(lease_seconds - 10 s, lease_seconds / 2)` after it sent
//! its last successful renewal, by its monotonic clock. Every request made while the lease
//! is held goes through [`Lease::send`]: refused when less than 5 s are left, retried (by
//! object_store) only while 5 s are left (the check in `clock.rs`, per attempt), and cut
//! short when the deadline passes, however far its retries got. Another host judges the
//! lease expired only by the store's clock: the store's `Date` later than the lease's
//! `Last-Modified` + `lease_seconds` + 10 s; it then takes it over by a conditional write on
//! the ETag it saw, with the epoch incremented. A lease whose holder is a process of this
//! machine that is gone (same boot, same PID namespace, no such pid or another start time)
//! is taken over at once.
//!
//! The lease object itself, what it holds and how one found in place is judged, is
//! [`object`]; this module takes, renews and releases it.

mod object;

pub(super) use object::{LOCK_OBJECT, live_holder};

use super::{S3Backend, block_on, store_error};
use crate::error::{Error, Result};
use object::{Judged, LeaseBody, body_bytes, judge};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How much later than its expiry, by the store's clock, a lease may be taken over; and
/// how much earlier than `lease_seconds` its holder stops.
const GRACE: Duration = Duration::from_secs(10);

/// No request is sent, or retried, once less than this is left before the holder's
/// deadline.
const FLOOR: Duration = Duration::from_secs(5);

/// The shortest renewal interval a lease may need: a shorter lease is refused.
const MIN_RENEWAL: Duration = Duration::from_secs(1);

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
    /// Held through a whole renewal, so two never race each other on one ETag.
    renewing: Mutex<()>,
    stop: (Mutex<bool>, Condvar),
}

/// A held lease; renewed in the background until dropped, then deleted if there is time.
#[derive(Debug)]
pub(crate) struct Lease {
    inner: Arc<Inner>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

/// What one try at the lease came to.
enum Attempt {
    /// Written: the ETag the store returned, and when the write was sent.
    Taken {
        e_tag: Option<String>,
        sent: Instant,
    },
    /// Removed or taken by another meanwhile: try again at once.
    Again,
    /// Held by another: why (who, and when it expires).
    Wait(String),
}

tokio::task_local! {
    /// The lease whose deadline bounds the requests of the task running now.
    static HOLDER: Arc<Inner>;
}

/// How long after it sent its last successful renewal the holder still writes:
/// `lease_seconds - 10 s`, but at least half the lease (SPEC §14 amendments). Either way
/// it stops well before another host may judge the lease expired (`lease_seconds + 10 s`
/// after its last write, by the store's clock).
fn holder_limit(lease: Duration) -> Duration {
    lease.saturating_sub(GRACE).max(lease / 2)
}

/// How often the holder renews: every third of the lease, and often enough that a
/// renewal, and one more try should it fail, is sent while more than [`FLOOR`] is left.
fn renew_every(lease: Duration) -> Duration {
    (lease / 3).min(holder_limit(lease).saturating_sub(FLOOR) / 2)
}

/// Refuses a lease too short to work: one that leaves the holder no room to renew above
/// the 5 s in which it sends nothing (`lease_seconds` under 14).
pub fn check_workable(lease_seconds: u64) -> Result<()> {
    check_workable_for("s3", lease_seconds)
}

/// [`check_workable`] for the backend whose config block is `block` (`s3`, `azure`).
pub fn check_workable_for(block: &str, lease_seconds: u64) -> Result<()> {
    let lease = Duration::from_secs(lease_seconds);
    if renew_every(lease) >= MIN_RENEWAL {
        return Ok(());
    }
    let least = (10..=3600)
        .find(|&s| renew_every(Duration::from_secs(s)) >= MIN_RENEWAL)
        .unwrap_or(3600);
    Err(Error::setting(format!(
        "{block}.lease_seconds {lease_seconds} is too short to publish with: its holder may write for {} s after each renewal and sends no request in the last {} s of that, which leaves it no time to renew; set {block}.lease_seconds to {least} or more (default 60)",
        holder_limit(lease).as_secs_f64(),
        FLOOR.as_secs()
    )))
}

/// How much of the holder's time is left at `now`, its deadline being `deadline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Left {
    /// Enough to send a request: this much.
    Send(Duration),
    /// Less than [`FLOOR`]: nothing more is sent.
    TooLittle(Duration),
    /// The deadline passed this long ago.
    Past(Duration),
}

fn time_left(deadline: Instant, now: Instant) -> Left {
    match deadline.checked_duration_since(now) {
        Some(left) if left >= FLOOR => Left::Send(left),
        Some(left) if !left.is_zero() => Left::TooLittle(left),
        _ => Left::Past(now.saturating_duration_since(deadline)),
    }
}

/// Implemented by the outcome of a request: whether it failed.
pub(crate) trait Outcome {
    /// True for a failure.
    fn failed(&self) -> bool;
}

impl<T, E> Outcome for std::result::Result<T, E> {
    fn failed(&self) -> bool {
        self.is_err()
    }
}

/// Whether a request may be sent now by the task running it: `Some(why not)` when it runs
/// under a lease (in [`Lease::send`]) with less than [`FLOOR`] left. Asked before each
/// attempt, retries included (`clock.rs`).
pub(super) fn refusal() -> Option<String> {
    HOLDER
        .try_with(|inner| inner.check(Instant::now()).err())
        .ok()
        .flatten()
        .map(|e| e.to_string())
}

impl Lease {
    /// Takes the lease of the bundle path `bundle` (key prefix `prefix`), waiting up to
    /// `timeout` for a live one to be released or to expire.
    pub(crate) fn acquire(
        backend: &S3Backend,
        bundle: &Path,
        prefix: &str,
        timeout: Duration,
        actor: &str,
    ) -> Result<Lease> {
        check_workable(backend.location.lease_seconds)?;
        let key = Key::from(format!("{prefix}/{LOCK_OBJECT}"));
        let shown = format!("{}/{LOCK_OBJECT}", bundle.display());
        let lease = Duration::from_secs(backend.location.lease_seconds);
        let deadline = Instant::now() + timeout;
        let mut body = LeaseBody::ours(actor, backend.location.lease_seconds);
        loop {
            body.nonce = Some(uuid::Uuid::new_v4().to_string());
            let why_waiting = match Lease::try_take(backend, &key, &shown, lease, &mut body)? {
                Attempt::Taken { e_tag, sent } => {
                    return Ok(Lease::held(backend, key, shown, lease, e_tag, body, sent));
                }
                Attempt::Again => continue,
                Attempt::Wait(why) => why,
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

    /// One try at the lease: created if there is none; taken over, with the next epoch,
    /// on the ETag seen if the one in place expired.
    fn try_take(
        backend: &S3Backend,
        key: &Key,
        shown: &str,
        lease: Duration,
        body: &mut LeaseBody,
    ) -> Result<Attempt> {
        let client = &backend.client;
        let sent = Instant::now();
        let put = block_on(client.put_opts(
            key,
            body_bytes(body),
            PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            },
        ));
        let (e_tag, epoch) = match put {
            Ok(r) => {
                return Ok(Attempt::Taken {
                    e_tag: r.e_tag,
                    sent,
                });
            }
            Err(object_store::Error::AlreadyExists { .. }) => {
                match judge(backend, key, shown, lease)? {
                    Judged::Gone => return Ok(Attempt::Again),
                    Judged::Live(why) => return Ok(Attempt::Wait(why)),
                    Judged::Expired { e_tag, epoch } => (e_tag, epoch),
                }
            }
            Err(e) => return Err(store_error("create the lease", shown, e)),
        };
        // Expired: take it over on the ETag seen.
        body.epoch = epoch + 1;
        let sent = Instant::now();
        let taken = block_on(client.put_opts(
            key,
            body_bytes(body),
            PutOptions {
                mode: PutMode::Update(UpdateVersion {
                    e_tag,
                    version: None,
                }),
                ..Default::default()
            },
        ));
        match taken {
            Ok(r) => Ok(Attempt::Taken {
                e_tag: r.e_tag,
                sent,
            }),
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::NotFound { .. }) => Ok(Attempt::Again),
            Err(e) => Err(store_error("take over the lease", shown, e)),
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
            renewing: Mutex::new(()),
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
    /// write, past its holder's deadline, or too close to it to send a request. Called
    /// before every write, and by [`Lease::send`] before every request.
    pub(crate) fn check(&self) -> Result<()> {
        self.inner.check(Instant::now())
    }

    /// Runs one request (or a few, or a stream's reading) under the lease: refused when
    /// less than 5 s are left, each retry refused likewise, and cut short when the
    /// holder's deadline passes (it moves on with each renewal). A request refused or cut
    /// short is a lost lease (`concurrent_change`), whatever object_store made of it.
    pub(crate) fn send<F>(&self, request: F) -> Result<F::Output>
    where
        F: Future,
        F::Output: Outcome,
    {
        self.inner.send(request)
    }

    /// Records the operation the lease is held for (written with the next renewal, and
    /// now).
    pub(crate) fn set_operation(&self, op: &str) -> Result<()> {
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
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The holder's deadline: its time to write ends then.
    fn deadline(&self) -> Instant {
        self.held().renewed + holder_limit(self.lease)
    }

    fn check(&self, now: Instant) -> Result<()> {
        let (lost, deadline) = {
            let h = self.held();
            (h.lost.clone(), h.renewed + holder_limit(self.lease))
        };
        if let Some(why) = lost {
            return Err(Error::ConcurrentChange(format!(
                "lock {} was lost ({why}); nothing more is written: run `distributor recover`",
                self.shown
            )));
        }
        let limit = holder_limit(self.lease);
        let (why, when) = match time_left(deadline, now) {
            Left::Send(_) => return Ok(()),
            Left::TooLittle(left) => (
                format!(
                    "has {:.1} s left of the {} s its holder may write for after its last renewal, less than the {} s a request needs",
                    left.as_secs_f64(),
                    limit.as_secs(),
                    FLOOR.as_secs()
                ),
                "soon",
            ),
            Left::Past(over) => (
                format!(
                    "was last renewed {} s ago, past the {} s its holder may write for",
                    (limit + over).as_secs(),
                    limit.as_secs()
                ),
                "now",
            ),
        };
        Err(Error::ConcurrentChange(format!(
            "lock {} {why} (lease_seconds {} less 10 s, at least half): another host may hold it {when}; nothing more is written: run `distributor recover`",
            self.shown,
            self.lease.as_secs()
        )))
    }

    fn send<F>(self: &Arc<Self>, request: F) -> Result<F::Output>
    where
        F: Future,
        F::Output: Outcome,
    {
        self.check(Instant::now())?;
        let inner = Arc::clone(self);
        let out = block_on(HOLDER.scope(Arc::clone(self), async move {
            tokio::select! {
                biased;
                out = request => Some(out),
                () = inner.runs_out() => None,
            }
        }));
        match out {
            Some(out) if !out.failed() => Ok(out),
            // Refused on a retry, or failed with too little time left to try again.
            Some(out) => self.check(Instant::now()).map(|()| out),
            None => {
                self.check(Instant::now())?;
                // The deadline moved on just now: a renewal ended as the request was cut.
                Err(Error::ConcurrentChange(format!(
                    "lock {}: a request was still unanswered when its holder's time to write ran out; nothing more is written: run `distributor recover`",
                    self.shown
                )))
            }
        }
    }

    /// Resolves once the holder's deadline has passed, following it as renewals move it.
    async fn runs_out(&self) {
        loop {
            let deadline = self.deadline();
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }

    fn renew_until_stopped(self: Arc<Self>) {
        let every = renew_every(self.lease).max(MIN_RENEWAL);
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

    /// One renewal: a conditional write on the ETag last written, under the same bounds
    /// as every request (none once less than 5 s are left: the lease then runs out).
    fn renew(self: &Arc<Self>) {
        let _one = self.renewing.lock().unwrap_or_else(|e| e.into_inner());
        let (etag, body) = {
            let h = self.held();
            if h.lost.is_some() {
                return;
            }
            (h.etag.clone(), h.body.clone())
        };
        let sent = Instant::now();
        let r = self.send(self.backend.client.put_opts(
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
        let mut h = self.held();
        match r {
            Ok(Ok(r)) => {
                h.etag = r.e_tag.unwrap_or_default();
                h.renewed = sent;
            }
            Ok(Err(object_store::Error::Precondition { .. }))
            | Ok(Err(object_store::Error::NotFound { .. })) => {
                h.lost = Some("another host took it over or removed it".into());
            }
            // A failed renewal is tried again; the lease runs out if none succeeds.
            Ok(Err(_)) | Err(_) => {}
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
        // Released only while the holder's deadline has not passed (with the 5 s every
        // request needs) and the lease is still ours. object_store cannot send a DELETE
        // with If-Match: a HEAD shows the ETag last written, then the DELETE.
        let etag = self.inner.held().etag.clone();
        let client = &self.inner.backend.client;
        if let Ok(Ok(meta)) = self.send(client.head(&self.inner.key))
            && meta.e_tag.as_deref() == Some(etag.as_str())
        {
            let _ = self.send(client.delete(&self.inner.key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn the_holder_writes_for_the_lease_less_10_s_but_at_least_half() {
        assert_eq!(holder_limit(s(60)), s(50));
        assert_eq!(holder_limit(s(30)), s(20));
        assert_eq!(holder_limit(s(20)), s(10));
        assert_eq!(holder_limit(s(14)), s(7));
        assert_eq!(holder_limit(s(10)), s(5));
        assert_eq!(holder_limit(s(3600)), s(3590));
    }

    #[test]
    fn renewals_come_every_third_of_the_lease_or_sooner_above_the_floor() {
        assert_eq!(renew_every(s(60)), s(20));
        assert_eq!(renew_every(s(30)), Duration::from_millis(7500));
        assert_eq!(renew_every(s(20)), Duration::from_millis(2500));
        assert_eq!(renew_every(s(14)), s(1));
        for secs in 14..=3600 {
            let lease = s(secs);
            let every = renew_every(lease);
            assert!(every <= lease / 3, "{secs}");
            // A renewal and one retry are both sent with at least the floor left.
            assert!(
                holder_limit(lease).saturating_sub(every * 2) >= FLOOR,
                "{secs}"
            );
        }
    }

    #[test]
    fn leases_under_14_s_are_refused_with_the_least_that_works() {
        for secs in 10..14 {
            let e = check_workable(secs).unwrap_err().to_string();
            assert!(e.contains("set s3.lease_seconds to 14 or more"), "{e}");
        }
        for secs in [14, 20, 60, 3600] {
            check_workable(secs).unwrap();
        }
    }

    #[test]
    fn requests_are_refused_once_less_than_5_s_are_left() {
        // An injected clock: instants around a deadline.
        let base = Instant::now();
        let deadline = base + s(50);
        assert_eq!(time_left(deadline, base), Left::Send(s(50)));
        assert_eq!(time_left(deadline, base + s(45)), Left::Send(s(5)));
        assert_eq!(
            time_left(deadline, base + Duration::from_millis(45_001)),
            Left::TooLittle(Duration::from_millis(4_999))
        );
        assert_eq!(time_left(deadline, deadline), Left::Past(Duration::ZERO));
        assert_eq!(time_left(deadline, base + s(52)), Left::Past(s(2)));
    }

    fn inner_renewed_at(renewed: Instant, lease: u64) -> Inner {
        let backend = S3Backend::new(
            "bucket",
            super::super::S3Location {
                backend: "s3".into(),
                endpoint: Some("http://127.0.0.1:9".into()),
                region: "us-east-1".into(),
                account: None,
                use_emulator: false,
                allow_http: true,
                virtual_hosted_style: false,
                lease_seconds: lease,
            },
            1,
            Default::default(),
        )
        .unwrap();
        Inner {
            backend,
            key: Key::from("p/.distributor.lock"),
            shown: "s3://bucket/p/.distributor.lock".into(),
            lease: s(lease),
            held: Mutex::new(Held {
                etag: "\"e\"".into(),
                body: LeaseBody {
                    host: "h".into(),
                    pid: 1,
                    actor: "a".into(),
                    operation_id: None,
                    epoch: 1,
                    lease_seconds: lease,
                    nonce: None,
                    boot_id: None,
                    pid_namespace: None,
                    start_time: None,
                },
                renewed,
                lost: None,
            }),
            renewing: Mutex::new(()),
            stop: (Mutex::new(false), Condvar::new()),
        }
    }

    #[test]
    fn the_lease_check_follows_the_deadline_from_the_last_renewal_sent() {
        let renewed = Instant::now();
        let inner = inner_renewed_at(renewed, 60);
        inner.check(renewed + s(44)).unwrap();
        inner.check(renewed + s(45)).unwrap();
        let e = inner.check(renewed + s(46)).unwrap_err().to_string();
        assert!(e.contains("has 4.0 s left of the 50 s"), "{e}");
        assert!(e.starts_with("concurrent change: "), "{e}");
        let e = inner.check(renewed + s(80)).unwrap_err().to_string();
        assert!(
            e.contains("was last renewed 80 s ago, past the 50 s"),
            "{e}"
        );
        // A renewal sent later moves the deadline.
        inner.held().renewed = renewed + s(40);
        inner.check(renewed + s(80)).unwrap();
    }

    #[test]
    fn a_request_with_too_little_time_left_is_never_started() {
        let inner = Arc::new(inner_renewed_at(Instant::now() - s(46), 60));
        let started = std::sync::atomic::AtomicBool::new(false);
        let r = inner.send(async {
            started.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok::<(), ()>(())
        });
        assert!(r.is_err());
        assert!(!started.load(std::sync::atomic::Ordering::SeqCst));
    }
}
