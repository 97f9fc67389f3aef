//! `distributor publish` and `distributor plan`.

use super::CommandOutput;
use super::progress::Shown;
use crate::error::{Error, Result};
use crate::ops::common::resolve_journal;
use crate::ops::publish::{PublishOptions, publish_with_progress};
use crate::plan::saved;
use crate::report::PlanFileUse;
use crate::source::Source;
use clap::Args;
use std::path::PathBuf;

/// Options shared by publish and plan.
#[derive(Debug, Args)]
pub(super) struct CommonArgs {
    #[command(flatten)]
    pub pipeline: super::ConfigArgs,
    /// Source bundle directory (holds distributor-manifest.json); default: source.path.
    #[arg(long, value_name = "DIR", conflicts_with = "manifest")]
    pub source: Option<PathBuf>,
    /// Manifest file; the bundle directory is its directory.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Only these destinations (repeatable); default: all.
    #[arg(long = "destination", value_name = "ID", value_hint = clap::ValueHint::Other)]
    pub destinations: Vec<String>,
    /// Replace forceable conflicts when transfer.on_conflict is replace.
    #[arg(long)]
    pub force: bool,
    /// Allow up to N deletions where guard.max_delete would refuse them (mass_delete).
    #[arg(long, value_name = "N")]
    pub allow_delete: Option<u64>,
    #[command(flatten)]
    pub run: super::RunArgs,
    /// With --json: leave the unchanged files and links out of each destination's
    /// `files` and `links`, counted in its `omitted_unchanged` (the summary still counts
    /// them). Without it the report lists every file.
    #[arg(long, requires = "json")]
    pub omit_unchanged: bool,
    #[command(flatten)]
    pub text: super::TextArgs,
}

/// Publish a source bundle to the pipeline's destinations.
#[derive(Debug, Args)]
pub(super) struct PublishArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Plan only: write nothing anywhere (same as `distributor plan`).
    #[arg(long)]
    pub dry_run: bool,
    /// Publish the saved plan FILE (`plan --out`): each destination only where planning
    /// again under its lock gives exactly that plan, else the conflict stale_plan.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["force", "allow_delete", "destinations"])]
    pub plan: Option<PathBuf>,
    /// Refuse any plan file but the one with this sha256 (as `plan --out` printed it).
    #[arg(long, value_name = "H", requires = "plan")]
    pub plan_sha256: Option<String>,
    /// Build and verify each release but do not activate it (releases destinations
    /// only): `distributor promote` activates it later.
    #[arg(long)]
    pub stage: bool,
}

/// Show what publish would do, writing nothing anywhere (publish --dry-run).
#[derive(Debug, Args)]
pub(super) struct PlanArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Also write the plan to FILE (JSON), to review and publish with `publish --plan`;
    /// prints its sha256.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Arguments resolved for [`run`].
pub(super) struct Resolved {
    common: CommonArgs,
    dry_run: bool,
    command: &'static str,
    /// `plan --out FILE`.
    out: Option<PathBuf>,
    /// `publish --plan FILE [--plan-sha256 H]`.
    plan: Option<(PathBuf, Option<String>)>,
    /// `publish --stage`.
    stage: bool,
}

impl PublishArgs {
    /// Folds `--dry-run` in.
    pub(super) fn into_common(self, _plan: bool) -> Resolved {
        Resolved {
            dry_run: self.dry_run,
            common: self.common,
            command: "publish",
            out: None,
            plan: self.plan.map(|p| (p, self.plan_sha256)),
            stage: self.stage,
        }
    }
}

impl PlanArgs {
    /// A plan is a dry-run publish.
    pub(super) fn into_common(self) -> Resolved {
        Resolved {
            dry_run: true,
            common: self.common,
            command: "plan",
            out: self.out,
            plan: None,
            stage: false,
        }
    }
}

/// Runs publish or plan.
pub(super) fn run(args: Resolved) -> Result<CommandOutput> {
    let a = args.common;
    let lock_timeout = a.run.lock_timeout()?;
    let actor = a.run.actor()?;
    let reason = a.run.reason()?;
    // A saved plan is read (and its sha256 checked) before anything else: a wrong one
    // plans and writes nothing (SPEC §19).
    let saved = match &args.plan {
        Some((file, sha)) => Some((file, saved::read(file, sha.as_deref())?)),
        None => None,
    };
    let config = a.pipeline.load()?;
    // Before the lock (docs/config.md, "Hooks"): a hook's program nobody else can replace.
    crate::hooks::check_programs(&config)?;
    let source = match (&a.source, &a.manifest, &config.source_path) {
        (Some(dir), _, _) => Source::open(dir)?,
        (None, Some(file), _) => Source::open_manifest(file)?,
        (None, None, Some(dir)) => Source::open_configured(dir, &config)?,
        (None, None, None) => {
            return Err(Error::Usage(format!(
                "no source: pass --source DIR or --manifest FILE, or set source.path in {}",
                config.file.display()
            )));
        }
    };
    let journal = resolve_journal(a.run.journal.as_deref(), Some(&config))?;
    let mut plan_file = None;
    let (mut destinations, mut force, mut allow_delete) = (a.destinations, a.force, a.allow_delete);
    let mut saved_plan = None;
    if let Some((file, (plan, sha256))) = saved {
        destinations = plan.destination_ids(&config, file)?;
        (force, allow_delete) = (plan.force, plan.allow_delete);
        plan_file = Some(PlanFileUse {
            path: file.display().to_string(),
            sha256,
            force,
            allow_delete,
        });
        saved_plan = Some(std::sync::Arc::new(plan));
    }
    let opts = PublishOptions {
        destinations,
        dry_run: args.dry_run,
        force,
        allow_delete,
        saved_plan,
        save_plan: args.out.is_some(),
        journal,
        lock_timeout,
        actor,
        reason,
        command: args.command.to_string(),
        stage: args.stage,
    };
    // A bar for a person at a terminal; lines at most every 10 s in a log (SPEC §20),
    // unless --quiet: staging for `publish`, probing and hashing for `plan`. `publish
    // --dry-run` stages nothing and shows nothing.
    let shown = match (args.command, args.dry_run) {
        ("publish", true) => Shown::Off,
        (command, _) => Shown::on_stderr(command, a.run.json, a.text.quiet),
    };
    let outcome = publish_with_progress(&config, &source, &opts, shown.progress());
    shown.finish();
    let outcome = outcome?;
    let mut outcome = outcome;
    outcome.report.plan_file = plan_file;
    // After every destination's lock was released (SPEC §19); never for a dry run.
    crate::hooks::run_for(&config, &mut outcome.report, &opts.journal);
    if let Some(out) = &args.out {
        let Some(plan) = &outcome.saved else {
            return Err(Error::Failed(format!(
                "no plan file written to {}: a destination could not be planned (see above)\n{}",
                out.display(),
                outcome.report.to_text(&a.text.options())
            )));
        };
        let (bytes, sha256) = plan.render()?;
        saved::write(out, &bytes)?;
        outcome.report.plan_file = Some(PlanFileUse {
            path: out.display().to_string(),
            sha256,
            force: plan.force,
            allow_delete: plan.allow_delete,
        });
    }
    let metrics = Some(crate::metrics::file::Run::of_report(&outcome.report));
    if a.omit_unchanged {
        // After the hooks and the metrics, which take the whole report.
        outcome.report.omit_unchanged();
    }
    Ok(CommandOutput::of_report(
        outcome.report,
        outcome.exit_code,
        metrics,
        a.run.json,
        &a.text,
    ))
}
