//! The takeover policy matrix (SPEC §5.1-5.3), through the real binary: every
//! `takeover.mode` against every existing-destination situation, in both state modes, each
//! run plain, with `--force`, and with `--force` under `transfer.on_conflict: refuse`; on
//! both backends (`<test>::local`, `<test>::s3`: SPEC §14, "every rule of §4-5 holds").
//!
//! The expected results are written out per row from the SPEC tables; nothing here
//! re-derives them from the planner, and one table serves both backends. Every "existing"
//! situation is built by really publishing first (another config, pipeline or bundle), or
//! by writing the state file by hand where no publication could produce it (invalid state,
//! another `state_version`).

use crate::common::backend::{Backend, Mark, World, per_backend};
use serde_json::Value;
use std::collections::BTreeSet;

/// The current publication: pipeline `weather`, destination `latest`, source `tomorrow`.
const ME: &str = "weather/latest";
const NEW_ID: &str = "tomorrow";
const NEW_AT: &str = "2026-12-02T07:00:00Z";
const NEW_FILES: &[(&str, &str)] = &[("a.txt", "new a"), ("b.txt", "new b")];
/// Every "existing" publication is older and holds `a.txt` (which collides with the
/// current bundle) and `old.txt` (which the current bundle omits).
const OLD_AT: &str = "2026-12-02T06:00:00Z";
const OLD_FILES: &[(&str, &str)] = &[("a.txt", "old a"), ("old.txt", "old only")];
const DEST: &str = "dest";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    SingleOwner,
    SharedRoot,
}
use Mode::{SharedRoot as SR, SingleOwner as SO};

impl Mode {
    fn yaml(self) -> &'static str {
        match self {
            SO => "single_owner",
            SR => "shared_root",
        }
    }
    fn other(self) -> Mode {
        match self {
            SO => SR,
            SR => SO,
        }
    }
}

/// What stands at the bundle path before the current publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Situation {
    /// Empty destination.
    NoState,
    /// `weather/latest` published `tomorrow`, older.
    SameOwner,
    /// `weather/other` published `other-src` (shared root: owns `a.txt`).
    OtherDestination,
    /// `radar/latest` published `radar-src` (shared root: owns `a.txt`).
    OtherPipeline,
    /// `weather/latest` published `older-src`.
    OtherSourceId,
    /// `radar/latest` published `tomorrow`, older (shared root: owns `a.txt`).
    SameSourceOtherPipeline,
    /// A real publication whose `.distributor.json` is then garbage.
    InvalidState,
    /// A real publication whose state then says `state_version: 3`.
    FutureStateVersion,
    /// A real publication whose state is then rewritten as the other backend's valid
    /// state: local gets `state_version: 2` with an ETag per output, s3 gets
    /// `state_version: 1` without them (SPEC §14: local state stays version 1).
    ForeignStateVersion,
    /// `weather/latest` published in the other state mode.
    StateModeMismatch,
    /// An unrecorded file at `a.txt`, no state.
    UnmanagedFile,
    /// An unrecorded directory at `a.txt`, no state.
    UnmanagedDirectory,
}
use Situation::*;

impl Situation {
    /// Another owner or source stands there: the rows of SPEC §5.2's table, whose outcome
    /// the takeover mode decides.
    fn takeover_decides(self) -> bool {
        matches!(
            self,
            OtherDestination | OtherPipeline | OtherSourceId | SameSourceOtherPipeline
        )
    }
}

/// The expected outcome of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Exp {
    /// A writing decision, exit 0.
    W(&'static str),
    /// `conflict`, exit 3, these kinds (as a set), every conflict with this `forceable`.
    C(&'static [&'static str], bool),
}
use Exp::{C, W};

/// `conflict` with forceable conflicts.
const fn cf(kinds: &'static [&'static str]) -> Exp {
    C(kinds, true)
}
/// `conflict` with conflicts `--force` may not override.
const fn cn(kinds: &'static [&'static str]) -> Exp {
    C(kinds, false)
}

/// One `takeovers` entry: from_owner, from_source_id, paths.
type Tk = (&'static str, &'static str, &'static [&'static str]);

/// One case: the expectation for a plain run, `--force`, and `--force` with
/// `transfer.on_conflict: refuse`; `previous` (owner, source id) as reported by every run;
/// and `takeovers` as listed when the decision is `replace_takeover` or `force_replace`.
struct Case {
    mode: Mode,
    situation: Situation,
    takeover: &'static str,
    runs: [Exp; 3],
    previous: Option<(&'static str, &'static str)>,
    takeovers: &'static [Tk],
}

const fn case(
    mode: Mode,
    situation: Situation,
    takeover: &'static str,
    runs: [Exp; 3],
    previous: Option<(&'static str, &'static str)>,
    takeovers: &'static [Tk],
) -> Case {
    Case {
        mode,
        situation,
        takeover,
        runs,
        previous,
        takeovers,
    }
}

const A: &[&str] = &["a.txt"];
const TK_NONE: &[Tk] = &[];
const TK_OTHER_DEST: &[Tk] = &[("weather/other", "other-src", A)];
const TK_RADAR: &[Tk] = &[("radar/latest", "radar-src", A)];
const TK_OWN_OLDER_SRC: &[Tk] = &[("weather/latest", "older-src", A)];
const TK_RADAR_SAME_ID: &[Tk] = &[("radar/latest", "tomorrow", A)];
const PREV_ME: Option<(&str, &str)> = Some((ME, NEW_ID));
const PREV_OWN_OLDER_SRC: Option<(&str, &str)> = Some((ME, "older-src"));
const PREV_OTHER_DEST: Option<(&str, &str)> = Some(("weather/other", "other-src"));
const PREV_RADAR: Option<(&str, &str)> = Some(("radar/latest", "radar-src"));
const PREV_RADAR_SAME_ID: Option<(&str, &str)> = Some(("radar/latest", "tomorrow"));

