//! Issue 27, the operator frictions a newcomer hit (SPEC §16, §20): each test here failed
//! before its fix.

use crate::common::{Env, Run};
use serde_json::Value;
use std::path::PathBuf;

/// A releases destination at `www/latest` with `keep`.
fn releases_config(env: &Env, keep: u32) -> PathBuf {
    env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "www/latest",
        &format!("    releases:\n      keep: {keep}\n"),
    )
}

/// Publishes `n` versions; returns their operation ids.
fn publish_versions(env: &Env, cfg: &std::path::Path, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let b = env.bundle(
                &format!("b{i}"),
                "tomorrow",
                &format!("2026-12-02T0{i}:00:00Z"),
                &[("v.txt", &format!("version {i}"))],
                &[],
            );
            let r = env.publish(cfg, &b, &[]);
            r.expect_code(0);
            r.dest(0)["operation_id"].as_str().unwrap().to_string()
        })
        .collect()
}

fn history(env: &Env, args: &[&str]) -> Run {
    let mut all = vec!["history"];
    all.extend_from_slice(args);
    env.run(&all)
}

/// Item 5: `history --action prune` and `--action adopt`, listed by `--help` and printed in
/// history's rows, are accepted.
#[test]
fn history_accepts_the_prune_and_adopt_actions() {
    let env = Env::new();
    // An in-place destination, adopted as a first release.
    let plain = env.simple_config("plain.yaml", "weather", "latest", "www/latest", "");
    let b = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T00:00:00Z",
        &[("v.txt", "0")],
        &[],
    );
    env.publish(&plain, &b, &[]).expect_code(0);
    // Before any adoption or prune: an empty list, not an error.
    for action in ["adopt", "prune"] {
        let r = history(&env, &["--action", action]);
        r.expect_code(0);
        assert!(r.stdout.starts_with("no operations"), "{}", r.stdout);
    }
    let cfg = releases_config(&env, 3);
    let c = cfg.to_str().unwrap();
    env.run(&["releases", "adopt", "--config", c])
        .expect_code(0);
    let r = history(&env, &["--action", "adopt", "--json"]);
    r.expect_code(0);
    let ops = r.json()["operations"].as_array().unwrap().clone();
    assert_eq!(ops.len(), 1, "{}", r.stdout);
    assert_eq!(ops[0]["decision"], "adopt");
    // prune: accepted, and the text rows say `prune` as the list prints it.
    env.run(&["prune", "--config", c]).expect_code(0);
    history(&env, &["--action", "prune"]).expect_code(0);
    let r = history(&env, &["--action", "adopted"]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("accepted:") && r.stderr.contains("prune, adopt"),
        "{}",
        r.stderr
    );
}

