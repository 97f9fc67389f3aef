//! The lease object (SPEC §14 and its amendments): what `<prefix>/.distributor.lock`
//! holds, who its holder is on its machine (read from `/proc`), and how a lease found in
//! place is judged: live, expired by the store's clock, or left by a process of this
//! machine that is gone.

use super::super::{S3Backend, block_on, store_error};
use super::GRACE;
use crate::error::Result;
use object_store::path::Path as Key;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The lease object's name under the prefix.
pub(crate) const LOCK_OBJECT: &str = ".distributor.lock";

/// What the lease object holds. The fields after `lease_seconds` are absent from leases
/// written before they existed; such a lease is only ever taken over once it expired.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LeaseBody {
    pub(super) host: String,
    pub(super) pid: u32,
    pub(super) actor: String,
    #[serde(default)]
    pub(super) operation_id: Option<String>,
    pub(super) epoch: u64,
    pub(super) lease_seconds: u64,
    /// Random, new with each acquisition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) nonce: Option<String>,
    /// `/proc/sys/kernel/random/boot_id` of the holder's machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) boot_id: Option<String>,
    /// The inode of the holder's `/proc/self/ns/pid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) pid_namespace: Option<u64>,
    /// The holder's start time: field 22 of `/proc/<pid>/stat` (clock ticks since boot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) start_time: Option<u64>,
}

impl LeaseBody {
    /// The lease this process writes for `actor`, at epoch 1, without a nonce yet.
    pub(super) fn ours(actor: &str, lease_seconds: u64) -> LeaseBody {
        let pid = std::process::id();
        LeaseBody {
            host: host(),
            pid,
            actor: actor.to_string(),
            operation_id: None,
            epoch: 1,
            lease_seconds,
            nonce: None,
            boot_id: boot_id(),
            pid_namespace: pid_namespace(),
            start_time: match start_time(pid) {
                Started::At(t) => Some(t),
                Started::Gone | Started::Unknown => None,
            },
        }
    }
}

fn host() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
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

pub(super) fn body_bytes(b: &LeaseBody) -> PutPayload {
    let mut v = serde_json::to_vec_pretty(b).expect("a lease serializes");
    v.push(b'\n');
    PutPayload::from(v)
}

/// What a lease object found in place says.
pub(super) enum Judged {
    /// It was removed meanwhile.
    Gone,
    /// Expired by the store's clock, or left by a process of this machine that is gone:
    /// it may be taken over on this ETag, with the next epoch.
    Expired { e_tag: Option<String>, epoch: u64 },
    /// Held: by whom, and when it expires.
    Live(String),
}

/// Reads the lease at `key` and judges it by the store's clock (`lease`: the length to
/// assume when its content does not say).
pub(super) fn judge(
    backend: &S3Backend,
    key: &Key,
    shown: &str,
    lease: Duration,
) -> Result<Judged> {
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
pub(crate) fn live_holder(
    backend: &S3Backend,
    bundle: &Path,
    prefix: &str,
) -> Result<Option<String>> {
    let key = Key::from(format!("{prefix}/{LOCK_OBJECT}"));
    let shown = format!("{}/{LOCK_OBJECT}", bundle.display());
    let lease = Duration::from_secs(backend.location.lease_seconds);
    Ok(match judge(backend, &key, &shown, lease)? {
        Judged::Live(why) => Some(format!("the lease {shown} is {why}")),
        Judged::Gone | Judged::Expired { .. } => None,
    })
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