const INVALID: &[&str] = &["invalid_state", "unmanaged_content"];
const UNMANAGED: &[&str] = &["unmanaged_content"];
const UNMANAGED_DIR: &[&str] = &["unmanaged_directory"];
const MISMATCH: &[&str] = &["state_mode_mismatch"];
const PIPELINE: &[&str] = &["pipeline_differs"];
const DESTINATION: &[&str] = &["destination_differs"];
const SOURCE_ID: &[&str] = &["source_id_differs"];
const OWNER: &[&str] = &["owner_conflict"];

const CREATE: [Exp; 3] = [W("create"), W("create"), W("create")];
const OLDER: [Exp; 3] = [W("replace_older"), W("replace_older"), W("replace_older")];
const TAKEOVER: [Exp; 3] = [
    W("replace_takeover"),
    W("replace_takeover"),
    W("replace_takeover"),
];
/// A forceable conflict: `--force` replaces, `refuse` keeps the conflict.
const fn forceable(kinds: &'static [&'static str]) -> [Exp; 3] {
    [cf(kinds), W("force_replace"), cf(kinds)]
}
/// A conflict `--force` cannot override.
const fn unforceable(kinds: &'static [&'static str]) -> [Exp; 3] {
    [cn(kinds), cn(kinds), cn(kinds)]
}

