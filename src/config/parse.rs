//! Validating the config's raw shape into a [`Config`], one phase at a time: the version,
//! the paths written at the top level, the upload tokens, each destination, then what
//! destinations must not share.

use super::paths::{absolute_dir_of, check_path_text, local_path, normalize, relative_note};
use super::raw::{RawConfig, RawDestination, RawMapping};
use super::{
    Config, Destination, Hooks, PathMapping, PathTemplate, ReleaseSettings, S3Settings,
    UploadToken, diagnose, guard, hooks, releases, s3,
};
use crate::error::{ConfigError, Error, Result};
use crate::model::{Backend, PathMappingMode, StateMode};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Parses and validates config text as if read from `file`.
pub(super) fn parse(text: &str, file: &Path) -> Result<Config> {
    let raw = super::raw::read(text, file)?;
    let mut reading = Reading {
        text,
        file,
        base: PathBuf::new(),
        relative_paths: Vec::new(),
    };
    if raw.version != 1 {
        return Err(reading.err(
            "version",
            format!("unsupported version {}, accepted: 1", raw.version),
        ));
    }
    reading.base = absolute_dir_of(file)?;
    let RawConfig {
        pipeline,
        source,
        journal,
        server,
        destinations: raw_destinations,
        ..
    } = raw;
    let source_path = reading.top_level_path("source.path", source.and_then(|s| s.path))?;
    let journal_path = reading.top_level_path("journal.path", journal.and_then(|j| j.path))?;
    let upload_tokens = server.map(|s| s.upload_tokens).unwrap_or_default();
    reading.check_upload_tokens(&upload_tokens)?;
    if raw_destinations.is_empty() {
        return Err(reading.err(
            "destinations",
            "at least one destination is required".into(),
        ));
    }
    let pipeline_hooks = hooks::settings("pipeline.hooks", pipeline.hooks.unwrap_or_default())
        .map_err(|(k, m)| reading.err(&k, m))?;
    let mut ids = BTreeMap::new();
    let mut destinations = Vec::with_capacity(raw_destinations.len());
    for (i, d) in raw_destinations.into_iter().enumerate() {
        let key = format!("destinations[{i}]");
        if let Some(first) = ids.insert(d.id.0.clone(), i) {
            return Err(reading.duplicate_id(&key, &d.id.0, first));
        }
        destinations.push(reading.destination(&key, d, &pipeline.id.0, &pipeline_hooks)?);
    }
    reading.check_shared(&destinations)?;
    Ok(Config {
        file: file.to_path_buf(),
        pipeline_id: pipeline.id.0,
        source_path,
        journal_path,
        upload_tokens,
        destinations,
        relative_paths: reading.relative_paths,
    })
}

/// The config being read: its text and file, for errors that say where a key is written,
/// and the paths written relative to the file's directory.
struct Reading<'a> {
    text: &'a str,
    file: &'a Path,
    /// The config file's directory, absolute: what relative paths resolve against.
    base: PathBuf,
    /// Key path and text of each path written relative, in file order.
    relative_paths: Vec<(String, String)>,
}

