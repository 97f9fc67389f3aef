//! `distributor verify --config F [--destination ID]... [--deep] [--json]`.

use super::CommandOutput;
use crate::config::Config;
use crate::error::Result;
use crate::inspect;
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;

/// Compare storage with state: missing, modified and unrecorded paths (exit 3 on drift).
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Pipeline config file (YAML).
    #[arg(long, value_name = "F")]
    pub config: PathBuf,
    /// Only these destinations (repeatable).
    #[arg(long = "destination", value_name = "ID")]
    pub destinations: Vec<String>,
    /// s3 destinations: download and hash every recorded object instead of trusting the
    /// listing's size and ETag (local destinations always hash every recorded file).
    #[arg(long)]
    pub deep: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn run(a: VerifyArgs) -> Result<CommandOutput> {
    let config = Config::load(&a.config)?;
    let dests = config.select(&a.destinations)?;
    let drift = inspect::verify(&dests, a.deep)?;
    let code = if drift.iter().any(|d| d.drifted()) {
        3
    } else {
        0
    };
    if a.json {
        let v = serde_json::json!({"pipeline_id": config.pipeline_id, "drift": code == 3, "destinations": drift});
        return Ok(CommandOutput {
            stdout: format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default()),
            code,
        });
    }
    let mut out = String::new();
    for d in &drift {
        let verdict = if d.drifted() { "drift" } else { "ok" };
        let _ = writeln!(
            out,
            "destination {} -> {}: state {}, {verdict}",
            d.destination_id, d.bundle_path, d.state
        );
        if let Some(r) = &d.invalid_reason {
            let _ = writeln!(out, "  invalid state: {r}");
        }
        for p in &d.missing {
            let _ = writeln!(out, "  missing    {p}");
        }
        for p in &d.modified {
            let _ = writeln!(out, "  modified   {p}");
        }
        for p in &d.unrecorded {
            let _ = writeln!(out, "  unrecorded {p}");
        }
    }
    Ok(CommandOutput { stdout: out, code })
}
