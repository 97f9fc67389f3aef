//! Pipeline configuration (SPEC §2): the YAML model, its defaults and its validation.
//!
//! Loading is all or nothing: a config with any unknown key, wrong type, bad enum value,
//! bad id or bad path is refused with an error naming the file, the key path, the line and
//! column where serde_yaml knows them, and what is accepted. Nothing here touches the
//! filesystem beyond reading the config file itself.

mod bounded;
mod diagnose;
mod guard;
mod hooks;
mod mapping;
mod releases;
mod s3;

pub use guard::{Guard, MaxDelete};
pub use hooks::{CREDENTIAL_VARS, Hook, Hooks};
pub use mapping::{PathTemplate, TemplatePart};
pub use releases::{
    ReleaseSettings, STAGE_MAX_AGE_DEFAULT, default_dir as default_releases_dir, parse_age,
};
pub use s3::{CacheRule, S3Settings};

use crate::error::{ConfigError, Error, Result};
use crate::model::{
    Backend, DestinationNewer, ID_RULE, OnConflict, PathMappingMode, ReconciliationMode,
    SameCreatedDigestMismatch, StateMode, TakeoverMode, is_valid_id,
};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// A validated pipeline or destination id; invalid ids fail during deserialization so the
/// error carries the YAML location.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Id(pub String);

