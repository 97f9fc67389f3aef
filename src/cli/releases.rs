//! `distributor releases adopt` and `distributor releases settings`.

use super::CommandOutput;
use crate::error::Result;
use crate::ops::adopt::adopt;
use clap::{Args, Subcommand};

/// Manage the releases of destinations with a releases block.
#[derive(Debug, Args)]
pub(super) struct ReleasesArgs {
    #[command(subcommand)]
    command: ReleasesCommand,
}

#[derive(Debug, Subcommand)]
enum ReleasesCommand {
    Adopt(AdoptArgs),
    Settings(SettingsArgs),
}

/// Record this config's releases settings (keep, max_age) in releases.dir in place of the
/// recorded ones, under the lock, journaled: how releases.keep is changed. Retention applies
/// them at the next publication or prune; nothing is removed now.
#[derive(Debug, Args)]
pub(super) struct SettingsArgs {
    #[command(flatten)]
    pub target: super::ReleasesSelection,
    /// Say what would change; write nothing anywhere.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// Turn the plain managed directory at path into a first release; refused, with the
/// list, while it holds content its state does not record.
#[derive(Debug, Args)]
pub(super) struct AdoptArgs {
    #[command(flatten)]
    pub target: super::ReleasesSelection,
    /// Say what would happen; write nothing anywhere.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub run: super::RunArgs,
}

impl ReleasesArgs {
    /// Whether the report is JSON.
    pub(super) fn json(&self) -> bool {
        match &self.command {
            ReleasesCommand::Adopt(a) => a.run.json,
            ReleasesCommand::Settings(a) => a.run.json,
        }
    }
}

/// Runs `releases <command>`.
pub(super) fn run(a: ReleasesArgs) -> Result<CommandOutput> {
    let a = match a.command {
        ReleasesCommand::Adopt(a) => a,
        ReleasesCommand::Settings(s) => return settings(s),
    };
    let (config, opts) = a.target.options(a.dry_run, &a.run)?;
    let (report, code) = adopt(&config, &opts)?;
    let stdout = super::render(a.run.json, &report, |r| r.to_text())?;
    Ok(CommandOutput::text(stdout, code, None))
}

fn settings(a: SettingsArgs) -> Result<CommandOutput> {
    let (config, opts) = a.target.options(a.dry_run, &a.run)?;
    let (report, code) = crate::ops::release_settings::record_settings(&config, &opts)?;
    let stdout = super::render(a.run.json, &report, |r| r.to_text())?;
    Ok(CommandOutput::text(stdout, code, None))
}
