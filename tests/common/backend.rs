//! One test body, every backend: a [`World`] is an [`Env`] plus the storage its
//! destinations live in — the temporary root for `Local`, a fresh moto bucket for `S3`, a
//! fresh Azurite container for `Azure` (object-store code paths, a Blob service) —
//! and knows how to name a destination there, put content there by hand, and read back
//! what is there. Paths are "storage paths": relative to the root (local) or keys in the
//! bucket (s3), so `dest/a.txt` is `<root>/dest/a.txt` or `s3://<bucket>/dest/a.txt`.
//!
//! [`per_backend!`] turns `fn name(b: Backend)` into the tests `name::local`, `name::s3`
//! and `name::azure`; the s3 one starts like every s3 test, with [`require_moto!`] (a loud
//! skip without moto_server, a failure when `DISTRIBUTOR_REQUIRE_S3` is set), the azure
//! one with `require_azurite!`.
//!
//! What differs by backend is only what SPEC §14 says differs: the destination keys, state
//! version (1 local, 2 s3 with an ETag per output), and that s3 has no symlinks, special
//! files or empty directories. A directory on s3 is a key prefix: it "exists" while some
//! key is under it.
//!
//! [`require_moto!`]: crate::common::s3::require_moto

use super::s3::{Moto, s3_env};
use super::{Env, F, Run};
use serde_json::Value;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Where destinations live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Local,
    S3,
    Azure,
}

impl Backend {
    /// The `state_version` this backend writes (SPEC §4, §14).
    pub fn state_version(self) -> u64 {
        match self {
            Backend::Local => 1,
            Backend::S3 | Backend::Azure => 2,
        }
    }

    /// Whether destinations are key prefixes in an object store (s3, azure).
    pub fn object_store(self) -> bool {
        self != Backend::Local
    }
}

/// For each `fn name(b: Backend)` listed, the tests `name::local` and `name::s3`.
macro_rules! per_backend {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn local() {
                super::$name($crate::common::backend::Backend::Local);
            }
            #[test]
            fn s3() {
                let _ = $crate::common::s3::require_moto!();
                super::$name($crate::common::backend::Backend::S3);
            }
            #[test]
            fn azure() {
                let _ = $crate::common::s3::require_azurite!();
                super::$name($crate::common::backend::Backend::Azure);
            }
        }
    )*};
}
pub(crate) use per_backend;

enum Storage {
    Local,
    S3 {
        moto: &'static Moto,
        bucket: String,
        vars: Vec<(&'static str, String)>,
    },
}

/// An [`Env`] and the storage of its destinations.
pub struct World {
    pub env: Env,
    pub backend: Backend,
    storage: Storage,
}

/// What a [`World::mark`] remembers: where the moto request log stood.
#[derive(Clone, Copy, Debug)]
pub struct Mark(u64);

impl World {
    /// A fresh world. For `S3` the caller has checked that moto runs (the tests
    /// [`per_backend!`] makes do).
    pub fn new(backend: Backend) -> World {
        let storage = match backend {
            Backend::Local => Storage::Local,
            Backend::S3 | Backend::Azure => {
                let moto = match backend {
                    Backend::Azure => {
                        super::s3::azurite().expect("an azure test starts with require_azurite!()")
                    }
                    _ => super::s3::moto().expect("an s3 test starts with require_moto!()"),
                };
                Storage::S3 {
                    moto,
                    bucket: moto.fresh_bucket(),
                    vars: s3_env(moto),
                }
            }
        };
        World {
            env: Env::new(),
            backend,
            storage,
        }
    }

    /// The destination keys (indented 4) that put a destination's bundle path at
    /// storage path `rel`: `path:` for local; `backend: s3`, `path: s3://...` and the
    /// `s3:` block reaching moto for s3.
    pub fn dest_keys(&self, rel: &str) -> String {
        format!(
            "    path: {}\n{}",
            self.bundle_path(rel),
            self.backend_keys()
        )
    }

    /// The keys besides `path:` that an s3 destination needs (empty for local); for
    /// configs that render the path themselves (`path_mapping`).
    pub fn backend_keys(&self) -> String {
        match &self.storage {
            Storage::Local => String::new(),
            Storage::S3 { moto, .. } => moto.backend_keys(),
        }
    }

    /// The bundle path at storage path `rel`, as the config and reports spell it.
    pub fn bundle_path(&self, rel: &str) -> String {
        match &self.storage {
            Storage::Local => self.env.path(rel).display().to_string(),
            Storage::S3 { moto, bucket, .. } => format!("{}{bucket}/{rel}", moto.scheme()),
        }
    }

    /// The storage path of a bundle path as reports spell it (the inverse of
    /// [`World::bundle_path`]).
    pub fn storage_path(&self, bundle_path: &str) -> String {
        let rel = match &self.storage {
            Storage::Local => bundle_path.strip_prefix(&format!("{}/", self.env.root.display())),
            Storage::S3 { moto, bucket, .. } => {
                bundle_path.strip_prefix(&format!("{}{bucket}/", moto.scheme()))
            }
        };
        rel.unwrap_or_else(|| panic!("{bundle_path} is not in this world"))
            .to_string()
    }

