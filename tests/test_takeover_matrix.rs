//! The takeover policy matrix (SPEC §5.1-5.3), through the real binary: every
//! `takeover.mode` against every existing-destination situation, in both state modes, each
//! run plain, with `--force`, and with `--force` under `transfer.on_conflict: refuse`.
//!
//! The expected results are written out per row from the SPEC tables; nothing here
//! re-derives them from the planner. Every "existing" situation is built by really
//! publishing first (another config, pipeline or bundle), or by writing the state file by
//! hand where no publication could produce it (invalid state, future `state_version`).

use crate::common::Env;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

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
#[derive(Clone, Copy, Debug)]
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
    /// A real publication whose state then says `state_version: 2`.
    FutureStateVersion,
    /// `weather/latest` published in the other state mode.
    StateModeMismatch,
    /// An unrecorded file at `a.txt`, no state.
    UnmanagedFile,
    /// An unrecorded directory at `a.txt`, no state.
    UnmanagedDirectory,
}
use Situation::*;

/// The expected outcome of one run.
#[derive(Clone, Debug)]
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
fn publish_existing(env: &Env, mode: Mode, pipeline: &str, dest: &str, id: &str) {
    let cfg = env.simple_config(
        &format!("existing-{pipeline}-{dest}-{}.yaml", mode.yaml()),
        pipeline,
        dest,
        DEST,
        &dest_yaml(mode, None, false),
    );
    let b = env.bundle(&format!("existing-{id}"), id, OLD_AT, OLD_FILES, &[]);
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "create", "setup publication: {}", r.stdout);
}

fn state_path(env: &Env) -> PathBuf {
    env.path(&format!("{DEST}/.distributor.json"))
}

