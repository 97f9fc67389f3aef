//! Operator experience (SPEC §16): `verify.ignore` for unrecorded content a monitor should
//! not report, and `manifest --exclude` for what never belongs in a bundle.

use crate::common::Env;

#[test]
fn verify_ignore_leaves_out_matching_unrecorded_paths_only() {
    let env = Env::new();
    let extra = "    verify:\n      ignore: [\"robots.txt\", \"**/*.tmp\"]\n";
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", extra);
    let b = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "one")],
        &[],
    );
    env.publish(&cfg, &b, &[]).expect_code(0);
    env.write("dest/robots.txt", "hand-made");
    env.write("dest/sub/x.tmp", "scratch");
    let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
    v.expect_code(0);
    assert_eq!(
        v.json()["destinations"][0]["unrecorded"],
        serde_json::json!([])
    );
    // Anything else is still reported, and so is a recorded file that changed.
    env.write("dest/sub/robots.txt", "not at the top");
    let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
    v.expect_code(3);
    assert_eq!(
        v.json()["destinations"][0]["unrecorded"],
        serde_json::json!(["sub/robots.txt"])
    );
    // A bad glob is a config error naming the key.
    let bad = env.simple_config(
        "bad.yaml",
        "weather",
        "latest",
        "dest",
        "    verify:\n      ignore: [\"a[\"]\n",
    );
    let r = env.run(&["validate", "--config", bad.to_str().unwrap()]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("destinations[0].verify.ignore"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("invalid glob 'a['"), "{}", r.stderr);
}

#[test]
fn manifest_exclude_leaves_out_matching_files_and_directories() {
    let env = Env::new();
    env.write("b/index.html", "site");
    env.write("b/.git/config", "git");
    env.write("b/.git/objects/ab", "obj");
    env.write("b/.DS_Store", "mac");
    env.write("b/img/.DS_Store", "mac");
    env.write("b/img/a.png", "png");
    let r = env.run(&[
        "manifest",
        env.path("b").to_str().unwrap(),
        "--id",
        "site",
        "--exclude",
        ".git",
        "--exclude",
        "**/.DS_Store",
    ]);
    r.expect_code(0);
    let m: serde_json::Value =
        serde_json::from_str(&env.read("b/distributor-manifest.json")).unwrap();
    let paths: Vec<&str> = m["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["img/a.png", "index.html"]);
    let r = env.run(&[
        "manifest",
        env.path("b").to_str().unwrap(),
        "--id",
        "site",
        "--exclude",
        "/abs",
    ]);
    r.expect_code(2);
    assert!(r.stderr.contains("--exclude"), "{}", r.stderr);
}

/// SPEC §16: completions for bash, zsh and fish from the clap definitions.
#[test]
fn completions_cover_every_command() {
    let env = Env::new();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef distributor"),
        ("fish", "complete -c distributor"),
    ] {
        let r = env.run(&["completions", shell]);
        r.expect_code(0);
        assert!(
            r.stdout.contains(marker),
            "{shell}: {}",
            &r.stdout[..200.min(r.stdout.len())]
        );
        for cmd in ["publish", "rollback", "prune", "recover", "history"] {
            assert!(r.stdout.contains(cmd), "{shell} completions lack {cmd}");
        }
    }
    env.run(&["completions", "powershell"]).expect_code(2);
}

/// The committed man pages (`docs/man/`: distributor(1) and one per command) are what the
/// binary's definitions generate, each with exit status and environment, and no other page
/// lies there. After changing a command or flag: `DISTRIBUTOR_UPDATE_MAN=1 cargo test
/// --all-features the_man_page`.
#[test]
fn the_man_pages_are_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/man");
    let pages = distributor::cli::man_pages().unwrap();
    if std::env::var_os("DISTRIBUTOR_UPDATE_MAN").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        for (name, page) in &pages {
            std::fs::write(dir.join(name), page).unwrap();
        }
    }
    let mut committed: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    committed.sort();
    let mut names: Vec<String> = pages.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    assert_eq!(
        committed, names,
        "docs/man/ is not current: run DISTRIBUTOR_UPDATE_MAN=1 cargo test --all-features the_man_page"
    );
    for (name, page) in &pages {
        let on_disk = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        assert!(
            on_disk == *page,
            "docs/man/{name} is not current: run DISTRIBUTOR_UPDATE_MAN=1 cargo test --all-features the_man_page"
        );
        assert!(
            page.contains(".SH EXIT STATUS") && page.contains(".SH ENVIRONMENT"),
            "{name}"
        );
    }
    for cmd in [
        "publish",
        "plan",
        "rollback",
        "recover",
        "serve",
        "releases-adopt",
    ] {
        assert!(
            names.contains(&format!("distributor-{cmd}.1")),
            "{cmd}: {names:?}"
        );
    }
    assert!(pages[0].1.contains("distributor\\-publish(1)"));
}

