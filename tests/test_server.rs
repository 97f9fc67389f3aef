//! `distributor serve` end to end: a real server on a loopback port, a real HTTP client.
//! This file holds the harness the other `test_server_*` files share, and the tests of
//! publishing, dry runs, authentication, parameters, status codes, logs and shutdown.

use crate::common::Env;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tar::EntryType;

pub const SECRET: &str = "weather-secret-0123456789";
pub const OTHER_SECRET: &str = "traffic-secret-9876543210";

/// A running `distributor serve`.
pub struct Server {
    child: Child,
    pub addr: String,
    pub spool: PathBuf,
    logs: Arc<Mutex<Vec<String>>>,
}

/// An HTTP reply.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("reply is not JSON ({e}): {}", self.body))
    }
    /// `error.kind` of an error reply.
    pub fn kind(&self) -> String {
        self.json()["error"]["kind"]
            .as_str()
            .unwrap_or_else(|| panic!("no error.kind in {}", self.body))
            .to_string()
    }
    pub fn message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
    pub fn expect(&self, status: u16) -> &Self {
        assert_eq!(self.status, status, "status; body: {}", self.body);
        self
    }
}

/// A config with one pipeline, its destinations (id, path under the env root) and tokens
/// (name, secret).
pub fn server_config(
    env: &Env,
    rel: &str,
    pipeline: &str,
    dests: &[(&str, &str)],
    tokens: &[(&str, &str)],
) -> PathBuf {
    let mut yaml = format!("version: 1\npipeline:\n  id: {pipeline}\n");
    if !tokens.is_empty() {
        yaml.push_str("server:\n  upload_tokens:\n");
        for (name, secret) in tokens {
            yaml.push_str(&format!(
                "    - name: {name}\n      sha256: \"{}\"\n",
                distributor::hash::sha256_hex(secret.as_bytes())
            ));
        }
    }
    yaml.push_str("destinations:\n");
    for (id, path) in dests {
        yaml.push_str(&format!(
            "  - id: {id}\n    path: {}\n",
            env.path(path).display()
        ));
    }
    env.config(rel, &yaml)
}

/// The usual world: pipeline `weather` (destination `latest` at `dest/latest`, token
/// `forecast-job`) and pipeline `traffic` (token `traffic-job`).
pub fn weather_and_traffic(env: &Env) -> (PathBuf, PathBuf) {
    let w = server_config(
        env,
        "weather.yaml",
        "weather",
        &[("latest", "dest/latest")],
        &[("forecast-job", SECRET)],
    );
    let t = server_config(
        env,
        "traffic.yaml",
        "traffic",
        &[("now", "dest/traffic")],
        &[("traffic-job", OTHER_SECRET)],
    );
    (w, t)
}