impl TryFrom<String> for Id {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Self, String> {
        if is_valid_id(&s) {
            Ok(Id(s))
        } else {
            Err(format!("invalid id '{s}': accepted are {ID_RULE}"))
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with keys version, pipeline, source, journal, server, destinations"
)]
struct RawConfig {
    version: u32,
    pipeline: RawPipeline,
    #[serde(default)]
    source: Option<RawSource>,
    #[serde(default)]
    journal: Option<RawJournal>,
    #[serde(default)]
    server: Option<RawServer>,
    destinations: Vec<RawDestination>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with keys id, hooks")]
struct RawPipeline {
    id: Id,
    #[serde(default)]
    hooks: Option<hooks::RawHooks>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key path")]
struct RawSource {
    #[serde(default)]
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key path")]
struct RawJournal {
    #[serde(default)]
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key upload_tokens")]
struct RawServer {
    #[serde(default)]
    upload_tokens: Vec<UploadToken>,
}

/// A bearer token accepted by `distributor serve` for this pipeline.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with keys name, sha256")]
pub struct UploadToken {
    /// Name used in logs and the journal; never the secret.
    pub name: String,
    /// Lowercase hex sha256 of the bearer token.
    pub sha256: String,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with keys id, backend, path, path_mapping, state, reconciliation, transfer, takeover, s3, releases, verify, guard, hooks"
)]
struct RawDestination {
    id: Id,
    #[serde(default = "default_backend")]
    backend: Backend,
    path: String,
    #[serde(default)]
    path_mapping: RawMapping,
    #[serde(default)]
    state: RawState,
    #[serde(default)]
    reconciliation: RawReconciliation,
    #[serde(default)]
    transfer: Transfer,
    #[serde(default)]
    takeover: RawTakeover,
    #[serde(default)]
    s3: Option<s3::RawS3>,
    #[serde(default)]
    azure: Option<s3::azure::RawAzure>,
    /// `None`: absent; `Some(None)`: the key with no value (an empty block).
    #[serde(default, deserialize_with = "present")]
    releases: Option<Option<releases::RawReleases>>,
    #[serde(default)]
    verify: Option<RawVerify>,
    #[serde(default)]
    guard: Option<guard::RawGuard>,
    #[serde(default)]
    hooks: Option<hooks::RawHooks>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key ignore")]
struct RawVerify {
    #[serde(default)]
    ignore: Vec<String>,
}

/// A key that is there, whatever its value (null included).
fn present<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

fn default_backend() -> Backend {
    Backend::Local
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with keys mode, template")]
struct RawMapping {
    #[serde(default = "default_mapping")]
    mode: PathMappingMode,
    #[serde(default)]
    template: Option<String>,
}

fn default_mapping() -> PathMappingMode {
    PathMappingMode::Fixed
}

impl Default for RawMapping {
    fn default() -> Self {
        RawMapping {
            mode: PathMappingMode::Fixed,
            template: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key mode")]
struct RawState {
    #[serde(default = "default_state_mode")]
    mode: StateMode,
}

fn default_state_mode() -> StateMode {
    StateMode::SingleOwner
}

impl Default for RawState {
    fn default() -> Self {
        RawState {
            mode: StateMode::SingleOwner,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key mode")]
struct RawReconciliation {
    #[serde(default = "default_reconciliation")]
    mode: ReconciliationMode,
}

fn default_reconciliation() -> ReconciliationMode {
    ReconciliationMode::Replace
}

impl Default for RawReconciliation {
    fn default() -> Self {
        RawReconciliation {
            mode: ReconciliationMode::Replace,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key mode")]
struct RawTakeover {
    #[serde(default = "default_takeover")]
    mode: TakeoverMode,
}

fn default_takeover() -> TakeoverMode {
    TakeoverMode::SamePipeline
}

impl Default for RawTakeover {
    fn default() -> Self {
        RawTakeover {
            mode: TakeoverMode::SamePipeline,
        }
    }
}

/// Transfer policy of a destination (SPEC §2, §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with keys destination_newer, same_created_digest_mismatch, on_conflict"
)]
pub struct Transfer {
    /// What to do when the destination holds a newer source.
    #[serde(default = "default_destination_newer")]
    pub destination_newer: DestinationNewer,
    /// What to do when source id and time match but the digest does not.
    #[serde(default = "default_same_created")]
    pub same_created_digest_mismatch: SameCreatedDigestMismatch,
    /// What `--force` may do.
    #[serde(default = "default_on_conflict")]
    pub on_conflict: OnConflict,
}

fn default_destination_newer() -> DestinationNewer {
    DestinationNewer::Skip
}
fn default_same_created() -> SameCreatedDigestMismatch {
    SameCreatedDigestMismatch::Conflict
}
fn default_on_conflict() -> OnConflict {
    OnConflict::Replace
}

impl Default for Transfer {
    fn default() -> Self {
        Transfer {
            destination_newer: DestinationNewer::Skip,
            same_created_digest_mismatch: SameCreatedDigestMismatch::Conflict,
            on_conflict: OnConflict::Replace,
        }
    }
}

/// How the bundle path is derived from the destination path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMapping {
    /// The destination path is the bundle path.
    Fixed,
    /// `<path>/<source id>`.
    SourceId,
    /// `<path>/<rendered template>`.
    Template(PathTemplate),
}

impl PathMapping {
    /// The `path_mapping.mode` value.
    pub fn mode(&self) -> PathMappingMode {
        match self {
            PathMapping::Fixed => PathMappingMode::Fixed,
            PathMapping::SourceId => PathMappingMode::SourceId,
            PathMapping::Template(_) => PathMappingMode::Template,
        }
    }
}

/// One validated destination.
#[derive(Debug, Clone)]
pub struct Destination {
    /// Destination id.
    pub id: String,
    /// Storage backend.
    pub backend: Backend,
    /// Absolute, lexically normalised destination path.
    pub path: PathBuf,
    /// Path mapping.
    pub path_mapping: PathMapping,
    /// `state.mode`.
    pub state_mode: StateMode,
    /// `reconciliation.mode`.
    pub reconciliation: ReconciliationMode,
    /// `transfer.*`.
    pub transfer: Transfer,
    /// `takeover.mode`.
    pub takeover: TakeoverMode,
    /// The object-store settings: the bucket, key prefix and `s3:` block when `backend` is
    /// s3; the container, key prefix and `azure:` block (with [`S3Settings::azure`]) when it
    /// is azure; `None` exactly for local destinations.
    pub s3: Option<S3Settings>,
    /// The `releases:` block (SPEC §15): `path` is a symlink swapped to each release.
    pub releases: Option<ReleaseSettings>,
    /// `verify.ignore` (SPEC §16): unrecorded paths `verify` does not report.
    pub verify_ignore: crate::globs::PathGlobs,
    /// `guard:` (SPEC §19): the deletion guards.
    pub guard: Guard,
    /// `hooks:` (SPEC §19): the pipeline's, then the destination's own.
    pub hooks: Hooks,
    /// How a `path` written relative was resolved, for messages about it:
    /// `destinations[0].path 'public/site' is taken relative to the config file
    /// /etc/distributor/weather.yaml`; `None` for an absolute path (or an s3 URL).
    pub path_origin: Option<String>,
}

/// A validated pipeline configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub file: PathBuf,
    /// Pipeline id.
    pub pipeline_id: String,
    /// `source.path`, resolved against the config file's directory.
    pub source_path: Option<PathBuf>,
    /// `journal.path`, resolved against the config file's directory.
    pub journal_path: Option<PathBuf>,
    /// `server.upload_tokens`.
    pub upload_tokens: Vec<UploadToken>,
    /// Destinations, in file order.
    pub destinations: Vec<Destination>,
    /// The paths written relative to the config file (`source.path`, `journal.path`,
    /// `destinations[i].path`): key path and text as written, in file order.
    pub relative_paths: Vec<(String, String)>,
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(file: &Path) -> Result<Config> {
        if let Ok(m) = std::fs::metadata(file)
            && m.len() > crate::limits::CONFIG_BYTES
        {
            return Err(ConfigError::TooLarge {
                file: file.to_path_buf(),
                size: m.len(),
                limit: crate::limits::CONFIG_BYTES,
            }
            .into());
        }
        let text = std::fs::read_to_string(file).map_err(|error| ConfigError::Unreadable {
            file: file.to_path_buf(),
            error,
        })?;
        Config::parse(&text, file)
    }

    /// Parses and validates config text as if read from `file` (relative paths resolve
    /// against `file`'s directory).
    pub fn parse(text: &str, file: &Path) -> Result<Config> {
        // Where the value at a key path is written: ` at line L column C`, as serde_yaml
        // says it, for the errors found after deserialization too.
        let at = |key: &str| {
            diagnose::locate(text, key)
                .map(|(line, column)| format!(" at line {line} column {column}"))
                .unwrap_or_default()
        };
        let err = |key: &str, message: String| -> Error {
            ConfigError::Key {
                file: file.to_path_buf(),
                key: key.to_string(),
                message,
                at: at(key),
            }
            .into()
        };
        let de = serde_yaml::Deserializer::from_str(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let key = if path == "." {
                "(top level)".to_string()
            } else {
                path
            };
            // Already located by serde_yaml: not looked up again.
            ConfigError::Key {
                file: file.to_path_buf(),
                message: diagnose::explain(&key, e.into_inner().to_string(), text),
                key,
                at: String::new(),
            }
        })?;
        if raw.version != 1 {
            return Err(err(
                "version",
                format!("unsupported version {}, accepted: 1", raw.version),
            ));
        }
        let base = absolute_dir_of(file)?;
        let resolve = |p: &str| normalize(&base.join(p));
        let mut relative_paths = Vec::new();
        let mut note_relative = |key: &str, text: &str| {
            if Path::new(text).is_relative() {
                relative_paths.push((key.to_string(), text.to_string()));
            }
        };
        let source_path = raw.source.and_then(|s| s.path);
        if let Some(p) = &source_path {
            check_path_text(p).map_err(|m| err("source.path", m))?;
            note_relative("source.path", p);
        }
        let source_path = source_path.map(|p| resolve(&p));
        let journal_path = raw.journal.and_then(|j| j.path);
        if let Some(p) = &journal_path {
            check_path_text(p).map_err(|m| err("journal.path", m))?;
            note_relative("journal.path", p);
        }
        let journal_path = journal_path.map(|p| resolve(&p));
        let upload_tokens = raw.server.map(|s| s.upload_tokens).unwrap_or_default();
        let mut token_names = BTreeSet::new();
        for (i, t) in upload_tokens.iter().enumerate() {
            let key = format!("server.upload_tokens[{i}]");
            if t.name.is_empty() || t.name.len() > 128 || t.name.chars().any(|c| c.is_control()) {
                return Err(err(
                    &format!("{key}.name"),
                    "a token name must be 1 to 128 printable characters".into(),
                ));
            }
            if !token_names.insert(t.name.clone()) {
                return Err(err(
                    &format!("{key}.name"),
                    format!("duplicate token name '{}'", t.name),
                ));
            }
            if t.sha256.len() != 64
                || !t
                    .sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err(err(
                    &format!("{key}.sha256"),
                    "accepted: 64 lowercase hex characters, the sha256 of the bearer token: compute it with `printf %s \"$TOKEN\" | sha256sum` and copy the first field".into(),
                ));
            }
        }
        if raw.destinations.is_empty() {
            return Err(err(
                "destinations",
                "at least one destination is required".into(),
            ));
        }
        let pipeline_hooks =
            hooks::settings("pipeline.hooks", raw.pipeline.hooks.unwrap_or_default())
                .map_err(|(k, m)| err(&k, m))?;
        let mut ids = std::collections::BTreeMap::new();
        let mut destinations = Vec::with_capacity(raw.destinations.len());
        for (i, d) in raw.destinations.into_iter().enumerate() {
            let key = format!("destinations[{i}]");
            if let Some(first) = ids.insert(d.id.0.clone(), i) {
                let (this, first) = (format!("{key}.id"), format!("destinations[{first}].id"));
                return Err(ConfigError::Key {
                    file: file.to_path_buf(),
                    message: format!(
                        "duplicate destination id '{}'{}; {first}{} has it already; each destination needs its own id",
                        d.id.0,
                        at(&this),
                        at(&first)
                    ),
                    key: this,
                    at: String::new(),
                }
                .into());
            }
            let mut path_origin = None;
            let misplaced = match d.backend {
                Backend::S3 => d.azure.is_some().then_some("azure"),
                Backend::Azure => d.s3.is_some().then_some("s3"),
                Backend::Local => (d.s3.is_some().then_some("s3"))
                    .or_else(|| d.azure.is_some().then_some("azure")),
            };
            if let Some(block) = misplaced {
                return Err(err(
                    &format!("{key}.{block}"),
                    format!(
                        "applies to backend {block} only; this destination is backend {} (set backend: {block}, or remove the {block} block)",
                        d.backend
                    ),
                ));
            }
            let (path, s3) = match d.backend {
                Backend::Local => {
                    let path =
                        local_path(&d.path, resolve).map_err(|m| err(&format!("{key}.path"), m))?;
                    if Path::new(&d.path).is_relative() {
                        note_relative(&format!("{key}.path"), &d.path);
                        path_origin = Some(relative_note(&format!("{key}.path"), &d.path, file));
                    }
                    (path, None)
                }
                Backend::S3 => {
                    let (bucket, prefix) =
                        s3::parse_path(&d.path).map_err(|m| err(&format!("{key}.path"), m))?;
                    let path = PathBuf::from(format!("s3://{bucket}/{prefix}"));
                    let settings =
                        s3::settings(&key, bucket, prefix, d.s3).map_err(|(k, m)| err(&k, m))?;
                    (path, Some(settings))
                }
                Backend::Azure => {
                    let (container, prefix) = s3::azure::parse_path(&d.path)
                        .map_err(|m| err(&format!("{key}.path"), m))?;
                    let path = PathBuf::from(format!("az://{container}/{prefix}"));
                    let settings = s3::azure::settings(&key, container, prefix, d.azure)
                        .map_err(|(k, m)| err(&k, m))?;
                    (path, Some(settings))
                }
            };
            let path_mapping = match (d.path_mapping.mode, d.path_mapping.template) {
                (PathMappingMode::Template, Some(t)) => {
                    let t = PathTemplate::parse(&t)
                        .map_err(|m| err(&format!("{key}.path_mapping.template"), m))?;
                    check_template_renders(&t, &raw.pipeline.id.0, &d.id.0)
                        .map_err(|m| err(&format!("{key}.path_mapping.template"), m))?;
                    PathMapping::Template(t)
                }
                (PathMappingMode::Template, None) => {
                    return Err(err(
                        &format!("{key}.path_mapping.template"),
                        "required when path_mapping.mode is template".into(),
                    ));
                }
                (_, Some(_)) => {
                    return Err(err(
                        &format!("{key}.path_mapping.template"),
                        "only allowed when path_mapping.mode is template".into(),
                    ));
                }
                (PathMappingMode::Fixed, None) => PathMapping::Fixed,
                (PathMappingMode::SourceId, None) => PathMapping::SourceId,
            };
            let releases = match d.releases {
                None => None,
                Some(None) => {
                    return Err(err(
                        &format!("{key}.releases"),
                        "is empty; accepted: a mapping with keys dir, keep, max_age, stage_max_age (releases: {keep: 3} for the defaults but keep), or no releases key at all".into(),
                    ));
                }
                Some(_) if d.backend.is_object_store() => {
                    return Err(err(
                        &format!("{key}.releases"),
                        format!(
                            "applies to backend local only; an {} destination publishes in place (remove the releases block)",
                            d.backend
                        ),
                    ));
                }
                Some(_) if path_mapping != PathMapping::Fixed => {
                    return Err(err(
                        &format!("{key}.releases"),
                        format!(
                            "applies to path_mapping.mode fixed only; this destination maps paths by {} (set path_mapping.mode: fixed, or remove the releases block)",
                            path_mapping.mode()
                        ),
                    ));
                }
                Some(Some(r)) => Some(
                    releases::settings(&key, &path, r, resolve, check_path_text)
                        .map_err(|(k, m)| err(&k, m))?,
                ),
            };
            let verify_ignore = crate::globs::PathGlobs::new(&d.verify.unwrap_or_default().ignore)
                .map_err(|m| err(&format!("{key}.verify.ignore"), m.to_string()))?;
            let guard =
                guard::settings(&key, d.guard.unwrap_or_default()).map_err(|(k, m)| err(&k, m))?;
            let hooks = hooks::settings(&format!("{key}.hooks"), d.hooks.unwrap_or_default())
                .map_err(|(k, m)| err(&k, m))?;
            destinations.push(Destination {
                id: d.id.0,
                backend: d.backend,
                path,
                path_mapping,
                state_mode: d.state.mode,
                reconciliation: d.reconciliation.mode,
                transfer: d.transfer,
                takeover: d.takeover.mode,
                s3,
                releases,
                verify_ignore,
                guard,
                hooks: pipeline_hooks.then(&hooks),
                path_origin,
            });
        }
        for (i, a) in destinations.iter().enumerate() {
            for b in &destinations[..i] {
                let fixed =
                    a.path_mapping == PathMapping::Fixed && b.path_mapping == PathMapping::Fixed;
                let single = a.state_mode == StateMode::SingleOwner
                    || b.state_mode == StateMode::SingleOwner;
                // The same bucket and prefix behind different endpoints is different storage.
                let same_store = a.s3.as_ref().map(|s| (&s.endpoint, &s.azure))
                    == b.s3.as_ref().map(|s| (&s.endpoint, &s.azure));
                if let (Some(ra), Some(rb)) = (&a.releases, &b.releases)
                    && ra.dir == rb.dir
                    && a.path != b.path
                {
                    return Err(err(
                        &format!("destinations[{i}].releases.dir"),
                        format!(
                            "destinations '{}' and '{}' keep their releases in the same directory {} for different paths; each path needs its own releases.dir",
                            b.id,
                            a.id,
                            ra.dir.display()
                        ),
                    ));
                }
                if fixed && single && same_store && a.path == b.path {
                    return Err(err(
                        &format!("destinations[{i}].path"),
                        format!(
                            "destinations '{}' and '{}' resolve to the same fixed path {}; single_owner destinations need their own path (use state.mode: shared_root for both to share one)",
                            b.id,
                            a.id,
                            a.path.display()
                        ),
                    ));
                }
            }
        }
        Ok(Config {
            file: file.to_path_buf(),
            pipeline_id: raw.pipeline.id.0,
            source_path,
            journal_path,
            upload_tokens,
            destinations,
            relative_paths,
        })
    }

    /// How the path at `key` (`source.path`, `journal.path`, `destinations[0].path`) was
    /// resolved, when it was written relative: `source.path 'out/site' is taken relative to
    /// the config file /etc/distributor/weather.yaml`, for a message about that path.
    /// `None` when the config wrote it absolute (or not at all).
    pub fn path_origin(&self, key: &str) -> Option<String> {
        self.relative_paths
            .iter()
            .find(|(k, _)| k == key)
            .map(|(k, text)| relative_note(k, text, &self.file))
    }

    /// For `validate`, a path written relative: `key: <where it went>[ (does not exist
    /// yet)]` and, on the next line, the note saying it is relative to the config file.
    pub fn relative_path_lines(&self, key: &str, path: &Path) -> Option<String> {
        let origin = self.path_origin(key)?;
        let missing = if std::fs::symlink_metadata(path).is_err() {
            " (does not exist yet)"
        } else {
            ""
        };
        Some(format!("{key}: {}{missing}\n    {origin}", path.display()))
    }

    /// The destinations named by `--destination` flags, in the order given; all of them
    /// when none is named. An unknown id is a usage error listing the configured ones.
    pub fn select(&self, ids: &[String]) -> Result<Vec<&Destination>> {
        if ids.is_empty() {
            return Ok(self.destinations.iter().collect());
        }
        ids.iter()
            .map(|id| {
                self.destination(id).ok_or_else(|| {
                    let known: Vec<&str> =
                        self.destinations.iter().map(|d| d.id.as_str()).collect();
                    Error::Usage(format!(
                        "--destination {id}: no such destination in {}; configured: {}",
                        self.file.display(),
                        known.join(", ")
                    ))
                })
            })
            .collect()
    }

    /// The index of a destination in the file, for key paths in messages.
    pub fn index_of(&self, dest: &Destination) -> usize {
        self.destinations
            .iter()
            .position(|d| d.id == dest.id)
            .unwrap_or(0)
    }

    /// Finds a destination by id.
    pub fn destination(&self, id: &str) -> Option<&Destination> {
        self.destinations.iter().find(|d| d.id == id)
    }
}

/// A template whose literal text makes every rendering unsafe (`../{source_id}`,
/// `/abs/{source_id}`, `{source_id}/`, `.distributor{source_id}`) is a config error, found
/// at load rather than at the first publication. Ids render non-empty and without `/`, and a
/// `{created:<fmt>}` renders the same shape at any time, so one sample rendering settles it.
fn check_template_renders(
    t: &PathTemplate,
    pipeline_id: &str,
    destination_id: &str,
) -> std::result::Result<(), String> {
    let sample =
        chrono::DateTime::parse_from_rfc3339("2026-12-02T06:00:00Z").map_err(|e| e.to_string())?;
    t.render("source-id", sample, pipeline_id, destination_id)
        .map(|_| ())
}

/// A local destination path: checked text, resolved against the config file's directory,
/// never `/`. An `s3://` URL here is a forgotten `backend: s3`, not a directory named `s3:`.
fn local_path(
    text: &str,
    resolve: impl Fn(&str) -> PathBuf,
) -> std::result::Result<PathBuf, String> {
    check_path_text(text)?;
    for (scheme, backend) in [("s3://", "s3"), ("az://", "azure")] {
        if text.starts_with(scheme) {
            return Err(format!(
                "'{text}' is an object-store URL but this destination is backend local; set backend: {backend} for it"
            ));
        }
    }
    let path = resolve(text);
    if path.parent().is_none() {
        return Err(format!(
            "'{text}' resolves to '/', accepted: a directory below the root"
        ));
    }
    Ok(path)
}

/// `<key> '<text>' is taken relative to the config file <file>`: what a message about a
/// path written relative says, so that an operator who expected the working directory
/// sees where it went. `file` as the operator named it, made absolute.
fn relative_note(key: &str, text: &str, file: &Path) -> String {
    let file = match std::path::absolute(file) {
        Ok(abs) => normalize(&abs),
        Err(_) => file.to_path_buf(),
    };
    format!(
        "{key} '{text}' is taken relative to the config file {}",
        file.display()
    )
}

/// Refuses path text that would silently resolve somewhere unexpected: an empty path (the
/// config file's own directory) and `~` (a shell expansion distributor does not do; the
/// path would name a directory called `~` beside the config file).
fn check_path_text(p: &str) -> std::result::Result<(), String> {
    if p.is_empty() {
        return Err("must not be empty".into());
    }
    if p.contains('$') {
        return Err(format!(
            "'{p}': variables are not expanded (a '$' is taken literally, which is almost never meant); accepted: an absolute path, or one relative to this file"
        ));
    }
    if p == "~" || p.starts_with("~/") {
        return Err(format!(
            "'{p}': '~' is not expanded; accepted: an absolute path, or one relative to this file"
        ));
    }
    Ok(())
}

fn absolute_dir_of(file: &Path) -> Result<PathBuf> {
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io("read current directory for", dir, e))?
            .join(dir)
    };
    Ok(normalize(&abs))
}

/// Lexically normalises an absolute path: drops `.`, resolves `..` against the text.
pub(crate) fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests;