impl Reading<'_> {
    /// Where the value at a key path is written: ` at line L column C`, as serde_yaml says
    /// it, for the errors found after deserialization too.
    fn at(&self, key: &str) -> String {
        diagnose::locate(self.text, key)
            .map(|(line, column)| format!(" at line {line} column {column}"))
            .unwrap_or_default()
    }

    /// The error for the value at `key`.
    fn err(&self, key: &str, message: String) -> Error {
        ConfigError::Key {
            file: self.file.to_path_buf(),
            key: key.to_string(),
            message,
            at: self.at(key),
        }
        .into()
    }

    /// A path resolved against the config file's directory.
    fn resolve(&self, p: &str) -> PathBuf {
        normalize(&self.base.join(p))
    }

    /// Remembers a path written relative, for the messages about it.
    fn note_relative(&mut self, key: &str, text: &str) {
        if Path::new(text).is_relative() {
            self.relative_paths
                .push((key.to_string(), text.to_string()));
        }
    }

    /// `source.path` or `journal.path`: checked text, resolved.
    fn top_level_path(&mut self, key: &str, text: Option<String>) -> Result<Option<PathBuf>> {
        if let Some(p) = &text {
            check_path_text(p).map_err(|m| self.err(key, m))?;
            self.note_relative(key, p);
        }
        Ok(text.map(|p| self.resolve(&p)))
    }

    /// `server.upload_tokens`: printable, unique names and a sha256 each.
    fn check_upload_tokens(&self, tokens: &[UploadToken]) -> Result<()> {
        let mut names = BTreeSet::new();
        for (i, t) in tokens.iter().enumerate() {
            let key = format!("server.upload_tokens[{i}]");
            if t.name.is_empty() || t.name.len() > 128 || t.name.chars().any(|c| c.is_control()) {
                return Err(self.err(
                    &format!("{key}.name"),
                    "a token name must be 1 to 128 printable characters".into(),
                ));
            }
            if !names.insert(t.name.clone()) {
                return Err(self.err(
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
                return Err(self.err(
                    &format!("{key}.sha256"),
                    "accepted: 64 lowercase hex characters, the sha256 of the bearer token: compute it with `printf %s \"$TOKEN\" | sha256sum` and copy the first field".into(),
                ));
            }
        }
        Ok(())
    }

    /// The error for a destination id already taken by `destinations[first]`, located at
    /// both.
    fn duplicate_id(&self, key: &str, id: &str, first: usize) -> Error {
        let (this, first) = (format!("{key}.id"), format!("destinations[{first}].id"));
        ConfigError::Key {
            file: self.file.to_path_buf(),
            message: format!(
                "duplicate destination id '{id}'{}; {first}{} has it already; each destination needs its own id",
                self.at(&this),
                self.at(&first)
            ),
            key: this,
            at: String::new(),
        }
        .into()
    }

    /// One destination, at key path `key` (`destinations[i]`).
    fn destination(
        &mut self,
        key: &str,
        d: RawDestination,
        pipeline_id: &str,
        pipeline_hooks: &Hooks,
    ) -> Result<Destination> {
        if let Some(block) = misplaced_block(&d) {
            return Err(self.err(
                &format!("{key}.{block}"),
                format!(
                    "applies to backend {block} only; this destination is backend {} (set backend: {block}, or remove the {block} block)",
                    d.backend
                ),
            ));
        }
        let (path, s3, path_origin) = self.location(key, d.backend, &d.path, d.s3, d.azure)?;
        let path_mapping = self.path_mapping(key, d.path_mapping, pipeline_id, &d.id.0)?;
        let releases = self.releases(key, d.releases, d.backend, &path_mapping, &path)?;
        let verify_ignore = crate::globs::PathGlobs::new(&d.verify.unwrap_or_default().ignore)
            .map_err(|m| self.err(&format!("{key}.verify.ignore"), m.to_string()))?;
        let guard =
            guard::settings(key, d.guard.unwrap_or_default()).map_err(|(k, m)| self.err(&k, m))?;
        let hooks = hooks::settings(&format!("{key}.hooks"), d.hooks.unwrap_or_default())
            .map_err(|(k, m)| self.err(&k, m))?;
        Ok(Destination {
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
        })
    }

    /// Where a destination is: its path (a local directory, or the `s3://` / `az://` URL
    /// of a bucket and prefix), its object-store settings, and how a relative local path
    /// was resolved.
    fn location(
        &mut self,
        key: &str,
        backend: Backend,
        text: &str,
        s3_block: Option<s3::RawS3>,
        azure_block: Option<s3::azure::RawAzure>,
    ) -> Result<(PathBuf, Option<S3Settings>, Option<String>)> {
        let path_key = format!("{key}.path");
        match backend {
            Backend::Local => {
                let path =
                    local_path(text, |p| self.resolve(p)).map_err(|m| self.err(&path_key, m))?;
                let mut path_origin = None;
                if Path::new(text).is_relative() {
                    self.note_relative(&path_key, text);
                    path_origin = Some(relative_note(&path_key, text, self.file));
                }
                Ok((path, None, path_origin))
            }
            Backend::S3 => {
                let (bucket, prefix) = s3::parse_path(text).map_err(|m| self.err(&path_key, m))?;
                let path = PathBuf::from(format!("s3://{bucket}/{prefix}"));
                let settings = s3::settings(key, bucket, prefix, s3_block)
                    .map_err(|(k, m)| self.err(&k, m))?;
                Ok((path, Some(settings), None))
            }
            Backend::Azure => {
                let (container, prefix) =
                    s3::azure::parse_path(text).map_err(|m| self.err(&path_key, m))?;
                let path = PathBuf::from(format!("az://{container}/{prefix}"));
                let settings = s3::azure::settings(key, container, prefix, azure_block)
                    .map_err(|(k, m)| self.err(&k, m))?;
                Ok((path, Some(settings), None))
            }
        }
    }

    /// `path_mapping`: a template only with mode template, and one that renders safely.
    fn path_mapping(
        &self,
        key: &str,
        raw: RawMapping,
        pipeline_id: &str,
        destination_id: &str,
    ) -> Result<PathMapping> {
        let template_key = format!("{key}.path_mapping.template");
        Ok(match (raw.mode, raw.template) {
            (PathMappingMode::Template, Some(t)) => {
                let t = PathTemplate::parse(&t).map_err(|m| self.err(&template_key, m))?;
                check_template_renders(&t, pipeline_id, destination_id)
                    .map_err(|m| self.err(&template_key, m))?;
                PathMapping::Template(t)
            }
            (PathMappingMode::Template, None) => {
                return Err(self.err(
                    &template_key,
                    "required when path_mapping.mode is template".into(),
                ));
            }
            (_, Some(_)) => {
                return Err(self.err(
                    &template_key,
                    "only allowed when path_mapping.mode is template".into(),
                ));
            }
            (PathMappingMode::Fixed, None) => PathMapping::Fixed,
            (PathMappingMode::SourceId, None) => PathMapping::SourceId,
        })
    }

    /// The `releases:` block: not empty, and only on a local destination with fixed paths.
    fn releases(
        &self,
        key: &str,
        raw: Option<Option<releases::RawReleases>>,
        backend: Backend,
        path_mapping: &PathMapping,
        path: &Path,
    ) -> Result<Option<ReleaseSettings>> {
        let releases_key = format!("{key}.releases");
        match raw {
            None => Ok(None),
            Some(None) => Err(self.err(
                &releases_key,
                "is empty; accepted: a mapping with keys dir, keep, max_age, stage_max_age (releases: {keep: 3} for the defaults but keep), or no releases key at all".into(),
            )),
            Some(_) if backend.is_object_store() => Err(self.err(
                &releases_key,
                format!(
                    "applies to backend local only; an {backend} destination publishes in place (remove the releases block)"
                ),
            )),
            Some(_) if *path_mapping != PathMapping::Fixed => Err(self.err(
                &releases_key,
                format!(
                    "applies to path_mapping.mode fixed only; this destination maps paths by {} (set path_mapping.mode: fixed, or remove the releases block)",
                    path_mapping.mode()
                ),
            )),
            Some(Some(r)) => releases::settings(key, path, r, |p| self.resolve(p), check_path_text)
                .map(Some)
                .map_err(|(k, m)| self.err(&k, m)),
        }
    }

    /// What two destinations must not share: a releases directory for different paths, or
    /// one fixed path in one store when either owns it alone.
    fn check_shared(&self, destinations: &[Destination]) -> Result<()> {
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
                    return Err(self.err(
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
                    return Err(self.err(
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
        Ok(())
    }
}

/// The object-store block a destination's backend does not read (`s3:` on an azure
/// destination, either on a local one), if it has one.
fn misplaced_block(d: &RawDestination) -> Option<&'static str> {
    match d.backend {
        Backend::S3 => d.azure.is_some().then_some("azure"),
        Backend::Azure => d.s3.is_some().then_some("s3"),
        Backend::Local => {
            (d.s3.is_some().then_some("s3")).or_else(|| d.azure.is_some().then_some("azure"))
        }
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
