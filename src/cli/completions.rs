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
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// A shell distributor writes completions for.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    /// GNU bash.
    Bash,
    /// Z shell.
    Zsh,
    /// fish.
    Fish,
}

/// Runs the command.
pub fn run(a: CompletionsArgs) -> Result<CommandOutput> {
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
        code: 0,
    })
}

/// A value parser that takes any text and tells the completion scripts the closed set of
/// values (`history --action`, `--status`): the command itself checks the value and its
/// error lists what is accepted, so parsing and messages stay as they are, while
/// `--action <TAB>` offers the set instead of file names.
#[derive(Clone)]
pub struct Hinted(pub fn() -> Vec<&'static str>);

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

/// The man page `distributor(1)`, roff, from the same definitions (`docs/man/distributor.1`
/// is this; a test fails when it is not current).
pub fn man_page() -> Result<String> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|e| Error::Failed(e.to_string()))?;
    String::from_utf8(out).map_err(|e| Error::Failed(e.to_string()))
}
