//! How many requests a publication to an object store makes (the issue "fewer requests
//! per change"), counted through the recording proxy (`tests/fixtures/s3_ignoring_proxy.py
//! --keep-conditions`, which forwards every request unchanged and logs it), on moto,
//! SeaweedFS and Azurite:
//! - a file up to 64 MiB goes in one PUT, not in parts;
//! - an unchanged republish writes nothing;
//! - a change deletes in batches (a fixed number of delete requests, whatever the number
//!   of changed files), copies aside only the replaced keys (not the deleted ones), and
//!   never reads back the staging records it wrote itself, nor the state object it
//!   committed;
//! - the one listing of the prefix made under the lease also finds the destination log's
//!   tail and the check objects killed runs left (no listings of their own), and a
//!   finished operation's staging entry is removed without a listing of it (the
//!   publisher knows what it created there).

use crate::common::Env;
use crate::common::s3::{
    IgnoringProxy, Moto, SINGLE_PUT_LIMIT, ServerKind, require_azurite, require_moto,
    require_seaweedfs, s3_env,
};
use std::path::Path;

const PREFIX: &str = "site";
/// Files of the bundle besides the big one.
const FILES: usize = 40;
/// Of them, replaced by the change.
const CHANGED: usize = 10;
/// Of them, dropped by the change.
const DROPPED: usize = 2;

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn on_moto() {
    requests_per_change(require_moto!());
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn on_seaweedfs() {
    requests_per_change(require_seaweedfs!());
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn on_azurite() {
    requests_per_change(require_azurite!());
}

/// One logged request: its method and target (path and query).
struct Request {
    method: String,
    target: String,
}

impl Request {
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// A delete: a DELETE, S3's DeleteObjects (`POST ?delete`) or an Azure Blob Batch
    /// (`POST ?comp=batch`).
    fn deletes(&self) -> bool {
        self.method == "DELETE"
            || (self.method == "POST"
                && (self.target.contains("?delete") || self.target.contains("comp=batch")))
    }

    /// A part of a multipart upload: S3's create, part or completion, Azure's Put Block
    /// or Put Block List.
    fn multipart(&self) -> bool {
        self.target.contains("uploads")
            || self.target.contains("partNumber=")
            || self.target.contains("uploadId=")
            || self.target.contains("comp=block")
    }
}

fn requests(proxy: &IgnoringProxy, from: usize) -> Vec<Request> {
    proxy.requests()[from..]
        .iter()
        .map(|l| {
            let mut parts = l.split(' ');
            Request {
                method: parts.next().unwrap_or_default().to_string(),
                target: parts.next().unwrap_or_default().to_string(),
            }
        })
        .collect()
}

fn shown(rs: &[Request]) -> String {
    rs.iter()
        .map(|r| format!("{} {}", r.method, r.target))
        .collect::<Vec<_>>()
        .join("\n")
}

fn bundle(
    env: &Env,
    name: &str,
    at: &str,
    changed: usize,
    dropped: usize,
    big: &str,
) -> std::path::PathBuf {
    let contents: Vec<(String, String)> = (0..FILES - dropped)
        .map(|i| {
            let v = if i < changed { 2 } else { 1 };
            (format!("f/{i:02}.txt"), format!("file {i}, version {v}\n"))
        })
        .collect();
    let mut files: Vec<(&str, &str)> = contents
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    files.push(("big.bin", big));
    env.bundle(name, "site", at, &files, &[])
}

fn requests_per_change(server: &'static Moto) {
    let env = Env::new();
    let bucket = server.fresh_bucket();
    let proxy = IgnoringProxy::recording(server, &env.path("requests.log"));
    // The server's endpoint with the proxy's address (Azurite's names the account too).
    let path = (server.endpoint.splitn(4, '/').nth(3)).map_or(String::new(), |p| format!("/{p}"));
    let through = format!("{}{path}", proxy.endpoint);
    let config = env.config(
        "d.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n{}",
            server.dest_keys_at(&bucket, PREFIX, &through)
        ),
    );
    // The release default: one PUT up to 64 MiB (the harness lowers it for other tests).
    let vars: Vec<(&str, String)> = s3_env(server)
        .into_iter()
        .filter(|(k, _)| *k != SINGLE_PUT_LIMIT)
        .collect();
    let mut vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // A check object counts as left by a killed run once it is this old (a minute in
    // release builds), so the one planted below is stale at once: the first publication
    // removes it.
    vars.push(("DISTRIBUTOR_S3_STALE_PROBE_SECONDS", "0"));
    let publish = |b: &Path| {
        let r = env.run_env(
            &[
                "publish",
                "--json",
                "--config",
                config.to_str().unwrap(),
                "--source",
                b.to_str().unwrap(),
            ],
            &vars,
        );
        r.expect_code(0);
        r
    };
    let kind = server.kind;
    // 9 MiB: past the 8 MiB part size, under the single-PUT limit.
    let big = "0123456789abcdef".repeat(9 * 1024 * 1024 / 16);
    // What a run killed during its conditional-write check leaves.
    let left = format!("{PREFIX}/.distributor-probe-00000000-0000-4000-8000-000000000000");
    server.put(&bucket, &left, b"distributor conditional-write check\n");
    // A check object of a nested bundle path is not this prefix's.
    let nested = format!("{PREFIX}/n/.distributor-probe-00000000-0000-4000-8000-000000000000");
    server.put(&bucket, &nested, b"not distributor's\n");

    // A first publication: one PUT per file, the big one included.
    publish(&bundle(&env, "b1", "2026-12-02T06:00:00Z", 0, 0, &big));
    let first = requests(&proxy, 0);
    assert!(
        !first.iter().any(Request::multipart),
        "{kind:?}: a 9 MiB file went in parts:\n{}",
        shown(&first)
    );
    let big_puts = first
        .iter()
        .filter(|r| r.method == "PUT" && r.path().ends_with("/site/big.bin"))
        .count();
    assert_eq!(big_puts, 1, "{kind:?}:\n{}", shown(&first));
    let content_puts = first
        .iter()
        .filter(|r| r.method == "PUT" && !r.path().contains("/site/.distributor"))
        .count();
    assert_eq!(content_puts, FILES + 1, "{kind:?}:\n{}", shown(&first));

    // Unchanged: reads only: the state and one listing, which also shows the staging
    // entries (before: 4, the staging places listed apart).
    let at = proxy.requests().len();
    publish(&bundle(&env, "b1", "2026-12-02T06:00:00Z", 0, 0, &big));
    let unchanged = requests(&proxy, at);
    assert!(
        unchanged
            .iter()
            .all(|r| r.method == "GET" || r.method == "HEAD"),
        "{kind:?}: an unchanged republish wrote:\n{}",
        shown(&unchanged)
    );
    assert!(
        unchanged.len() <= 2,
        "{kind:?}: {} requests for an unchanged republish:\n{}",
        unchanged.len(),
        shown(&unchanged)
    );

    // 10 files replaced, 2 dropped.
    let at = proxy.requests().len();
    publish(&bundle(
        &env,
        "b2",
        "2026-12-02T07:00:00Z",
        CHANGED,
        DROPPED,
        &big,
    ));
    let change = requests(&proxy, at);
    let all = shown(&change);
    // The check object a killed run left is gone, found by the listing planning made
    // (before: a listing of the prefix's top level of its own, on every run, which the
    // change below must not make).
    assert!(
        server.get(&bucket, &left).is_none(),
        "{kind:?}: a stale check object is left"
    );
    assert!(
        server.get(&bucket, &nested).is_some(),
        "{kind:?}: a nested key that looks like a check object was deleted"
    );
    let lists: Vec<&Request> = change
        .iter()
        .filter(|r| {
            r.method == "GET" && (r.target.contains("list-type=") || r.target.contains("comp=list"))
        })
        .collect();
    assert!(
        !lists.iter().any(|r| r.target.contains("delimiter=")
            || r.target.contains("log")
            || r.target.contains("staging")),
        "{kind:?}: a listing of the top level, of the log or of the staging entry of its own:\n{all}"
    );
    assert_eq!(lists.len(), 1, "{kind:?}: listings:\n{all}");
    // And the entry removed without a listing is gone whole.
    let left_in_staging = server.list(&bucket, &format!("{PREFIX}/.distributor/staging/"));
    assert!(
        left_in_staging.is_empty(),
        "{kind:?}: left in staging: {:?}",
        left_in_staging.iter().map(|o| &o.key).collect::<Vec<_>>()
    );
    // Copied aside: the replaced keys only. A deleted key is deleted after the commit
    // decision, so nothing ever restores it.
    let copies = change
        .iter()
        .filter(|r| {
            r.method == "PUT"
                && r.path().contains("/.distributor/staging/")
                && r.path().contains("/old/")
        })
        .count();
    assert_eq!(copies, CHANGED, "{kind:?}: copies aside:\n{all}");
    // Deletes in batches: the probe object, the dropped keys, `plan.json`, the rest of the
    // staging entry with its decision, the lease. Before: one request per key.
    let deletes = change.iter().filter(|r| r.deletes()).count();
    assert_eq!(deletes, 5, "{kind:?}: delete requests:\n{all}");
    // Nothing this run wrote into its staging entry is read back.
    let read_back: Vec<&Request> = change
        .iter()
        .filter(|r| r.method == "GET" && r.path().contains("/.distributor/staging/"))
        .collect();
    assert!(
        read_back.is_empty(),
        "{kind:?}: staging records read back:\n{all}"
    );
    // The state object: read before the lock and once under it; the one committed is
    // not read back (before: once more before the log entry).
    let state_reads = change
        .iter()
        .filter(|r| r.method == "GET" && r.path().ends_with("/site/.distributor.json"))
        .count();
    assert_eq!(state_reads, 2, "{kind:?}:\n{all}");
    // In all: 2 per replaced file (its copy aside and its upload) and a fixed number:
    // 42 on S3 (moto and SeaweedFS), 53 on Azure, which copies aside through this host (a
    // GET of the old blob each); one of them the log entry's path list (docs/audit.md),
    // and the entry chains to the one before by the sha256 the journal kept, without
    // reading it. Before the path list: 41 and 52; before that: 45 and
    // 56 (listings of the top level, of the log and of the staging entry, the state read
    // back); before that, 71 on S3 (12 copies, 21 delete requests, 4 staging records read
    // back, 4 reads of the state object) and 84 on Azure.
    let fixed = match kind {
        ServerKind::Azurite => 23 + CHANGED,
        _ => 22,
    };
    assert!(
        change.len() <= 2 * CHANGED + fixed,
        "{kind:?}: {} requests for {CHANGED} replaced and {DROPPED} dropped files (at most {}):\n{all}",
        change.len(),
        2 * CHANGED + fixed
    );
}
