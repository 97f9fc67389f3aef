//! The destination log (SPEC §18) and what releases read from it (SPEC §17 "Releases"):
//! activations are log entries; the active and previous release come from the log, never
//! from `path` alone; while `path` is not what the last logged activation made, retention
//! removes nothing and publishing is the conflict `path_changed`; bad entries stop
//! retention and are named by file; the old activation log migrates idempotently; two
//! writers racing for one seq never both win.

use crate::common::hostile::PausedRun;
use crate::common::{Env, Run};
use serde_json::Value;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const PATH: &str = "www/latest";
const DIR: &str = "www/.latest.releases";
const LOG: &str = "www/.latest.releases/.distributor/log";

fn config(env: &Env, keep: u32) -> PathBuf {
    let extra = format!("    releases:\n      keep: {keep}\n");
    env.simple_config("c.yaml", "weather", "latest", PATH, &extra)
}

fn site(env: &Env, i: usize) -> PathBuf {
    let v = format!("version {i}");
    env.bundle(
        &format!("site{i}"),
        "site",
        &format!("2026-12-02T0{i}:00:00Z"),
        &[("index.html", v.as_str()), ("same.css", "same")],
        &[],
    )
}

fn op_of(r: &Run) -> String {
    r.dest(0)["operation_id"].as_str().unwrap().to_string()
}

fn publish_versions(env: &Env, cfg: &Path, range: std::ops::RangeInclusive<usize>) -> Vec<String> {
    range
        .map(|i| {
            let r = env.publish(cfg, &site(env, i), &[]);
            r.expect_code(0);
            op_of(&r)
        })
        .collect()
}

fn releases(env: &Env) -> BTreeSet<String> {
    std::fs::read_dir(env.path(DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect()
}

fn active(env: &Env) -> String {
    let t = std::fs::read_link(env.path(PATH)).expect("path is a symlink");
    t.to_str()
        .unwrap()
        .strip_prefix(".latest.releases/")
        .unwrap()
        .to_string()
}

/// The log's entries that parse, by file name.
fn logged(env: &Env) -> Vec<Value> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(env.path(LOG))
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    names.sort();
    (names.iter())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .filter(|p| p.to_string_lossy().ends_with(".json"))
        .filter_map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).ok())
        .collect()
}

fn entry_file(seq: u64) -> String {
    format!("{seq:020}.json")
}

fn prune(env: &Env, cfg: &Path) -> Run {
    env.run(&["prune", "--json", "--config", cfg.to_str().unwrap()])
}

fn rollback_to(env: &Env, cfg: &Path, op: &str) -> Run {
    env.run(&[
        "rollback",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--to",
        op,
    ])
}

