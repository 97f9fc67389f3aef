//! distributor publishes producer bundles into configured destinations without ever
//! claiming content it does not own.
//!
//! The pipeline, and where each step lives:
//!
//! 1. [`config`]: the pipeline's YAML, validated whole before anything else runs.
//! 2. [`source`]: the bundle's manifest, safe paths, structure and size checks, digest.
//! 3. [`backend::local`]: probes a bundle path into a [`plan::Storage`] listing, reads
//!    [`state`]; it is the only code that writes to destinations.
//! 4. [`plan`]: the pure planner: decisions, takeover policy, conflicts, reconciliation.
//! 5. [`journal`]: the append-only SQLite journal every operation is written to first.
//! 6. [`execute`]: runs a plan through the journal: stage, move aside, place, commit.
//! 7. [`report`]: renders plans and outcomes as text or JSON.
//!
//! [`ops::publish`] ties 1-7 together for the CLI ([`cli`]) and the HTTP server ([`server`]). [`ops::inspect`]
//! holds the read-only `status` and `verify` ([`log_mismatch`] judges a state against the
//! destination log); [`dest_log`] prints each destination's own log (`backend::local::log`).
//! [`ops::recover`] finishes or undoes interrupted operations from the journal and staging;
//! [`journal::query`] serves `history`. Long work counts what it did through [`progress`].

#![forbid(unsafe_code)]
#![deny(unused_must_use)]
#![warn(missing_docs)]
// An item is `pub` only where a binary or a test reaches it: one inside a crate-private
// module says `pub(crate)` (or narrower), so what is the library's surface reads off the
// declaration.
#![warn(unreachable_pub)]

pub mod backend;
pub mod cli;
pub(crate) mod clock;
pub mod config;
pub(crate) mod dest_log;
pub mod error;
pub mod execute;
pub mod failpoint;
pub(crate) mod fs;
pub(crate) mod globs;
pub mod hash;
pub(crate) mod hooks;
pub(crate) mod input;
pub mod journal;
pub(crate) mod limits;
pub(crate) mod log_mismatch;
pub(crate) mod metrics;
pub mod model;
pub mod ops;
pub(crate) mod ordered;
pub(crate) mod parallel;
pub(crate) mod paths;
pub(crate) mod plan;
pub mod progress;
pub mod record;
pub(crate) mod report;
pub(crate) mod server;
pub mod source;
pub mod state;
pub(crate) mod units;

pub use error::{Error, Result};
