//! A real S3 protocol server for tests: one `moto_server` (moto's standalone server, a
//! Python package) per test process on a free 127.0.0.1 port, and a plain-HTTP client
//! for it (ureq) to set up buckets and objects and to look at them afterwards, without
//! going through distributor.
//!
//! Finding the server, in this order:
//! 1. `$DISTRIBUTOR_MOTO_SERVER` (an explicit path: a wrong one is a failure);
//! 2. `target/ci-venv/bin/moto_server` under the crate root (where `.ci/run` installs it);
//! 3. `moto_server` on `PATH`.
//!
//! When none is found, a test that starts with [`require_moto!`] prints a loud
//! `SKIPPED: ...` line to the real stderr (not captured by the test harness) and returns;
//! with `DISTRIBUTOR_REQUIRE_S3` set (CI sets it) it fails instead.
//!
//! moto does not check request signatures, so the client sends a fixed, unsigned
//! `Authorization` header: without one moto treats a request as anonymous and answers
//! 403 to reads of (private) objects.
//!
//! The server is killed when the test process ends (`PR_SET_PDEATHSIG`, armed from a
//! thread that lives as long as the process). Its log is `moto-server-<pid>.log` under
//! `CARGO_TARGET_TMPDIR`.
//!
//! Race tests use a second server, [`moto_serial`] ([`require_serial_moto!`]): the same
//! moto application served one request at a time (`tests/fixtures/moto_serial.py`, run by
//! the Python beside the moto_server found above), so that a conditional write's
//! check-then-write is atomic as on S3. `moto_server` itself serves each request on a
//! thread, and moto checks `If-None-Match`/`If-Match` and then writes without a lock:
//! concurrent conditional writes of one key can all succeed there (see
//! `tests/test_s3_hosts.rs`). Its log is `moto-serial-<pid>.log`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// Path of the moto_server to use, overriding the search.
pub const MOTO_SERVER_VAR: &str = "DISTRIBUTOR_MOTO_SERVER";
/// When set (to anything but empty or `0`), a missing moto_server fails the test instead
/// of skipping it.
pub const REQUIRE_VAR: &str = "DISTRIBUTOR_REQUIRE_S3";
/// How long moto_server may take to answer after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The `Authorization` header sent with every request: moto wants one (it does not check
/// it), distributor's real client signs its own.
const AUTHORIZATION: &str = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
     SignedHeaders=host, Signature=0000000000000000000000000000000000000000000000000000000000000000";

/// Starts the test with the shared moto server, or returns from it (with a loud
/// `SKIPPED` line) when there is none and `DISTRIBUTOR_REQUIRE_S3` is not set.
/// Evaluates to `&'static Moto`.
macro_rules! require_moto {
    () => {
        match $crate::common::s3::moto() {
            Some(m) => m,
            None => {
                $crate::common::s3::announce_skip();
                return;
            }
        }
    };
}
pub(crate) use require_moto;

/// [`require_moto!`] for the serial server ([`moto_serial`]): for tests whose requests
/// race, since only there are conditional writes atomic. Evaluates to `&'static Moto`.
macro_rules! require_serial_moto {
    () => {
        match $crate::common::s3::moto_serial() {
            Some(m) => m,
            None => {
                $crate::common::s3::announce_skip();
                return;
            }
        }
    };
}
pub(crate) use require_serial_moto;

/// The running moto server.
pub struct Moto {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub endpoint: String,
    pub port: u16,
    /// The server's stdout and stderr.
    pub log: PathBuf,
    /// The moto_server binary found (for the serial server: the one whose Python runs
    /// `tests/fixtures/moto_serial.py`).
    pub binary: PathBuf,
    /// True for the server that serves one request at a time ([`moto_serial`]).
    pub serial: bool,
    agent: ureq::Agent,
}

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    /// As S3 sends it, quotes included: `"<md5 hex>"` for a plain PUT.
    pub etag: String,
}

/// What HEAD tells about an object. `etag` keeps its quotes, like [`ObjectInfo::etag`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadInfo {
    pub size: u64,
    pub etag: String,
    pub content_type: Option<String>,
    pub cache_control: Option<String>,
    /// The `Last-Modified` header as sent (an HTTP date, second precision).
    pub last_modified: Option<String>,
}