#[test]
fn every_activation_is_a_log_entry_with_who_what_and_which_release() {
    let env = Env::new();
    let cfg = config(&env, 3);
    let ops = publish_versions(&env, &cfg, 1..=2);
    let log = logged(&env);
    assert_eq!(log.len(), 2);
    let e = &log[1];
    assert_eq!(e["seq"], 2);
    assert_eq!(e["log_format_version"], 1);
    assert_eq!(e["operation_id"], ops[1].as_str());
    assert_eq!(e["command"], "publish");
    assert_eq!(e["pipeline_id"], "weather");
    assert_eq!(e["destination_id"], "latest");
    assert_eq!(e["actor"], "cli:tester");
    assert!(e["host"].as_str().is_some_and(|h| !h.is_empty()));
    // The journal that ran it: one uuid per journal, the same in every entry it wrote.
    let jid = e["journal_id"].as_str().expect("journal_id");
    assert!(
        uuid::Uuid::parse_str(jid).is_ok_and(|u| u.get_version_num() == 4),
        "{jid}"
    );
    assert_eq!(log[0]["journal_id"], e["journal_id"]);
    assert_eq!(e["release_activated"], ops[1].as_str());
    assert_eq!(e["release_deactivated"], ops[0].as_str());
    assert_eq!(e["source"]["id"], "site");
    // index.html changed, same.css did not.
    assert_eq!(e["counts"]["written"], 1);
    assert_eq!(e["counts"]["unchanged"], 1);
    assert_eq!(log[0]["counts"]["unchanged"], 0);
    assert!(e["post_state_sha256"].as_str().is_some());
    assert!(e.get("recovered_by").is_none());
    let md = std::fs::metadata(env.path(&format!("{LOG}/{}", entry_file(2)))).unwrap();
    assert_eq!(md.permissions().mode() & 0o7777, 0o600);
    assert!(
        std::fs::read(env.path(&format!("{LOG}/{}", entry_file(2))))
            .unwrap()
            .len()
            < 4096
    );
    // A rollback is an entry too: what it undoes, and the hold.
    let r = env.run(&["rollback", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    let log = logged(&env);
    assert_eq!(log.len(), 3);
    assert_eq!(log[2]["command"], "rollback");
    assert_eq!(log[2]["release_activated"], ops[0].as_str());
    assert_eq!(log[2]["undoes"], ops[1].as_str());
    assert_eq!(log[2]["held"].as_array().unwrap().len(), 1);
}

/// The audit's attack 3: with `path` renamed away for a moment, or replaced by a plain
/// directory, `prune` and retention removed the active and previous releases, and opening
/// the destination wrote a lock file into the user's directory. Now nothing is removed,
/// `path_changed` is reported, publishing is refused with it, and the plain directory is
/// not touched; `rollback --to` puts a release of the operator's choice back.
#[test]
fn path_renamed_away_or_replaced_by_a_plain_directory_removes_and_publishes_nothing() {
    let env = Env::new();
    let cfg = config(&env, 0);
    let ops = publish_versions(&env, &cfg, 1..=2);
    let kept = releases(&env);
    assert_eq!(kept, BTreeSet::from([ops[0].clone(), ops[1].clone()]));

    // Renamed away.
    std::fs::rename(env.path(PATH), env.path("www/moved")).unwrap();
    let r = prune(&env, &cfg);
    r.expect_code(3);
    let d = r.dest(0);
    assert!(
        d["path_changed"]
            .as_str()
            .unwrap()
            .contains("shows nothing"),
        "{d}"
    );
    assert_eq!(d["removed"], 0);
    assert_eq!(releases(&env), kept);
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["path_changed"]);
    assert_eq!(releases(&env), kept);
    assert!(!env.exists(PATH));
    let r = env.publish(&cfg, &site(&env, 3), &["--force"]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["path_changed"], "not forceable");

    // Replaced by a plain directory: nothing is written into it, not even a lock file.
    env.write(&format!("{PATH}/mine.txt"), "the user's");
    let before = env.snapshot(PATH);
    let r = prune(&env, &cfg);
    r.expect_code(3);
    assert!(
        r.dest(0)["path_changed"]
            .as_str()
            .unwrap()
            .contains("plain directory")
    );
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["path_changed"]);
    assert_eq!(
        env.snapshot(PATH),
        before,
        "the plain directory is untouched"
    );
    assert!(!env.exists(&format!("{PATH}/.distributor.lock")));
    assert_eq!(releases(&env), kept);
    // Only `rollback --to` runs; it does not replace the user's directory.
    let r = env.run(&["rollback", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(1);
    assert!(r.stdout.contains("path_changed"), "{}", r.stdout);
    let r = rollback_to(&env, &cfg, &ops[1]);
    r.expect_code(1);
    assert_eq!(env.snapshot(PATH), before);

    // The directory moved away: `rollback --to` activates the named release and logs it.
    std::fs::rename(env.path(PATH), env.path("www/users-dir")).unwrap();
    let r = rollback_to(&env, &cfg, &ops[0]);
    r.expect_code(0);
    assert_eq!(active(&env), ops[0]);
    let log = logged(&env);
    assert_eq!(log.last().unwrap()["release_activated"], ops[0].as_str());
    assert_eq!(releases(&env), kept, "both are active or previous");
    // And publishing works again.
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(0);
}

/// `path` pointed at another release than the last logged activation made (someone ran
/// `ln -sfn`): the same refusal.
#[test]
fn path_pointing_at_another_release_is_path_changed() {
    let env = Env::new();
    let cfg = config(&env, 0);
    let ops = publish_versions(&env, &cfg, 1..=2);
    std::fs::remove_file(env.path(PATH)).unwrap();
    std::os::unix::fs::symlink(format!(".latest.releases/{}", ops[0]), env.path(PATH)).unwrap();
    let r = prune(&env, &cfg);
    r.expect_code(3);
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["path_changed"]);
    assert_eq!(releases(&env).len(), 2);
}

/// A torn, forged or untrusted entry: retention removes nothing and says which file; a
/// publication still goes on (and is logged after it).
#[test]
fn a_bad_log_entry_stops_retention_and_is_named() {
    let env = Env::new();
    let cfg = config(&env, 0);
    let ops = publish_versions(&env, &cfg, 1..=2);
    // A torn entry 3, as a power cut mid-write by some other tool would leave it.
    let torn = env.write(
        &format!("{LOG}/{}", entry_file(3)),
        "{\"log_format_version\": 1, \"se",
    );
    std::fs::set_permissions(&torn, PermissionsExt::from_mode(0o600)).unwrap();
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(0);
    assert!(r.stderr.contains(&entry_file(3)), "{}", r.stderr);
    assert_eq!(releases(&env).len(), 3, "retention removed nothing");
    assert_eq!(logged(&env).len(), 3, "the publication is entry 4");
    assert!(env.exists(&format!("{LOG}/{}", entry_file(4))));
    let r = prune(&env, &cfg);
    r.expect_code(1);
    let err = r.dest(0)["log_error"].as_str().unwrap().to_string();
    assert!(err.contains(&entry_file(3)), "{err}");
    assert_eq!(releases(&env).len(), 3);
    // status and verify name it too, and exit 1.
    for cmd in ["status", "verify"] {
        let r = env.run(&[cmd, "--json", "--config", cfg.to_str().unwrap()]);
        r.expect_code(1);
        let e = r.dest(0)["log_error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(e.contains(&entry_file(3)), "{cmd}: {}", r.stdout);
    }
    // A forged entry (another mode) is as bad.
    std::fs::remove_file(&torn).unwrap();
    let mut forged = logged(&env)[1].clone();
    forged["seq"] = 3.into();
    std::fs::write(&torn, serde_json::to_vec(&forged).unwrap()).unwrap();
    std::fs::set_permissions(&torn, PermissionsExt::from_mode(0o644)).unwrap();
    let r = prune(&env, &cfg);
    r.expect_code(1);
    assert!(
        r.dest(0)["log_error"]
            .as_str()
            .unwrap()
            .contains("mode 0644")
    );
    assert!(releases(&env).contains(&ops[0]));
}

/// The old activation log moves into the log: each line becomes the entry of its
/// number, the settings move, and the old settings record says where. Running it again
/// (after a crash before the settings moved) creates nothing twice. The audit's attack 1:
/// a torn line followed by `recover`'s append on the same line keeps the activation, so
/// the previous release stays and rollback steps back one release.
#[test]
fn the_old_activation_log_migrates_once_and_a_torn_line_loses_no_activation() {
    let env = Env::new();
    let cfg = config(&env, 0);
    let ops = publish_versions(&env, &cfg, 1..=3);
    // Make releases.dir look as a Part II binary left it: the activation log (its second
    // line torn by a disk-full append, then appended again by recover), the settings.
    let line = |op: &str, at: &str| {
        format!(
            "{{\"release\":\"{op}\",\"operation_id\":\"{op}\",\"activated_at\":\"{at}\",\"owner\":\"weather/latest\"}}"
        )
    };
    let l1 = line(&ops[1], "2026-12-02T01:00:00.000Z");
    let l2 = line(&ops[2], "2026-12-02T02:00:00.000Z");
    let text = format!("{l1}\n{}{l2}\n", &l2[..30]);
    std::fs::remove_dir_all(env.path(&format!("{DIR}/.distributor/log"))).unwrap();
    std::fs::remove_file(env.path(&format!("{DIR}/.distributor/releases.json"))).unwrap();
    env.write(&format!("{DIR}/.distributor-activations.log"), &text);
    let settings = format!(
        "{{\"path\": \"{}\", \"keep\": 0}}",
        env.path(PATH).display()
    );
    env.write(&format!("{DIR}/.distributor-releases.json"), &settings);
    // Retention (a dry run, unlocked) reads the old log as the log would hold it.
    let r = env.run(&[
        "prune",
        "--dry-run",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    r.expect_code(0);
    let d = r.dest(0);
    let kept: Vec<&str> = (d["releases"].as_array().unwrap().iter())
        .filter(|v| v["keep"] == true)
        .map(|v| v["release"].as_str().unwrap())
        .collect();
    assert_eq!(kept, [ops[1].as_str(), ops[2].as_str()]);
    // The first locked run migrates.
    prune(&env, &cfg).expect_code(0);
    let log = logged(&env);
    assert_eq!(log.len(), 2);
    assert_eq!(log[0]["release_activated"], ops[1].as_str());
    assert_eq!(log[1]["release_activated"], ops[2].as_str());
    assert_eq!(log[1]["migrated_from"], ".distributor-activations.log");
    assert_eq!(
        env.read(&format!("{DIR}/.distributor-releases.json")),
        "{\"moved_to\": \".distributor/\"}\n"
    );
    assert!(env.exists(&format!("{DIR}/.distributor/releases.json")));
    // Interrupted before the settings record was replaced: the next run migrates again,
    // and creates nothing twice.
    env.write(&format!("{DIR}/.distributor-releases.json"), &settings);
    prune(&env, &cfg).expect_code(0);
    assert_eq!(logged(&env), log);
    // The log this journal saw reach entry 3 was removed by hand above (a Part II
    // binary's journal knew no log): a rollback is `log_missing` until `log --restart`.
    let r = env.run(&["rollback", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(3);
    assert!(r.stdout.contains("log_missing"), "{}", r.stdout);
    env.run(&["log", "--config", cfg.to_str().unwrap(), "--restart"])
        .expect_code(0);
    // The previous release is the one before the active, and rollback goes there.
    assert!(releases(&env).contains(&ops[1]));
    let r = env.run(&["rollback", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    assert_eq!(active(&env), ops[1]);
}

/// A line of the old log that cannot be read: which activation it held is unknown, so it
/// is not migrated; retention removes nothing and the error names the file.
#[test]
fn an_unreadable_old_log_line_stops_retention_and_publishing() {
    let env = Env::new();
    let cfg = config(&env, 0);
    let ops = publish_versions(&env, &cfg, 1..=2);
    std::fs::remove_dir_all(env.path(&format!("{DIR}/.distributor/log"))).unwrap();
    env.write(
        &format!("{DIR}/.distributor-activations.log"),
        &format!(
            "{{\"release\":\"{}\",\"oper\n{{\"release\":\"{}\",\"operation_id\":\"{}\",\"activated_at\":\"t\"}}\n",
            ops[0], ops[1], ops[1]
        ),
    );
    env.write(
        &format!("{DIR}/.distributor-releases.json"),
        &format!(
            "{{\"path\": \"{}\", \"keep\": 0}}",
            env.path(PATH).display()
        ),
    );
    let r = prune(&env, &cfg);
    r.expect_code(1);
    let err = r.dest(0)["log_error"].as_str().unwrap().to_string();
    assert!(
        err.contains(".distributor-activations.log: line 1"),
        "{err}"
    );
    // Publishing is refused: the log this journal saw was removed by hand above
    // (`log_missing`); once that gap is logged, by the unreadable line.
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["log_missing"], "{}", r.stdout);
    env.run(&["log", "--config", cfg.to_str().unwrap(), "--restart"])
        .expect_code(0);
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(1);
    assert_eq!(releases(&env).len(), 2);
}

/// Two writers race for one seq (the other one held no valid lock): the one that links
/// second stops with `concurrent_change` and logs nothing; its staging entry stays for
/// `recover`. A writer that finds its own file under the number (a link reported as
/// failed) counts the entry as written.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_race_for_one_seq_has_one_winner() {
    let env = Env::new();
    let cfg = config(&env, 3);
    publish_versions(&env, &cfg, 1..=1);
    let b2 = site(&env, 2);
    let args = [
        "publish",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        b2.to_str().unwrap(),
    ];
    let paused = PausedRun::start(&env, &args, "before_log_link", &[]);
    // Another writer takes seq 2.
    let theirs = env.write(&format!("{LOG}/{}", entry_file(2)), "{}");
    std::fs::set_permissions(&theirs, PermissionsExt::from_mode(0o600)).unwrap();
    let r = paused.resume();
    r.expect_code(1);
    assert!(
        r.stdout.contains("concurrent change"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        std::fs::read_to_string(&theirs).unwrap(),
        "{}",
        "never replaced"
    );
    let temps: Vec<String> = std::fs::read_dir(env.path(LOG))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(temps.is_empty(), "{temps:?}");

    // The writer's own file under the number: written.
    std::fs::remove_file(&theirs).unwrap();
    let r = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    let log = logged(&env);
    assert_eq!(log.len(), 2);
    assert!(log[1]["recovered_by"]["actor"].is_string(), "{}", log[1]);
    assert_eq!(log[1]["actor"], "cli:tester");
    let b3 = site(&env, 3);
    let args = [
        "publish",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        b3.to_str().unwrap(),
    ];
    let paused = PausedRun::start(&env, &args, "before_log_link", &[]);
    let tmp = std::fs::read_dir(env.path(LOG))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".tmp-")
        })
        .expect("the writer's temporary file");
    std::fs::hard_link(&tmp, env.path(&format!("{LOG}/{}", entry_file(3)))).unwrap();
    let r = paused.resume();
    r.expect_code(0);
    let log = logged(&env);
    assert_eq!(log.len(), 3);
    assert_eq!(log[2]["operation_id"], op_of(&r).as_str());
}

/// A log write that fails (no space left: an injected error) after the commit point
/// loses nothing: the staging entry stays, `recover` writes the entry, and retention then
/// keeps the active and previous releases.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_failed_log_write_loses_no_activation() {
    let env = Env::new();
    let cfg = config(&env, 0);
    let ops = publish_versions(&env, &cfg, 1..=2);
    let r = env.run_env(
        &[
            "publish",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            site(&env, 3).to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "io_log_write=error")],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    let op = active(&env);
    assert!(!ops.contains(&op), "the commit point was passed");
    assert_eq!(logged(&env).len(), 2);
    assert_eq!(releases(&env).len(), 3, "nothing removed");
    let r = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    let log = logged(&env);
    assert_eq!(log.len(), 3);
    assert_eq!(log[2]["release_activated"], op.as_str());
    prune(&env, &cfg).expect_code(0);
    assert_eq!(releases(&env), BTreeSet::from([ops[1].clone(), op]));
}

fn log_cmd(env: &Env, cfg: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["log", "--config", cfg.to_str().unwrap()];
    args.extend_from_slice(extra);
    env.run(&args)
}

/// `distributor log`: oldest first; `--limit N` the N newest, oldest first; `--jsonl` one
/// object per line; `--since` by commit time.
#[test]
fn log_prints_the_entries_oldest_first() {
    let env = Env::new();
    let cfg = config(&env, 3);
    let ops = publish_versions(&env, &cfg, 1..=3);
    let r = log_cmd(&env, &cfg, &[]);
    r.expect_code(0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(lines[0].starts_with("destination latest ("), "{}", r.stdout);
    assert_eq!(lines.len(), 4, "{}", r.stdout);
    for (line, op) in lines[1..].iter().zip(&ops) {
        assert!(
            line.contains(op.as_str()) && line.contains("publish"),
            "{line}"
        );
    }
    let r = log_cmd(&env, &cfg, &["--jsonl", "--limit", "2"]);
    r.expect_code(0);
    let objs: Vec<Value> = (r.stdout.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = objs.iter().map(|o| o["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [2, 3]);
    assert_eq!(objs[1]["operation_id"], ops[2].as_str());
    let r = log_cmd(&env, &cfg, &["--jsonl", "--since", "2999-01-01"]);
    r.expect_code(0);
    assert_eq!(r.stdout, "");
    let r = log_cmd(&env, &cfg, &["--jsonl", "--since", "2000-01-01T00:00:00Z"]);
    assert_eq!(r.stdout.lines().count(), 3);
    log_cmd(&env, &cfg, &["--since", "yesterday"]).expect_code(2);
    log_cmd(&env, &cfg, &["--destination", "nope"]).expect_code(2);
}

/// A bad entry: `log` names its file and exits 1; `log --quarantine SEQ` moves it to
/// `.distributor/quarantine/` and logs the move; then the log is whole again and
/// retention removes what it should.
#[test]
fn log_quarantine_moves_a_bad_entry_out_and_retention_resumes() {
    let env = Env::new();
    let cfg = config(&env, 0);
    let ops = publish_versions(&env, &cfg, 1..=2);
    let torn = env.write(
        &format!("{LOG}/{}", entry_file(3)),
        "{\"log_format_version\": 1",
    );
    std::fs::set_permissions(&torn, PermissionsExt::from_mode(0o600)).unwrap();
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(0);
    let third = op_of(&r);
    let r = log_cmd(&env, &cfg, &[]);
    r.expect_code(1);
    assert!(r.stdout.contains(&entry_file(3)), "{}", r.stdout);
    let r = log_cmd(&env, &cfg, &["--jsonl"]);
    r.expect_code(1);
    assert!(r.stderr.contains(&entry_file(3)), "{}", r.stderr);
    assert_eq!(
        r.stdout.lines().count(),
        3,
        "the believed entries still print"
    );

    let r = log_cmd(&env, &cfg, &["--quarantine", "3"]);
    r.expect_code(0);
    assert!(
        r.stdout.contains("entry 5 records the move"),
        "{}",
        r.stdout
    );
    assert!(env.exists(&format!("{DIR}/.distributor/quarantine/{}", entry_file(3))));
    let r = log_cmd(&env, &cfg, &["--jsonl"]);
    r.expect_code(0);
    let last: Value = serde_json::from_str(r.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["command"], "quarantine");
    assert_eq!(last["quarantined_seq"], 3);
    let r = prune(&env, &cfg);
    r.expect_code(0);
    assert_eq!(releases(&env), BTreeSet::from([ops[1].clone(), third]));
    let last = logged(&env).last().unwrap().clone();
    assert_eq!(last["command"], "prune");
    assert_eq!(last["removed_count"], 1);
    assert_eq!(last["removed_releases"][0], ops[0].as_str());
}

/// A destination published in place keeps its log in its own `.distributor/log/`: one
/// entry per committed publication (none for an unchanged one), never reported by
/// `verify` as unrecorded; a crash before the entry is linked leaves it the missing last
/// one, and `recover` writes it with `recovered_by`.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn in_place_publications_are_logged_and_recover_writes_a_missing_entry() {
    let env = Env::new();
    let cfg = env.simple_config("p.yaml", "weather", "latest", "plain", "");
    let b1 = site(&env, 1);
    let first = env.publish(&cfg, &b1, &[]);
    first.expect_code(0);
    env.publish(&cfg, &b1, &[]).expect_code(0);
    let read = |env: &Env| -> Vec<Value> {
        let dir = env.path("plain/.distributor/log");
        let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .filter(|p| p.to_string_lossy().ends_with(".json"))
            .collect();
        names.sort();
        (names.iter())
            .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
            .collect()
    };
    let log = read(&env);
    assert_eq!(log.len(), 1, "an unchanged publication adds no entry");
    assert_eq!(log[0]["operation_id"], op_of(&first).as_str());
    assert_eq!(log[0]["decision"], "create");
    assert_eq!(log[0]["counts"]["written"], 2);
    env.run(&["verify", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    let r = env.run_env(
        &[
            "publish",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            site(&env, 2).to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "before_log_link")],
    );
    assert_ne!(r.code, 0);
    assert_eq!(read(&env).len(), 1);
    let r = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    let log = read(&env);
    assert_eq!(log.len(), 2);
    assert_eq!(log[1]["decision"], "replace_older");
    // What the run's staging record counted: index.html written, same.css unchanged.
    assert_eq!(log[1]["counts"]["written"], 1);
    assert_eq!(log[1]["counts"]["unchanged"], 1);
    assert_eq!(log[1]["actor"], "cli:tester");
    assert!(log[1]["recovered_by"].is_object(), "{}", log[1]);
    let left: Vec<String> = std::fs::read_dir(env.path("plain/.distributor/log"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let r = log_cmd(&env, &cfg, &["--jsonl"]);
    r.expect_code(0);
    assert_eq!(r.stdout.lines().count(), 2);
}

/// Set to `1` (`.ci/run` does: CI runs as root), a test that needs a tmpfs mount fails
/// instead of skipping when it cannot make one.
const REQUIRE_TMPFS: &str = "DISTRIBUTOR_REQUIRE_TMPFS";

/// Skips the current test loudly, recorded for the run's closing summary
/// ([`crate::common::left_out`]), or fails it when [`REQUIRE_TMPFS`] is `1`.
fn skip_without_tmpfs(why: &str) {
    if std::env::var(REQUIRE_TMPFS).is_ok_and(|v| v == "1") {
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("<unnamed test>");
        panic!("{test} needs a tmpfs mount: {why}; {REQUIRE_TMPFS}=1 requires it to run");
    }
    crate::common::left_out::skip(
        "a tmpfs mount (run as root)",
        &format!("{why}. {REQUIRE_TMPFS}=1 makes this a failure."),
    );
}

/// Unmounts a filesystem a test mounted, whatever happens.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A real full disk at the log write (a small tmpfs, filled while the publication stands
/// just before writing its entry): the publication passed its commit point and says so,
/// nothing is lost, and `recover`, once there is room, writes the entry; retention then
/// keeps the active and previous releases. Needs root (mount); skipped otherwise, loudly,
/// and failed instead under `DISTRIBUTOR_REQUIRE_TMPFS=1`.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_full_disk_at_the_log_write_loses_nothing() {
    let euid = rustix::process::geteuid().as_raw();
    if euid != 0 {
        return skip_without_tmpfs(&format!("mounting one needs root, this is uid {euid}"));
    }
    let env = Env::new();
    std::fs::create_dir_all(env.path("www")).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(env.path("www"))
        .output();
    match mounted {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            return skip_without_tmpfs(&format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Err(e) => return skip_without_tmpfs(&format!("mount could not run: {e}")),
    }
    let _guard = Mounted(env.path("www"));
    let cfg = config(&env, 0);
    let ops = publish_versions(&env, &cfg, 1..=2);
    let b3 = site(&env, 3);
    let args = [
        "publish",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        b3.to_str().unwrap(),
    ];
    let paused = PausedRun::start(&env, &args, "io_log_write", &[]);
    // Fill the filesystem.
    {
        use std::io::Write;
        let mut f = std::fs::File::create(env.path("www/filler")).unwrap();
        let chunk = vec![0u8; 64 << 10];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }
    let r = paused.resume();
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stdout.contains("No space left") && r.stdout.contains("passed its commit point"),
        "{}",
        r.stdout
    );
    let third = active(&env);
    assert!(!ops.contains(&third), "the commit point was passed");
    assert_eq!(logged(&env).len(), 2);
    assert_eq!(releases(&env).len(), 3, "nothing removed");
    let temps: Vec<String> = std::fs::read_dir(env.path(LOG))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(temps.is_empty(), "{temps:?}");
    std::fs::remove_file(env.path("www/filler")).unwrap();
    let r = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    let log = logged(&env);
    assert_eq!(log.len(), 3);
    assert_eq!(log[2]["release_activated"], third.as_str());
    assert_eq!(log[2]["release_deactivated"], ops[1].as_str());
    prune(&env, &cfg).expect_code(0);
    assert_eq!(releases(&env), BTreeSet::from([ops[1].clone(), third]));
}
