//! `distributor completions SHELL` and the man page, both generated from the clap
//! definitions the binary parses with (`clap_complete`, `clap_mangen`).

use super::{Cli, CommandOutput};
use crate::error::{Error, Result};
use clap::{Args, CommandFactory, ValueEnum};

/// Print a shell completion script (bash, zsh or fish) to standard output.
///
/// bash: `distributor completions bash > /etc/bash_completion.d/distributor`;
/// zsh: `distributor completions zsh > "${fpath[1]}/_distributor"`;
/// fish: `distributor completions fish > ~/.config/fish/completions/distributor.fish`.
#[derive(Debug, Args)]
pub(super) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// A shell distributor writes completions for.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum Shell {
    /// GNU bash.
    Bash,
    /// Z shell.
    Zsh,
    /// fish.
    Fish,
}

/// Runs the command.
pub(super) fn run(a: CompletionsArgs) -> Result<CommandOutput> {
    let shell = match a.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "distributor", &mut out);
    Ok(CommandOutput {
        report: None,
        stdout: String::from_utf8(out).map_err(|e| Error::Failed(e.to_string()))?,
        code: crate::error::ExitCode::Success,
        metrics: None,
    })
}

/// A value parser that takes any text and tells the completion scripts the closed set of
/// values (`history --action`, `--status`): the command itself checks the value and its
/// error lists what is accepted, so parsing and messages stay as they are, while
/// `--action <TAB>` offers the set instead of file names.
#[derive(Clone)]
pub(super) struct Hinted(pub fn() -> Vec<&'static str>);

impl clap::builder::TypedValueParser for Hinted {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            (self.0)()
                .into_iter()
                .map(clap::builder::PossibleValue::new),
        ))
    }
}

/// Every man page, from the same definitions: `distributor(1)`, then one per command
/// (`distributor-publish(1)`, and `distributor-releases-adopt(1)` for the commands under
/// `releases`), each with the exit status and environment sections. `(file name, roff)`;
/// `docs/man/` holds them, and a test fails when one is not current.
pub fn man_pages() -> Result<Vec<(String, String)>> {
    let mut pages = Vec::new();
    let top = Cli::command();
    pages.push(("distributor.1".to_string(), render(top.clone())?));
    let mut each = |name: String, cmd: clap::Command| -> Result<()> {
        let cmd = cmd
            .name(name.clone())
            .bin_name(name.replace('-', " "))
            .version(env!("CARGO_PKG_VERSION"));
        let page = render(cmd)?;
        pages.push((format!("{name}.1"), page));
        Ok(())
    };
    for sub in top.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let name = format!("distributor-{}", sub.get_name());
        for nested in sub.get_subcommands().filter(|n| n.get_name() != "help") {
            each(format!("{name}-{}", nested.get_name()), nested.clone())?;
        }
        each(name, sub.clone())?;
    }
    Ok(pages)
}

/// One page, with the sections clap does not write.
fn render(cmd: clap::Command) -> Result<String> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| Error::Failed(e.to_string()))?;
    let mut page = String::from_utf8(out).map_err(|e| Error::Failed(e.to_string()))?;
    for section in [EXIT_STATUS, ENVIRONMENT, SEE_ALSO] {
        page.push_str(section);
    }
    Ok(page)
}

/// EXIT STATUS, ENVIRONMENT and SEE ALSO, in roff (SPEC §10, §16).
const EXIT_STATUS: &str = r".SH EXIT STATUS
.TP
0
Success, including unchanged and skipped destinations and dry runs without conflicts.
.TP
1
An error: I/O, an invalid source, a lock timeout, the journal, a failed execution; for
recover, an operation that diverged, was untrusted, had its staging moved or could not be
recovered; a bad entry in a destination log.
.TP
2
A usage error or an invalid config.
.TP
3
A destination had a conflict (untrusted_record, stale_plan, mass_delete included); for
verify, drift or invalid state.
.TP
4
Recovery required: an unfinished operation blocks the destination, or a failed
publication could not roll itself back. Run distributor recover.
";

const ENVIRONMENT: &str = r".SH ENVIRONMENT
.TP
DISTRIBUTOR_JOURNAL
The journal file, when --journal is not given (else journal.path of the config, else
$XDG_STATE_HOME/distributor/journal.sqlite3, else ~/.local/state/distributor/journal.sqlite3).
.TP
DISTRIBUTOR_ACTOR
Who runs the command, for the journal, the lock record and the destination log, when
--actor is not given (else the CI's identity, else user@host).
.TP
XDG_STATE_HOME, HOME
Where the default journal lives.
.TP
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL
Credentials, region and endpoint of s3 destinations. Hooks never get them.
.TP
NO_COLOR, TERM
No colours in text reports when NO_COLOR is set; no progress bar when TERM is dumb.
";

const SEE_ALSO: &str = r".SH SEE ALSO
The operator documentation in docs/ of the distributor sources: config.md, operations.md,
troubleshooting.md, review-then-apply.md.
";

/// Print a man page (roff): distributor(1), or one command's (`distributor man publish`,
/// `distributor man releases-adopt`). Read it with `distributor man publish | man -l -`.
#[derive(Debug, Args)]
pub(super) struct ManArgs {
    /// The command whose page to print; none: distributor(1).
    pub command: Option<String>,
}

/// Runs `distributor man`.
pub(super) fn run_man(a: ManArgs) -> Result<CommandOutput> {
    let pages = man_pages()?;
    let want = match &a.command {
        None => "distributor.1".to_string(),
        Some(c) => format!("distributor-{c}.1"),
    };
    let Some((_, page)) = pages.iter().find(|(name, _)| *name == want) else {
        let names: Vec<&str> = (pages.iter().skip(1))
            .map(|(n, _)| n.trim_start_matches("distributor-").trim_end_matches(".1"))
            .collect();
        return Err(Error::Usage(format!(
            "man {}: no such command; accepted: {}",
            a.command.as_deref().unwrap_or_default(),
            names.join(", ")
        )));
    };
    Ok(CommandOutput {
        report: None,
        stdout: page.clone(),
        code: crate::error::ExitCode::Success,
        metrics: None,
    })
}
