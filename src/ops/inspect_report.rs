//! The reports of `status` and `verify` (SPEC §10, §16, §20): each bundle path's exit
//! code, the metrics rows, and the text (full and `--quiet`). What the two share is
//! written once: a bundle path's problem lines and its metrics row.

use crate::error::ExitCode;
use crate::ops::inspect::{BundleDrift, BundleStatus};
use std::fmt::Write;

impl BundleStatus {
    /// Its exit code: an unreadable bundle path (or a bad log entry) is 1, pending
    /// recovery 4 (SPEC §10 precedence).
    pub(crate) fn exit_code(&self) -> ExitCode {
        match (self.error.as_ref(), self.recovery_pending) {
            (Some(_), _) => ExitCode::Failed,
            // An untrusted record is decided before a pending recovery (SPEC §17).
            _ if self.untrusted_record.is_some() => ExitCode::Conflict,
            _ if self.log_error.is_some() => ExitCode::Failed,
            (None, true) => ExitCode::RecoveryRequired,
            _ if self.release_moved.is_some() => ExitCode::Conflict,
            (None, false) => ExitCode::Success,
        }
    }
}

impl BundleDrift {
    /// Its exit code: an unverifiable bundle path is 1, pending recovery 4, drift 3
    /// (SPEC §10 precedence).
    pub(crate) fn exit_code(&self) -> ExitCode {
        match (self.error.as_ref(), self.recovery_pending, self.drifted()) {
            (Some(_), _, _) => ExitCode::Failed,
            // An untrusted record is decided before a pending recovery (SPEC §17).
            _ if self.untrusted_record.is_some() => ExitCode::Conflict,
            _ if self.log_error.is_some() => ExitCode::Failed,
            (None, true, _) => ExitCode::RecoveryRequired,
            (None, false, true) => ExitCode::Conflict,
            (None, false, false) => ExitCode::Success,
        }
    }
}

/// The metrics of a command that writes nothing: a row per bundle path, `(destination
/// id, exit code)`, saying only whether it succeeded.
pub(crate) fn checked_metrics<'a>(
    pipeline_id: &str,
    rows: impl Iterator<Item = (&'a str, ExitCode)>,
) -> crate::metrics::file::Run {
    crate::metrics::file::Run {
        pipeline: pipeline_id.to_string(),
        rows: rows
            .map(|(d, c)| crate::metrics::file::Row::checked(d, c.is_success()))
            .collect(),
    }
}

/// The lines a bundle path's problems take in `status` and `verify` text: its invalid
/// state (headed `invalid`), its error, an untrusted record, the destination log's bad
/// entries.
fn problem_lines(
    out: &mut String,
    invalid: (&str, Option<&String>),
    error: Option<&String>,
    untrusted_record: Option<&String>,
    release_moved: Option<&String>,
    log_error: Option<&String>,
) {
    if let (head, Some(r)) = invalid {
        let _ = writeln!(out, "  {head}: {r}");
    }
    if let Some(e) = error {
        let _ = writeln!(out, "  error: {e}");
    }
    if let Some(u) = untrusted_record {
        let _ = writeln!(out, "  untrusted_record: {u}");
    }
    if let Some(m) = release_moved {
        let _ = writeln!(out, "  release_moved: {m}");
    }
    if let Some(e) = log_error {
        let _ = writeln!(out, "  error: {e}");
    }
}