/// `distributor man [COMMAND]` prints a page, for installs without docs/.
#[test]
fn man_prints_a_page() {
    let env = Env::new();
    let r = env.run(&["man", "publish"]);
    r.expect_code(0);
    assert!(
        r.stdout.contains(".TH distributor-publish 1") && r.stdout.contains("\\-\\-allow\\-delete"),
        "{}",
        &r.stdout[..300.min(r.stdout.len())]
    );
    let r = env.run(&["man"]);
    r.expect_code(0);
    assert!(r.stdout.contains(".TH distributor 1"));
    let r = env.run(&["man", "nope"]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("accepted:") && r.stderr.contains("publish"),
        "{}",
        r.stderr
    );
}

/// SPEC §16 / issue: error messages that say how to fix the mistake.
#[test]
fn common_mistakes_get_a_hint() {
    let env = Env::new();
    let head = "pipeline:\n  id: w\ndestinations:\n  - id: d\n";
    for (yaml, says) in [
        (
            format!("version: \"1\"\n{head}    path: out\n"),
            "expected the number 1",
        ),
        (
            "version: 1\npipeline:\n\tid: w\ndestinations:\n  - id: d\n    path: out\n".to_string(),
            "tabs are not allowed for indentation in YAML (line 3)",
        ),
        (
            format!("version: 1\n{head}    path: $HOME/out\n"),
            "variables are not expanded",
        ),
        (
            format!("version: 1\nsource:\n  path: ${{BUILD}}/out\n{head}    path: out\n"),
            "variables are not expanded",
        ),
        (
            format!(
                "version: 1\nserver:\n  upload_tokens: [{{name: a, sha256: abc}}]\n{head}    path: out\n"
            ),
            "printf %s \"$TOKEN\" | sha256sum",
        ),
    ] {
        let cfg = env.config("c.yaml", &yaml);
        let r = env.run(&["validate", "--config", cfg.to_str().unwrap()]);
        r.expect_code(2);
        assert!(r.stderr.contains(says), "{yaml}\n{}", r.stderr);
    }
    // A bundle without its manifest: how to write one.
    let cfg = env.simple_config("ok.yaml", "w", "d", "dest", "");
    env.write("b/a.txt", "a");
    let r = env.run(&[
        "plan",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        env.path("b").to_str().unwrap(),
    ]);
    r.expect_code(1);
    assert!(r.stderr.contains("distributor manifest"), "{}", r.stderr);
    assert!(r.stderr.contains("--id ID"), "{}", r.stderr);
}

/// SPEC §16: a waiting run prints who holds the lock (host, pid, actor, operation, since)
/// once, and the lock timeout error names the holder.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn the_lock_says_who_holds_it() {
    use crate::common::hostile::PausedRun;
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b1 = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1")],
        &[],
    );
    let b2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("a.txt", "2")],
        &[],
    );
    let c = cfg.to_str().unwrap();
    let holder = PausedRun::start(
        &env,
        &[
            "publish",
            "--config",
            c,
            "--source",
            b1.to_str().unwrap(),
            "--actor",
            "holder-bot",
        ],
        "after_staging_record",
        &[],
    );
    let pid = holder.pid();
    let r = env.run(&[
        "publish",
        "--config",
        c,
        "--source",
        b2.to_str().unwrap(),
        "--lock-timeout",
        "0.5",
    ]);
    r.expect_code(1);
    let waiting: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("waiting for the lock"))
        .collect();
    assert_eq!(waiting.len(), 1, "printed once: {}", r.stderr);
    for needle in [
        format!("pid {pid}"),
        "actor cli:holder-bot".to_string(),
        "operation ".to_string(),
        "since 20".to_string(),
        "host ".to_string(),
    ] {
        assert!(waiting[0].contains(&needle), "{needle}: {}", waiting[0]);
    }
    assert!(
        !waiting[0].contains("operation (none yet)"),
        "{}",
        waiting[0]
    );
    let error = r
        .stdout
        .lines()
        .find(|l| l.contains("--lock-timeout"))
        .unwrap_or_default();
    assert!(error.contains(&format!("pid {pid}")), "{}", r.stdout);
    holder.resume().expect_code(0);
}