/// A reply from [`Moto::raw`].
#[derive(Debug)]
pub struct S3Reply {
    pub status: u16,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl S3Reply {
    /// The first header of that name (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The `<Code>` of an S3 error body.
    pub fn error_code(&self) -> Option<String> {
        xml_elements(&self.text(), "Code").into_iter().next()
    }
}

/// Which of the two shared servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `moto_server` as installed: a thread per request.
    Threaded,
    /// `tests/fixtures/moto_serial.py`: one request at a time.
    Serial,
}

type Shared = OnceLock<Result<Option<Moto>, String>>;
static MOTO: Shared = OnceLock::new();
static MOTO_SERIAL: Shared = OnceLock::new();

fn shared(cell: &'static Shared, kind: Kind) -> Option<&'static Moto> {
    match cell.get_or_init(|| start(kind)) {
        Ok(m) => m.as_ref(),
        Err(e) => panic!("{e}"),
    }
}

/// The moto server shared by the whole test process, started on first use. `None` when
/// no moto_server is installed and `DISTRIBUTOR_REQUIRE_S3` is not set; panics when it
/// is set, or when a moto_server is there but does not start.
pub fn moto() -> Option<&'static Moto> {
    shared(&MOTO, Kind::Threaded)
}

/// The serial moto server shared by the whole test process (one request at a time, so
/// conditional writes are atomic), started on first use; found, skipped or failed like
/// [`moto()`]. Its buckets are its own: not those of [`moto()`].
pub fn moto_serial() -> Option<&'static Moto> {
    shared(&MOTO_SERIAL, Kind::Serial)
}

