//! The command-line interface: one file per command, each an args struct (whose doc
//! comments are the help) and a handler that calls one library function. This module maps
//! errors to exit codes, in one place.

mod actor;
mod blame;
mod completions;
mod history;
mod log;
mod manifest;
mod progress;
mod promote;
mod prune;
mod publish;
mod recover;
mod releases;
mod rollback;
mod serve;
mod status;
mod validate;
mod verify;

use crate::error::Error;
pub(crate) use actor::{cli_actor, cli_reason};
use clap::{Parser, Subcommand};
pub use completions::man_pages;
use std::io::Write;
use std::process::ExitCode;

/// Publishes producer bundles into configured destinations, safely.
#[derive(Debug, Parser)]
#[command(name = "distributor", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
    /// After a command that changes or checks destinations, write its gauges to PATH in
    /// node_exporter's textfile format.
    #[arg(long, value_name = "PATH", global = true)]
    metrics_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    Publish(publish::PublishArgs),
    Plan(publish::PlanArgs),
    Manifest(manifest::ManifestArgs),
    Validate(validate::ValidateArgs),
    Status(status::StatusArgs),
    Verify(verify::VerifyArgs),
    Recover(recover::RecoverArgs),
    History(history::HistoryArgs),
    Serve(serve::ServeArgs),
    Rollback(rollback::RollbackArgs),
    Promote(promote::PromoteArgs),
    Prune(prune::PruneArgs),
    Log(log::LogArgs),
    Blame(blame::BlameArgs),
    Releases(releases::ReleasesArgs),
    Completions(completions::CompletionsArgs),
    Man(completions::ManArgs),
}

/// What a command produced: text for stdout and the exit code.
pub(crate) struct CommandOutput {
    /// Printed to stdout.
    pub stdout: String,
    /// A `--json` report, printed to stdout after `stdout` as it is serialized: a report
    /// of a million files is hundreds of megabytes, never held whole in memory.
    pub report: Option<crate::report::Report>,
    /// Process exit code.
    pub code: crate::error::ExitCode,
    /// What `--metrics-file` records of the run (SPEC §20); `None` for a command that
    /// neither changes nor checks a destination.
    pub metrics: Option<crate::metrics::file::Run>,
}

impl CommandOutput {
    /// Output that is text alone (a `--json` one rendered to text too).
    fn text(
        stdout: String,
        code: crate::error::ExitCode,
        metrics: Option<crate::metrics::file::Run>,
    ) -> Self {
        CommandOutput {
            stdout,
            report: None,
            code,
            metrics,
        }
    }

    /// A run's report (publish, rollback, promote) as `--json` (written out as it is
    /// serialized, by `finish`) or as text laid out as `text` says.
    fn of_report(
        report: crate::report::Report,
        code: crate::error::ExitCode,
        metrics: Option<crate::metrics::file::Run>,
        json: bool,
        text: &TextArgs,
    ) -> Self {
        let (stdout, report) = if json {
            (String::new(), Some(report))
        } else {
            (report.to_text(&text.options()), None)
        };
        CommandOutput {
            stdout,
            report,
            code,
            metrics,
        }
    }
}

/// A JSON report of many files is megabytes long; through a pipe of the default 64 KiB the
/// reader has to be woken for every 64 KiB. When stdout is a pipe and the output is larger,
/// the pipe is made to hold it (up to 1 MiB, what an unprivileged process may ask for).
/// Nothing happens when stdout is not a pipe or the kernel refuses.
fn widen_pipe(stdout: &impl std::os::fd::AsFd, len: usize) {
    const DEFAULT: usize = 64 << 10;
    const MOST: usize = 1 << 20;
    if len > DEFAULT {
        let _ = rustix::pipe::fcntl_setpipe_size(stdout, len.min(MOST));
    }
}