/// `status` as text: each bundle path's state, problems, owners, releases, and a pending
/// recovery or a publication under way.
pub(crate) fn status_text(st: &[BundleStatus]) -> String {
    let mut out = String::new();
    for s in st {
        let _ = writeln!(
            out,
            "destination {} -> {}: state {}",
            s.destination_id, s.bundle_path, s.state
        );
        problem_lines(
            &mut out,
            ("invalid", s.invalid_reason.as_ref()),
            s.error.as_ref(),
            s.untrusted_record.as_ref(),
            s.release_moved.as_ref(),
            s.log_error.as_ref(),
        );
        for o in &s.owners {
            let _ = writeln!(
                out,
                "  owner {}: source {} created {}, {} outputs, {} links, published {} by operation {}",
                o.owner,
                o.source.id,
                o.source.created_at,
                o.outputs,
                o.links,
                o.published_at,
                o.operation_id
            );
        }
        for r in s.releases.iter().flatten() {
            let when = match (&r.activated_at, &r.staged_at) {
                (Some(a), _) => format!("activated {a}"),
                // A staged release (SPEC §19): `distributor promote` activates it.
                (None, Some(st)) => format!("staged {st}, not promoted"),
                (None, None) => "activated never".to_string(),
            };
            let _ = writeln!(
                out,
                "  release {}: {when}; {} ({})",
                r.release,
                if r.keep { "kept" } else { "would be pruned" },
                r.reason
            );
        }
        if let Some(what) = &s.recovery {
            let _ = writeln!(out, "  recovery pending: {what}");
        }
        if let Some(who) = &s.busy {
            let _ = writeln!(
                out,
                "  busy: another distributor process is publishing here now ({who})"
            );
        }
    }
    out
}

/// `status --quiet` (SPEC §16, as §20 amends it): a line for every bundle path that could
/// not be read, waits for recovery, or holds an untrusted record or an invalid state,
/// saying why, then the summary.
pub(crate) fn status_quiet_text(st: &[BundleStatus]) -> String {
    let mut out = String::new();
    let (mut valid, mut absent, mut invalid) = (0, 0, 0);
    let (mut pending, mut busy, mut errors) = (0, 0, 0);
    for s in st {
        match s.state {
            "valid" => valid += 1,
            "absent" => absent += 1,
            "invalid" => invalid += 1,
            _ => {}
        }
        busy += usize::from(s.busy.is_some());
        let why = if let Some(e) = s.error.as_ref().or(s.log_error.as_ref()) {
            errors += 1;
            format!("error: {e}")
        } else if let Some(u) = &s.untrusted_record {
            format!("untrusted_record: {u}")
        } else if let Some(what) = &s.recovery {
            pending += 1;
            format!("recovery pending: {what}")
        } else if let Some(r) = &s.invalid_reason {
            format!("invalid: {r}")
        } else {
            continue;
        };
        let _ = writeln!(
            out,
            "destination {} -> {}: {why}",
            s.destination_id, s.bundle_path
        );
    }
    let _ = writeln!(
        out,
        "summary: {} bundle path(s); {valid} valid, {absent} absent, {invalid} invalid, {pending} recovery pending, {busy} busy, {errors} error(s)",
        st.len()
    );
    out
}

/// `verify` as text: each bundle path's verdict, problems, the counts of its drifted
/// paths and the paths (at most [`crate::report::FILE_LINES`] unless `every_file`).
pub(crate) fn verify_text(drift: &[BundleDrift], every_file: bool) -> String {
    let mut out = String::new();
    for d in drift {
        let verdict = if d.error.is_some() {
            "error"
        } else if d.recovery_pending {
            "recovery pending, not compared"
        } else if d.busy.is_some() {
            "busy, not compared"
        } else if d.drifted() {
            "drift"
        } else {
            "ok"
        };
        let _ = writeln!(
            out,
            "destination {} -> {}: state {}, {verdict}",
            d.destination_id, d.bundle_path, d.state
        );
        problem_lines(
            &mut out,
            ("invalid state", d.invalid_reason.as_ref()),
            d.error.as_ref(),
            d.untrusted_record.as_ref(),
            d.release_moved.as_ref(),
            d.log_error.as_ref(),
        );
        if let Some(m) = &d.log_mismatch {
            let _ = writeln!(out, "  log_mismatch: {m}");
        }
        if let Some(m) = &d.log_chain_broken {
            let _ = writeln!(out, "  log_chain_broken: {m}");
        }
        if let Some(what) = &d.recovery {
            let _ = writeln!(out, "  {what}");
        }
        if let Some(who) = &d.busy {
            let _ = writeln!(
                out,
                "  another distributor process is publishing here now ({who})"
            );
        }
        drifted_paths(&mut out, d, every_file);
    }
    out
}