/// One row per case. Read with SPEC §5.1 (decisions), §5.2 (takeover table) and §5.3
/// (conflict kinds and `forceable`).
#[rustfmt::skip]
const CASES: &[Case] = &[
    // ---- single owner ----
    case(SO, NoState, "same_pipeline", CREATE, None, TK_NONE),
    case(SO, NoState, "same_source", CREATE, None, TK_NONE),
    case(SO, NoState, "any_managed", CREATE, None, TK_NONE),
    case(SO, NoState, "never", CREATE, None, TK_NONE),

    case(SO, SameOwner, "same_pipeline", OLDER, PREV_ME, TK_NONE),
    case(SO, SameOwner, "same_source", OLDER, PREV_ME, TK_NONE),
    case(SO, SameOwner, "any_managed", OLDER, PREV_ME, TK_NONE),
    case(SO, SameOwner, "never", OLDER, PREV_ME, TK_NONE),

    case(SO, OtherDestination, "same_pipeline", TAKEOVER, PREV_OTHER_DEST, TK_OTHER_DEST),
    case(SO, OtherDestination, "same_source", forceable(SOURCE_ID), PREV_OTHER_DEST, TK_OTHER_DEST),
    case(SO, OtherDestination, "any_managed", TAKEOVER, PREV_OTHER_DEST, TK_OTHER_DEST),
    case(SO, OtherDestination, "never", forceable(DESTINATION), PREV_OTHER_DEST, TK_OTHER_DEST),

    case(SO, OtherPipeline, "same_pipeline", forceable(PIPELINE), PREV_RADAR, TK_RADAR),
    case(SO, OtherPipeline, "same_source", forceable(SOURCE_ID), PREV_RADAR, TK_RADAR),
    case(SO, OtherPipeline, "any_managed", TAKEOVER, PREV_RADAR, TK_RADAR),
    case(SO, OtherPipeline, "never", forceable(PIPELINE), PREV_RADAR, TK_RADAR),

    case(SO, OtherSourceId, "same_pipeline", TAKEOVER, PREV_OWN_OLDER_SRC, TK_OWN_OLDER_SRC),
    case(SO, OtherSourceId, "same_source", forceable(SOURCE_ID), PREV_OWN_OLDER_SRC, TK_OWN_OLDER_SRC),
    case(SO, OtherSourceId, "any_managed", TAKEOVER, PREV_OWN_OLDER_SRC, TK_OWN_OLDER_SRC),
    case(SO, OtherSourceId, "never", forceable(SOURCE_ID), PREV_OWN_OLDER_SRC, TK_OWN_OLDER_SRC),

    case(SO, SameSourceOtherPipeline, "same_pipeline", forceable(PIPELINE), PREV_RADAR_SAME_ID, TK_RADAR_SAME_ID),
    case(SO, SameSourceOtherPipeline, "same_source", TAKEOVER, PREV_RADAR_SAME_ID, TK_RADAR_SAME_ID),
    case(SO, SameSourceOtherPipeline, "any_managed", TAKEOVER, PREV_RADAR_SAME_ID, TK_RADAR_SAME_ID),
    case(SO, SameSourceOtherPipeline, "never", forceable(PIPELINE), PREV_RADAR_SAME_ID, TK_RADAR_SAME_ID),

    case(SO, InvalidState, "same_pipeline", forceable(INVALID), None, TK_NONE),
    case(SO, InvalidState, "same_source", forceable(INVALID), None, TK_NONE),
    case(SO, InvalidState, "any_managed", forceable(INVALID), None, TK_NONE),
    case(SO, InvalidState, "never", forceable(INVALID), None, TK_NONE),

    case(SO, FutureStateVersion, "same_pipeline", forceable(INVALID), None, TK_NONE),
    case(SO, FutureStateVersion, "same_source", forceable(INVALID), None, TK_NONE),
    case(SO, FutureStateVersion, "any_managed", forceable(INVALID), None, TK_NONE),
    case(SO, FutureStateVersion, "never", forceable(INVALID), None, TK_NONE),

    case(SO, ForeignStateVersion, "same_pipeline", forceable(INVALID), None, TK_NONE),
    case(SO, ForeignStateVersion, "same_source", forceable(INVALID), None, TK_NONE),
    case(SO, ForeignStateVersion, "any_managed", forceable(INVALID), None, TK_NONE),
    case(SO, ForeignStateVersion, "never", forceable(INVALID), None, TK_NONE),

    case(SO, StateModeMismatch, "same_pipeline", unforceable(MISMATCH), None, TK_NONE),
    case(SO, StateModeMismatch, "same_source", unforceable(MISMATCH), None, TK_NONE),
    case(SO, StateModeMismatch, "any_managed", unforceable(MISMATCH), None, TK_NONE),
    case(SO, StateModeMismatch, "never", unforceable(MISMATCH), None, TK_NONE),

    case(SO, UnmanagedFile, "same_pipeline", forceable(UNMANAGED), None, TK_NONE),
    case(SO, UnmanagedFile, "same_source", forceable(UNMANAGED), None, TK_NONE),
    case(SO, UnmanagedFile, "any_managed", forceable(UNMANAGED), None, TK_NONE),
    case(SO, UnmanagedFile, "never", forceable(UNMANAGED), None, TK_NONE),

    case(SO, UnmanagedDirectory, "same_pipeline", unforceable(UNMANAGED_DIR), None, TK_NONE),
    case(SO, UnmanagedDirectory, "same_source", unforceable(UNMANAGED_DIR), None, TK_NONE),
    case(SO, UnmanagedDirectory, "any_managed", unforceable(UNMANAGED_DIR), None, TK_NONE),
    case(SO, UnmanagedDirectory, "never", unforceable(UNMANAGED_DIR), None, TK_NONE),

    // ---- shared root: "other owner" situations mean that owner's record owns a.txt;
    // `previous` is the current owner's own record only ----
    case(SR, NoState, "same_pipeline", CREATE, None, TK_NONE),
    case(SR, NoState, "same_source", CREATE, None, TK_NONE),
    case(SR, NoState, "any_managed", CREATE, None, TK_NONE),
    case(SR, NoState, "never", CREATE, None, TK_NONE),

    case(SR, SameOwner, "same_pipeline", OLDER, PREV_ME, TK_NONE),
    case(SR, SameOwner, "same_source", OLDER, PREV_ME, TK_NONE),
    case(SR, SameOwner, "any_managed", OLDER, PREV_ME, TK_NONE),
    case(SR, SameOwner, "never", OLDER, PREV_ME, TK_NONE),

    case(SR, OtherDestination, "same_pipeline", TAKEOVER, None, TK_OTHER_DEST),
    case(SR, OtherDestination, "same_source", forceable(OWNER), None, TK_OTHER_DEST),
    case(SR, OtherDestination, "any_managed", TAKEOVER, None, TK_OTHER_DEST),
    case(SR, OtherDestination, "never", forceable(OWNER), None, TK_OTHER_DEST),

    case(SR, OtherPipeline, "same_pipeline", forceable(OWNER), None, TK_RADAR),
    case(SR, OtherPipeline, "same_source", forceable(OWNER), None, TK_RADAR),
    case(SR, OtherPipeline, "any_managed", TAKEOVER, None, TK_RADAR),
    case(SR, OtherPipeline, "never", forceable(OWNER), None, TK_RADAR),

    // The current owner's own record with another source id (SPEC §5.2, last paragraph).
    case(SR, OtherSourceId, "same_pipeline", TAKEOVER, PREV_OWN_OLDER_SRC, TK_OWN_OLDER_SRC),
    case(SR, OtherSourceId, "same_source", forceable(SOURCE_ID), PREV_OWN_OLDER_SRC, TK_OWN_OLDER_SRC),
    case(SR, OtherSourceId, "any_managed", TAKEOVER, PREV_OWN_OLDER_SRC, TK_OWN_OLDER_SRC),
    case(SR, OtherSourceId, "never", forceable(SOURCE_ID), PREV_OWN_OLDER_SRC, TK_OWN_OLDER_SRC),

    case(SR, SameSourceOtherPipeline, "same_pipeline", forceable(OWNER), None, TK_RADAR_SAME_ID),
    case(SR, SameSourceOtherPipeline, "same_source", TAKEOVER, None, TK_RADAR_SAME_ID),
    case(SR, SameSourceOtherPipeline, "any_managed", TAKEOVER, None, TK_RADAR_SAME_ID),
    case(SR, SameSourceOtherPipeline, "never", forceable(OWNER), None, TK_RADAR_SAME_ID),

    case(SR, InvalidState, "same_pipeline", forceable(INVALID), None, TK_NONE),
    case(SR, InvalidState, "same_source", forceable(INVALID), None, TK_NONE),
    case(SR, InvalidState, "any_managed", forceable(INVALID), None, TK_NONE),
    case(SR, InvalidState, "never", forceable(INVALID), None, TK_NONE),

    case(SR, FutureStateVersion, "same_pipeline", forceable(INVALID), None, TK_NONE),
    case(SR, FutureStateVersion, "same_source", forceable(INVALID), None, TK_NONE),
    case(SR, FutureStateVersion, "any_managed", forceable(INVALID), None, TK_NONE),
    case(SR, FutureStateVersion, "never", forceable(INVALID), None, TK_NONE),

    case(SR, ForeignStateVersion, "same_pipeline", forceable(INVALID), None, TK_NONE),
    case(SR, ForeignStateVersion, "same_source", forceable(INVALID), None, TK_NONE),
    case(SR, ForeignStateVersion, "any_managed", forceable(INVALID), None, TK_NONE),
    case(SR, ForeignStateVersion, "never", forceable(INVALID), None, TK_NONE),

    case(SR, StateModeMismatch, "same_pipeline", unforceable(MISMATCH), None, TK_NONE),
    case(SR, StateModeMismatch, "same_source", unforceable(MISMATCH), None, TK_NONE),
    case(SR, StateModeMismatch, "any_managed", unforceable(MISMATCH), None, TK_NONE),
    case(SR, StateModeMismatch, "never", unforceable(MISMATCH), None, TK_NONE),

    case(SR, UnmanagedFile, "same_pipeline", forceable(UNMANAGED), None, TK_NONE),
    case(SR, UnmanagedFile, "same_source", forceable(UNMANAGED), None, TK_NONE),
    case(SR, UnmanagedFile, "any_managed", forceable(UNMANAGED), None, TK_NONE),
    case(SR, UnmanagedFile, "never", forceable(UNMANAGED), None, TK_NONE),

    case(SR, UnmanagedDirectory, "same_pipeline", unforceable(UNMANAGED_DIR), None, TK_NONE),
    case(SR, UnmanagedDirectory, "same_source", unforceable(UNMANAGED_DIR), None, TK_NONE),
    case(SR, UnmanagedDirectory, "any_managed", unforceable(UNMANAGED_DIR), None, TK_NONE),
    case(SR, UnmanagedDirectory, "never", unforceable(UNMANAGED_DIR), None, TK_NONE),
];