    /// A one-destination config like [`Env::simple_config`], the bundle path at storage
    /// path `path`.
    pub fn simple_config(
        &self,
        rel: &str,
        pipeline: &str,
        dest: &str,
        path: &str,
        extra: &str,
    ) -> PathBuf {
        let yaml = format!(
            "version: 1\npipeline:\n  id: {pipeline}\ndestinations:\n  - id: {dest}\n{}{extra}",
            self.dest_keys(path)
        );
        self.env.config(rel, &yaml)
    }

    /// A source bundle (always a local directory), as [`Env::bundle`].
    pub fn bundle(&self, rel: &str, id: &str, at: &str, files: &[F], links: &[F]) -> PathBuf {
        self.env.bundle(rel, id, at, files, links)
    }

    /// What the backend needs in the environment of a run (none for local storage).
    pub fn vars(&self) -> Vec<(&str, &str)> {
        match &self.storage {
            Storage::Local => Vec::new(),
            Storage::S3 { vars, .. } => vars.iter().map(|(k, v)| (*k, v.as_str())).collect(),
        }
    }

    /// Runs the binary with what the backend needs in the environment.
    pub fn run(&self, args: &[&str]) -> Run {
        match &self.storage {
            Storage::Local => self.env.run(args),
            Storage::S3 { vars, .. } => {
                let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
                self.env.run_env(args, &vars)
            }
        }
    }

    /// `publish --json --config C --source B` plus extra args.
    pub fn publish(&self, config: &Path, bundle: &Path, extra: &[&str]) -> Run {
        self.command("publish", config, Some(bundle), extra)
    }

    /// `plan --json --config C --source B` plus extra args.
    pub fn plan(&self, config: &Path, bundle: &Path, extra: &[&str]) -> Run {
        self.command("plan", config, Some(bundle), extra)
    }

    /// `verify --json --config C`.
    pub fn verify(&self, config: &Path) -> Run {
        self.command("verify", config, None, &[])
    }

    /// `status --json --config C`.
    pub fn status(&self, config: &Path) -> Run {
        self.command("status", config, None, &[])
    }