/// A bundle path's drifted paths in `verify` text: their counts by kind (and the
/// unrecorded ones `verify.ignore` passes over), then the paths.
fn drifted_paths(out: &mut String, d: &BundleDrift, every_file: bool) {
    let lists = [
        ("missing", &d.missing),
        ("modified", &d.modified),
        ("unrecorded", &d.unrecorded),
    ];
    let mut counts: Vec<String> = lists
        .iter()
        .filter(|(_, l)| !l.is_empty())
        .map(|(what, l)| format!("{} {what}", l.len()))
        .collect();
    if d.ignored > 0 {
        counts.push(format!("{} unrecorded ignored (verify.ignore)", d.ignored));
    }
    if !counts.is_empty() {
        let _ = writeln!(out, "  {}", counts.join(", "));
    }
    let all: Vec<(&str, &String)> = lists
        .iter()
        .flat_map(|(what, l)| l.iter().map(move |p| (*what, p)))
        .collect();
    let shown = if every_file {
        all.len()
    } else {
        all.len().min(crate::report::FILE_LINES)
    };
    for (what, p) in &all[..shown] {
        let _ = writeln!(out, "  {what:<10} {p}");
    }
    if shown < all.len() {
        let _ = writeln!(
            out,
            "  ... and {} more (--files lists every one, --json has them all)",
            all.len() - shown
        );
    }
}

/// `verify --quiet` (SPEC §16, as §20 amends it): a line for every bundle path that could
/// not be verified, drifted or waits for recovery, saying why, then the summary.
pub(crate) fn verify_quiet_text(drift: &[BundleDrift]) -> String {
    let mut out = String::new();
    let (mut ok, mut drifted, mut pending, mut busy, mut errors) = (0, 0, 0, 0, 0);
    for d in drift {
        let why = if let Some(e) = d.error.as_ref().or(d.log_error.as_ref()) {
            errors += 1;
            format!("error: {e}")
        } else if let Some(u) = &d.untrusted_record {
            drifted += 1;
            format!("untrusted_record: {u}")
        } else if let Some(what) = &d.recovery {
            pending += 1;
            format!("recovery pending: {what}")
        } else if d.busy.is_some() {
            busy += 1;
            continue;
        } else if d.drifted() {
            drifted += 1;
            format!("drift: {}", drift_reason(d))
        } else {
            ok += 1;
            continue;
        };
        let _ = writeln!(
            out,
            "destination {} -> {}: {why}",
            d.destination_id, d.bundle_path
        );
    }
    let _ = writeln!(
        out,
        "summary: {} bundle path(s); {ok} ok, {drifted} drift, {pending} recovery pending, {busy} busy, {errors} error(s)",
        drift.len()
    );
    out
}

/// Why a bundle path drifted, in one line: the counts and the first path of each list, an
/// invalid state's reason, a log mismatch.
fn drift_reason(d: &BundleDrift) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(r) = &d.invalid_reason {
        parts.push(format!("invalid state: {r}"));
    }
    for (what, l) in [
        ("missing", &d.missing),
        ("modified", &d.modified),
        ("unrecorded", &d.unrecorded),
    ] {
        match l.as_slice() {
            [] => {}
            [one] => parts.push(format!("1 {what} ({one})")),
            [first, ..] => parts.push(format!("{} {what} (first {first})", l.len())),
        }
    }
    if let Some(m) = &d.log_mismatch {
        parts.push(format!("log_mismatch: {m}"));
    }
    parts.join(", ")
}