/// Item 7: `--exclude '.git/'` means, as in gitignore, everything below a directory
/// `.git`; it no longer silently excludes nothing.
#[test]
fn manifest_exclude_with_a_trailing_slash_leaves_out_the_directory() {
    let env = Env::new();
    env.write("b/index.html", "site");
    env.write("b/.git/HEAD", "ref");
    env.write("b/.git/objects/ab", "obj");
    env.write("b/sub/.git", "a file named .git stays");
    env.write("b/a/node_modules/x.js", "x");
    let r = env.run(&[
        "manifest",
        env.path("b").to_str().unwrap(),
        "--id",
        "site",
        "--exclude",
        ".git/",
        "--exclude",
        "**/node_modules/",
    ]);
    r.expect_code(0);
    let m: Value = serde_json::from_str(&env.read("b/distributor-manifest.json")).unwrap();
    let paths: Vec<&str> = m["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["index.html", "sub/.git"]);
    let r = env.run(&[
        "manifest",
        env.path("b").to_str().unwrap(),
        "--id",
        "site",
        "--exclude",
        "//",
    ]);
    r.expect_code(2);
    assert!(r.stderr.contains("--exclude"), "{}", r.stderr);
}

/// Item 11: `rollback --to` takes a unique start of the operation id, as `history show`
/// and `recover --abandon` do; an unknown or ambiguous start is a clear usage error.
#[test]
fn rollback_to_accepts_a_unique_prefix() {
    let env = Env::new();
    let cfg = releases_config(&env, 3);
    let ops = publish_versions(&env, &cfg, 3);
    let c = cfg.to_str().unwrap();
    let rollback = |to: &str| env.run(&["rollback", "--json", "--config", c, "--to", to]);
    let r = rollback(&ops[0][..8]);
    r.expect_code(0);
    let target = std::fs::read_link(env.path("www/latest")).unwrap();
    assert!(
        target.to_string_lossy().ends_with(&ops[0]),
        "{}",
        target.display()
    );
    // No release starts so: the error lists what is there.
    let unknown = if ops.iter().any(|o| o.starts_with("ffff")) {
        "0000"
    } else {
        "ffff"
    };
    let r = rollback(unknown);
    r.expect_code(2);
    assert!(
        r.stdout.contains("no release") && r.stdout.contains(&ops[1]),
        "{}{}",
        r.stdout,
        r.stderr
    );
    // Not an id at all.
    let r = rollback("latest");
    r.expect_code(2);
    assert!(r.stderr.contains("--to latest"), "{}", r.stderr);
}

/// Item 10: completions know the closed sets of `history --action` and `--status`, and
/// `--destination` no longer completes to file names; parsing and its errors are as
/// before.
#[test]
fn completions_offer_actions_and_statuses_not_file_names() {
    let env = Env::new();
    let bash = env.run(&["completions", "bash"]);
    bash.expect_code(0);
    let case = |flag: &str| -> String {
        let at = bash
            .stdout
            .find(&format!("                {flag})\n"))
            .unwrap_or_else(|| panic!("no case for {flag}"));
        bash.stdout[at..].lines().nth(1).unwrap().to_string()
    };
    let action = case("--action");
    for v in ["replace_takeover", "rollback", "prune", "adopt"] {
        assert!(action.contains(v), "{action}");
    }
    let status = case("--status");
    for v in ["refused", "diverged", "applied"] {
        assert!(status.contains(v), "{status}");
    }
    let destination = case("--destination");
    assert!(!destination.contains("compgen -f"), "{destination}");
    let fish = env.run(&["completions", "fish"]);
    assert!(
        fish.stdout
            .lines()
            .filter(|l| l.contains("-l destination "))
            .all(|l| l.contains(" -f")),
        "{}",
        fish.stdout
    );
    // The command still checks the value, with its own message.
    let r = env.run(&["history", "--status", "bogus"]);
    r.expect_code(2);
    assert!(
        r.stderr
            .contains("--status bogus: unknown value, accepted: in_progress"),
        "{}",
        r.stderr
    );
}

/// Three destinations: `ok`, `blocked` (its path lies under a regular file) and
/// `taken` (unmanaged content where the bundle's file goes).
fn three_destinations(env: &Env) -> PathBuf {
    env.write("plain-file", "not a directory");
    env.write("taken/a.txt", "someone else's");
    env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: ok\n    path: {}\n  - id: blocked\n    path: {}\n  - id: taken\n    path: {}\n",
            env.path("ok").display(),
            env.path("plain-file/below").display(),
            env.path("taken").display(),
        ),
    )
}