    fn command(&self, cmd: &str, config: &Path, bundle: Option<&Path>, extra: &[&str]) -> Run {
        let mut args = vec![cmd, "--json", "--config", config.to_str().unwrap()];
        if let Some(b) = bundle {
            args.extend_from_slice(&["--source", b.to_str().unwrap()]);
        }
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// Writes content by hand at storage path `rel` (unmanaged, or tampering).
    pub fn write(&self, rel: &str, content: &str) {
        match &self.storage {
            Storage::Local => {
                self.env.write(rel, content);
            }
            Storage::S3 { moto, bucket, .. } => {
                moto.put(bucket, rel, content.as_bytes());
            }
        }
    }

    /// Content at storage path `rel`, `None` when there is no file (object) there.
    pub fn get(&self, rel: &str) -> Option<String> {
        match &self.storage {
            Storage::Local => fs::read(self.env.path(rel)).ok(),
            Storage::S3 { moto, bucket, .. } => moto.get(bucket, rel),
        }
        .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Content at storage path `rel` (panics when there is none).
    pub fn read(&self, rel: &str) -> String {
        self.get(rel)
            .unwrap_or_else(|| panic!("{:?}: nothing at {rel}", self.backend))
    }

    /// Whether the bundle path at `bundle` holds an operation's staging.
    pub fn staging_left(&self, bundle: &str) -> bool {
        match &self.storage {
            Storage::Local => self.env.staging_left(bundle),
            Storage::S3 { .. } => self.exists(&format!("{bundle}/.distributor-staging")),
        }
    }

    /// True when a file stands at `rel`, or a directory: on s3, some key under `rel/`.
    pub fn exists(&self, rel: &str) -> bool {
        match &self.storage {
            Storage::Local => self.env.exists(rel),
            Storage::S3 { moto, bucket, .. } => {
                moto.head(bucket, rel).is_some()
                    || !moto
                        .list_page(bucket, &format!("{rel}/"), Some(1), None)
                        .0
                        .is_empty()
            }
        }
    }

    /// Removes the file (object) at `rel`.
    pub fn remove(&self, rel: &str) {
        match &self.storage {
            Storage::Local => fs::remove_file(self.env.path(rel)).unwrap(),
            Storage::S3 { moto, bucket, .. } => moto.delete(bucket, rel),
        }
    }

    /// Everything under storage path `rel`, sorted: path relative to `rel` and content
    /// (local: [`Env::snapshot`], with directories and symlinks; s3: every key, with its
    /// content and ETag, distributor's lease and staging included).
    pub fn snapshot(&self, rel: &str) -> Vec<(String, String)> {
        match &self.storage {
            Storage::Local => self.env.snapshot(rel),
            Storage::S3 { moto, bucket, .. } => moto
                .snapshot(bucket, &format!("{rel}/"))
                .into_iter()
                .map(|(k, (etag, c))| {
                    let k = k[rel.len() + 1..].to_string();
                    (k, format!("{etag} {}", String::from_utf8_lossy(&c)))
                })
                .collect(),
        }
    }

    /// The files a reader sees under storage path `rel`: path relative to `rel` and
    /// content; no directories, no lock, no staging.
    pub fn tree(&self, rel: &str) -> Vec<(String, String)> {
        let own = |p: &str| {
            p == ".distributor.lock"
                || p.ends_with("/.distributor.lock")
                || p.starts_with(".distributor-staging/")
                || p.contains("/.distributor-staging/")
        };
        match &self.storage {
            Storage::Local => self
                .env
                .snapshot(rel)
                .into_iter()
                .filter(|(p, c)| c != "<dir>" && !own(p))
                .collect(),
            Storage::S3 { moto, bucket, .. } => moto
                .snapshot(bucket, &format!("{rel}/"))
                .into_iter()
                .map(|(k, (_, c))| {
                    let k = k[rel.len() + 1..].to_string();
                    (k, String::from_utf8_lossy(&c).into_owned())
                })
                .filter(|(p, _)| !own(p))
                .collect(),
        }
    }

    /// The parsed `.distributor.json` of the bundle path at `bundle`.
    pub fn state(&self, bundle: &str) -> Value {
        serde_json::from_str(&self.read(&format!("{bundle}/.distributor.json")))
            .expect("state is JSON")
    }

    /// Replaces `.distributor.json` of the bundle path at `bundle` by hand.
    pub fn write_state(&self, bundle: &str, content: &str) {
        match &self.storage {
            Storage::Local => {
                self.env
                    .write_state_file(&format!("{bundle}/.distributor.json"), content.as_bytes());
            }
            Storage::S3 { .. } => self.write(&format!("{bundle}/.distributor.json"), content),
        }
    }

    /// The ETag the store lists for the object at `rel` (s3 only; `None` for local).
    pub fn etag(&self, rel: &str) -> Option<String> {
        match &self.storage {
            Storage::Local => None,
            Storage::S3 { moto, bucket, .. } => moto.head(bucket, rel).map(|h| h.etag),
        }
    }

    /// Where the storage's request log stands, for [`World::writes_since`].
    pub fn mark(&self) -> Mark {
        match &self.storage {
            Storage::Local => Mark(0),
            Storage::S3 { moto, .. } => {
                settle(moto);
                Mark(fs::metadata(&moto.log).map(|m| m.len()).unwrap())
            }
        }
    }

    /// Every write request (PUT, POST, DELETE) made to this world's bucket since `mark`,
    /// as moto logged it: `METHOD /bucket/key...`. moto logs a request before it answers
    /// it, so a finished run's requests are all there. Always empty for local, which has
    /// no request log: there a snapshot is the only evidence.
    pub fn writes_since(&self, mark: Mark) -> Vec<String> {
        let Storage::S3 { moto, bucket, .. } = &self.storage else {
            return Vec::new();
        };
        settle(moto);
        let mut log = fs::File::open(&moto.log).unwrap();
        log.seek(SeekFrom::Start(mark.0)).unwrap();
        let mut text = Vec::new();
        log.read_to_end(&mut text).unwrap();
        let text = strip_ansi(&String::from_utf8_lossy(&text));
        // Azurite names the account before the container.
        let base = moto
            .endpoint
            .split("://")
            .nth(1)
            .and_then(|h| h.find('/').map(|i| &h[i..]))
            .unwrap_or("");
        let mut writes = Vec::new();
        for line in text.lines() {
            // `127.0.0.1 - - [date] "PUT /bucket/key HTTP/1.1" 200 -`
            let Some(request) = line.split('"').nth(1) else {
                continue;
            };
            let mut words = request.split(' ');
            let (Some(method), Some(target)) = (words.next(), words.next()) else {
                continue;
            };
            let in_bucket = target
                .strip_prefix(base)
                .and_then(|t| t.strip_prefix('/'))
                .and_then(|t| t.strip_prefix(bucket.as_str()))
                .is_some_and(|rest| rest.starts_with('/') || rest.starts_with('?'));
            if in_bucket && matches!(method, "PUT" | "POST" | "DELETE") {
                writes.push(format!("{method} {target}"));
            }
        }
        writes
    }
}

/// Waits until every request answered so far is in the server's log. moto logs a request
/// before it answers it; Azurite logs it once the answer is sent, so a client may hear the
/// answer first: a request of its own is sent, and once its line is in the log, so are
/// those answered before it (Azurite writes them in order).
fn settle(server: &super::s3::S3Server) {
    if server.kind != super::s3::ServerKind::Azurite {
        return;
    }
    let token = format!("settle-{}", uuid::Uuid::new_v4().simple());
    let r = server.raw("GET", &format!("?comp=list&prefix={token}"), &[], &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let started = std::time::Instant::now();
    loop {
        if fs::read_to_string(&server.log).is_ok_and(|l| l.contains(&token)) {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "Azurite did not log {token} in {}",
            server.log.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The text without ANSI colour sequences (`ESC [ ... m`), which werkzeug puts around
/// the request of an error reply.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
