//! Who holds a destination lock (SPEC §16): the process that takes `.distributor.lock`
//! writes into it its host, pid, actor, operation (once known) and since when; a process
//! waiting for the lock prints that once, and the lock timeout error names it. The record
//! is informative only: the `flock` is the lock.

use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, Write};

/// What a lock file says of its holder.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Holder {
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// The actor, when the process knew it.
    #[serde(default)]
    pub actor: Option<String>,
    /// The operation, once one began.
    #[serde(default)]
    pub operation: Option<String>,
    /// Since when, RFC 3339 UTC.
    pub since: String,
}

impl Holder {
    fn me(operation: Option<String>, actor: &str) -> Holder {
        Holder {
            host: rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned(),
            pid: std::process::id(),
            actor: Some(actor.to_string()),
            operation,
            since: crate::clock::now(),
        }
    }

    /// In words: `host h, pid p, actor a, operation o, since t`.
    pub fn describe(&self) -> String {
        format!(
            "host {}, pid {}, actor {}, operation {}, since {}",
            self.host,
            self.pid,
            self.actor.as_deref().unwrap_or("(not recorded)"),
            self.operation.as_deref().unwrap_or("(none yet)"),
            self.since
        )
    }
}

/// Writes this process's record into the lock file it holds (best effort: the record is
/// informative, the `flock` is the lock).
pub fn record(file: &std::fs::File, operation: Option<String>, actor: &str) {
    let Ok(mut text) = serde_json::to_vec(&Holder::me(operation, actor)) else {
        return;
    };
    text.push(b'\n');
    let mut f = file;
    let _ = f
        .set_len(0)
        .and_then(|()| f.rewind())
        .and_then(|()| f.write_all(&text));
}

/// What the lock file says of its holder, if it says anything readable.
pub fn read(file: &std::fs::File) -> Option<Holder> {
    let mut text = Vec::new();
    let mut f = file;
    f.rewind().ok()?;
    f.take(4096).read_to_end(&mut text).ok()?;
    serde_json::from_slice(&text).ok()
}