impl Server {
    /// Starts the server with `--config` for each config plus `extra`, on 127.0.0.1:0
    /// unless `extra` has `--listen`, with `--spool <root>/spool`; waits for its address.
    pub fn start(env: &Env, configs: &[&Path], extra: &[&str]) -> Server {
        let spool = env.path("spool");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_distributor"));
        cmd.arg("serve");
        for c in configs {
            cmd.arg("--config").arg(c);
        }
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.arg("--spool").arg(&spool).args(extra);
        cmd.env_clear()
            .env("HOME", env.path("home"))
            .env("USER", "tester")
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DISTRIBUTOR_JOURNAL", env.journal())
            .current_dir(&env.root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn distributor serve");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = Arc::clone(&logs);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["event"] == "listening"
                {
                    let _ = tx.send(v["address"].as_str().unwrap_or_default().to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "server did not start; stderr:\n{}",
                    logs.lock().unwrap().join("\n")
                );
            }
        };
        Server {
            child,
            addr,
            spool,
            logs,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into()
    }

    /// POSTs `body` to `path` with an optional bearer token and content type.
    pub fn post_raw(
        &self,
        path: &str,
        token: Option<&str>,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Resp {
        let mut req = Self::agent().post(self.url(path));
        if let Some(t) = token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        if let Some(ct) = content_type {
            req = req.header("Content-Type", ct);
        }
        let mut resp = req.send(body).expect("POST");
        Resp {
            status: resp.status().as_u16(),
            body: resp.body_mut().read_to_string().expect("reply body"),
        }
    }

    /// POSTs a tar to `/v1/pipelines/{pipeline}/bundles{query}` with the weather token.
    pub fn upload(&self, pipeline: &str, query: &str, tar: &[u8]) -> Resp {
        self.post_raw(
            &format!("/v1/pipelines/{pipeline}/bundles{query}"),
            Some(SECRET),
            Some("application/x-tar"),
            tar,
        )
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> Resp {
        let mut req = Self::agent().get(self.url(path));
        if let Some(t) = token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.call().expect("GET");
        Resp {
            status: resp.status().as_u16(),
            body: resp.body_mut().read_to_string().expect("reply body"),
        }
    }

    /// Every stderr line so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// Request log lines (parsed) so far.
    pub fn request_logs(&self) -> Vec<Value> {
        self.log_lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == "request")
            .collect()
    }

    /// Waits until the request log has `n` lines (the line is written as the reply goes).
    pub fn wait_for_request_logs(&self, n: usize) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let logs = self.request_logs();
            if logs.len() >= n || start.elapsed() > Duration::from_secs(10) {
                return logs;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM to this server (by its pid).
    pub fn signal_term(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -TERM failed");
    }

    /// Waits for the process to exit, at most `secs`.
    pub fn wait_exit(&mut self, secs: u64) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "server did not exit within {secs}s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal_term();
        self.wait_exit(30)
    }

    /// Entries left in the spool besides its lock file.
    pub fn spool_leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.spool)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n != ".distributor-serve.lock")
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A tar of a bundle directory's regular files (symlinks are left out: links travel in the
/// manifest), named relative to the directory.
pub fn bundle_tar(dir: &Path) -> Vec<u8> {
    let mut files = Vec::new();
    collect_files(dir, dir, &mut files);
    files.sort();
    let mut b = tar::Builder::new(Vec::new());
    for rel in files {
        b.append_path_with_name(dir.join(&rel), &rel)
            .expect("append");
    }
    b.into_inner().expect("tar")
}

fn collect_files(base: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            collect_files(base, &e.path(), out);
        } else if ft.is_file() {
            out.push(
                e.path()
                    .strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// One raw tar entry: name bytes exactly as given (no checks), type, content, link name.
pub struct RawEntry<'a> {
    pub name: &'a [u8],
    pub ty: EntryType,
    pub data: &'a [u8],
    pub link: &'a [u8],
}

pub fn file<'a>(name: &'a str, data: &'a [u8]) -> RawEntry<'a> {
    RawEntry {
        name: name.as_bytes(),
        ty: EntryType::Regular,
        data,
        link: b"",
    }
}

/// A tar of raw entries, written header by header so hostile names and types go through.
pub fn raw_tar(entries: &[RawEntry]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        {
            let old = h.as_old_mut();
            old.name[..e.name.len()].copy_from_slice(e.name);
            old.linkname[..e.link.len()].copy_from_slice(e.link);
        }
        h.set_entry_type(e.ty);
        h.set_size(e.data.len() as u64);
        h.set_mode(if e.ty == EntryType::Directory {
            0o755
        } else {
            0o644
        });
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        b.append(&h, e.data).expect("append raw entry");
    }
    b.into_inner().expect("tar")
}

/// The manifest of `files` (path, content) as JSON bytes.
pub fn manifest_json(id: &str, created_at: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
    let outputs: Vec<Value> = files
        .iter()
        .map(|(p, c)| {
            serde_json::json!({"path": p, "size": c.len(), "sha256": distributor::hash::sha256_hex(c)})
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "manifest_version": 1, "id": id, "created_at": created_at, "outputs": outputs,
    }))
    .unwrap()
}

/// A valid upload of `files` with a manifest, as raw entries plus `extra` entries after.
pub fn tar_with_manifest(
    id: &str,
    created_at: &str,
    files: &[(&str, &[u8])],
    extra: &[RawEntry],
) -> Vec<u8> {
    let manifest = manifest_json(id, created_at, files);
    let mut entries = vec![file("distributor-manifest.json", &manifest)];
    for (p, c) in files {
        entries.push(file(p, c));
    }
    for e in extra {
        entries.push(RawEntry {
            name: e.name,
            ty: e.ty,
            data: e.data,
            link: e.link,
        });
    }
    raw_tar(&entries)
}

