//! `distributor validate --config F [--source DIR]`.

use super::CommandOutput;
use crate::backend::{Kind, kind_of};
use crate::error::{ConfigError, Result};
use crate::source::Source;
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;

/// Check a config (and optionally a source bundle) without publishing.
#[derive(Debug, Args)]
pub(super) struct ValidateArgs {
    #[command(flatten)]
    pub pipeline: super::ConfigArgs,
    /// Also verify this source bundle: its manifest, and every output's size and sha256.
    #[arg(long, value_name = "DIR")]
    pub source: Option<PathBuf>,
}

/// Runs the command.
pub(super) fn run(a: ValidateArgs) -> Result<CommandOutput> {
    let config = a.pipeline.load()?;
    crate::hooks::check_programs(&config)?;
    for (i, d) in config.destinations.iter().enumerate() {
        let releases_dir = match kind_of(d) {
            Kind::ObjectStore(_) => continue,
            Kind::Releases(r) => Some(r.dir.as_path()),
            Kind::Local => None,
        };
        for (key, path) in [
            ("path", Some(d.path.as_path())),
            ("releases.dir", releases_dir),
        ] {
            if let Some(why) = path.and_then(crate::backend::local::blocked_by_file) {
                return Err(ConfigError::File {
                    file: config.file.clone(),
                    message: format!(
                        "destinations[{i}].{key} (destination {}): {why}; nothing can be published there (accepted: a directory, or a path whose existing ancestors are directories)",
                        d.id
                    ),
                }
                .into());
            }
        }
    }
    let mut out = format!(
        "config {}: valid, pipeline {}\n",
        config.file.display(),
        config.pipeline_id
    );
    for d in &config.destinations {
        let _ = writeln!(
            out,
            "  destination {}: {} ({}), state {}, reconciliation {}, takeover {}",
            d.id,
            d.path.display(),
            d.path_mapping.mode(),
            d.state_mode,
            d.reconciliation,
            d.takeover
        );
        if let Some(origin) = &d.path_origin {
            let _ = writeln!(out, "    {origin}");
        }
        // SPEC §14 accepts 10 to 3600, but a lease under 14 s leaves its holder no time
        // to renew (the amendments' deadline and 5 s floor): say so before a run refuses it.
        let block = d.backend.as_str();
        if let Kind::ObjectStore(s) = kind_of(d)
            && let Err(e) = crate::backend::s3::check_workable_for(block, s.lease_seconds)
        {
            let _ = writeln!(
                out,
                "    warning: accepted ({block}.lease_seconds takes 10 to 3600), but publish and recover refuse it: {e}"
            );
        }
    }
    // Paths written relative are taken relative to the config file, not the working
    // directory: say where each one went.
    for (key, path) in [
        ("source.path", &config.source_path),
        ("journal.path", &config.journal_path),
    ] {
        if let Some(lines) = path
            .as_deref()
            .and_then(|p| config.relative_path_lines(key, p))
        {
            let _ = writeln!(out, "  {lines}");
        }
    }
    if let Some(dir) = a.source {
        let s = Source::open(&dir)?;
        s.verify_content()?;
        let _ = writeln!(
            out,
            "source {}: valid, id {}, {} outputs, digest {}",
            dir.display(),
            s.manifest.id,
            s.manifest.outputs.len(),
            s.digest
        );
    }
    Ok(CommandOutput {
        report: None,
        stdout: out,
        code: crate::error::ExitCode::Success,
        metrics: None,
    })
}