/// Prints the loud skip line for the current test to the real stderr (the test harness
/// captures `eprintln!` of passing tests, not this).
pub fn announce_skip() {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    // One write, so that parallel tests' lines do not interleave.
    let line = format!(
        "\n*** SKIPPED: {test} needs moto_server (pip install 'moto[server]'; see .ci/run): \
         none via ${MOTO_SERVER_VAR}, target/ci-venv/bin/moto_server or PATH. \
         {REQUIRE_VAR}=1 makes this a failure. ***\n"
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn required() -> bool {
    std::env::var(REQUIRE_VAR).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Where moto_server is, or why it is not there.
fn find_binary() -> Result<Option<PathBuf>, String> {
    if let Some(p) = std::env::var_os(MOTO_SERVER_VAR).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if is_executable(&p) {
            Ok(Some(p))
        } else {
            Err(format!(
                "${MOTO_SERVER_VAR} is {} but that is not an executable file \
                 (pip install 'moto[server]'; see .ci/run)",
                p.display()
            ))
        };
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-venv/bin/moto_server");
    if is_executable(&venv) {
        return Ok(Some(venv));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    Ok(std::env::split_paths(&path)
        .map(|d| d.join("moto_server"))
        .find(|p| is_executable(p)))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// How to run a server: a program and its first arguments (`-H`, `-p` follow).
struct Launch {
    program: PathBuf,
    args: Vec<PathBuf>,
}

/// The script the serial server runs.
fn serial_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/moto_serial.py")
}

/// The Python that runs `moto_server` (and so can import moto): `python` beside it (a
/// venv's bin), else the interpreter its `#!` line names.
fn python_of(moto_server: &Path) -> Result<PathBuf, String> {
    let beside = moto_server.with_file_name("python");
    if is_executable(&beside) {
        return Ok(beside);
    }
    let text = std::fs::read(moto_server).map_err(|e| format!("{}: {e}", moto_server.display()))?;
    let first = text.split(|&b| b == b'\n').next().unwrap_or_default();
    let shebang = String::from_utf8_lossy(first);
    shebang
        .strip_prefix("#!")
        .and_then(|l| l.split_whitespace().next())
        .map(PathBuf::from)
        .filter(|p| is_executable(p))
        .ok_or_else(|| {
            format!(
                "no Python to run {} with: none beside moto_server {} and its first line names none",
                serial_script().display(),
                moto_server.display()
            )
        })
}

fn start(kind: Kind) -> Result<Option<Moto>, String> {
    let binary = match find_binary()? {
        Some(b) => b,
        None if required() => {
            return Err(format!(
                "{REQUIRE_VAR} is set but no moto_server was found (${MOTO_SERVER_VAR}, \
                 {}/target/ci-venv/bin/moto_server, PATH): pip install 'moto[server]' \
                 (see .ci/run)",
                env!("CARGO_MANIFEST_DIR")
            ));
        }
        None => return Ok(None),
    };
    let (launch, name) = match kind {
        Kind::Threaded => (
            Launch {
                program: binary.clone(),
                args: Vec::new(),
            },
            "moto-server",
        ),
        Kind::Serial => (
            Launch {
                program: python_of(&binary)?,
                args: vec![serial_script()],
            },
            "moto-serial",
        ),
    };
    let log =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}.log", std::process::id()));
    // A port taken between the probe below and moto's bind makes moto exit: try again.
    let mut failures = Vec::new();
    for _ in 0..3 {
        match start_on_free_port(&launch, &log) {
            Ok(port) => {
                return Ok(Some(Moto {
                    endpoint: format!("http://127.0.0.1:{port}"),
                    port,
                    log,
                    binary,
                    serial: kind == Kind::Serial,
                    agent: agent(Duration::from_secs(120)),
                }));
            }
            Err(e) => failures.push(e),
        }
    }
    Err(format!(
        "{name} ({}{}) did not start: {}\n--- {} ---\n{}",
        launch.program.display(),
        launch
            .args
            .iter()
            .map(|a| format!(" {}", a.display()))
            .collect::<String>(),
        failures.join("; "),
        log.display(),
        std::fs::read_to_string(&log).unwrap_or_default()
    ))
}

/// Starts the server on a free port; the port once it answers.
fn start_on_free_port(launch: &Launch, log: &Path) -> Result<u16, String> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&launch.program);
    cmd.args(&launch.args)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .env("PYTHONUNBUFFERED", "1");
    // Settings meant for real AWS or for another moto must not change this one.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("AWS_") || k.starts_with("MOTO_") {
            cmd.env_remove(&*k);
        }
    }
    let parent = rustix::process::getpid();
    // SAFETY: between fork and exec the closure only makes two system calls and may
    // exit; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The parent may have died before the signal was armed.
            if rustix::process::getppid() != Some(parent) {
                std::process::exit(1);
            }
            Ok(())
        });
    }

    // The death signal fires when the *thread* that forked the child ends, and test
    // threads end with their test: fork from a thread that lives as long as the child,
    // and records how it ended.
    let exited: Arc<Mutex<Option<String>>> = Arc::default();
    let (tx, rx) = mpsc::channel();
    {
        let exited = exited.clone();
        std::thread::Builder::new()
            .name(format!("moto-server-{port}"))
            .spawn(move || match cmd.spawn() {
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                }
                Ok(mut child) => {
                    let _ = tx.send(Ok(child.id()));
                    let status = child.wait();
                    *exited.lock().unwrap() = Some(format!("{status:?}"));
                }
            })
            .map_err(|e| e.to_string())?;
    }
    let pid = rx
        .recv()
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot run {}: {e}", launch.program.display()))?;

    let endpoint = format!("http://127.0.0.1:{port}");
    let poll = agent(Duration::from_secs(2));
    let started = Instant::now();
    loop {
        if let Some(status) = exited.lock().unwrap().clone() {
            return Err(format!("it exited ({status}) on port {port}"));
        }
        let answer = poll
            .get(format!("{endpoint}/"))
            .header("Authorization", AUTHORIZATION)
            .call();
        if let Ok(r) = answer
            && r.status() == 200
        {
            break;
        }
        if started.elapsed() > START_TIMEOUT {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            return Err(format!(
                "it did not answer on port {port} within {START_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(port)
}

/// Percent-encodes everything but RFC 3986's unreserved characters, and `/` when
/// `keep_slash` (for object keys in a path).
pub fn percent_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Replaces XML's five named entities and numeric character references, in one pass.
pub fn xml_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let end = rest
            .find(';')
            .unwrap_or_else(|| panic!("unterminated XML entity in {s:?}"));
        let entity = &rest[1..end];
        let c = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = entity
                    .strip_prefix("#x")
                    .or_else(|| entity.strip_prefix("#X"))
                {
                    u32::from_str_radix(hex, 16).ok()
                } else {
                    entity.strip_prefix('#').and_then(|d| d.parse().ok())
                };
                code.and_then(char::from_u32)
                    .unwrap_or_else(|| panic!("unknown XML entity &{entity}; in {s:?}"))
            }
        };
        out.push(c);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The unescaped text of every `<tag>…</tag>` (and `<tag/>`, as empty) directly in `xml`,
/// in order. Enough for S3's flat replies; not a general XML parser.
pub fn xml_elements(xml: &str, tag: &str) -> Vec<String> {
    let (open, close, empty) = (format!("<{tag}>"), format!("</{tag}>"), format!("<{tag}/>"));
    let mut out = Vec::new();
    let mut rest = xml;
    loop {
        let o = rest.find(&open);
        let e = rest.find(&empty);
        match (o, e) {
            (Some(o), e) if e.is_none_or(|e| o < e) => {
                let body = &rest[o + open.len()..];
                let c = body
                    .find(&close)
                    .unwrap_or_else(|| panic!("no {close} in {xml}"));
                out.push(xml_unescape(&body[..c]));
                rest = &body[c + close.len()..];
            }
            (_, Some(e)) => {
                out.push(String::new());
                rest = &rest[e + empty.len()..];
            }
            _ => return out,
        }
    }
}

/// The raw text of the first `<tag>…</tag>`, if any (not unescaped: for nesting).
fn xml_block<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&close)?;
    Some(&xml[start..start + len])
}