/// The three ways each case runs.
const RUNS: [(&str, bool, bool); 3] = [
    ("plain", false, false),
    ("--force", true, false),
    ("--force with on_conflict: refuse", true, true),
];

/// Destination keys for `state.mode`, `takeover.mode` and optionally `on_conflict: refuse`.
fn dest_yaml(mode: Mode, takeover: Option<&str>, refuse: bool) -> String {
    let mut s = format!("    state:\n      mode: {}\n", mode.yaml());
    if let Some(t) = takeover {
        s.push_str(&format!("    takeover:\n      mode: {t}\n"));
    }
    if refuse {
        s.push_str("    transfer:\n      on_conflict: refuse\n");
    }
    s
}

/// Publishes `OLD_FILES` as `pipeline/dest` with source `id` into `DEST`, in `mode`.
fn publish_existing(w: &World, mode: Mode, pipeline: &str, dest: &str, id: &str) {
    let cfg = w.simple_config(
        &format!("existing-{pipeline}-{dest}-{}.yaml", mode.yaml()),
        pipeline,
        dest,
        DEST,
        &dest_yaml(mode, None, false),
    );
    let b = w.bundle(&format!("existing-{id}"), id, OLD_AT, OLD_FILES, &[]);
    let r = w.publish(&cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "create", "setup publication: {}", r.stdout);
}

/// Rewrites the state at `DEST` by hand.
fn rewrite_state(w: &World, edit: impl FnOnce(&mut Value)) {
    let mut s = w.state(DEST);
    edit(&mut s);
    w.write_state(DEST, &serde_json::to_string_pretty(&s).unwrap());
}

/// Builds `situation` at `DEST` for a current destination in `mode`.
fn build(w: &World, mode: Mode, situation: Situation) {
    match situation {
        NoState => {}
        SameOwner => publish_existing(w, mode, "weather", "latest", NEW_ID),
        OtherDestination => publish_existing(w, mode, "weather", "other", "other-src"),
        OtherPipeline => publish_existing(w, mode, "radar", "latest", "radar-src"),
        OtherSourceId => publish_existing(w, mode, "weather", "latest", "older-src"),
        SameSourceOtherPipeline => publish_existing(w, mode, "radar", "latest", NEW_ID),
        InvalidState => {
            publish_existing(w, mode, "weather", "latest", NEW_ID);
            w.write_state(DEST, "{ this is not json");
        }
        FutureStateVersion => {
            publish_existing(w, mode, "weather", "latest", NEW_ID);
            rewrite_state(w, |s| s["state_version"] = Value::from(3));
        }
        ForeignStateVersion => {
            publish_existing(w, mode, "weather", "latest", NEW_ID);
            rewrite_state(w, |s| {
                let local = w.backend == Backend::Local;
                s["state_version"] = Value::from(if local { 2 } else { 1 });
                for o in s["outputs"].as_array_mut().unwrap() {
                    let o = o.as_object_mut().unwrap();
                    if local {
                        o.insert("etag".into(), "\"0123456789abcdef0123456789abcdef\"".into());
                    } else {
                        o.remove("etag");
                    }
                }
            });
        }
        StateModeMismatch => publish_existing(w, mode.other(), "weather", "latest", NEW_ID),
        UnmanagedFile => w.write(&format!("{DEST}/a.txt"), "hand-made"),
        // On s3: a key under the planned path `a.txt/` (SPEC §14).
        UnmanagedDirectory => w.write(&format!("{DEST}/a.txt/inner.txt"), "hand-made"),
    }
}

/// Collects mismatches so one run of the matrix reports all of them.
pub(crate) struct Check {
    pub(crate) errors: Vec<String>,
}

impl Check {
    pub(crate) fn eq<T: PartialEq + std::fmt::Debug>(
        &mut self,
        ctx: &str,
        what: &str,
        got: T,
        want: T,
    ) {
        if got != want {
            self.errors
                .push(format!("{ctx}: {what}: got {got:?}, want {want:?}"));
        }
    }
    pub(crate) fn truth(&mut self, ctx: &str, what: &str, ok: bool) {
        if !ok {
            self.errors.push(format!("{ctx}: {what}"));
        }
    }
}

/// What an s3 dry run adds to each destination's message (SPEC §14).
const NOT_VERIFIED: &str = "conditional writes not verified";

/// The report without the fields a dry run may differ in (SPEC §11); for an s3 dry run
/// also without the note [`NOT_VERIFIED`], which must be there.
fn comparable(mut report: Value, s3_dry_run: bool, ctx: &str, check: &mut Check) -> Value {
    report["dry_run"] = Value::Null;
    for d in report["destinations"].as_array_mut().unwrap() {
        d["status"] = Value::Null;
        d["operation_id"] = Value::Null;
        if s3_dry_run {
            let message = d["message"].as_str().unwrap_or("").to_string();
            check.truth(
                ctx,
                &format!("an s3 dry run says {NOT_VERIFIED:?}: {message:?}"),
                message.ends_with(NOT_VERIFIED),
            );
            let rest = message.strip_suffix(NOT_VERIFIED).unwrap_or(&message);
            d["message"] = Value::from(rest.strip_suffix("; ").unwrap_or(rest));
        }
    }
    report
}

/// The write requests since `mark` but the lease's and the conditional-write probe's
/// (SPEC §14), which a refused run may make like a local one takes its lock: what a run
/// that must not write may not send (s3; always empty for local, whose snapshot is the
/// evidence). Multi-object deletes (`POST /bucket?delete`, how the lease and the probe
/// are removed) are left out too: the log does not say which keys they name, and the
/// snapshot shows any content key that went missing.
fn content_writes(w: &World, mark: Mark) -> Vec<String> {
    let own = |r: &str| {
        // S3's DeleteObjects; Azure's Blob Batch (object_store sends every delete so).
        let multi_delete = r.starts_with("POST ")
            && (r.ends_with("?delete") || r.ends_with("?restype=container&comp=batch"));
        r.contains("/.distributor.lock") || r.contains("/.distributor-probe-") || multi_delete
    };
    w.writes_since(mark)
        .into_iter()
        .filter(|r| !own(r))
        .collect()
}

