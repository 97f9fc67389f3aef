//! How long work tells whoever watches it how far it got (SPEC §20 "Progress"): staging
//! (`publish`), probing and hashing (`plan`), checking recorded files (`verify`),
//! recovering operations (`recover`), removing releases (`prune`), walking and hashing a
//! bundle (`manifest`).
//!
//! The library only counts; what is shown, and where, is the CLI's business
//! (`cli/progress.rs` draws a bar on a terminal and prints lines in a log). Work takes a
//! [`Ticker`], which is nobody when no one watches: then each count is one branch on a
//! `None`, no allocation, no system call, no lock. Callers from many threads at once
//! are fine: a [`Progress`] is `Sync`.
//!
//! Must never: write to stdout, or change what a command does or reports.

/// Hears how a piece of work goes. Called from the working threads, so implementations
/// are `Sync` and their calls cheap.
pub trait Progress: Sync + std::fmt::Debug {
    /// A piece of work starts (counts start again from zero).
    fn start(&self, task: &Task<'_>);
    /// `n` more bytes were read, copied or hashed.
    fn bytes(&self, n: u64);
    /// `n` more of the task's items are done.
    fn done(&self, n: u64);
    /// The work ended, done or failed: clear whatever was drawn.
    fn finish(&self);
}

/// What a piece of work is, for its progress line: `{label}: {done}/{total} {unit}[,
/// {bytes}]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task<'a> {
    /// What it is done on: a destination id, or empty (`manifest`).
    pub label: &'a str,
    /// What is counted, plural: `files`, `paths probed`, `operations`, `releases removed`.
    pub unit: &'static str,
    /// How many items in all, when known before the work starts.
    pub total: Option<u64>,
    /// Whether bytes are counted too (copied or hashed), and how many in all when known.
    pub bytes: Bytes,
}

/// Whether a [`Task`] counts bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bytes {
    /// Bytes are no part of it (looking up paths, removing releases).
    Uncounted,
    /// Bytes are counted; how many in all is not known before.
    Counted,
    /// Bytes are counted, this many in all.
    Of(u64),
}

/// Where work reports its progress: to a [`Progress`], or to nobody ([`Ticker::NONE`]),
/// with the label of what it works on (a destination id). `Copy`, so it is passed by
/// value down to the loops that count.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ticker<'a> {
    to: Option<&'a dyn Progress>,
    label: &'a str,
}

impl<'a> Ticker<'a> {
    /// Nobody watches.
    pub const NONE: Ticker<'static> = Ticker {
        to: None,
        label: "",
    };

    /// Reports to `p`, if any.
    pub fn to(p: Option<&'a dyn Progress>) -> Ticker<'a> {
        Ticker { to: p, label: "" }
    }

    /// The same, for work on `label` (a destination id).
    pub fn on(self, label: &'a str) -> Ticker<'a> {
        Ticker { label, ..self }
    }

    /// Whether anybody watches (to spare work done only to be counted).
    pub fn is_on(self) -> bool {
        self.to.is_some()
    }

    /// Starts a piece of work: `total` items of `unit` (see [`Task`]).
    pub fn start(self, unit: &'static str, total: Option<u64>, bytes: Bytes) {
        if let Some(p) = self.to {
            p.start(&Task {
                label: self.label,
                unit,
                total,
                bytes,
            });
        }
    }

    /// See [`Progress::bytes`].
    #[inline]
    pub fn bytes(self, n: u64) {
        if let Some(p) = self.to {
            p.bytes(n);
        }
    }

    /// See [`Progress::done`].
    #[inline]
    pub fn done(self, n: u64) {
        if let Some(p) = self.to
            && n > 0
        {
            p.done(n);
        }
    }

    /// See [`Progress::finish`].
    pub fn finish(self) {
        if let Some(p) = self.to {
            p.finish();
        }
    }
}