/// Rows of the journal's `operations` view: (operation_id, actor, destination, status).
pub fn journal_operations(env: &Env) -> Vec<(String, String, String, String)> {
    let conn = rusqlite::Connection::open(env.journal()).expect("open journal");
    let mut st = conn
        .prepare(
            "SELECT operation_id, actor, destination_id, status FROM operations ORDER BY started_at",
        )
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

/// Every byte of the journal files (db, WAL) as lossy text, to search for secrets.
pub fn journal_bytes(env: &Env) -> String {
    let mut all = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let p = PathBuf::from(format!("{}{suffix}", env.journal().display()));
        if let Ok(b) = std::fs::read(p) {
            all.extend(b);
        }
    }
    String::from_utf8_lossy(&all).into_owned()
}

fn state_source_id(env: &Env, rel: &str) -> String {
    let state: Value =
        serde_json::from_str(&env.read(&format!("{rel}/.distributor.json"))).unwrap();
    state["source"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

// ---------------------------------------------------------------------------------------

#[test]
fn upload_publishes_and_journals_the_token_name_never_the_secret() {
    let env = Env::new();
    let (w, t) = weather_and_traffic(&env);
    let mut server = Server::start(&env, &[&w, &t], &[]);
    let tar = tar_with_manifest(
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("forecast.json", b"{}"), ("maps/temp.png", b"png")],
        &[],
    );
    let r = server.upload("weather", "", &tar);
    r.expect(200);
    let report = r.json();
    assert_eq!(report["report_version"], 1);
    assert_eq!(report["dry_run"], false);
    assert_eq!(report["pipeline_id"], "weather");
    assert_eq!(report["destinations"][0]["decision"], "create");
    assert_eq!(report["destinations"][0]["status"], "applied");
    assert!(report.get("error").is_none(), "{report}");
    assert_eq!(env.read("dest/latest/forecast.json"), "{}");
    assert_eq!(env.read("dest/latest/maps/temp.png"), "png");
    assert_eq!(state_source_id(&env, "dest/latest"), "tomorrow");

    let ops = journal_operations(&env);
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].0, report["destinations"][0]["operation_id"]);
    assert_eq!(ops[0].1, "token:forecast-job");
    assert_eq!(ops[0].3, "applied");

    let logs = server.wait_for_request_logs(1);
    let line = &logs[0];
    assert_eq!(line["method"], "POST");
    assert_eq!(line["path"], "/v1/pipelines/weather/bundles");
    assert_eq!(line["status"], 200);
    assert_eq!(line["pipeline"], "weather");
    assert_eq!(line["token"], "forecast-job");
    assert_eq!(line["destinations"][0]["destination"], "latest");
    assert_eq!(line["destinations"][0]["decision"], "create");
    assert!(line["duration_ms"].is_number());
    assert_eq!(server.stop().code(), Some(0));
    assert!(!server.log_lines().join("\n").contains(SECRET));
    assert!(!journal_bytes(&env).contains(SECRET));
    assert!(server.spool_leftovers().is_empty());
}

#[test]
fn gzip_upload_of_a_bundle_made_by_distributor_manifest_publishes_links() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let dir = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("forecast.json", "{}"), ("maps/temp.png", "png")],
        &[("current.png", "maps/temp.png")],
    );
    let r = server.post_raw(
        "/v1/pipelines/weather/bundles",
        Some(SECRET),
        Some("application/gzip"),
        &gzip(&bundle_tar(&dir)),
    );
    r.expect(200);
    assert_eq!(
        r.json()["destinations"][0]["links"][0]["path"],
        "current.png"
    );
    assert_eq!(
        std::fs::read_link(env.path("dest/latest/current.png")).unwrap(),
        PathBuf::from("maps/temp.png")
    );
    // The same bundle again: unchanged, nothing journaled.
    let r = server.post_raw(
        "/v1/pipelines/weather/bundles",
        Some(SECRET),
        None,
        &bundle_tar(&dir),
    );
    r.expect(200);
    assert_eq!(r.json()["destinations"][0]["decision"], "unchanged");
    assert_eq!(journal_operations(&env).len(), 1);
}