/// Builds `situation` at `DEST` for a current destination in `mode`.
fn build(env: &Env, mode: Mode, situation: Situation) {
    match situation {
        NoState => {}
        SameOwner => publish_existing(env, mode, "weather", "latest", NEW_ID),
        OtherDestination => publish_existing(env, mode, "weather", "other", "other-src"),
        OtherPipeline => publish_existing(env, mode, "radar", "latest", "radar-src"),
        OtherSourceId => publish_existing(env, mode, "weather", "latest", "older-src"),
        SameSourceOtherPipeline => publish_existing(env, mode, "radar", "latest", NEW_ID),
        InvalidState => {
            publish_existing(env, mode, "weather", "latest", NEW_ID);
            std::fs::write(state_path(env), "{ this is not json").unwrap();
        }
        FutureStateVersion => {
            publish_existing(env, mode, "weather", "latest", NEW_ID);
            let mut s: Value =
                serde_json::from_slice(&std::fs::read(state_path(env)).unwrap()).unwrap();
            s["state_version"] = Value::from(2);
            std::fs::write(state_path(env), serde_json::to_vec_pretty(&s).unwrap()).unwrap();
        }
        StateModeMismatch => publish_existing(env, mode.other(), "weather", "latest", NEW_ID),
        UnmanagedFile => {
            env.write(&format!("{DEST}/a.txt"), "hand-made");
        }
        UnmanagedDirectory => {
            env.write(&format!("{DEST}/a.txt/inner.txt"), "hand-made");
        }
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

/// The report without the fields a dry run may differ in (SPEC §11).
fn comparable(mut report: Value) -> Value {
    report["dry_run"] = Value::Null;
    for d in report["destinations"].as_array_mut().unwrap() {
        d["status"] = Value::Null;
        d["operation_id"] = Value::Null;
    }
    report
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

fn run_case(c: &Case, run: usize, check: &mut Check) {
    let (label, force, refuse) = RUNS[run];
    let ctx = format!(
        "{:?} / {:?} / takeover {} / {label}",
        c.mode, c.situation, c.takeover
    );
    let env = Env::new();
    build(&env, c.mode, c.situation);
    let cfg = env.simple_config(
        "current.yaml",
        "weather",
        "latest",
        DEST,
        &dest_yaml(c.mode, Some(c.takeover), refuse),
    );
    let bundle = env.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[]);
    let extra: &[&str] = if force { &["--force"] } else { &[] };
    let before = env.snapshot(DEST);

    let mut dry_args = vec!["--dry-run"];
    dry_args.extend_from_slice(extra);
    let dry = env.publish(&cfg, &bundle, &dry_args);
    check.eq(
        &ctx,
        "a dry run writes nothing",
        env.snapshot(DEST),
        before.clone(),
    );
    let r = env.publish(&cfg, &bundle, extra);
    check.eq(
        &ctx,
        "dry-run report equals the real one but for dry_run, status, operation_id",
        comparable(dry.json()),
        comparable(r.json()),
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
                env.read(&format!("{DEST}/a.txt")),
                "new a".into(),
            );
            check.eq(
                &ctx,
                "b.txt",
                env.read(&format!("{DEST}/b.txt")),
                "new b".into(),
            );
            check_state_records_me(&env, c.mode, &ctx, check);
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
            check.eq(&ctx, "operation_id", d["operation_id"].clone(), Value::Null);
            check.eq(
                &ctx,
                "a conflict writes nothing",
                env.snapshot(DEST),
                before,
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

/// After a write the state records the current owner, source and both new outputs.
fn check_state_records_me(env: &Env, mode: Mode, ctx: &str, check: &mut Check) {
    let s: Value = serde_json::from_str(&env.read(&format!("{DEST}/.distributor.json")))
        .expect("state is JSON");
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
        "conflict",
        "failed",
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
    let decisions: u64 = summary_keys[1..10].iter().map(|k| n(k)).sum();
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
            summary_keys[1..10].contains(&decision),
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
        for t in d["takeovers"].as_array().into_iter().flatten() {
            check.eq(
                ctx,
                "takeover keys",
                keys(t),
                set(&["from_owner", "from_source_id", "paths"]),
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
fn run_matrix(mode: Mode, takeover: &str) {
    let mut check = Check { errors: vec![] };
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|c| c.mode == mode && c.takeover == takeover)
        .collect();
    assert_eq!(cases.len(), 11, "one row per situation");
    for c in cases {
        for run in 0..RUNS.len() {
            run_case(c, run, &mut check);
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
    assert_eq!(CASES.len(), 2 * 4 * 11);
}

#[test]
fn single_owner_same_pipeline() {
    run_matrix(SO, "same_pipeline");
}
#[test]
fn single_owner_same_source() {
    run_matrix(SO, "same_source");
}
#[test]
fn single_owner_any_managed() {
    run_matrix(SO, "any_managed");
}
#[test]
fn single_owner_never() {
    run_matrix(SO, "never");
}
#[test]
fn shared_root_same_pipeline() {
    run_matrix(SR, "same_pipeline");
}
#[test]
fn shared_root_same_source() {
    run_matrix(SR, "same_source");
}
#[test]
fn shared_root_any_managed() {
    run_matrix(SR, "any_managed");
}
#[test]
fn shared_root_never() {
    run_matrix(SR, "never");
}

/// SPEC §5.3: forced replacement of invalid state deletes nothing and writes fresh state.
#[test]
fn forced_invalid_state_deletes_nothing_and_writes_fresh_state() {
    let env = Env::new();
    build(&env, SO, InvalidState);
    env.write(&format!("{DEST}/notes.txt"), "hand-made");
    let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
    let bundle = env.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[]);
    let r = env.publish(&cfg, &bundle, &["--force"]);
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
        env.read("dest/old.txt"),
        "old only",
        "not known to be managed"
    );
    assert_eq!(env.read("dest/notes.txt"), "hand-made");
    assert_eq!(env.read("dest/a.txt"), "new a");
    let s: Value = serde_json::from_str(&env.read("dest/.distributor.json")).unwrap();
    assert_eq!(s["state_version"], 1);
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
#[test]
fn owner_conflict_names_path_and_owner() {
    let env = Env::new();
    build(&env, SR, OtherPipeline);
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        DEST,
        &dest_yaml(SR, Some("same_pipeline"), false),
    );
    let bundle = env.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[]);
    let r = env.publish(&cfg, &bundle, &[]);
    r.expect_code(3);
    let c = &r.dest(0)["conflicts"][0];
    assert_eq!(c["kind"], "owner_conflict");
    assert_eq!(c["path"], "a.txt");
    assert_eq!(c["owner"], "radar/latest");
    assert_eq!(c["forceable"], true);
    assert!(!c["message"].as_str().unwrap().is_empty());
}

/// A multi-destination report: every field of SPEC §11 and counters that add up.
#[test]
fn report_fields_and_summary_over_several_destinations() {
    let env = Env::new();
    let yaml = format!(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n\
         \x20 - id: fresh\n    path: {}\n\
         \x20 - id: older\n    path: {}\n\
         \x20 - id: clash\n    path: {}\n\
         \x20 - id: merged\n    path: {}\n    reconciliation:\n      mode: merge\n",
        env.path("d/fresh").display(),
        env.path("d/older").display(),
        env.path("d/clash").display(),
        env.path("d/merged").display(),
    );
    let cfg = env.config("c.yaml", &yaml);
    let old = env.bundle("old", NEW_ID, OLD_AT, OLD_FILES, &[("l", "a.txt")]);
    let r = env.run(&[
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
    env.write("d/clash/a.txt", "hand-made");
    let new = env.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[("l", "b.txt")]);
    let r = env.publish(&cfg, &new, &[]);
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
    assert_eq!(link_ops, [("l", "overwrite")]);
}

/// An unrecorded symlink on a planned path is unmanaged content: a conflict, and `--force`
/// replaces the link itself, never what it points to.
#[test]
fn an_unmanaged_symlink_is_forceable_and_never_followed() {
    let env = Env::new();
    env.write("outside.txt", "outside");
    std::fs::create_dir_all(env.path(DEST)).unwrap();
    std::os::unix::fs::symlink("../outside.txt", env.path("dest/a.txt")).unwrap();
    let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
    let bundle = env.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[]);
    let before = env.snapshot(DEST);
    let r = env.publish(&cfg, &bundle, &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["unmanaged_content"]);
    assert_eq!(r.dest(0)["conflicts"][0]["path"], "a.txt");
    assert_eq!(env.snapshot(DEST), before);
    let r = env.publish(&cfg, &bundle, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    let md = std::fs::symlink_metadata(env.path("dest/a.txt")).unwrap();
    assert!(md.is_file(), "the link is replaced by the file");
    assert_eq!(env.read("dest/a.txt"), "new a");
    assert_eq!(env.read("outside.txt"), "outside");
}

/// The text report of a takeover says which mode permitted replacing which owner and
/// source (SPEC §11).
#[test]
fn the_text_report_names_the_mode_owner_and_source_of_a_takeover() {
    let env = Env::new();
    build(&env, SO, OtherDestination);
    let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
    let bundle = env.bundle("current", NEW_ID, NEW_AT, NEW_FILES, &[]);
    let r = env.run(&[
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
