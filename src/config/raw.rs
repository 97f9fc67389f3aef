//! The config file as YAML holds it, before validation: the shapes serde reads (unknown
//! keys refused, each with what is accepted) and their defaults.

use super::{Id, Transfer, UploadToken, diagnose, guard, hooks, releases, s3};
use crate::error::{ConfigError, Result};
use crate::model::{Backend, PathMappingMode, ReconciliationMode, StateMode, TakeoverMode};
use serde::Deserialize;
use std::path::Path;

/// Reads the YAML into its raw shape; an error names the key path and what is accepted,
/// located by serde_yaml.
pub(super) fn read(text: &str, file: &Path) -> Result<RawConfig> {
    let de = serde_yaml::Deserializer::from_str(text);
    let raw = serde_path_to_error::deserialize(de).map_err(|e| {
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
    Ok(raw)
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with keys version, pipeline, source, journal, server, destinations"
)]
pub(super) struct RawConfig {
    pub(super) version: u32,
    pub(super) pipeline: RawPipeline,
    #[serde(default)]
    pub(super) source: Option<RawSource>,
    #[serde(default)]
    pub(super) journal: Option<RawJournal>,
    #[serde(default)]
    pub(super) server: Option<RawServer>,
    pub(super) destinations: Vec<RawDestination>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with keys id, hooks")]
pub(super) struct RawPipeline {
    pub(super) id: Id,
    #[serde(default)]
    pub(super) hooks: Option<hooks::RawHooks>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key path")]
pub(super) struct RawSource {
    #[serde(default)]
    pub(super) path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key path")]
pub(super) struct RawJournal {
    #[serde(default)]
    pub(super) path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key upload_tokens")]
pub(super) struct RawServer {
    #[serde(default)]
    pub(super) upload_tokens: Vec<UploadToken>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with keys id, backend, path, path_mapping, state, reconciliation, transfer, takeover, s3, releases, verify, guard, hooks"
)]
pub(super) struct RawDestination {
    pub(super) id: Id,
    #[serde(default = "default_backend")]
    pub(super) backend: Backend,
    pub(super) path: String,
    #[serde(default)]
    pub(super) path_mapping: RawMapping,
    #[serde(default)]
    pub(super) state: RawState,
    #[serde(default)]
    pub(super) reconciliation: RawReconciliation,
    #[serde(default)]
    pub(super) transfer: Transfer,
    #[serde(default)]
    pub(super) takeover: RawTakeover,
    #[serde(default)]
    pub(super) s3: Option<s3::RawS3>,
    #[serde(default)]
    pub(super) azure: Option<s3::azure::RawAzure>,
    /// `None`: absent; `Some(None)`: the key with no value (an empty block).
    #[serde(default, deserialize_with = "present")]
    pub(super) releases: Option<Option<releases::RawReleases>>,
    #[serde(default)]
    pub(super) verify: Option<RawVerify>,
    #[serde(default)]
    pub(super) guard: Option<guard::RawGuard>,
    #[serde(default)]
    pub(super) hooks: Option<hooks::RawHooks>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with key ignore")]
pub(super) struct RawVerify {
    #[serde(default)]
    pub(super) ignore: Vec<String>,
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
pub(super) struct RawMapping {
    #[serde(default = "default_mapping")]
    pub(super) mode: PathMappingMode,
    #[serde(default)]
    pub(super) template: Option<String>,
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
pub(super) struct RawState {
    #[serde(default = "default_state_mode")]
    pub(super) mode: StateMode,
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
pub(super) struct RawReconciliation {
    #[serde(default = "default_reconciliation")]
    pub(super) mode: ReconciliationMode,
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
pub(super) struct RawTakeover {
    #[serde(default = "default_takeover")]
    pub(super) mode: TakeoverMode,
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