/// Whether the s3 variant runs `run` (an index into [`RUNS`]) of `c`.
///
/// The whole table through moto took 92-202 s on a shared two-core machine, against
/// 20-30 s for local (an s3 publication is some 40 requests to the one moto process, which
/// does not get faster with more test threads), so s3 runs a subset, chosen from the
/// table alone, that took 30-42 s there:
/// - the plain run of every row of SPEC §5.2's table (another owner or source), in every
///   takeover mode: the takeover policy applied to state read from s3;
/// - of every other run, the first in table order of each state mode, situation and
///   expected outcome, where a `--force` run that still expects a conflict counts apart
///   from the plain one: every situation, every conflict kind, `force_replace`, a refused
///   `--force` and an unforceable one, each on s3 at least once.
///
/// That is 86 of the 288 runs.
fn runs_on_s3(c: &Case, run: usize) -> bool {
    if run == 0 && c.situation.takeover_decides() {
        return true;
    }
    let key = |c: &Case, run: usize| {
        let forced_conflict = run > 0 && matches!(c.runs[run], C(..));
        (c.mode, c.situation, c.runs[run].clone(), forced_conflict)
    };
    let first = CASES
        .iter()
        .flat_map(|d| (0..RUNS.len()).map(move |r| (d, r)))
        .find(|&(d, r)| key(d, r) == key(c, run))
        .expect("the case itself");
    std::ptr::eq(first.0, c) && first.1 == run
}

fn takeovers_of(d: &Value) -> Vec<(String, String, Vec<String>)> {
    d["takeovers"]
        .as_array()
        .expect("takeovers is an array")
        .iter()
        .map(|t| {
            (
                t["from_owner"].as_str().unwrap_or("?").to_string(),
                t["from_source_id"].as_str().unwrap_or("?").to_string(),
                t["paths"]
                    .as_array()
                    .expect("paths is an array")
                    .iter()
                    .map(|p| p.as_str().unwrap_or("?").to_string())
                    .collect(),
            )
        })
        .collect()
}

fn previous_of(d: &Value) -> Option<(String, String)> {
    if d["previous"].is_null() {
        return None;
    }
    Some((
        d["previous"]["owner"].as_str().unwrap_or("?").to_string(),
        d["previous"]["source"]["id"]
            .as_str()
            .unwrap_or("?")
            .to_string(),
    ))
}

fn run_case(b: Backend, c: &Case, run: usize, check: &mut Check) {
    let (label, force, refuse) = RUNS[run];
    let ctx = format!(
        "{b:?} / {:?} / {:?} / takeover {} / {label}",
        c.mode, c.situation, c.takeover
    );
    let w = World::new(b);
    build(&w, c.mode, c.situation);
    let cfg = w.simple_config(
        "current.yaml",
        "weather",
        "latest",
        DEST,
        &dest_yaml(c.mode, Some(c.takeover), refuse),
    );
    let bundle = w.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[]);
    let extra: &[&str] = if force { &["--force"] } else { &[] };
    let before = w.snapshot(DEST);

    let mut dry_args = vec!["--dry-run"];
    dry_args.extend_from_slice(extra);
    let mark = w.mark();
    let dry = w.publish(&cfg, &bundle, &dry_args);
    check.eq(
        &ctx,
        "a dry run writes nothing",
        w.snapshot(DEST),
        before.clone(),
    );
    check.eq(
        &ctx,
        "a dry run sends no write request",
        w.writes_since(mark),
        vec![],
    );
    let mark = w.mark();
    let r = w.publish(&cfg, &bundle, extra);
    let dry_report = comparable(dry.json(), b.object_store(), &ctx, check);
    let real_report = comparable(r.json(), false, &ctx, check);
    check.eq(
        &ctx,
        "dry-run report equals the real one but for dry_run, status, operation_id",
        dry_report,
        real_report,
    );
    check_report_shape(&r.json(), &ctx, check);
    let d = r.dest(0);
    check.eq(
        &ctx,
        "previous",
        previous_of(&d),
        c.previous.map(|(o, s)| (o.into(), s.into())),
    );

    let mut kinds: Vec<String> = r.conflict_kinds();
    kinds.sort();
    kinds.dedup();
    match &c.runs[run] {
        W(decision) => {
            check.eq(&ctx, "exit code", r.code, 0);
            check.eq(&ctx, "decision", r.decision().as_str(), *decision);
            check.eq(&ctx, "status", d["status"].as_str(), Some("applied"));
            // A forced replacement still lists what it overrode: the plain run's conflicts.
            let overridden: Vec<String> = match (&c.runs[0], *decision) {
                (C(k, _), "force_replace") => {
                    let mut k: Vec<String> = k.iter().map(|x| x.to_string()).collect();
                    k.sort();
                    k
                }
                _ => vec![],
            };
            check.eq(&ctx, "conflicts", kinds, overridden);
            for conflict in d["conflicts"].as_array().unwrap() {
                check.eq(
                    &ctx,
                    "an overridden conflict is forceable",
                    conflict["forceable"].as_bool(),
                    Some(true),
                );
            }
            let want: Vec<(String, String, Vec<String>)> =
                if matches!(*decision, "replace_takeover" | "force_replace") {
                    c.takeovers
                        .iter()
                        .map(|(o, s, p)| {
                            (
                                o.to_string(),
                                s.to_string(),
                                p.iter().map(|x| x.to_string()).collect(),
                            )
                        })
                        .collect()
                } else {
                    vec![]
                };
            check.eq(&ctx, "takeovers", takeovers_of(&d), want);
            check.eq(
                &ctx,
                "a.txt",
                w.get(&format!("{DEST}/a.txt")),
                Some("new a".into()),
            );
            check.eq(
                &ctx,
                "b.txt",
                w.get(&format!("{DEST}/b.txt")),
                Some("new b".into()),
            );
            check_state_records_me(&w, c.mode, &ctx, check);
            check.truth(
                &ctx,
                "the request log shows the run's writes (else it proves nothing of dry runs)",
                b == Backend::Local || !w.writes_since(mark).is_empty(),
            );
        }
        C(want_kinds, forceable) => {
            check.eq(&ctx, "exit code", r.code, 3);
            check.eq(&ctx, "decision", r.decision().as_str(), "conflict");
            check.eq(&ctx, "status", d["status"].as_str(), Some("conflict"));
            let mut want: Vec<String> = want_kinds.iter().map(|k| k.to_string()).collect();
            want.sort();
            check.eq(&ctx, "conflict kinds", kinds, want);
            for conflict in d["conflicts"].as_array().unwrap() {
                check.eq(
                    &ctx,
                    &format!("forceable of {}", conflict["kind"]),
                    conflict["forceable"].as_bool(),
                    Some(*forceable),
                );
            }
            check.eq(&ctx, "takeovers of a conflict", takeovers_of(&d), vec![]);
            // A refused publication is journaled, with its conflicts (SPEC §16).
            check.truth(
                &ctx,
                "a conflict is journaled: its operation_id is set",
                d["operation_id"].is_string(),
            );
            check.eq(&ctx, "a conflict writes nothing", w.snapshot(DEST), before);
            check.eq(
                &ctx,
                "a conflict sends no write request but the lease's and probe's",
                content_writes(&w, mark),
                vec![],
            );
            if force && *forceable {
                check.truth(
                    &ctx,
                    "a refused --force says transfer.on_conflict: refuse",
                    d["message"].as_str().unwrap_or("").contains("refuse"),
                );
            }
        }
    }
}

