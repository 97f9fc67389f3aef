//! `--metrics-file PATH` (SPEC §20): after a command that changes or checks destinations,
//! its gauges in node_exporter's textfile format, one series per destination, labelled
//! `{command,pipeline,destination}`: when it last ran, when it last succeeded, how long it
//! took, what it wrote, deleted and found in conflict, and its exit code.
//!
//! The file is written under a lock on `PATH.lock`, to a new file of a name no one can
//! predict (`PATH.<pid>.<random>.tmp`), and renamed over `PATH`: the textfile collector
//! never reads half a file, and no name another user plants in the directory is followed
//! ([`super::place`]). `last_success` of every series
//! this run did not succeed on (another destination, another command sharing the file, or
//! a failure now) is carried over from the previous file. One file per (config, command)
//! is the documented practice.

use super::place::{MetricsFileError, Place};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// One destination's result in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    /// Destination id.
    pub destination: String,
    /// Files and links written.
    pub files_written: u64,
    /// Files and links deleted.
    pub files_deleted: u64,
    /// Conflicts found.
    pub conflicts: u64,
    /// The destination's run succeeded (written, unchanged or skipped; not failed or in
    /// conflict).
    pub success: bool,
}

/// What a command's run gives the metrics file.
#[derive(Debug, Clone, Default)]
pub(crate) struct Run {
    /// The pipeline.
    pub pipeline: String,
    /// One row per destination the command looked at.
    pub rows: Vec<Row>,
}

impl Row {
    /// The row of a command that writes nothing (`verify`, `status`, `recover`): only
    /// whether it succeeded at `destination`.
    pub(crate) fn checked(destination: &str, success: bool) -> Row {
        Row {
            destination: destination.to_string(),
            files_written: 0,
            files_deleted: 0,
            conflicts: 0,
            success,
        }
    }
}

impl Run {
    /// The rows of a `publish`, `plan` or `rollback` report.
    pub(crate) fn of_report(report: &crate::report::Report) -> Run {
        use crate::report::Status;
        Run {
            pipeline: report.pipeline_id.clone(),
            rows: (report.destinations.iter())
                .map(|d| {
                    let c = super::Counts::of(d);
                    Row {
                        destination: d.destination_id.clone(),
                        files_written: c.written,
                        files_deleted: c.deleted,
                        conflicts: c.conflicts,
                        success: !matches!(d.status, Status::Failed | Status::Conflict),
                    }
                })
                .collect(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct Labels {
    command: String,
    pipeline: String,
    destination: String,
}

type G = Gauge<f64, AtomicU64>;

/// Writes the gauges of `run` (command `command`, `elapsed`, exit code `code`) to `path`.
pub(crate) fn write(
    path: &Path,
    command: &str,
    run: &Run,
    elapsed: Duration,
    code: crate::error::ExitCode,
) -> Result<(), MetricsFileError> {
    let place = Place::open(path)?;
    let lock = place.lock()?;
    let previous = place
        .previous()?
        .map(|text| last_successes(&text))
        .unwrap_or_default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut registry = Registry::default();
    let family = |registry: &mut Registry, name: &str, help: &str| {
        let f = Family::<Labels, G>::default();
        registry.register(name, help, f.clone());
        f
    };
    let last_run = family(
        &mut registry,
        "distributor_last_run_timestamp_seconds",
        "When distributor last ran this command on this destination (Unix time)",
    );
    let last_success = family(
        &mut registry,
        "distributor_last_success_timestamp_seconds",
        "When this command last succeeded on this destination (Unix time)",
    );
    let duration = family(
        &mut registry,
        "distributor_last_run_duration_seconds",
        "How long the last run of this command took",
    );
    let written = family(
        &mut registry,
        "distributor_last_run_files_written",
        "Files and links the last run wrote to this destination",
    );
    let deleted = family(
        &mut registry,
        "distributor_last_run_files_deleted",
        "Files and links the last run deleted from this destination",
    );
    let conflicts = family(
        &mut registry,
        "distributor_last_run_conflicts",
        "Conflicts the last run found at this destination",
    );
    let exit = family(
        &mut registry,
        "distributor_last_run_exit_code",
        "The exit code of the last run of this command",
    );
    let mut successes = previous;
    for r in &run.rows {
        let l = Labels {
            command: command.to_string(),
            pipeline: run.pipeline.clone(),
            destination: r.destination.clone(),
        };
        last_run.get_or_create(&l).set(now);
        duration.get_or_create(&l).set(elapsed.as_secs_f64());
        written.get_or_create(&l).set(r.files_written as f64);
        deleted.get_or_create(&l).set(r.files_deleted as f64);
        conflicts.get_or_create(&l).set(r.conflicts as f64);
        exit.get_or_create(&l).set(f64::from(code.code()));
        if r.success {
            successes.insert(l, now);
        }
    }
    for (l, t) in &successes {
        last_success.get_or_create(l).set(*t);
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).map_err(|_| {
        MetricsFileError::Render {
            path: place.path().to_path_buf(),
        }
    })?;
    place.replace(&text)?;
    drop(lock);
    Ok(())
}

/// The `distributor_last_success_timestamp_seconds` series of a previous file.
fn last_successes(text: &str) -> BTreeMap<Labels, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("distributor_last_success_timestamp_seconds{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let mut l = Labels {
            command: String::new(),
            pipeline: String::new(),
            destination: String::new(),
        };
        // Label values are configured ids and command names: no quotes or commas inside.
        for pair in labels.split(',') {
            let Some((k, v)) = pair.split_once('=') else {
                continue;
            };
            let v = v.trim_matches('"').to_string();
            match k {
                "command" => l.command = v,
                "pipeline" => l.pipeline = v,
                "destination" => l.destination = v,
                _ => {}
            }
        }
        if !l.command.is_empty() {
            out.insert(l, value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(d: &str, success: bool) -> Row {
        Row {
            destination: d.into(),
            files_written: 3,
            files_deleted: 1,
            conflicts: u64::from(!success),
            success,
        }
    }

    #[test]
    fn success_times_carry_over_and_failures_keep_the_last_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("distributor.prom");
        let run = |rows: Vec<Row>| Run {
            pipeline: "weather".into(),
            rows,
        };
        write(
            &path,
            "publish",
            &run(vec![row("a", true), row("b", true)]),
            Duration::from_millis(1500),
            crate::error::ExitCode::Success,
        )
        .unwrap();
        let first = last_successes(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(first.len(), 2);
        // b fails now, a is not in this run: both keep their last success.
        write(
            &path,
            "publish",
            &run(vec![row("b", false)]),
            Duration::from_secs(1),
            crate::error::ExitCode::Conflict,
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(last_successes(&text), first, "{text}");
        assert!(
            text.contains("# TYPE distributor_last_run_exit_code gauge"),
            "{text}"
        );
        assert!(
            text.contains(
                "distributor_last_run_exit_code{command=\"publish\",pipeline=\"weather\",destination=\"b\"} 3"
            ),
            "{text}"
        );
        assert!(text.contains("distributor_last_run_conflicts{command=\"publish\",pipeline=\"weather\",destination=\"b\"} 1"), "{text}");
        // No temporary file is left beside it.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    }
}