#[test]
fn dry_run_plans_and_writes_nothing() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"a")], &[]);
    let r = server.upload("weather", "?dry_run=true", &tar);
    r.expect(200);
    let report = r.json();
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["destinations"][0]["status"], "planned");
    assert_eq!(report["destinations"][0]["decision"], "create");
    assert!(report["destinations"][0]["operation_id"].is_null());
    assert!(!env.exists("dest/latest"));
    assert!(journal_operations(&env).is_empty());
    // The real run's report matches the dry run's but for dry_run, status, operation id.
    let real = server.upload("weather", "?dry_run=false", &tar);
    real.expect(200);
    let mut a = report.clone();
    let mut b = real.json();
    for v in [&mut a, &mut b] {
        v["dry_run"] = Value::Null;
        v["destinations"][0]["status"] = Value::Null;
        v["destinations"][0]["operation_id"] = Value::Null;
    }
    assert_eq!(a, b);
}

#[test]
fn destination_parameter_selects_destinations_and_unknown_ones_are_refused() {
    let env = Env::new();
    let cfg = server_config(
        &env,
        "w.yaml",
        "weather",
        &[("a", "dest/a"), ("b", "dest/b")],
        &[("forecast-job", SECRET)],
    );
    let server = Server::start(&env, &[&cfg], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("x", b"x")], &[]);
    let r = server.upload("weather", "?destination=b", &tar);
    r.expect(200);
    assert_eq!(r.json()["destinations"].as_array().unwrap().len(), 1);
    assert!(env.exists("dest/b/x") && !env.exists("dest/a"));
    let r = server.upload("weather", "?destination=nope", &tar);
    r.expect(400);
    assert_eq!(r.kind(), "invalid_parameter");
    assert!(r.message().contains("'nope'") && r.message().contains("a, b"));
    assert!(
        !r.message().contains("w.yaml"),
        "no server paths: {}",
        r.message()
    );
}

#[test]
fn authentication_statuses() {
    let env = Env::new();
    let (w, t) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w, &t], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a", b"a")], &[]);
    let path = "/v1/pipelines/weather/bundles";
    let ct = Some("application/x-tar");
    let r = server.post_raw(path, None, ct, &tar);
    r.expect(401);
    assert_eq!(r.kind(), "unauthorized");
    server.post_raw(path, Some("wrong"), ct, &tar).expect(401);
    let r = server.post_raw(path, Some(OTHER_SECRET), ct, &tar);
    r.expect(403);
    assert_eq!(r.kind(), "forbidden");
    assert!(r.message().contains("traffic-job"));
    // Unknown pipeline: 404 for a valid token, 401 without one (no enumeration).
    let r = server.post_raw("/v1/pipelines/nope/bundles", Some(SECRET), ct, &tar);
    r.expect(404);
    assert_eq!(r.kind(), "unknown_pipeline");
    server
        .post_raw("/v1/pipelines/nope/bundles", None, ct, &tar)
        .expect(401);
    // A non-bearer scheme is not a token.
    let mut resp = Server::agent()
        .post(server.url(path))
        .header("Authorization", "Basic d2VhdGhlcjpzZWNyZXQ=")
        .send(&tar[..])
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert!(
        resp.body_mut()
            .read_to_string()
            .unwrap()
            .contains("unauthorized")
    );
    // The destinations view takes the same checks.
    server
        .get("/v1/pipelines/weather/destinations", None)
        .expect(401);
    server
        .get("/v1/pipelines/weather/destinations", Some(OTHER_SECRET))
        .expect(403);
    server.get("/v1/health", None).expect(200);
    assert!(!env.exists("dest/latest"));
    let logs = server.wait_for_request_logs(9);
    let forbidden = logs.iter().find(|l| l["status"] == 403).unwrap();
    assert_eq!(forbidden["token"], "traffic-job");
    let all = server.log_lines().join("\n");
    assert!(!all.contains(SECRET) && !all.contains(OTHER_SECRET) && !all.contains("d2Vh"));
}