/// After a write the state records the current owner, source and both new outputs, in
/// the backend's state version (s3: with each output's ETag as the store lists it).
fn check_state_records_me(w: &World, mode: Mode, ctx: &str, check: &mut Check) {
    let s = w.state(DEST);
    check.eq(
        ctx,
        "state_version",
        s["state_version"].as_u64(),
        Some(w.backend.state_version()),
    );
    for o in s["outputs"].as_array().unwrap() {
        let p = o["path"].as_str().unwrap_or("?");
        check.eq(
            ctx,
            &format!("etag of {p}"),
            o["etag"].as_str().map(str::to_string),
            w.etag(&format!("{DEST}/{p}")),
        );
    }
    check.eq(
        ctx,
        "state_mode",
        s["state_mode"].as_str(),
        Some(mode.yaml()),
    );
    let source_id = match mode {
        SO => {
            check.eq(
                ctx,
                "state pipeline_id",
                s["pipeline_id"].as_str(),
                Some("weather"),
            );
            check.eq(
                ctx,
                "state destination_id",
                s["destination_id"].as_str(),
                Some("latest"),
            );
            s["source"]["id"].clone()
        }
        SR => s["owners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["owner"] == ME)
            .map(|o| o["source"]["id"].clone())
            .unwrap_or(Value::Null),
    };
    check.eq(ctx, "state source id", source_id.as_str(), Some(NEW_ID));
    for p in ["a.txt", "b.txt"] {
        let rec = s["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["path"] == p);
        check.truth(ctx, &format!("state records {p}"), rec.is_some());
        if mode == SR {
            check.eq(
                ctx,
                &format!("owner of {p}"),
                rec.map(|o| o["owner"].clone()),
                Some(Value::from(ME)),
            );
        }
    }
}

/// Every field SPEC §11 names, exactly, and summary counters that add up.
pub(crate) fn check_report_shape(r: &Value, ctx: &str, check: &mut Check) {
    fn keys(v: &Value) -> BTreeSet<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    }
    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }
    check.eq(
        ctx,
        "report keys",
        keys(r),
        set(&[
            "report_version",
            "command",
            "dry_run",
            "pipeline_id",
            "source",
            "destinations",
            "summary",
        ]),
    );
    check.eq(ctx, "report_version", r["report_version"].as_u64(), Some(1));
    check.eq(
        ctx,
        "source keys",
        keys(&r["source"]),
        set(&["id", "created_at", "digest"]),
    );
    let summary_keys = [
        "destinations",
        "create",
        "unchanged",
        "repair",
        "replace_older",
        "replace_changed",
        "replace_takeover",
        "force_replace",
        "skip_destination_newer",
        "rollback",
        "promote",
        "conflict",
        "failed",
        "staged",
        "files_written",
        "files_deleted",
        "files_unchanged",
        "files_retained",
        "bytes_written",
    ];
    let s = &r["summary"];
    check.eq(ctx, "summary keys", keys(s), set(&summary_keys));
    let n = |k: &str| s[k].as_u64().unwrap_or(u64::MAX);
    let dests = r["destinations"].as_array().cloned().unwrap_or_default();
    check.eq(
        ctx,
        "summary.destinations",
        n("destinations"),
        dests.len() as u64,
    );
    let decisions: u64 = summary_keys[1..12].iter().map(|k| n(k)).sum();
    check.eq(
        ctx,
        "decision counters add up to destinations",
        decisions,
        dests.len() as u64,
    );
    let (mut written, mut deleted, mut unchanged, mut retained, mut bytes) = (0, 0, 0, 0, 0);
    let mut failed = 0;
    for d in &dests {
        check.eq(
            ctx,
            "destination keys",
            keys(d),
            set(&[
                "destination_id",
                "bundle_path",
                "state_mode",
                "takeover_mode",
                "decision",
                "status",
                "operation_id",
                "previous",
                "takeovers",
                "conflicts",
                "files",
                "links",
                "message",
            ]),
        );
        let decision = d["decision"].as_str().unwrap_or("?");
        check.truth(
            ctx,
            &format!("decision {decision} has a summary counter"),
            summary_keys[1..12].contains(&decision),
        );
        if !d["previous"].is_null() {
            check.eq(
                ctx,
                "previous keys",
                keys(&d["previous"]),
                set(&["owner", "source"]),
            );
            check.eq(
                ctx,
                "previous.source keys",
                keys(&d["previous"]["source"]),
                set(&["id", "created_at", "digest"]),
            );
        }
        let owner = format!(
            "{}/{}",
            r["pipeline_id"].as_str().unwrap_or("?"),
            d["destination_id"].as_str().unwrap_or("?")
        );
        for t in d["takeovers"].as_array().into_iter().flatten() {
            check.eq(
                ctx,
                "takeover keys",
                keys(t),
                set(&["from_owner", "from_source_id", "cross_owner", "paths"]),
            );
            // Another owner's paths, or only another source id of this owner.
            check.eq(
                ctx,
                "takeover cross_owner",
                t["cross_owner"].as_bool(),
                Some(t["from_owner"].as_str() != Some(owner.as_str())),
            );
        }
        for c in d["conflicts"].as_array().into_iter().flatten() {
            check.eq(
                ctx,
                "conflict keys",
                keys(c),
                set(&["kind", "path", "owner", "forceable", "message"]),
            );
        }
        for l in d["links"].as_array().into_iter().flatten() {
            check.eq(ctx, "link keys", keys(l), set(&["path", "target", "op"]));
        }
        if d["status"] == "failed" {
            failed += 1;
            continue;
        }
        for f in d["files"].as_array().into_iter().flatten() {
            check.eq(
                ctx,
                "file keys",
                keys(f),
                set(&["path", "op", "size", "sha256"]),
            );
            match f["op"].as_str().unwrap_or("?") {
                "create" | "overwrite" => {
                    written += 1;
                    bytes += f["size"].as_u64().unwrap_or(0);
                }
                "delete" => deleted += 1,
                "unchanged" => unchanged += 1,
                "retain" => retained += 1,
                op => check.truth(ctx, &format!("unknown file op {op}"), false),
            }
        }
    }
    check.eq(ctx, "summary.failed", n("failed"), failed);
    check.eq(ctx, "summary.files_written", n("files_written"), written);
    check.eq(ctx, "summary.files_deleted", n("files_deleted"), deleted);
    check.eq(
        ctx,
        "summary.files_unchanged",
        n("files_unchanged"),
        unchanged,
    );
    check.eq(ctx, "summary.files_retained", n("files_retained"), retained);
    check.eq(ctx, "summary.bytes_written", n("bytes_written"), bytes);
}