/// Item 1 (SPEC §20 amends §16): `--quiet` prints the summary and, for every destination
/// that failed or conflicted, one line saying why; a pending recovery (exit 4) reads as
/// such, not as a failure.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn quiet_still_says_why_a_destination_failed_or_waits_for_recovery() {
    let env = Env::new();
    let cfg = three_destinations(&env);
    let c = cfg.to_str().unwrap();
    let b1 = env.bundle("b1", "one", "2026-12-01T06:00:00Z", &[("a.txt", "1")], &[]);
    let s1 = b1.to_str().unwrap();
    let r = env.run(&["publish", "--quiet", "--config", c, "--source", s1]);
    r.expect_code(3);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", r.stdout);
    assert!(
        lines[0].starts_with("destination blocked: conflict: unsafe_storage (not forceable): ")
            && lines[0].contains("plain-file is a file"),
        "{}",
        r.stdout
    );
    assert!(
        lines[1].starts_with("destination taken: conflict: unmanaged_content (forceable): "),
        "{}",
        r.stdout
    );
    assert!(
        lines[2].starts_with("summary: 3 destination(s)"),
        "{}",
        r.stdout
    );

    // An operation killed after its journal entry: `ok` waits for recovery (exit 4).
    let b2 = env.bundle("b2", "one", "2026-12-02T06:00:00Z", &[("a.txt", "2")], &[]);
    let s2 = b2.to_str().unwrap();
    let killed = env.run_env(
        &[
            "publish",
            "--config",
            c,
            "--source",
            s2,
            "--destination",
            "ok",
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_journal_append")],
    );
    crate::common::faults::assert_aborted(&killed, "after_journal_append");
    let r = env.run(&[
        "publish",
        "--quiet",
        "--config",
        c,
        "--source",
        s2,
        "--destination",
        "ok",
    ]);
    r.expect_code(4);
    let first = r.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("destination ok: recovery pending: ") && first.contains("recover"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("failed:"), "{}", r.stdout);
    let r = env.publish(&cfg, &b2, &["--destination", "ok"]);
    assert_eq!(r.dest(0)["error_kind"], "recovery_required", "{}", r.stdout);
}

/// Item 2: when the lock cannot be taken, the report is the lock timeout naming the
/// holder, never the lock-free look's view of the holder's half-placed files as
/// (forceable) conflicts. With `--quiet`, that is the destination's one line (item 1).
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_lock_timeout_reports_the_holder_not_its_in_flight_files() {
    use crate::common::hostile::PausedRun;
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let files: Vec<(String, String)> = (0..8)
        .map(|i| (format!("f{i}.txt"), format!("{i}")))
        .collect();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let b1 = env.bundle("b1", "tomorrow", "2026-12-02T06:00:00Z", &files, &[]);
    let b2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("f0.txt", "new")],
        &[],
    );
    let c = cfg.to_str().unwrap();
    // The holder stands with its files placed and its state not yet written.
    let holder = PausedRun::start(
        &env,
        &["publish", "--config", c, "--source", b1.to_str().unwrap()],
        "after_placement",
        &[],
    );
    let pid = holder.pid();
    let second = |extra: &[&str]| {
        let mut args = vec!["publish", "--config", c, "--source", b2.to_str().unwrap()];
        args.extend_from_slice(&["--lock-timeout", "0.2"]);
        args.extend_from_slice(extra);
        env.run(&args)
    };
    let r = second(&["--json"]);
    r.expect_code(1);
    let d = r.dest(0);
    assert_eq!(d["status"], "failed", "{}", r.stdout);
    assert_eq!(d["conflicts"], serde_json::json!([]), "{}", r.stdout);
    assert_eq!(d["error_kind"], "lock_timeout", "{}", r.stdout);
    assert_eq!(d["decision"], serde_json::Value::Null, "{}", r.stdout);
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {pid}")),
        "{}",
        r.stdout
    );
    let r = second(&[]);
    r.expect_code(1);
    assert!(!r.stdout.contains("unmanaged_content"), "{}", r.stdout);
    assert!(!r.stdout.contains("forceable"), "{}", r.stdout);
    let r = second(&["--quiet"]);
    r.expect_code(1);
    let first = r.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("destination latest: failed: ") && first.contains(&format!("pid {pid}")),
        "{}",
        r.stdout
    );
    holder.resume().expect_code(0);
}