impl Moto {
    /// `endpoint/bucket/key` with the key percent-encoded (slashes kept).
    pub fn object_url(&self, bucket: &str, key: &str) -> String {
        format!("{}/{bucket}/{}", self.endpoint, percent_encode(key, true))
    }

    /// Any request, for what the helpers below do not cover (conditional writes,
    /// checksums, ...). `path_and_query` starts with `/`. Never panics on a status.
    pub fn raw(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> S3Reply {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path_and_query}", self.endpoint))
            .header("Authorization", AUTHORIZATION);
        let has_content_type = headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
        if !body.is_empty() && !has_content_type {
            // Without one the server may take the body for a form.
            req = req.header("Content-Type", "application/octet-stream");
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let answer = if body.is_empty() && method != "PUT" && method != "POST" {
            self.agent.run(req.body(()).expect("request"))
        } else {
            self.agent.run(req.body(body.to_vec()).expect("request"))
        };
        let mut resp = answer.unwrap_or_else(|e| panic!("{method} {path_and_query}: {e}"));
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = if method == "HEAD" {
            Vec::new()
        } else {
            resp.body_mut()
                .with_config()
                .limit(u64::MAX)
                .read_to_vec()
                .unwrap_or_else(|e| panic!("{method} {path_and_query}: reading the body: {e}"))
        };
        S3Reply {
            status: resp.status().as_u16(),
            headers,
            body,
        }
    }

    /// `raw` on one object.
    pub fn raw_object(
        &self,
        method: &str,
        bucket: &str,
        key: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> S3Reply {
        let path = format!("/{bucket}/{}", percent_encode(key, true));
        self.raw(method, &path, headers, body)
    }

    /// Creates a bucket (panics unless S3 says 200).
    pub fn create_bucket(&self, name: &str) {
        let r = self.raw("PUT", &format!("/{name}"), &[], &[]);
        assert_eq!(r.status, 200, "create bucket {name}: {}", r.text());
    }

    /// Creates and names a bucket no other call of this process gets.
    pub fn fresh_bucket(&self) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("test-{}-{n}", std::process::id());
        self.create_bucket(&name);
        name
    }

    /// One ListObjectsV2 page: its objects and the continuation token of the next one.
    pub fn list_page(
        &self,
        bucket: &str,
        prefix: &str,
        max_keys: Option<u32>,
        continuation: Option<&str>,
    ) -> (Vec<ObjectInfo>, Option<String>) {
        let mut q = format!(
            "/{bucket}?list-type=2&prefix={}",
            percent_encode(prefix, false)
        );
        if let Some(m) = max_keys {
            q.push_str(&format!("&max-keys={m}"));
        }
        if let Some(t) = continuation {
            q.push_str(&format!("&continuation-token={}", percent_encode(t, false)));
        }
        let r = self.raw("GET", &q, &[], &[]);
        assert_eq!(r.status, 200, "list {bucket}/{prefix}: {}", r.text());
        let xml = r.text();
        assert!(
            xml.contains("<ListBucketResult"),
            "not a ListBucketResult: {xml}"
        );
        let mut objects = Vec::new();
        let mut rest = xml.as_str();
        while let Some(block) = xml_block(rest, "Contents") {
            let one = |tag: &str| {
                xml_elements(block, tag)
                    .into_iter()
                    .next()
                    .unwrap_or_else(|| panic!("no <{tag}> in <Contents>{block}</Contents>"))
            };
            objects.push(ObjectInfo {
                key: one("Key"),
                size: one("Size").parse().expect("<Size>"),
                etag: one("ETag"),
            });
            let end = rest.find("</Contents>").unwrap() + "</Contents>".len();
            rest = &rest[end..];
        }
        let truncated = xml_elements(&xml, "IsTruncated")
            .first()
            .map(String::as_str)
            == Some("true");
        let next = xml_elements(&xml, "NextContinuationToken")
            .into_iter()
            .next();
        assert_eq!(
            truncated,
            next.is_some(),
            "IsTruncated and NextContinuationToken disagree: {xml}"
        );
        (objects, next)
    }

    /// Every page of a listing (`max_keys` per page, S3's 1000 when `None`).
    pub fn list_pages(
        &self,
        bucket: &str,
        prefix: &str,
        max_keys: Option<u32>,
    ) -> Vec<Vec<ObjectInfo>> {
        let mut pages = Vec::new();
        let mut token = None;
        loop {
            let (objects, next) = self.list_page(bucket, prefix, max_keys, token.as_deref());
            pages.push(objects);
            match next {
                Some(t) => token = Some(t),
                None => return pages,
            }
        }
    }

    /// Every object under `prefix` (a plain string prefix, not a folder), in key order,
    /// following continuation tokens.
    pub fn list(&self, bucket: &str, prefix: &str) -> Vec<ObjectInfo> {
        self.list_pages(bucket, prefix, None).concat()
    }

    /// The object's content, `None` when there is no such key.
    pub fn get(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let r = self.raw_object("GET", bucket, key, &[], &[]);
        match r.status {
            200 => Some(r.body),
            404 => None,
            s => panic!("GET {bucket}/{key}: {s} {}", r.text()),
        }
    }

    /// Writes the object (unconditionally); returns its ETag, quotes included.
    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8]) -> String {
        let r = self.raw_object(
            "PUT",
            bucket,
            key,
            &[("Content-Type", "application/octet-stream")],
            bytes,
        );
        assert_eq!(r.status, 200, "PUT {bucket}/{key}: {}", r.text());
        r.header("etag")
            .unwrap_or_else(|| panic!("PUT {bucket}/{key}: no ETag"))
            .to_string()
    }

    /// Deletes the object (no error when there is none).
    pub fn delete(&self, bucket: &str, key: &str) {
        let r = self.raw_object("DELETE", bucket, key, &[], &[]);
        assert!(
            r.status == 204 || r.status == 200,
            "DELETE {bucket}/{key}: {} {}",
            r.status,
            r.text()
        );
    }

    /// HEAD of the object, `None` when there is no such key.
    pub fn head(&self, bucket: &str, key: &str) -> Option<HeadInfo> {
        let r = self.raw_object("HEAD", bucket, key, &[], &[]);
        match r.status {
            200 => {}
            404 => return None,
            s => panic!("HEAD {bucket}/{key}: {s}"),
        }
        let h = |n: &str| r.header(n).map(str::to_string);
        Some(HeadInfo {
            size: h("content-length")
                .and_then(|l| l.parse().ok())
                .unwrap_or_else(|| panic!("HEAD {bucket}/{key}: no Content-Length")),
            etag: h("etag").unwrap_or_else(|| panic!("HEAD {bucket}/{key}: no ETag")),
            content_type: h("content-type"),
            cache_control: h("cache-control"),
            last_modified: h("last-modified"),
        })
    }

    /// Every object under `prefix`: key → (ETag, content). Two snapshots are equal when
    /// the objects are byte for byte the same.
    pub fn snapshot(&self, bucket: &str, prefix: &str) -> BTreeMap<String, (String, Vec<u8>)> {
        self.list(bucket, prefix)
            .into_iter()
            .map(|o| {
                let content = self
                    .get(bucket, &o.key)
                    .unwrap_or_else(|| panic!("{bucket}/{} listed but gone", o.key));
                (o.key, (o.etag, content))
            })
            .collect()
    }
}