/// Runs every row of `mode` and `takeover` three ways, reporting all mismatches at once.
fn run_matrix(b: Backend, mode: Mode, takeover: &str) {
    let mut check = Check { errors: vec![] };
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|c| c.mode == mode && c.takeover == takeover)
        .collect();
    assert_eq!(cases.len(), 12, "one row per situation");
    for c in cases {
        for run in 0..RUNS.len() {
            if b == Backend::Local || runs_on_s3(c, run) {
                run_case(b, c, run, &mut check);
            }
        }
    }
    assert!(
        check.errors.is_empty(),
        "{} mismatch(es):\n{}",
        check.errors.len(),
        check.errors.join("\n")
    );
}

#[test]
fn matrix_has_one_row_per_case() {
    assert_eq!(CASES.len(), 2 * 4 * 12);
}

#[test]
fn the_s3_subset_runs_every_situation_and_outcome() {
    let picked: Vec<(&Case, usize)> = CASES
        .iter()
        .flat_map(|c| (0..RUNS.len()).map(move |r| (c, r)))
        .filter(|&(c, r)| runs_on_s3(c, r))
        .collect();
    assert_eq!(picked.len(), 86);
    for c in CASES {
        for r in 0..RUNS.len() {
            assert!(
                picked.iter().any(|&(p, pr)| p.mode == c.mode
                    && p.situation == c.situation
                    && p.runs[pr] == c.runs[r]),
                "{:?} / {:?}: {:?} is never run on s3",
                c.mode,
                c.situation,
                c.runs[r]
            );
        }
    }
}

fn single_owner_same_pipeline(b: Backend) {
    run_matrix(b, SO, "same_pipeline");
}
fn single_owner_same_source(b: Backend) {
    run_matrix(b, SO, "same_source");
}
fn single_owner_any_managed(b: Backend) {
    run_matrix(b, SO, "any_managed");
}
fn single_owner_never(b: Backend) {
    run_matrix(b, SO, "never");
}
fn shared_root_same_pipeline(b: Backend) {
    run_matrix(b, SR, "same_pipeline");
}
fn shared_root_same_source(b: Backend) {
    run_matrix(b, SR, "same_source");
}
fn shared_root_any_managed(b: Backend) {
    run_matrix(b, SR, "any_managed");
}
fn shared_root_never(b: Backend) {
    run_matrix(b, SR, "never");
}
per_backend!(
    single_owner_same_pipeline,
    single_owner_same_source,
    single_owner_any_managed,
    single_owner_never,
    shared_root_same_pipeline,
    shared_root_same_source,
    shared_root_any_managed,
    shared_root_never,
);

/// SPEC §5.3: forced replacement of invalid state deletes nothing and writes fresh state
/// (of the backend's version).
fn forced_invalid_state_deletes_nothing_and_writes_fresh_state(b: Backend) {
    let w = World::new(b);
    build(&w, SO, InvalidState);
    w.write(&format!("{DEST}/notes.txt"), "hand-made");
    let cfg = w.simple_config("c.yaml", "weather", "latest", DEST, "");
    let bundle = w.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[]);
    let r = w.publish(&cfg, &bundle, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    let d = r.dest(0);
    assert!(d["previous"].is_null());
    assert_eq!(d["takeovers"], serde_json::json!([]));
    assert!(
        d["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["op"] != "delete"),
        "nothing is deleted: {d:#}"
    );
    assert_eq!(
        w.read("dest/old.txt"),
        "old only",
        "not known to be managed"
    );
    assert_eq!(w.read("dest/notes.txt"), "hand-made");
    assert_eq!(w.read("dest/a.txt"), "new a");
    let s = w.state(DEST);
    assert_eq!(s["state_version"], b.state_version());
    let paths: Vec<&str> = s["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["a.txt", "b.txt"],
        "fresh state records only the new outputs"
    );
}

/// SPEC §5.3: conflicts name their path and owner; a refused `--force` says why.
fn owner_conflict_names_path_and_owner(b: Backend) {
    let w = World::new(b);
    build(&w, SR, OtherPipeline);
    let cfg = w.simple_config(
        "c.yaml",
        "weather",
        "latest",
        DEST,
        &dest_yaml(SR, Some("same_pipeline"), false),
    );
    let bundle = w.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[]);
    let r = w.publish(&cfg, &bundle, &[]);
    r.expect_code(3);
    let c = &r.dest(0)["conflicts"][0];
    assert_eq!(c["kind"], "owner_conflict");
    assert_eq!(c["path"], "a.txt");
    assert_eq!(c["owner"], "radar/latest");
    assert_eq!(c["forceable"], true);
    assert!(!c["message"].as_str().unwrap().is_empty());
}

