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
mod parse;
mod paths;
mod raw;
mod releases;
mod s3;

pub use guard::{Guard, MaxDelete};
pub use hooks::{CREDENTIAL_VARS, Hook, Hooks};
pub use mapping::{PathTemplate, TemplatePart};
pub use releases::{
    ReleaseSettings, STAGE_MAX_AGE_DEFAULT, default_dir as default_releases_dir, parse_age,
};
pub use s3::{CacheRule, S3Settings};

use paths::relative_note;

use crate::error::{ConfigError, Error, Result};
use crate::model::{
    Backend, DestinationNewer, ID_RULE, OnConflict, PathMappingMode, ReconciliationMode,
    SameCreatedDigestMismatch, StateMode, TakeoverMode, is_valid_id,
};
use serde::Deserialize;
use std::path::{Path, PathBuf};

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

/// A bearer token accepted by `distributor serve` for this pipeline.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with keys name, sha256")]
pub struct UploadToken {
    /// Name used in logs and the journal; never the secret.
    pub name: String,
    /// Lowercase hex sha256 of the bearer token.
    pub sha256: String,
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
        parse::parse(text, file)
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

#[cfg(test)]
mod tests;