/// Item 9: a releases publication reports the release it activated and the ones
/// retention removed, in text and JSON, and `history` shows the removal (a row under the
/// publication, and `--action prune` lists it).
#[test]
fn a_releases_publication_reports_what_it_activated_and_removed() {
    let env = Env::new();
    let cfg = releases_config(&env, 0);
    let ops = publish_versions(&env, &cfg, 2);
    let b = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T02:00:00Z",
        &[("v.txt", "2")],
        &[],
    );
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(0);
    let d = r.dest(0);
    let op = d["operation_id"].as_str().unwrap();
    assert_eq!(d["release_activated"], op, "{}", r.stdout);
    assert_eq!(
        d["releases_removed"],
        serde_json::json!([ops[0]]),
        "{}",
        r.stdout
    );
    assert_eq!(r.json()["report_version"], 1);
    let b = env.bundle(
        "b3",
        "tomorrow",
        "2026-12-02T03:00:00Z",
        &[("v.txt", "3")],
        &[],
    );
    let c = cfg.to_str().unwrap();
    let r = env.run(&["publish", "--config", c, "--source", b.to_str().unwrap()]);
    r.expect_code(0);
    assert!(r.stdout.contains("  release activated: "), "{}", r.stdout);
    assert!(
        r.stdout
            .contains(&format!("  retention removed: {}", ops[1])),
        "{}",
        r.stdout
    );
    // history: the removal under the publication's row, and --action prune finds it.
    let h = history(&env, &[]);
    assert!(
        h.stdout
            .contains(&format!("    retention removed releases {}", ops[0])),
        "{}",
        h.stdout
    );
    let h = history(&env, &["--action", "prune", "--json"]);
    h.expect_code(0);
    let listed: Vec<String> = h.json()["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["releases_removed"][0].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, [ops[1].clone(), ops[0].clone()], "{}", h.stdout);
}

/// A config with one s3 destination `site` at `s3://<bucket>/site` on moto.
fn s3_config(env: &Env, endpoint: &str, bucket: &str) -> PathBuf {
    env.config(
        "s3.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n    backend: s3\n    path: s3://{bucket}/site\n    s3:\n      endpoint: {endpoint}\n      allow_http: true\n"
        ),
    )
}

/// Item 4, first contact with S3 (SPEC §21): missing credentials, a store that cannot be
/// reached and a bucket that does not exist each get an error that names the destination,
/// what is missing and how to fix it; never the store's XML, object_store's raw wording or
/// the instance-metadata address. The metadata service is either disabled or pointed at a
/// closed loopback port, so nothing waits for a timeout.
#[test]
fn s3_first_contact_errors_say_what_is_missing() {
    let moto = crate::common::s3::require_moto!();
    let env = Env::new();
    let bucket = moto.fresh_bucket();
    let b = env.bundle(
        "b",
        "site",
        "2026-12-02T06:00:00Z",
        &[("index.html", "hi")],
        &[],
    );
    let vars = crate::common::s3::s3_env(moto);
    let with = |keep_keys: bool, extra: &[(&'static str, &str)]| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = (vars.iter())
            .filter(|(k, _)| keep_keys || !k.starts_with("AWS_") || *k == "AWS_REGION")
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        v.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        v
    };
    let publish = |bucket: &str, endpoint: &str, vars: &[(String, String)]| -> String {
        let cfg = s3_config(&env, endpoint, bucket);
        let args = [
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ];
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (&**k, &**v)).collect();
        let r = env.run_env(&args, &vars);
        r.expect_code(1);
        let all = format!("{}{}", r.stdout, r.stderr);
        for never in [
            "api/token",
            "Generic S3 error",
            "169.254",
            "<Error>",
            "<Code>",
            "decision: none",
        ] {
            assert!(!all.contains(never), "{never}: {all}");
        }
        // The destination, by id and by where it is.
        assert!(all.contains("site"), "{all}");
        assert!(all.contains(&format!("s3://{bucket}/site")), "{all}");
        all
    };
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
    };

    // No credentials anywhere (empty HOME), the metadata service disabled; then asked at
    // a closed port.
    for extra in [
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", closed.as_str()),
    ] {
        let all = publish(&bucket, &moto.endpoint, &with(false, &[extra]));
        for needle in [
            "no AWS credentials",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_PROFILE",
            "~/.aws/credentials",
            "credential_process",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_EC2_METADATA_DISABLED",
        ] {
            assert!(all.contains(needle), "{extra:?} {needle}: {all}");
        }
    }
    // Half a key pair is named.
    let all = publish(
        &bucket,
        &moto.endpoint,
        &with(
            false,
            &[
                ("AWS_EC2_METADATA_DISABLED", "true"),
                ("AWS_ACCESS_KEY_ID", "AKIDHALF"),
            ],
        ),
    );
    assert!(
        all.contains("AWS_ACCESS_KEY_ID is set without AWS_SECRET_ACCESS_KEY"),
        "{all}"
    );
    // A profile that is not defined: named, with no files and with files that define
    // other profiles.
    for files in [false, true] {
        if files {
            env.write(
                "home/.aws/config",
                "[profile other]\naws_access_key_id = AKIDOTHER\naws_secret_access_key = x\n",
            );
        }
        let all = publish(
            &bucket,
            &moto.endpoint,
            &with(
                false,
                &[
                    ("AWS_EC2_METADATA_DISABLED", "true"),
                    ("AWS_PROFILE", "reports"),
                ],
            ),
        );
        assert!(all.contains("reports"), "{all}");
        assert!(all.contains("~/.aws/config"), "{all}");
    }
    std::fs::remove_dir_all(env.path("home/.aws")).unwrap();

    // A store that cannot be reached: nothing listens at the endpoint.
    let all = publish(&bucket, &closed, &with(true, &[]));
    assert!(
        all.contains(&format!("cannot reach the store at {closed}"))
            && all.contains("s3.endpoint")
            && all.contains("nothing was written"),
        "{all}"
    );

    // A bucket that does not exist.
    let missing = format!("{bucket}-missing");
    let all = publish(&missing, &moto.endpoint, &with(true, &[]));
    assert!(
        all.contains(&format!("bucket {missing} does not exist"))
            && all.contains("create it first"),
        "{all}"
    );
}

