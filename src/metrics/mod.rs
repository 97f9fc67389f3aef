//! Metrics (SPEC §20): `serve`'s `/metrics` (Prometheus text, through `prometheus-client`)
//! and every command's `--metrics-file` (gauges in node_exporter's textfile format).
//!
//! Labels take only configured ids and closed sets: a destination's outcome (its report
//! status), conflict kinds, a recovery's outcome, an upload rejection's error kind. Never a
//! path, a key, a token or a value from a request.
//!
//! Must never: put anything a client sent into a label, or leave a torn metrics file (it
//! is written beside and renamed over, under a lock).

pub(crate) mod file;
pub(crate) mod place;

use crate::report::Report;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

/// Histogram buckets, seconds (SPEC §20).
pub(crate) const BUCKETS: [f64; 9] = [0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Dest {
    pipeline: String,
    destination: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DestOutcome {
    pipeline: String,
    destination: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DestKind {
    pipeline: String,
    destination: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Version {
    version: String,
}

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// `serve`'s metrics.
#[derive(Debug)]
pub(crate) struct ServeMetrics {
    registry: Registry,
    publications: Family<DestOutcome, Counter>,
    files_written: Family<Dest, Counter>,
    bytes_written: Family<Dest, Counter>,
    files_deleted: Family<Dest, Counter>,
    conflicts: Family<DestKind, Counter>,
    duration: Family<Dest, Histogram, fn() -> Histogram>,
    lock_wait: Histogram,
    rejected: Family<Reason, Counter>,
}

impl Default for ServeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ServeMetrics {
    /// Every metric registered, `distributor_build_info` set.
    pub(crate) fn new() -> ServeMetrics {
        let mut registry = Registry::default();
        let publications = Family::<DestOutcome, Counter>::default();
        registry.register(
            "distributor_publications",
            "Publications by destination and outcome (applied, staged, skipped, conflict, failed)",
            publications.clone(),
        );
        let files_written = Family::<Dest, Counter>::default();
        registry.register(
            "distributor_files_written",
            "Files written by publications",
            files_written.clone(),
        );
        let bytes_written = Family::<Dest, Counter>::default();
        registry.register(
            "distributor_bytes_written",
            "Bytes written by publications",
            bytes_written.clone(),
        );
        let files_deleted = Family::<Dest, Counter>::default();
        registry.register(
            "distributor_files_deleted",
            "Files deleted by publications",
            files_deleted.clone(),
        );
        let conflicts = Family::<DestKind, Counter>::default();
        registry.register(
            "distributor_conflicts",
            "Conflicts found by publications, by kind",
            conflicts.clone(),
        );
        let duration = Family::<Dest, Histogram, fn() -> Histogram>::new_with_constructor(
            histogram as fn() -> Histogram,
        );
        registry.register(
            "distributor_publication_duration_seconds",
            "How long a publication of one destination took, lock wait included",
            duration.clone(),
        );
        // `serve` runs no recovery: the family is there, with no samples, for
        // dashboards that name it.
        registry.register(
            "distributor_recoveries",
            "Operations recover finished, by outcome",
            Family::<Outcome, Counter>::default(),
        );
        let lock_wait = histogram();
        registry.register(
            "distributor_lock_wait_seconds",
            "How long publications waited for a destination lock",
            lock_wait.clone(),
        );
        let rejected = Family::<Reason, Counter>::default();
        registry.register(
            "distributor_uploads_rejected",
            "Uploads refused before publishing, by error kind",
            rejected.clone(),
        );
        let build = Family::<Version, Gauge>::default();
        registry.register(
            "distributor_build_info",
            "This distributor's version (always 1)",
            build.clone(),
        );
        build
            .get_or_create(&Version {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        ServeMetrics {
            registry,
            publications,
            files_written,
            bytes_written,
            files_deleted,
            conflicts,
            duration,
            lock_wait,
            rejected,
        }
    }

    /// Counts a publication's report: per destination its outcome, files and bytes,
    /// conflicts by kind, and `elapsed` (the whole publication, shared by its destinations).
    pub(crate) fn publication(&self, report: &Report, elapsed: Duration) {
        for d in &report.destinations {
            let dest = Dest {
                pipeline: report.pipeline_id.clone(),
                destination: d.destination_id.clone(),
            };
            self.publications
                .get_or_create(&DestOutcome {
                    pipeline: dest.pipeline.clone(),
                    destination: dest.destination.clone(),
                    outcome: status_word(d.status).to_string(),
                })
                .inc();
            let counts = Counts::of(d);
            self.files_written
                .get_or_create(&dest)
                .inc_by(counts.written);
            self.bytes_written.get_or_create(&dest).inc_by(counts.bytes);
            self.files_deleted
                .get_or_create(&dest)
                .inc_by(counts.deleted);
            for c in &d.conflicts {
                self.conflicts
                    .get_or_create(&DestKind {
                        pipeline: dest.pipeline.clone(),
                        destination: dest.destination.clone(),
                        kind: c.kind.to_string(),
                    })
                    .inc();
            }
            self.duration
                .get_or_create(&dest)
                .observe(elapsed.as_secs_f64());
            if let Some(w) = d.lock_wait {
                self.lock_wait.observe(w.as_secs_f64());
            }
        }
    }

    /// Counts an upload refused before it was published; `reason` is the error's kind (a
    /// closed set: `invalid_bundle`, `too_large`, `unauthorized`, ...).
    pub(crate) fn rejected(&self, reason: &'static str) {
        self.rejected
            .get_or_create(&Reason {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// The metrics in the text format.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

fn status_word(s: crate::report::Status) -> &'static str {
    use crate::report::Status::*;
    match s {
        Planned => "planned",
        Applied => "applied",
        Staged => "staged",
        Skipped => "skipped",
        Conflict => "conflict",
        Failed => "failed",
    }
}

/// What one destination's run wrote and deleted.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    /// Files and links written.
    pub written: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Files and links deleted.
    pub deleted: u64,
    /// Conflicts.
    pub conflicts: u64,
}

impl Counts {
    /// The counts of a destination's report entry; nothing for a run that wrote nothing.
    pub(crate) fn of(d: &crate::report::DestinationReport) -> Counts {
        use crate::model::FileOp;
        let mut c = Counts {
            conflicts: d.conflicts.len() as u64,
            ..Counts::default()
        };
        if d.status != crate::report::Status::Applied {
            return c;
        }
        for f in d.files.iter() {
            match f.op {
                FileOp::Create | FileOp::Overwrite => {
                    c.written += 1;
                    c.bytes += f.size;
                }
                FileOp::Delete => c.deleted += 1,
                FileOp::Unchanged | FileOp::Retain => {}
            }
        }
        for l in &d.links {
            match l.op {
                FileOp::Create | FileOp::Overwrite => c.written += 1,
                FileOp::Delete => c.deleted += 1,
                FileOp::Unchanged | FileOp::Retain => {}
            }
        }
        c
    }
}
