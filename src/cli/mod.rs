//! The command-line interface: one file per command, each an args struct (whose doc
//! comments are the help) and a handler that calls one library function. This module maps
//! errors to exit codes, in one place.

mod history;
mod manifest;
mod progress;
mod publish;
mod recover;
mod serve;
mod status;
mod validate;
mod verify;

use crate::error::Error;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

/// Publishes producer bundles into configured destinations, safely.
#[derive(Debug, Parser)]
#[command(name = "distributor", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
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
}

/// What a command produced: text for stdout and the exit code.
pub struct CommandOutput {
    /// Printed to stdout.
    pub stdout: String,
    /// Process exit code.
    pub code: u8,
}

/// Parses arguments, runs the command and returns the exit code (SPEC §10).
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let json = cli.wants_json();
    let result = match cli.command {
        Command::Publish(a) => publish::run(a.into_common(false)),
        Command::Plan(a) => publish::run(a.into_common()),
        Command::Manifest(a) => manifest::run(a),
        Command::Validate(a) => validate::run(a),
        Command::Status(a) => status::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Recover(a) => recover::run(a),
        Command::History(a) => history::run(a),
        Command::Serve(a) => serve::run(a),
    };
    match result {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe is not an error worth reporting.
            let _ = stdout.write_all(out.stdout.as_bytes());
            let _ = stdout.flush();
            ExitCode::from(out.code)
        }
        Err(e) => {
            report_error(&e, json);
            ExitCode::from(e.exit_code())
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
    fn wants_json(&self) -> bool {
        match &self.command {
            Command::Publish(a) => a.common.json,
            Command::Plan(a) => a.common.json,
            Command::Status(a) => a.json,
            Command::Verify(a) => a.json,
            Command::Recover(a) => a.json,
            Command::History(a) => a.json(),
            _ => false,
        }
    }
}

/// `cli:<user>`, the actor recorded for CLI publications.
pub fn cli_actor() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".to_string());
    // The journal and `history` show it on one line: a control character (a newline in
    // $USER) would let it forge more lines, so those are escaped.
    let user: String = user
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
    format!("cli:{user}")
}