/// Item 8: changing `releases.keep` is `distributor releases settings` (under the lock,
/// journaled), and `releases_mismatch` names that command.
#[test]
fn releases_settings_records_a_changed_keep() {
    let env = Env::new();
    let cfg = releases_config(&env, 3);
    let ops = publish_versions(&env, &cfg, 3);
    // keep: 0 now.
    let cfg = releases_config(&env, 0);
    let c = cfg.to_str().unwrap();
    let b = env.bundle(
        "b9",
        "tomorrow",
        "2026-12-02T09:00:00Z",
        &[("v.txt", "9")],
        &[],
    );
    let r = env.publish(&cfg, &b, &[]);
    assert_eq!(r.conflict_kinds(), ["releases_mismatch"], "{}", r.stdout);
    let msg = r.dest(0)["conflicts"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("distributor releases settings --config"),
        "{msg}"
    );
    // A dry run says what it would record and writes nothing.
    let before = env.snapshot("www");
    let r = env.run(&["releases", "settings", "--dry-run", "--config", c]);
    r.expect_code(0);
    assert!(
        r.stdout.contains("would record") && r.stdout.contains("keep 0"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("before: ") && r.stdout.contains("keep 3"),
        "{}",
        r.stdout
    );
    assert_eq!(env.snapshot("www"), before);
    let r = env.run(&["releases", "settings", "--json", "--config", c]);
    r.expect_code(0);
    let d = &r.json()["destinations"][0];
    assert_eq!(d["status"], "changed", "{}", r.stdout);
    let op = d["operation_id"].as_str().unwrap().to_string();
    // Journaled, with what changed.
    let h = env.run(&["history", "show", &op]);
    h.expect_code(0);
    assert!(
        h.stdout.contains("settings_changed: ") && h.stdout.contains("keep 3 -> "),
        "{}",
        h.stdout
    );
    let h = history(&env, &["--action", "settings", "--json"]);
    assert_eq!(
        h.json()["operations"].as_array().unwrap().len(),
        1,
        "{}",
        h.stdout
    );
    // Recorded: again is a no-op, and the publication applies keep: 0.
    let r = env.run(&["releases", "settings", "--config", c]);
    r.expect_code(0);
    assert!(r.stdout.contains("already recorded"), "{}", r.stdout);
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(0);
    let removed: Vec<String> = r.dest(0)["releases_removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let mut expected = [ops[0].clone(), ops[1].clone()];
    expected.sort();
    let mut removed = removed;
    removed.sort();
    assert_eq!(removed, expected, "{}", r.stdout);
}

/// Item 12: `history --config F show ID` works as `history show ID --config F` does; a
/// list filter before `show` is a usage error saying so.
#[test]
fn history_config_before_show_is_accepted() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        // A top-level key (not indented): the journal is found through the config only.
        &format!("journal:\n  path: {}\n", env.path("j.sqlite3").display()),
    );
    let b = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1")],
        &[],
    );
    let c = cfg.to_str().unwrap();
    let r = env.run_env_without_journal(
        &[
            "publish",
            "--json",
            "--config",
            c,
            "--source",
            b.to_str().unwrap(),
        ],
        &[],
    );
    r.expect_code(0);
    let op = r.dest(0)["operation_id"].as_str().unwrap().to_string();
    let before = env.run_env_without_journal(&["history", "--config", c, "show", &op[..8]], &[]);
    before.expect_code(0);
    let after = env.run_env_without_journal(&["history", "show", &op[..8], "--config", c], &[]);
    after.expect_code(0);
    assert_eq!(before.stdout, after.stdout);
    assert!(before.stdout.contains(&op), "{}", before.stdout);
    let r = env.run_env_without_journal(&["history", "--config", c, "--json", "show", &op], &[]);
    r.expect_code(0);
    assert_eq!(r.json()["operation_id"], op.as_str());
    let r = env.run_env_without_journal(&["history", "--action", "create", "show", &op], &[]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("--action filters the list"),
        "{}",
        r.stderr
    );
}