#[test]
fn producers_cannot_choose_ownership_takeover_transfer_or_force() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a", b"a")], &[]);
    for q in [
        "?force=true",
        "?takeover=any_managed",
        "?on_conflict=replace",
        "?transfer.destination_newer=conflict",
        "?owner=weather/old",
        "?dry_run=true&force=1",
    ] {
        let r = server.upload("weather", q, &tar);
        r.expect(400);
        assert_eq!(r.kind(), "forbidden_parameter", "{q}");
    }
    let r = server.upload("weather", "?colour=red", &tar);
    r.expect(400);
    assert_eq!(r.kind(), "invalid_parameter");
    assert!(r.message().contains("dry_run and destination"));
    assert!(!env.exists("dest/latest"));
    assert!(journal_operations(&env).is_empty());
}

#[test]
fn conflict_is_409_with_the_report_and_writes_nothing() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    env.write("dest/latest/a.txt", "hand-made");
    let server = Server::start(&env, &[&w], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"new")], &[]);
    let r = server.upload("weather", "", &tar);
    r.expect(409);
    assert_eq!(r.kind(), "conflict");
    let report = r.json();
    assert_eq!(report["destinations"][0]["decision"], "conflict");
    assert_eq!(
        report["destinations"][0]["conflicts"][0]["kind"],
        "unmanaged_content"
    );
    assert_eq!(env.read("dest/latest/a.txt"), "hand-made");
    // A dry run reaches the same verdict.
    server.upload("weather", "?dry_run=true", &tar).expect(409);
    assert!(journal_operations(&env).is_empty());
}

#[test]
fn pending_recovery_is_423() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let first = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    server.upload("weather", "", &first).expect(200);
    env.write("dest/latest/.distributor-staging/leftover/x", "half-done");
    let second = tar_with_manifest("t", "2026-12-02T07:00:00Z", &[("a.txt", b"two")], &[]);
    let r = server.upload("weather", "", &second);
    r.expect(423);
    assert_eq!(r.kind(), "recovery_required");
    assert!(
        r.message().contains("distributor recover"),
        "{}",
        r.message()
    );
    assert_eq!(r.json()["destinations"][0]["status"], "failed");
    assert_eq!(env.read("dest/latest/a.txt"), "one");
}

#[test]
fn an_unusable_journal_is_500() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", env.journal().display()));
    }
    std::fs::create_dir_all(env.journal()).unwrap();
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    let r = server.upload("weather", "", &tar);
    r.expect(500);
    assert_eq!(r.kind(), "journal");
    assert!(!env.exists("dest/latest/a.txt"));
    assert!(server.spool_leftovers().is_empty());
}

#[test]
fn destinations_view_summarises_state() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let r = server.get("/v1/pipelines/weather/destinations", Some(SECRET));
    r.expect(200);
    assert_eq!(r.json()["destinations"][0]["state"], "absent");
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    server.upload("weather", "", &tar).expect(200);
    let v = server
        .get("/v1/pipelines/weather/destinations", Some(SECRET))
        .json();
    assert_eq!(v["pipeline_id"], "weather");
    let d = &v["destinations"][0];
    assert_eq!(d["destination_id"], "latest");
    assert_eq!(d["state"], "valid");
    assert_eq!(d["owners"][0]["owner"], "weather/latest");
    assert_eq!(d["owners"][0]["source"]["id"], "t");
    assert_eq!(d["owners"][0]["outputs"], 1);
    assert_eq!(d["recovery_pending"], false);
}

#[test]
fn unknown_routes_and_methods_answer_json_errors() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let r = server.get("/v2/whatever", None);
    r.expect(404);
    assert_eq!(r.kind(), "not_found");
    let r = server.get("/v1/pipelines/weather/bundles", Some(SECRET));
    r.expect(405);
    assert_eq!(r.kind(), "method_not_allowed");
    let h = server.get("/v1/health", None);
    h.expect(200);
    assert_eq!(h.json()["status"], "ok");
}