/// A multi-destination report: every field of SPEC §11 and counters that add up. On s3
/// the bundles hold no link (a link is always `unsupported_link` there, SPEC §14); links
/// are not files, so the counters are the same.
fn report_fields_and_summary_over_several_destinations(b: Backend) {
    let w = World::new(b);
    let yaml = format!(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n\
         \x20 - id: fresh\n{}\
         \x20 - id: older\n{}\
         \x20 - id: clash\n{}\
         \x20 - id: merged\n{}    reconciliation:\n      mode: merge\n",
        w.dest_keys("d/fresh"),
        w.dest_keys("d/older"),
        w.dest_keys("d/clash"),
        w.dest_keys("d/merged"),
    );
    let cfg = w.env.config("c.yaml", &yaml);
    let links = |target| match b {
        Backend::Local => vec![("l", target)],
        Backend::S3 | Backend::Azure => vec![],
    };
    let old = w.bundle("old", NEW_ID, OLD_AT, OLD_FILES, &links("a.txt"));
    let r = w.run(&[
        "publish",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        old.to_str().unwrap(),
        "--destination",
        "older",
        "--destination",
        "merged",
    ]);
    r.expect_code(0);
    w.write("d/clash/a.txt", "hand-made");
    let new = w.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &links("b.txt"));
    let r = w.publish(&cfg, &new, &[]);
    r.expect_code(3);
    let j = r.json();
    assert_eq!(j["command"], "publish");
    assert_eq!(j["dry_run"], false);
    assert_eq!(j["pipeline_id"], "weather");
    assert_eq!(j["source"]["id"], NEW_ID);
    let decisions: Vec<&str> = j["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["decision"].as_str().unwrap())
        .collect();
    assert_eq!(
        decisions,
        ["create", "replace_older", "conflict", "replace_older"]
    );
    let s = &j["summary"];
    assert_eq!(s["destinations"], 4);
    assert_eq!(s["create"], 1);
    assert_eq!(s["replace_older"], 2);
    assert_eq!(s["conflict"], 1);
    // fresh: 2 created; older: a.txt overwritten, b.txt created, old.txt deleted;
    // merged: a.txt overwritten, b.txt created, old.txt retained.
    assert_eq!(s["files_written"], 6);
    assert_eq!(s["files_deleted"], 1);
    assert_eq!(s["files_retained"], 1);
    assert_eq!(s["files_unchanged"], 0);
    assert_eq!(s["bytes_written"], 6 * 5);
    let mut check = Check { errors: vec![] };
    check_report_shape(&j, "several destinations", &mut check);
    assert!(check.errors.is_empty(), "{}", check.errors.join("\n"));
    let older = r.dest(1);
    let link_ops: Vec<(&str, &str)> = older["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["path"].as_str().unwrap(), l["op"].as_str().unwrap()))
        .collect();
    match b {
        Backend::Local => assert_eq!(link_ops, [("l", "overwrite")]),
        Backend::S3 | Backend::Azure => assert_eq!(link_ops, []),
    }
}

/// The text report of a takeover says which mode permitted replacing which owner and
/// source (SPEC §11).
fn the_text_report_names_the_mode_owner_and_source_of_a_takeover(b: Backend) {
    let w = World::new(b);
    build(&w, SO, OtherDestination);
    let cfg = w.simple_config("c.yaml", "weather", "latest", DEST, "");
    let bundle = w.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[]);
    let r = w.run(&[
        "publish",
        "--dry-run",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        bundle.to_str().unwrap(),
    ]);
    r.expect_code(0);
    assert!(r.stdout.contains("replace_takeover"), "{}", r.stdout);
    assert!(
        r.stdout.contains("same_pipeline")
            && r.stdout.contains("weather/other")
            && r.stdout.contains("other-src"),
        "{}",
        r.stdout
    );
}

per_backend!(
    forced_invalid_state_deletes_nothing_and_writes_fresh_state,
    owner_conflict_names_path_and_owner,
    report_fields_and_summary_over_several_destinations,
    the_text_report_names_the_mode_owner_and_source_of_a_takeover,
);

/// An unrecorded symlink on a planned path is unmanaged content: a conflict, and `--force`
/// replaces the link itself, never what it points to. Local only: s3 has no symlinks.
#[test]
fn an_unmanaged_symlink_is_forceable_and_never_followed() {
    let w = World::new(Backend::Local);
    let env = &w.env;
    env.write("outside.txt", "outside");
    std::fs::create_dir_all(env.path(DEST)).unwrap();
    std::os::unix::fs::symlink("../outside.txt", env.path("dest/a.txt")).unwrap();
    let cfg = w.simple_config("c.yaml", "weather", "latest", DEST, "");
    let bundle = w.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[]);
    let before = env.snapshot(DEST);
    let r = w.publish(&cfg, &bundle, &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["unmanaged_content"]);
    assert_eq!(r.dest(0)["conflicts"][0]["path"], "a.txt");
    assert_eq!(env.snapshot(DEST), before);
    let r = w.publish(&cfg, &bundle, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    let md = std::fs::symlink_metadata(env.path("dest/a.txt")).unwrap();
    assert!(md.is_file(), "the link is replaced by the file");
    assert_eq!(env.read("dest/a.txt"), "new a");
    assert_eq!(env.read("outside.txt"), "outside");
}
