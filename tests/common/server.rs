//! A running `distributor serve` for tests: starts the real binary on 127.0.0.1:0, reads
//! its address from the `listening` log line, collects its JSON log lines, and talks to it
//! with a real HTTP client (ureq) or a raw socket; plus tar builders for well-formed and
//! hostile uploads, and journal readers.

use super::Env;
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
    pub child: Child,
    pub addr: String,
    /// The metrics listener's address (`--metrics-listen`, 127.0.0.1:0 unless the test
    /// says otherwise); `None` with `--no-metrics`.
    pub metrics_addr: Option<String>,
    pub spool: PathBuf,
    logs: Arc<Mutex<Vec<String>>>,
    /// The thread reading the server's stderr into `logs`; joined once the server exits,
    /// so that its last lines are in `logs` before anyone looks.
    reader: Option<std::thread::JoinHandle<()>>,
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
        Server::start_env(env, configs, extra, &[])
    }

    /// [`Server::start`] with `vars` added to the server's (otherwise cleared)
    /// environment, e.g. the credentials of an s3 destination.
    pub fn start_env(
        env: &Env,
        configs: &[&Path],
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Server {
        let spool = env.path("spool");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_distributor"));
        cmd.arg("serve");
        for c in configs {
            cmd.arg("--config").arg(c);
        }
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        // Tests run servers side by side: no fixed metrics port.
        if !extra.contains(&"--metrics-listen") && !extra.contains(&"--no-metrics") {
            cmd.args(["--metrics-listen", "127.0.0.1:0"]);
        }
        cmd.arg("--spool").arg(&spool).args(extra);
        cmd.env_clear()
            .env("HOME", env.path("home"))
            .env("USER", "tester")
            .env("DISTRIBUTOR_ACTOR", "tester")
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DISTRIBUTOR_JOURNAL", env.journal())
            .current_dir(&env.root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn distributor serve");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = Arc::clone(&logs);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["event"] == "listening"
                {
                    let _ = tx.send((
                        v["address"].as_str().unwrap_or_default().to_string(),
                        v["metrics_address"].as_str().map(str::to_string),
                    ));
                }
                sink.lock().unwrap().push(line);
            }
        });
        let (addr, metrics_addr) = match rx.recv_timeout(Duration::from_secs(30)) {
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
            metrics_addr,
            spool,
            logs,
            reader: Some(reader),
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
            if logs.len() >= n || start.elapsed() > Duration::from_secs(60) {
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
                // Its stderr is closed: the reader gets to the end of it.
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
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

pub fn state_source_id(env: &Env, rel: &str) -> String {
    let state: Value =
        serde_json::from_str(&env.read(&format!("{rel}/.distributor.json"))).unwrap();
    state["source"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string()
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

pub fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

impl Server {
    pub fn child_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}