/// Variables [`apply_s3_env`] removes before it sets [`s3_env`]: every `AWS_*` variable
/// (among them AWS_ENDPOINT_URL, AWS_PROFILE, AWS_SESSION_TOKEN, AWS_CA_BUNDLE,
/// AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CONTAINER_CREDENTIALS_*), and these.
pub const S3_ENV_CLEARED: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// The environment a distributor process needs to reach moto: fixed credentials
/// (AWS_ACCESS_KEY_ID=test, AWS_SECRET_ACCESS_KEY=test, which moto accepts unchecked),
/// AWS_REGION=us-east-1, and NO_PROXY/no_proxy for the loopback addresses. It names no
/// endpoint: the destination's config does (`moto.endpoint`, with `allow_http: true`),
/// since an AWS_ENDPOINT_URL would override it.
///
/// With [`super::Env::run_env`] nothing else leaks in (it clears the environment); for a
/// `Command` of your own use [`apply_s3_env`].
pub fn s3_env(_moto: &Moto) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", "test".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
        ("NO_PROXY", "127.0.0.1,localhost".to_string()),
        ("no_proxy", "127.0.0.1,localhost".to_string()),
    ]
}

/// Removes from `cmd` every variable of [`S3_ENV_CLEARED`] and every `AWS_*` one, whether
/// it comes from this process or was set on `cmd`, then sets [`s3_env`].
pub fn apply_s3_env(cmd: &mut Command, moto: &Moto) {
    let inherited = std::env::vars_os().map(|(k, _)| k);
    let set: Vec<_> = cmd.get_envs().map(|(k, _)| k.to_os_string()).collect();
    for k in inherited.chain(set) {
        let name = k.to_string_lossy();
        if name.starts_with("AWS_") || S3_ENV_CLEARED.contains(&&*name) {
            cmd.env_remove(&k);
        }
    }
    for (k, v) in s3_env(moto) {
        cmd.env(k, v);
    }
}