#[test]
fn refuses_to_start_on_bad_setups() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let open = server_config(&env, "open.yaml", "open", &[("d", "dest/open")], &[]);
    let twin = server_config(
        &env,
        "twin.yaml",
        "weather",
        &[("d", "dest/twin")],
        &[("x", "y")],
    );
    let bad = env.config(
        "bad.yaml",
        "version: 1\npipeline:\n  id: Bad Id\ndestinations: []\n",
    );
    let serve = |args: &[&str]| {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0", "--spool"];
        let spool = env.path("spool");
        all.push(spool.to_str().unwrap());
        all.extend_from_slice(args);
        env.run(&all)
    };
    let r = serve(&["--config", open.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stderr.contains("no upload token") && r.stderr.contains("--allow-unauthenticated"));
    let r = serve(&[
        "--config",
        w.to_str().unwrap(),
        "--config",
        twin.to_str().unwrap(),
    ]);
    r.expect_code(2);
    assert!(r.stderr.contains("already served"), "{}", r.stderr);
    let r = serve(&["--config", bad.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stderr.contains("bad.yaml"), "{}", r.stderr);
    let r = env.run(&[
        "serve",
        "--config",
        open.to_str().unwrap(),
        "--allow-unauthenticated",
        "--listen",
        "0.0.0.0:0",
    ]);
    r.expect_code(2);
    assert!(r.stderr.contains("loopback"), "{}", r.stderr);
    let r = env.run(&[
        "serve",
        "--config",
        w.to_str().unwrap(),
        "--listen",
        "nonsense",
    ]);
    r.expect_code(2);
    assert!(r.stderr.contains("--listen nonsense"), "{}", r.stderr);
    // A second server on the same spool is refused.
    let _first = Server::start(&env, &[&w], &[]);
    let r = serve(&["--config", w.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stderr.contains("in use"), "{}", r.stderr);
}

#[test]
fn allow_unauthenticated_serves_tokenless_pipelines_on_loopback() {
    let env = Env::new();
    let open = server_config(&env, "open.yaml", "open", &[("d", "dest/open")], &[]);
    let server = Server::start(&env, &[&open], &["--allow-unauthenticated"]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    let r = server.post_raw(
        "/v1/pipelines/open/bundles",
        None,
        Some("application/x-tar"),
        &tar,
    );
    r.expect(200);
    assert_eq!(journal_operations(&env)[0].1, "unauthenticated");
    // A wrong token is still refused rather than ignored.
    server
        .post_raw("/v1/pipelines/open/bundles", Some("guess"), None, &tar)
        .expect(401);
    server
        .post_raw("/v1/pipelines/nope/bundles", None, None, &tar)
        .expect(404);
}

/// Sends a request head and `first` body bytes over a raw socket, returns the stream.
pub fn raw_request(addr: &str, head: &str, first: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(first).unwrap();
    s.flush().unwrap();
    s
}

/// Reads an HTTP/1.1 response (status and body, Content-Length framed) from `s`.
pub fn read_response(s: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).expect("read response");
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                let status = text[9..12].parse().unwrap_or(0);
                return (status, text[end + 4..end + 4 + len].to_string());
            }
        }
    }
    panic!(
        "connection closed before a full response: {}",
        String::from_utf8_lossy(&buf)
    );
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

#[test]
fn sigterm_during_an_upload_finishes_it_and_exits_0() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let mut server = Server::start(&env, &[&w], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    let head = format!(
        "POST /v1/pipelines/weather/bundles HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {SECRET}\r\nContent-Type: application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n",
        server.addr
    );
    let (first, rest) = tar.split_at(1024);
    let mut s = raw_request(&server.addr, &head, &chunk(first));
    std::thread::sleep(Duration::from_millis(300));
    server.signal_term();
    // The server stops accepting: new connections are refused once it has seen the signal.
    let start = Instant::now();
    while TcpStream::connect(&server.addr).is_ok() {
        assert!(start.elapsed() < Duration::from_secs(10), "still accepting");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.child_running(), "exited with an upload in flight");
    s.write_all(&chunk(rest)).unwrap();
    s.write_all(b"0\r\n\r\n").unwrap();
    let (status, body) = read_response(&mut s);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"applied\""), "{body}");
    drop(s);
    assert_eq!(server.wait_exit(30).code(), Some(0));
    assert_eq!(env.read("dest/latest/a.txt"), "one");
    assert!(server.spool_leftovers().is_empty());
    let lines = server.log_lines().join("\n");
    assert!(lines.contains("\"shutdown\"") && lines.contains("\"stopped\""));
}

impl Server {
    pub fn child_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}