/// Item 14: `validate` refuses a local destination whose path lies under a regular file
/// (publish would refuse it as `unsafe_storage`), naming the key and the file.
#[test]
fn validate_refuses_a_destination_under_a_regular_file() {
    let env = Env::new();
    env.write("plain-file", "not a directory");
    let cfg = env.simple_config("c.yaml", "weather", "latest", "plain-file/below/latest", "");
    let r = env.run(&["validate", "--config", cfg.to_str().unwrap()]);
    r.expect_code(2);
    assert!(
        r.stderr
            .contains("destinations[0].path (destination latest)")
            && r.stderr.contains("plain-file is a file, not a directory: "),
        "{}",
        r.stderr
    );
    // A path that does not exist yet below a directory is fine.
    let cfg = env.simple_config("ok.yaml", "weather", "latest", "new/dir/latest", "");
    env.run(&["validate", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
}

/// Item 15: `history` where no journal exists says so, rather than reading like a
/// journal that recorded nothing.
#[test]
fn history_says_when_the_journal_does_not_exist() {
    let env = Env::new();
    let r = env.run(&["history"]);
    r.expect_code(0);
    assert!(
        r.stdout.starts_with("no operations: journal ") && r.stdout.contains("does not exist yet"),
        "{}",
        r.stdout
    );
    assert!(!env.journal().exists());
}

/// `n` files `f01.txt` ... with some content each.
fn many_files(n: usize) -> Vec<(String, String)> {
    (1..=n)
        .map(|i| (format!("f{i:02}.txt"), format!("file {i}")))
        .collect()
}

fn as_refs(files: &[(String, String)]) -> Vec<(&str, &str)> {
    files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect()
}

/// Item 15: the summary's conflict count agrees with the grouped lines (`x30`): it counts
/// conflicts, and names the destinations they refused.
#[test]
fn the_summary_counts_conflicts_as_the_grouped_lines_do() {
    let env = Env::new();
    let files = many_files(30);
    for (p, _) in &files {
        env.write(&format!("dest/{p}"), "someone else's");
    }
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = env.bundle("b", "one", "2026-12-02T06:00:00Z", &as_refs(&files), &[]);
    for quiet in [false, true] {
        let mut args = vec!["plan", "--config", cfg.to_str().unwrap()];
        args.extend(["--source", b.to_str().unwrap()]);
        if quiet {
            args.push("--quiet");
        }
        let r = env.run(&args);
        r.expect_code(3);
        assert!(
            r.stdout.contains("unmanaged_content x30 (forceable)"),
            "{}",
            r.stdout
        );
        let summary = r.stdout.lines().last().unwrap_or_default();
        assert!(
            summary.contains("; 30 conflict(s) in 1 destination(s), 0 failed"),
            "{summary}"
        );
    }
}

/// Item 15: a destination that failed (here: recovery is pending after a crash) prints
/// its reason where the decision line was, the decision only as what was planned, and
/// none of its planned file lines, as if they had been written; `--files` lists them
/// under a heading that says they were not written.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_failed_destination_shows_its_reason_not_its_planned_files() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let c = cfg.to_str().unwrap();
    let files = many_files(25);
    let b = env.bundle("b", "one", "2026-12-02T06:00:00Z", &as_refs(&files), &[]);
    let s = b.to_str().unwrap();
    let killed = env.run_env(
        &["publish", "--config", c, "--source", s],
        &[("DISTRIBUTOR_FAILPOINT", "after_journal_append")],
    );
    crate::common::faults::assert_aborted(&killed, "after_journal_append");
    let r = env.run(&["publish", "--config", c, "--source", s]);
    r.expect_code(4);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("destination latest -> "))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(
        lines[at + 1].starts_with("  failed: recovery required: ")
            && lines[at + 1].contains("distributor recover"),
        "{}",
        r.stdout
    );
    assert_eq!(
        lines[at + 2],
        "  planned: create, not carried out",
        "{}",
        r.stdout
    );
    assert!(
        lines[at + 3].starts_with("  files: 25 create (")
            && lines[at + 3].ends_with(" not written)"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("decision:"), "{}", r.stdout);
    assert!(!r.stdout.contains("  + f01.txt"), "{}", r.stdout);
    assert!(!r.stdout.contains("more (--files"), "{}", r.stdout);
    // Asked for, they are listed as planned.
    let r = env.run(&["plan", "--files", "--config", c, "--source", s]);
    r.expect_code(4);
    assert!(
        r.stdout.contains("  planned, not written:\n  + f01.txt"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("  + f25.txt"), "{}", r.stdout);
}

/// Item 15: every history row says who ran the operation, not only a takeover's.
#[test]
fn history_rows_name_the_actor() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let c = cfg.to_str().unwrap();
    let b = env.bundle("b", "one", "2026-12-02T06:00:00Z", &[("a.txt", "1")], &[]);
    let s = b.to_str().unwrap();
    env.run(&["publish", "--config", c, "--source", s, "--actor", "alice"])
        .expect_code(0);
    let b2 = env.bundle("b2", "one", "2026-12-02T07:00:00Z", &[("a.txt", "2")], &[]);
    let s2 = b2.to_str().unwrap();
    env.run(&["publish", "--config", c, "--source", s2])
        .expect_code(0);
    let r = history(&env, &["--config", c]);
    r.expect_code(0);
    let rows: Vec<&str> = r.stdout.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(rows.len(), 2, "{}", r.stdout);
    assert!(
        rows.iter()
            .any(|l| l.contains(" create ") && l.ends_with("  by cli:alice")),
        "{}",
        r.stdout
    );
    assert!(
        rows.iter()
            .any(|l| l.contains(" replace_older ") && l.ends_with("  by cli:tester")),
        "{}",
        r.stdout
    );
}

/// Item 15: `verify` counts the unrecorded paths its `verify.ignore` globs hid, in text
/// and in `--json` (`ignored`), without calling them drift.
#[test]
fn verify_counts_what_its_ignore_globs_hid() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        "    verify:\n      ignore: [\"*.tmp\"]\n",
    );
    let c = cfg.to_str().unwrap();
    let b = env.bundle("b", "one", "2026-12-02T06:00:00Z", &[("a.txt", "1")], &[]);
    env.publish(&cfg, &b, &[]).expect_code(0);
    for n in ["x.tmp", "y.tmp", "z.tmp"] {
        env.write(&format!("dest/{n}"), "scratch");
    }
    let r = env.run(&["verify", "--config", c]);
    r.expect_code(0);
    assert!(r.stdout.contains(": state valid, ok\n"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("  3 unrecorded ignored (verify.ignore)\n"),
        "{}",
        r.stdout
    );
    let r = env.run(&["verify", "--json", "--config", c]);
    r.expect_code(0);
    assert_eq!(r.json()["destinations"][0]["ignored"], 3, "{}", r.stdout);
    assert_eq!(r.json()["drift"], false, "{}", r.stdout);
    env.write("dest/other.txt", "not ignored");
    let r = env.run(&["verify", "--config", c]);
    r.expect_code(3);
    assert!(
        r.stdout
            .contains("  1 unrecorded, 3 unrecorded ignored (verify.ignore)\n"),
        "{}",
        r.stdout
    );
}

