//! s3 destinations that must be refused, or that only a running process can judge (SPEC
//! §12, §14), against real servers on 127.0.0.1: a store that ignores conditional writes
//! (moto behind `tests/fixtures/s3_ignoring_proxy.py`) is refused before anything is
//! written, and dry runs do not probe it; a live lease of another host makes a publisher
//! give up after `--lock-timeout`, one of a dead process of this host is taken over at
//! once (on SeaweedFS, like every lease test); `distributor serve` publishes to an s3 destination; an http endpoint from
//! `AWS_ENDPOINT_URL` without `allow_http` and a bucket that does not exist are clear
//! errors that write nothing.

use crate::common::s3::{IgnoringProxy, Moto, require_moto, require_seaweedfs, s3_env};
use crate::common::server::{SECRET, Server, bundle_tar, gzip};
use crate::common::{Env, F, Run};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PREFIX: &str = "weather/latest";

const V1: &[F] = &[
    ("index.html", "<h1>v1</h1>"),
    ("forecast.json", "{\"t\": 1}"),
    ("maps/temp.png", "png-1"),
];

/// One bucket and the environment to reach it.
struct World {
    env: Env,
    moto: &'static Moto,
    bucket: String,
    vars: Vec<(&'static str, String)>,
}

impl World {
    fn new(moto: &'static Moto) -> World {
        World {
            env: Env::new(),
            moto,
            bucket: moto.fresh_bucket(),
            vars: s3_env(moto),
        }
    }

    /// A config with one s3 destination `site` at `s3://<bucket>/<PREFIX>` and the `s3:`
    /// block `s3_block` (keys indented 6).
    fn config_with(&self, rel: &str, bucket: &str, s3_block: &str) -> PathBuf {
        self.env.config(
            rel,
            &format!(
                "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n    backend: s3\n    path: s3://{bucket}/{PREFIX}\n    s3:\n{s3_block}"
            ),
        )
    }

    /// A config whose destination's endpoint is `endpoint` (plain http allowed).
    fn config(&self, rel: &str, endpoint: &str) -> PathBuf {
        self.config_with(
            rel,
            &self.bucket,
            &format!("      endpoint: {endpoint}\n      allow_http: true\n"),
        )
    }

    fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        let mut env: Vec<(&str, &str)> = self.vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.extend_from_slice(extra);
        self.env.run_env(args, &env)
    }

    /// `publish --json` (or `plan --json` for `command` "plan") of `bundle` plus `extra`.
    fn cmd(&self, command: &str, config: &Path, bundle: &Path, extra: &[&str]) -> Run {
        let mut args = vec![
            command,
            "--json",
            "--config",
            path(config),
            "--source",
            path(bundle),
        ];
        args.extend_from_slice(extra);
        self.run(&args, &[])
    }

    /// Every object in the bucket: key -> (etag, content).
    fn bucket_objects(&self) -> BTreeMap<String, (String, Vec<u8>)> {
        self.moto.snapshot(&self.bucket, "")
    }