/// `--lock-timeout SECS`, checked: a finite number of seconds >= 0.
fn lock_timeout(secs: f64) -> crate::error::Result<std::time::Duration> {
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(Error::Usage(format!(
            "--lock-timeout {secs}: accepted is a number of seconds >= 0"
        )));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// How a command that changes destinations runs (SPEC §2, §16): its report's form, its
/// journal, how long it waits for a lock, and who it says runs it.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Journal file (else DISTRIBUTOR_JOURNAL, journal.path, $XDG_STATE_HOME/distributor/journal.sqlite3).
    #[arg(long, value_name = "P")]
    pub journal: Option<std::path::PathBuf>,
    /// Seconds to wait for a destination lock.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub lock_timeout: f64,
    /// Who runs this, for the journal (else DISTRIBUTOR_ACTOR, the CI's identity, user@host).
    #[arg(long, value_name = "NAME")]
    pub actor: Option<String>,
    /// Why, for the journal, the destination log, the report and hooks (else DISTRIBUTOR_REASON): at most 1 KiB, no control characters.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

impl RunArgs {
    /// `--reason`, else `DISTRIBUTOR_REASON`, bounded as the actor is: a usage error before
    /// anything is locked or written when it is over 1 KiB or holds a control character.
    pub(crate) fn reason(&self) -> crate::error::Result<Option<String>> {
        Ok(cli_reason(self.reason.as_deref())?)
    }

    /// `--lock-timeout`, checked.
    pub(crate) fn lock_timeout(&self) -> crate::error::Result<std::time::Duration> {
        lock_timeout(self.lock_timeout)
    }

    /// The journal: `--journal`, else where the environment or `config` puts it
    /// ([`crate::ops::common::resolve_journal`]).
    pub(crate) fn journal_for(
        &self,
        config: &crate::config::Config,
    ) -> crate::error::Result<std::path::PathBuf> {
        crate::ops::common::resolve_journal(self.journal.as_deref(), Some(config))
    }

    /// `--actor`, else the environment's identity ([`cli_actor`]), bounded: a usage
    /// error before anything is locked or written when it is over 1 KiB or holds a
    /// control character.
    pub(crate) fn actor(&self) -> crate::error::Result<String> {
        Ok(cli_actor(self.actor.as_deref())?)
    }
}

/// The pipeline config a command reads.
#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArgs {
    /// Pipeline config file (YAML).
    #[arg(long, value_name = "F")]
    pub config: std::path::PathBuf,
}

impl ConfigArgs {
    /// The config, loaded and checked.
    pub(crate) fn load(&self) -> crate::error::Result<crate::config::Config> {
        crate::config::Config::load(&self.config)
    }
}

/// The destinations a command looks at: of the config, those named, else all.
#[derive(Debug, clap::Args)]
pub(crate) struct Selection {
    #[command(flatten)]
    pub pipeline: ConfigArgs,
    /// Only these destinations (repeatable).
    #[arg(long = "destination", value_name = "ID", value_hint = clap::ValueHint::Other)]
    pub destinations: Vec<String>,
}

/// The destinations a releases command (rollback, prune, `releases adopt`, `releases
/// settings`) runs on: of the config, those named, else every one with a releases block.
#[derive(Debug, clap::Args)]
pub(crate) struct ReleasesSelection {
    #[command(flatten)]
    pub pipeline: ConfigArgs,
    /// Only these destinations (repeatable); default: every destination with releases.
    #[arg(long = "destination", value_name = "ID", value_hint = clap::ValueHint::Other)]
    pub destinations: Vec<String>,
}

impl ReleasesSelection {
    /// The config, and what a releases command runs with: these destinations,
    /// `dry_run`, and `run`'s journal, lock timeout and actor.
    pub(crate) fn options(
        self,
        dry_run: bool,
        run: &RunArgs,
    ) -> crate::error::Result<(crate::config::Config, crate::ops::common::ReleasesOptions)> {
        let lock_timeout = run.lock_timeout()?;
        let actor = run.actor()?;
        let reason = run.reason()?;
        let config = self.pipeline.load()?;
        let journal = run.journal_for(&config)?;
        Ok((
            config,
            crate::ops::common::ReleasesOptions {
                destinations: self.destinations,
                dry_run,
                journal,
                lock_timeout,
                actor,
                reason,
            },
        ))
    }
}

/// How much a text report shows (SPEC §16).
#[derive(Debug, clap::Args)]
pub(crate) struct TextArgs {
    /// List every file and link (a text report lists at most 20 per destination).
    #[arg(long, conflicts_with = "quiet")]
    pub files: bool,
    /// Print only the summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

impl TextArgs {
    /// The layout of a text report on this process's stdout.
    pub(crate) fn options(&self) -> crate::report::TextOptions {
        use std::io::IsTerminal;
        crate::report::TextOptions {
            files: self.files,
            quiet: self.quiet,
            colour: crate::report::TextOptions::colour_for(std::io::stdout().is_terminal()),
        }
    }
}

/// A report as `--json` (pretty, one object) or as text.
fn render<T: serde::Serialize>(
    json: bool,
    report: &T,
    text: impl FnOnce(&T) -> String,
) -> crate::error::Result<String> {
    if json {
        Ok(format!("{}\n", serde_json::to_string_pretty(report)?))
    } else {
        Ok(text(report))
    }
}

/// Parses arguments, runs the command and returns the exit code (SPEC §10).
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                crate::error::ExitCode::Usage
            } else {
                crate::error::ExitCode::Success
            }
            .into();
        }
    };
    let json = cli.wants_json();
    let metrics_file = cli.metrics_file.clone();
    let command = cli.command_name();
    let started = std::time::Instant::now();
    let result = match crate::limits::check_env() {
        Err(e) => Err(e),
        Ok(()) => cli.run(),
    };
    if let (Some(path), Ok(out)) = (&metrics_file, &result)
        && let Some(run) = &out.metrics
        && let Err(e) = crate::metrics::file::write(path, command, run, started.elapsed(), out.code)
    {
        eprintln!("warning: --metrics-file: {e}");
    }
    finish(result, json)
}

