//! `distributor log`.

use super::{CommandOutput, cli_actor};
use crate::dest_log::{LogOptions, LogRepair, errors, read_logs, repair, to_jsonl, to_text};
use crate::error::Result;
use clap::Args;

/// Print each destination's own log (who changed it, from which host, in order), oldest
/// first; or move a bad entry out of it.
///
/// The log is `.distributor/log/` in the bundle path (in `releases.dir` for a destination
/// with releases; for an s3 destination the keys `<prefix>/.distributor/log/`): one entry
/// per operation that changed the destination. A torn, unparsable, untrusted or
/// out-of-sequence entry is an error naming its file (exit 1).
#[derive(Debug, Args)]
pub(super) struct LogArgs {
    #[command(flatten)]
    pub pipeline: super::ConfigArgs,
    /// Only these destinations (repeatable); default: every destination.
    #[arg(long = "destination", value_name = "ID", value_hint = clap::ValueHint::Other)]
    pub destinations: Vec<String>,
    /// Only entries committed at or after TIME (RFC 3339, or a date YYYY-MM-DD, UTC).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only the N newest entries of each destination (printed oldest first).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// One JSON object per line, one line per entry.
    #[arg(long)]
    pub jsonl: bool,
    /// Move entry SEQ (a bad one) to .distributor/quarantine/ under the destination lock
    /// (s3: its lease), and log the move.
    #[arg(long, value_name = "SEQ", conflicts_with_all = ["since", "limit", "jsonl", "restart"])]
    pub quarantine: Option<u64>,
    /// Under the destination lock, log that the log is shorter than the journal in use
    /// saw it (it was removed or cut short) and go on from there: publishing is refused
    /// (log_missing) until this or --quarantine is run.
    #[arg(long, conflicts_with_all = ["since", "limit", "jsonl"])]
    pub restart: bool,
    /// Seconds to wait for the destination lock (--quarantine, --restart).
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub lock_timeout: f64,
    /// Who runs this, for the entry of --quarantine or --restart (else DISTRIBUTOR_ACTOR, the CI's identity, user@host).
    #[arg(long, value_name = "NAME")]
    pub actor: Option<String>,
    /// Why, for the entry of --quarantine or --restart (else DISTRIBUTOR_REASON): at most 1 KiB, no control characters.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Journal file (else DISTRIBUTOR_JOURNAL, journal.path, $XDG_STATE_HOME/distributor/journal.sqlite3): where --quarantine and --restart record the log's new tail.
    #[arg(long, value_name = "P")]
    pub journal: Option<std::path::PathBuf>,
}

/// Runs log.
pub(super) fn run(a: LogArgs) -> Result<CommandOutput> {
    // Before the config is even read: the actor of a quarantine's or restart's entry is
    // bounded.
    let (actor, reason) = match a.quarantine.is_some() || a.restart {
        true => (
            Some(cli_actor(a.actor.as_deref())?),
            super::cli_reason(a.reason.as_deref())?,
        ),
        false if a.reason.is_some() => {
            return Err(crate::error::Error::Usage(
                "--reason goes with --quarantine or --restart, which write an entry; reading the log records nothing".into(),
            ));
        }
        false => (None, None),
    };
    let config = a.pipeline.load()?;
    let what = match (a.quarantine, a.restart) {
        (Some(seq), _) => Some(LogRepair::Quarantine(seq)),
        (None, true) => Some(LogRepair::Restart),
        (None, false) => None,
    };
    if let (Some(what), Some(actor)) = (what, actor) {
        let lock_timeout = super::lock_timeout(a.lock_timeout)?;
        let path = crate::ops::common::resolve_journal(a.journal.as_deref(), Some(&config))?;
        let journal = crate::journal::Journal::open(&path)?;
        let done = repair(
            &config,
            &a.destinations,
            what,
            lock_timeout,
            (&actor, reason.as_deref()),
            &journal,
        )?;
        let (dest, at) = (done.destination, done.seq);
        let stdout = match what {
            LogRepair::Quarantine(seq) => format!(
                "destination {dest}: entry {seq} moved to .distributor/quarantine/; entry {at} records the move\n"
            ),
            LogRepair::Restart => format!(
                "destination {dest}: entry {at} records that the log went on from here ({}); publishing resumes\n",
                match done.journal_knew {
                    Some(k) => format!("journal {} had seen it reach entry {k}", path.display()),
                    None => format!("journal {} had seen none of it", path.display()),
                }
            ),
        };
        return Ok(CommandOutput {
            report: None,
            stdout,
            code: crate::error::ExitCode::Success,
            metrics: None,
        });
    }
    let opts = LogOptions {
        destinations: a.destinations,
        since: a.since,
        limit: a.limit,
    };
    let (logs, code) = read_logs(&config, &opts)?;
    let stdout = if a.jsonl {
        eprint!("{}", errors(&logs));
        to_jsonl(&logs)?
    } else {
        to_text(&logs)
    };
    Ok(CommandOutput {
        report: None,
        stdout,
        code,
        metrics: None,
    })
}