/// A store that ignores conditional writes: `tests/fixtures/s3_ignoring_proxy.py` in front
/// of moto, forwarding every request unchanged but for the `If-None-Match` and `If-Match`
/// headers, which it drops. Runs on a free 127.0.0.1 port until dropped (killed then; it
/// also exits by itself when its stdin closes, should the test process die first).
pub struct IgnoringProxy {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub endpoint: String,
    /// One line per request: `METHOD PATH key=<signer or -> dropped=<header names or ->`.
    pub log: PathBuf,
}

impl Moto {
    /// The Python that runs moto_server (the one beside it), else `python3` on PATH.
    pub fn python(&self) -> PathBuf {
        self.binary
            .parent()
            .map(|d| d.join("python3"))
            .filter(|p| is_executable(p))
            .unwrap_or_else(|| PathBuf::from("python3"))
    }
}

impl IgnoringProxy {
    /// Starts a proxy in front of `moto`; its request log is `log`.
    pub fn start(moto: &Moto, log: &Path) -> IgnoringProxy {
        IgnoringProxy::launch(moto, log, &[])
    }

    /// The same proxy, dropping nothing: it only records each request's signer
    /// (`key=<access key id>/<region>/<service>` in its log), to see which credentials
    /// and region a run used.
    pub fn recording(moto: &Moto, log: &Path) -> IgnoringProxy {
        IgnoringProxy::launch(moto, log, &["--keep-conditions"])
    }

    fn launch(moto: &Moto, log: &Path, extra: &[&str]) -> IgnoringProxy {
        use std::io::BufRead;
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/s3_ignoring_proxy.py");
        let python = moto.python();
        let mut child = Command::new(&python)
            .arg(&script)
            .arg(&moto.endpoint)
            .arg(log)
            .args(extra)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("run {} {}: {e}", python.display(), script.display()));
        let mut line = String::new();
        let read =
            std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
        let port: u16 = match read.ok().and_then(|_| line.trim().parse().ok()) {
            Some(p) => p,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the ignoring proxy did not print its port (got {line:?})");
            }
        };
        IgnoringProxy {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            log: log.to_path_buf(),
        }
    }

    /// Every request forwarded so far, one line each.
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for IgnoringProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