impl Cli {
    fn run(self) -> crate::error::Result<CommandOutput> {
        match self.command {
            Command::Publish(a) => publish::run(a.into_common(false)),
            Command::Plan(a) => publish::run(a.into_common()),
            Command::Manifest(a) => manifest::run(a),
            Command::Validate(a) => validate::run(a),
            Command::Status(a) => status::run(a),
            Command::Verify(a) => verify::run(a),
            Command::Recover(a) => recover::run(a),
            Command::History(a) => history::run(a),
            Command::Serve(a) => serve::run(a),
            Command::Rollback(a) => rollback::run(a),
            Command::Promote(a) => promote::run(a),
            Command::Prune(a) => prune::run(a),
            Command::Log(a) => log::run(a),
            Command::Blame(a) => blame::run(a),
            Command::Releases(a) => releases::run(a),
            Command::Completions(a) => completions::run(a),
            Command::Man(a) => completions::run_man(a),
        }
    }
}

/// Prints a command's output (or its error) and gives its exit code.
fn finish(result: crate::error::Result<CommandOutput>, json: bool) -> ExitCode {
    match result {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            let len = out.stdout.len() + out.report.as_ref().map_or(0, |r| r.json_len_estimate());
            widen_pipe(&stdout, len);
            // A closed pipe is not an error worth reporting.
            let _ = stdout.write_all(out.stdout.as_bytes());
            if let Some(report) = &out.report {
                let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut stdout);
                let _ = report.write_json(&mut w).and_then(|()| w.flush());
            }
            let _ = stdout.flush();
            out.code.into()
        }
        Err(e) => {
            report_error(&e, json);
            e.exit_code().into()
        }
    }
}

fn report_error(e: &Error, json: bool) {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        let t = s.to_string();
        if !msg.contains(&t) {
            msg.push_str(": ");
            msg.push_str(&t);
        }
        src = s.source();
    }
    if json {
        let v = serde_json::json!({"error": {"kind": e.kind(), "message": msg}});
        println!("{v}");
    }
    eprintln!("error: {msg}");
}

impl Cli {
    /// The command's name, as metrics label it.
    fn command_name(&self) -> &'static str {
        match &self.command {
            Command::Publish(a) if a.dry_run => "plan",
            Command::Publish(_) => "publish",
            Command::Plan(_) => "plan",
            Command::Promote(_) => "promote",
            Command::Manifest(_) => "manifest",
            Command::Validate(_) => "validate",
            Command::Status(_) => "status",
            Command::Verify(_) => "verify",
            Command::Recover(_) => "recover",
            Command::History(_) => "history",
            Command::Serve(_) => "serve",
            Command::Rollback(_) => "rollback",
            Command::Prune(_) => "prune",
            Command::Log(_) => "log",
            Command::Blame(_) => "blame",
            Command::Releases(_) => "releases",
            Command::Completions(_) => "completions",
            Command::Man(_) => "man",
        }
    }

    fn wants_json(&self) -> bool {
        match &self.command {
            Command::Publish(a) => a.common.run.json,
            Command::Plan(a) => a.common.run.json,
            Command::Status(a) => a.json,
            Command::Verify(a) => a.json,
            Command::Recover(a) => a.run.json,
            Command::History(a) => a.json(),
            Command::Rollback(a) => a.run.json,
            Command::Promote(a) => a.run.json,
            Command::Prune(a) => a.run.json,
            Command::Releases(a) => a.json(),
            Command::Blame(a) => a.json(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::widen_pipe;

    #[test]
    fn a_pipe_is_widened_for_large_output_only() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let before = rustix::pipe::fcntl_getpipe_size(&w).unwrap();
        widen_pipe(&w, 1000);
        assert_eq!(rustix::pipe::fcntl_getpipe_size(&w).unwrap(), before);
        widen_pipe(&w, 300 << 10);
        assert!(rustix::pipe::fcntl_getpipe_size(&w).unwrap() >= 300 << 10);
        widen_pipe(&w, 64 << 20);
        assert!(rustix::pipe::fcntl_getpipe_size(&r).unwrap() <= 1 << 20);
        // Not a pipe: nothing happens, nothing fails.
        let f = tempfile::tempfile().unwrap();
        widen_pipe(&f, 300 << 10);
    }
}