/// Item 15 (SPEC §20 amends §16): `status -q` and `verify -q` print one line for each
/// destination that failed, drifted or holds something wrong, saying why, then a
/// summary; the exit code is the one without `-q`.
#[test]
fn status_and_verify_take_quiet() {
    let env = Env::new();
    env.write("plain-file", "not a directory");
    let cfg = env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: ok\n    path: {}\n  - id: drifted\n    path: {}\n  - id: broken\n    path: {}\n",
            env.path("ok").display(),
            env.path("drifted").display(),
            env.path("broken").display(),
        ),
    );
    let c = cfg.to_str().unwrap();
    let b = env.bundle(
        "b",
        "one",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1"), ("b.txt", "2")],
        &[],
    );
    env.publish(&cfg, &b, &[]).expect_code(0);
    env.write("drifted/a.txt", "changed");
    env.write("broken/.distributor.json", "not json");
    for q in ["-q", "--quiet"] {
        let r = env.run(&["verify", q, "--config", c]);
        r.expect_code(3);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 3, "{}", r.stdout);
        assert!(
            lines[0].starts_with("destination drifted -> ")
                && lines[0].ends_with(": drift: 1 modified (a.txt)"),
            "{}",
            r.stdout
        );
        assert!(
            lines[1].starts_with("destination broken -> ")
                && lines[1].contains(": drift: invalid state: "),
            "{}",
            r.stdout
        );
        assert_eq!(
            lines[2],
            "summary: 3 bundle path(s); 1 ok, 2 drift, 0 recovery pending, 0 busy, 0 error(s)"
        );
        let r = env.run(&["status", q, "--config", c]);
        r.expect_code(0);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{}", r.stdout);
        assert!(
            lines[0].starts_with("destination broken -> ") && lines[0].contains(": invalid: "),
            "{}",
            r.stdout
        );
        assert_eq!(
            lines[1],
            "summary: 3 bundle path(s); 2 valid, 0 absent, 1 invalid, 0 recovery pending, 0 busy, 0 error(s)"
        );
    }
    // --files and --quiet contradict each other.
    env.run(&["verify", "-q", "--files", "--config", c])
        .expect_code(2);
}

