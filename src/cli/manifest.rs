//! `distributor manifest DIR --id ID [--created-at T]`.

use super::CommandOutput;
use super::progress::Shown;
use crate::error::Result;
use crate::source::{MANIFEST_FILE, write_manifest_excluding};
use clap::Args;
use std::path::PathBuf;

/// Write distributor-manifest.json for every regular file under DIR.
#[derive(Debug, Args)]
pub(super) struct ManifestArgs {
    /// Bundle directory.
    pub dir: PathBuf,
    /// Source id.
    #[arg(long)]
    pub id: String,
    /// Creation time, RFC 3339 with offset; default: now (UTC).
    #[arg(long, value_name = "T")]
    pub created_at: Option<String>,
    /// Leave out paths this glob matches (repeatable): whole bundle-relative paths, `*`
    /// within one segment, `**` across them; a matched directory goes with everything
    /// below it, and a glob ending in `/` matches directories only, as in gitignore
    /// (`--exclude .git/ --exclude '**/.DS_Store'`).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Show no progress on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Runs the command.
pub(super) fn run(a: ManifestArgs) -> Result<CommandOutput> {
    let created = a
        .created_at
        .unwrap_or_else(|| chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let exclude = crate::globs::PathGlobs::new(&a.exclude)
        .map_err(|m| crate::error::Error::Usage(format!("--exclude: {m}")))?;
    // How walking and hashing the bundle go (SPEC §20).
    let shown = Shown::on_stderr("manifest", false, a.quiet);
    let m = write_manifest_excluding(&a.dir, &a.id, &created, &exclude, shown.ticker());
    shown.finish();
    let m = m?;
    Ok(CommandOutput {
        report: None,
        stdout: format!(
            "wrote {} ({} outputs, {} links, digest {})\n",
            a.dir.join(MANIFEST_FILE).display(),
            m.outputs.len(),
            m.links.len(),
            m.digest()
        ),
        code: crate::error::ExitCode::Success,
        metrics: None,
    })
}