    /// The operations of this env's journal, as `history --json` lists them.
    fn history(&self) -> Vec<Value> {
        let h = self.run(&["history", "--json"], &[]);
        h.expect_code(0);
        h.json()["operations"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn key(rel: &str) -> String {
    format!("{PREFIX}/{rel}")
}

/// The destination's message of a `--json` report.
fn message(r: &Run) -> String {
    r.dest(0)["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The requests of a proxy log that could change something.
fn writes(requests: &[String]) -> Vec<String> {
    requests
        .iter()
        .filter(|l| !l.starts_with("GET ") && !l.starts_with("HEAD "))
        .cloned()
        .collect()
}

/// The lease object's body, as the backend writes it.
fn lease_body(host: &str, pid: u32) -> Vec<u8> {
    serde_json::to_vec_pretty(&serde_json::json!({
        "host": host,
        "pid": pid,
        "actor": "someone-else",
        "operation_id": "00000000-0000-4000-8000-000000000000",
        "epoch": 3,
        "lease_seconds": 60,
    }))
    .unwrap()
}

/// A lease of a process of this machine: [`lease_body`] plus the boot id, the PID
/// namespace and the process's start time, which let a run on this machine tell whether
/// that process is gone (SPEC §14 amendments).
fn local_lease_body(pid: u32, start_time: u64) -> Vec<u8> {
    use std::os::unix::fs::MetadataExt;
    let mut v: serde_json::Value = serde_json::from_slice(&lease_body(&this_host(), pid)).unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    v["nonce"] = "9a0f3c2e-5d1b-4c6a-8e7f-112233445566".into();
    v["boot_id"] = boot.trim().into();
    v["pid_namespace"] = std::fs::metadata("/proc/self/ns/pid").unwrap().ino().into();
    v["start_time"] = start_time.into();
    serde_json::to_vec_pretty(&v).unwrap()
}

/// This process's start time: field 22 of `/proc/self/stat`, counted after the command.
fn my_start_time() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// The host name a lease of this machine records (the kernel's node name).
fn this_host() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// A pid no process of this machine has.
fn dead_pid() -> u32 {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    (2..max)
        .rev()
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .expect("a free pid")
}

#[test]
fn a_store_that_ignores_conditional_writes_is_refused_before_anything_is_written() {
    let moto = require_moto!();
    let w = World::new(moto);
    let proxy = IgnoringProxy::start(moto, &w.env.path("proxy.log"));
    let through_proxy = w.config("proxy.yaml", &proxy.endpoint);
    let b1 = w
        .env
        .bundle("b1", "tomorrow", "2026-12-02T06:00:00Z", V1, &[]);

    // Dry runs plan from reads alone: no probe, nothing written, through the proxy either.
    for (command, extra) in [("plan", &[][..]), ("publish", &["--dry-run"][..])] {
        let r = w.cmd(command, &through_proxy, &b1, extra);
        r.expect_code(0);
        assert_eq!(r.decision(), "create", "{command}");
        assert_eq!(r.dest(0)["status"], "planned", "{command}");
    }
    let requests = proxy.requests();
    assert!(
        !requests.is_empty(),
        "the dry runs did not go through the proxy"
    );
    assert_eq!(
        writes(&requests),
        Vec::<String>::new(),
        "a dry run wrote (or probed) through the proxy"
    );
    assert!(
        w.bucket_objects().is_empty(),
        "a dry run wrote to the bucket"
    );
    assert!(w.history().is_empty(), "a dry run journaled an operation");

    // The real run probes, finds the condition ignored and refuses: exit 1, a message that
    // says why, and nothing left in the bucket (no probe object, no lease, no content).
    let r = w.cmd("publish", &through_proxy, &b1, &[]);
    r.expect_code(1);
    assert_eq!(r.dest(0)["status"], "failed");
    let msg = message(&r);
    assert!(
        msg.contains(&format!(
            "the store at {} ignores conditional writes",
            proxy.endpoint
        )) && msg.contains("If-None-Match: *")
            && msg.contains("refuses it"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("s3://{}/{PREFIX}/.distributor-probe-", w.bucket)),
        "{msg}"
    );
    // Without --json the text report says it too.
    let text = w.run(
        &[
            "publish",
            "--config",
            path(&through_proxy),
            "--source",
            path(&b1),
        ],
        &[],
    );
    text.expect_code(1);
    assert!(
        format!("{}{}", text.stdout, text.stderr).contains("ignores conditional writes"),
        "{text:?}"
    );
    assert!(
        w.bucket_objects().is_empty(),
        "a refused store kept something: {:?}",
        w.bucket_objects().keys().collect::<Vec<_>>()
    );
    assert!(
        w.history().is_empty(),
        "a refused publication was journaled"
    );
    // What went through the proxy: the probe only (its conditional PUTs lost their
    // conditions on the way, then a batch delete removed it), never the lease or any
    // content.
    let writes = writes(&proxy.requests());
    let probe = format!("PUT /{}/{PREFIX}/.distributor-probe-", w.bucket);
    let batch_delete = format!("POST /{}?delete ", w.bucket);
    assert!(
        writes
            .iter()
            .all(|l| l.starts_with(&probe) || l.starts_with(&batch_delete)),
        "more than the probe was written: {writes:#?}"
    );
    let dropped = |h: &str| {
        writes
            .iter()
            .any(|l| l.to_ascii_lowercase().ends_with(&format!("dropped={h}")))
    };
    assert!(
        dropped("if-none-match") && dropped("if-match"),
        "the proxy dropped no condition: {writes:#?}"
    );
    assert!(
        writes.iter().any(|l| l.starts_with(&batch_delete)),
        "the probe was not removed: {writes:#?}"
    );

    // The same publication straight to moto, which honours the conditions: it works. So
    // the proxy, dropping the conditions, is what made the difference.
    let direct = w.config("direct.yaml", &moto.endpoint);
    let r = w.cmd("publish", &direct, &b1, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "create");
    for (p, c) in V1 {
        assert_eq!(moto.get(&w.bucket, &key(p)).unwrap(), c.as_bytes(), "{p}");
    }
    let keys: Vec<String> = w.bucket_objects().into_keys().collect();
    assert!(
        !keys.iter().any(|k| k.contains(".distributor-probe-")
            || k.ends_with(".distributor.lock")
            || k.contains(".distributor/staging/")
            || k.contains(".distributor-staging/")),
        "{keys:#?}"
    );
    assert_eq!(w.history().len(), 1);

    // And through the proxy again a publication that would write is still refused, with
    // the published objects left as they are.
    let before = w.bucket_objects();
    let b2 = w.env.bundle(
        "b2",
        "later",
        "2026-12-02T07:00:00Z",
        &[("index.html", "<h1>v2</h1>")],
        &[],
    );
    let r = w.cmd("publish", &through_proxy, &b2, &[]);
    r.expect_code(1);
    assert!(
        message(&r).contains("ignores conditional writes"),
        "{}",
        message(&r)
    );
    assert_eq!(w.bucket_objects(), before, "a refused store was written to");
}

#[test]
fn serve_refuses_a_store_that_ignores_conditional_writes() {
    let moto = require_moto!();
    let w = World::new(moto);
    let proxy = IgnoringProxy::start(moto, &w.env.path("proxy.log"));
    let config = server_s3_config(&w, &proxy.endpoint);
    let vars: Vec<(&str, &str)> = w.vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Server::start_env(&w.env, &[&config], &[], &vars);
    let b1 = w
        .env
        .bundle("b1", "tomorrow", "2026-12-02T06:00:00Z", V1, &[]);
    let r = server.post_raw(
        "/v1/pipelines/weather/bundles",
        Some(SECRET),
        Some("application/gzip"),
        &gzip(&bundle_tar(&b1)),
    );
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(r.kind(), "failed");
    assert!(
        r.message().contains("ignores conditional writes"),
        "{}",
        r.body
    );
    assert!(
        w.bucket_objects().is_empty(),
        "a refused store kept something"
    );
    assert!(w.history().is_empty());
}

#[test]
fn a_live_lease_of_another_host_times_out_and_a_dead_local_one_is_taken_over() {
    let server = require_seaweedfs!();
    let w = World::new(server);
    let config = w.config("d.yaml", &server.endpoint);
    let b1 = w
        .env
        .bundle("b1", "tomorrow", "2026-12-02T06:00:00Z", V1, &[]);
    let lock = key(".distributor.lock");

    // Another host's lease, just written (a current Last-Modified): live for 70 s more.
    server.put(&w.bucket, &lock, &lease_body("other-host", 4242));
    let before = w.bucket_objects();
    let started = Instant::now();
    let r = w.cmd("publish", &config, &b1, &["--lock-timeout", "2"]);
    let waited = started.elapsed();
    r.expect_code(1);
    assert_eq!(r.dest(0)["status"], "failed");
    // The CLI's report has no error kind per destination; the message is the lock error's
    // (kind lock_timeout): who holds it, and that --lock-timeout ran out.
    let msg = message(&r);
    assert!(
        msg.contains(&format!(
            "lock s3://{}/{PREFIX}/.distributor.lock",
            w.bucket
        )) && msg.contains("held by other-host pid 4242")
            && msg.contains("epoch 3")
            && msg.contains("by the store's clock")
            && msg.contains("gave up after 2 s (--lock-timeout)"),
        "{msg}"
    );
    assert!(
        waited >= Duration::from_secs(2),
        "gave up after {waited:?}, before --lock-timeout"
    );
    assert_eq!(
        w.bucket_objects(),
        before,
        "a publisher without the lock wrote"
    );
    assert!(
        w.history().is_empty(),
        "an operation was journaled without the lock"
    );

    // This host's own lease, of a process that is still alive (the test itself): live too.
    server.put(
        &w.bucket,
        &lock,
        &local_lease_body(std::process::id(), my_start_time()),
    );
    let r = w.cmd("publish", &config, &b1, &["--lock-timeout", "1"]);
    r.expect_code(1);
    assert!(
        message(&r).contains(&format!(
            "held by {} pid {}",
            this_host(),
            std::process::id()
        )),
        "{}",
        message(&r)
    );
    assert!(w.content_is_empty(), "a publisher without the lock wrote");

    // This machine's lease of a process that is gone is never renewed again: taken over
    // before the lock timeout, so long before its expiry by the store's clock (70 s, past
    // the 30 s the publisher waits at most: exit 0 is the takeover).
    let pid = dead_pid();
    server.put(&w.bucket, &lock, &local_lease_body(pid, my_start_time()));
    let r = w.cmd("publish", &config, &b1, &["--lock-timeout", "30"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "create");
    for (p, c) in V1 {
        assert_eq!(server.get(&w.bucket, &key(p)).unwrap(), c.as_bytes(), "{p}");
    }
    assert_eq!(
        server.get(&w.bucket, &lock),
        None,
        "the lease taken over was not released"
    );
    assert_eq!(w.history().len(), 1);
}

impl World {
    /// Nothing in the bucket but the lease object.
    fn content_is_empty(&self) -> bool {
        self.bucket_objects()
            .keys()
            .all(|k| *k == key(".distributor.lock"))
    }
}

/// A server config: pipeline `weather`, token `forecast-job`, destination `site` at
/// `s3://<bucket>/<PREFIX>` through `endpoint`.
fn server_s3_config(w: &World, endpoint: &str) -> PathBuf {
    w.env.config(
        "serve.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\nserver:\n  upload_tokens:\n    - name: forecast-job\n      sha256: \"{}\"\ndestinations:\n  - id: site\n    backend: s3\n    path: s3://{}/{PREFIX}\n    s3:\n      endpoint: {endpoint}\n      allow_http: true\n      cache_control: [{{glob: \"*.html\", value: no-cache}}]\n",
            distributor::hash::sha256_hex(SECRET.as_bytes()),
            w.bucket
        ),
    )
}

#[test]
fn serve_publishes_to_an_s3_destination() {
    let moto = require_moto!();
    let w = World::new(moto);
    let config = server_s3_config(&w, &moto.endpoint);
    let vars: Vec<(&str, &str)> = w.vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut server = Server::start_env(&w.env, &[&config], &[], &vars);
    let b1 = w
        .env
        .bundle("b1", "tomorrow", "2026-12-02T06:00:00Z", V1, &[]);
    let upload = gzip(&bundle_tar(&b1));
    let post = |query: &str| {
        server.post_raw(
            &format!("/v1/pipelines/weather/bundles{query}"),
            Some(SECRET),
            Some("application/gzip"),
            &upload,
        )
    };
    let bundle_path = format!("s3://{}/{PREFIX}", w.bucket);

    // A dry run plans and writes nothing.
    let r = post("?dry_run=true");
    r.expect(200);
    assert_eq!(r.json()["destinations"][0]["status"], "planned");
    assert!(
        w.bucket_objects().is_empty(),
        "a dry run wrote to the bucket"
    );

    let r = post("");
    r.expect(200);
    let report = r.json();
    let d = &report["destinations"][0];
    assert_eq!(d["decision"], "create", "{report}");
    assert_eq!(d["status"], "applied");
    assert_eq!(d["bundle_path"], bundle_path.as_str());
    let op = d["operation_id"]
        .as_str()
        .expect("an operation id")
        .to_string();

    // The objects are the bundle's files with their content and headers; distributor
    // left its state and its log's entry (SPEC §18) with its path list, nothing else (no
    // lease, no staging, no probe).
    let objects = w.bucket_objects();
    let mut want: Vec<String> = V1.iter().map(|(p, _)| key(p)).collect();
    want.push(key(".distributor.json"));
    want.push(key(".distributor/log/00000000000000000001.json"));
    want.push(key(".distributor/log/00000000000000000001.paths.jsonl"));
    want.sort();
    assert_eq!(objects.keys().cloned().collect::<Vec<_>>(), want);
    for (p, c) in V1 {
        assert_eq!(objects[&key(p)].1, c.as_bytes(), "{p}");
    }
    let html = moto.head(&w.bucket, &key("index.html")).unwrap();
    assert_eq!(html.content_type.as_deref(), Some("text/html"));
    assert_eq!(html.cache_control.as_deref(), Some("no-cache"));
    let state: Value =
        serde_json::from_slice(&objects[&key(".distributor.json")].1).expect("state is JSON");
    assert_eq!(state["state_version"], 2);
    assert_eq!(state["source"]["id"], "tomorrow");
    let entry: Value =
        serde_json::from_slice(&objects[&key(".distributor/log/00000000000000000001.json")].1)
            .expect("a log entry is JSON");
    assert_eq!(entry["operation_id"], op.as_str());
    assert_eq!(entry["actor"], "token:forecast-job");

    // The server's journal has the operation, at the s3 bundle path, by the token.
    let ops = w.history();
    assert_eq!(ops.len(), 1, "{ops:#?}");
    assert_eq!(ops[0]["operation_id"], op.as_str());
    assert_eq!(ops[0]["bundle_path"], bundle_path.as_str());
    assert_eq!(ops[0]["actor"], "token:forecast-job");
    assert_eq!(ops[0]["status"], "applied");
    assert_eq!(ops[0]["destination_id"], "site");

    // The same upload again: unchanged, nothing rewritten, nothing journaled.
    let r = post("");
    r.expect(200);
    assert_eq!(r.json()["destinations"][0]["decision"], "unchanged");
    assert_eq!(w.bucket_objects(), objects);
    assert_eq!(w.history().len(), 1);
    assert_eq!(server.stop().code(), Some(0));
    assert!(!server.log_lines().join("\n").contains(SECRET));
}

#[test]
fn an_http_endpoint_from_aws_endpoint_url_needs_allow_http() {
    let moto = require_moto!();
    let w = World::new(moto);
    // No endpoint and no allow_http in the config: the environment names moto's plain
    // http endpoint, which overrides the configured one (SPEC §14).
    // Nor when the config names an https endpoint: the environment's replaces it.
    let unset = w.config_with("unset.yaml", &w.bucket, "      region: us-east-1\n");
    let https = w.config_with(
        "https.yaml",
        &w.bucket,
        "      endpoint: https://s3.example.invalid\n      region: us-east-1\n",
    );
    let b1 = w
        .env
        .bundle("b1", "tomorrow", "2026-12-02T06:00:00Z", V1, &[]);
    let env = [("AWS_ENDPOINT_URL", moto.endpoint.as_str())];
    for (config, args) in [unset, https].iter().flat_map(|c| {
        [
            (c, &["publish"][..]),
            (c, &["publish", "--dry-run"][..]),
            (c, &["plan"][..]),
        ]
    }) {
        let mut all = args.to_vec();
        all.extend(["--json", "--config", path(config), "--source", path(&b1)]);
        let r = w.run(&all, &env);
        // A destination that cannot be used as configured: exit 2, reported on the
        // destination, nothing else attempted.
        r.expect_code(2);
        assert_eq!(r.dest(0)["status"], "failed", "{config:?} {args:?}");
        let text = message(&r);
        assert!(
            text.contains(&format!(
                "s3 endpoint {} (from AWS_ENDPOINT_URL, which overrides s3.endpoint) is plain http",
                moto.endpoint
            )) && text.contains("s3.allow_http: true"),
            "{config:?} {args:?}: {text}"
        );
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
    assert!(w.bucket_objects().is_empty(), "something was written");
    assert!(w.history().is_empty(), "something was journaled");

    // With allow_http the same environment reaches moto and publishes.
    let allowed = w.config_with(
        "allowed.yaml",
        &w.bucket,
        "      region: us-east-1\n      allow_http: true\n",
    );
    let r = w.run(
        &[
            "publish",
            "--json",
            "--config",
            path(&allowed),
            "--source",
            path(&b1),
        ],
        &env,
    );
    r.expect_code(0);
    assert_eq!(r.decision(), "create");
    assert_eq!(
        moto.get(&w.bucket, &key("index.html")).unwrap(),
        b"<h1>v1</h1>"
    );
}

#[test]
fn a_bucket_that_does_not_exist_is_a_clear_error() {
    let moto = require_moto!();
    let w = World::new(moto);
    let missing = format!("no-such-bucket-{}", std::process::id());
    let config = w.config_with(
        "d.yaml",
        &missing,
        &format!(
            "      endpoint: {}\n      allow_http: true\n",
            moto.endpoint
        ),
    );
    let b1 = w
        .env
        .bundle("b1", "tomorrow", "2026-12-02T06:00:00Z", V1, &[]);
    for extra in [&[][..], &["--dry-run"][..]] {
        let r = w.cmd("publish", &config, &b1, extra);
        let text = format!("{}\n{}", r.stdout, r.stderr);
        assert_eq!(r.code, 1, "{extra:?}: {text}");
        assert!(!text.contains("panicked"), "{extra:?}: {text}");
        let msg = message(&r);
        assert!(msg.contains(&missing), "{extra:?}: {msg}");
        // What distributor was doing, and the store's own reason.
        assert!(msg.starts_with("s3: "), "{extra:?}: {msg}");
        assert!(msg.contains("NoSuchBucket"), "{extra:?}: {msg}");
    }
    assert!(w.history().is_empty(), "an operation was journaled");
    // verify and status say so too, rather than reading a missing bucket as no state: on
    // that destination, in state `error` (SPEC §16).
    for cmd in ["verify", "status"] {
        let r = w.run(&[cmd, "--config", path(&config)], &[]);
        assert_eq!(r.code, 1, "{cmd}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains(": state error"), "{cmd}: {}", r.stdout);
        assert!(r.stdout.contains("NoSuchBucket"), "{cmd}: {}", r.stdout);
    }
    let r = moto.raw("GET", &format!("/{missing}?list-type=2"), &[], &[]);
    assert_eq!(r.status, 404, "the bucket appeared: {}", r.text());
}