/// Item 15: `-q` says why for an unreadable destination and a pending recovery too (exit
/// 1 and 4 as without it).
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn status_and_verify_quiet_name_errors_and_pending_recovery() {
    let env = Env::new();
    env.write("plain-file", "not a directory");
    let cfg = env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: ok\n    path: {}\n  - id: waiting\n    path: {}\n",
            env.path("ok").display(),
            env.path("waiting").display(),
        ),
    );
    let c = cfg.to_str().unwrap();
    let b = env.bundle("b", "one", "2026-12-02T06:00:00Z", &[("a.txt", "1")], &[]);
    let s = b.to_str().unwrap();
    env.publish(&cfg, &b, &["--destination", "ok"])
        .expect_code(0);
    let killed = env.run_env(
        &[
            "publish",
            "--config",
            c,
            "--source",
            s,
            "--destination",
            "waiting",
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_staging")],
    );
    crate::common::faults::assert_aborted(&killed, "after_staging");
    for cmd in ["status", "verify"] {
        let r = env.run(&[cmd, "-q", "--config", c]);
        r.expect_code(4);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{cmd}: {}", r.stdout);
        assert!(
            lines[0].starts_with("destination waiting -> ")
                && lines[0].contains(": recovery pending: "),
            "{cmd}: {}",
            r.stdout
        );
        assert!(
            lines[1].contains(" 1 recovery pending, 0 busy, 0 error(s)"),
            "{cmd}: {}",
            r.stdout
        );
    }
}
