//! Error hints and truths an operator needs (issue 15, items 11-13; SPEC §16): a path the
//! config wrote relative says it is taken relative to the config file, a journal path
//! that is a directory says so, a destination path under a file names the file, `--force`
//! in a shared root says and does the same thing when another owner's content is newer,
//! and the documentation's upload, web-server and journal examples are right.

use crate::common::Env;
use std::path::Path;

const T6: &str = "2026-12-02T06:00:00Z";
const T7: &str = "2026-12-02T07:00:00Z";

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `source.path: out/site` in `conf/c.yaml`, run from a directory that has `out/site`: the
/// config means `conf/out/site`, and the error says so.
#[test]
fn a_relative_source_path_that_does_not_exist_says_it_is_relative_to_the_config_file() {
    let env = Env::new();
    env.bundle("out/site", "site-1", T6, &[("index.html", "hi")], &[]);
    let cfg = env.config(
        "conf/c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: w\nsource:\n  path: out/site\ndestinations:\n  - id: d\n    path: {}\n",
            env.path("dest").display()
        ),
    );
    let conf = env.path("conf");
    for cmd in ["plan", "publish"] {
        let r = env.run(&[cmd, "--config", "conf/c.yaml"]);
        r.expect_code(1);
        let says = format!(
            "source.path 'out/site' is taken relative to the config file {}: {} does not exist",
            s(&cfg),
            conf.join("out/site").display()
        );
        assert!(r.stderr.contains(&says), "{cmd}: {}", r.stderr);
    }
    // A file there instead of the bundle directory.
    env.write("conf/out/site", "not a directory");
    let r = env.run(&["plan", "--config", "conf/c.yaml"]);
    r.expect_code(1);
    assert!(
        r.stderr
            .contains("source.path 'out/site' is taken relative to the config file")
            && r.stderr.contains("is not a directory"),
        "{}",
        r.stderr
    );
    // A directory without a manifest: how to write one, and where the path came from.
    std::fs::remove_file(conf.join("out/site")).unwrap();
    env.write("conf/out/site/index.html", "hi");
    let r = env.run(&["plan", "--config", "conf/c.yaml"]);
    r.expect_code(1);
    assert!(r.stderr.contains("distributor manifest"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("(source.path 'out/site' is taken relative to the config file"),
        "{}",
        r.stderr
    );
    // --source is the working directory's, as ever.
    env.run(&["plan", "--config", "conf/c.yaml", "--source", "out/site"])
        .expect_code(0);
}

/// `validate` says where every relative path went, and that it is relative to the config
/// file; absolute paths get no such line.
#[test]
fn validate_shows_where_relative_paths_went() {
    let env = Env::new();
    let cfg = env.config(
        "conf/c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: w\nsource:\n  path: out/site\njournal:\n  path: ../state/j.sqlite3\ndestinations:\n  - id: rel\n    path: public/latest\n  - id: abs\n    path: {}\n",
            env.path("dest").display()
        ),
    );
    let r = env.run(&["validate", "--config", "conf/c.yaml"]);
    r.expect_code(0);
    let file = s(&cfg);
    for line in [
        format!("destinations[0].path 'public/latest' is taken relative to the config file {file}"),
        format!(
            "source.path: {} (does not exist yet)",
            env.path("conf/out/site").display()
        ),
        format!("source.path 'out/site' is taken relative to the config file {file}"),
        format!("journal.path: {}", env.path("state/j.sqlite3").display()),
        format!("journal.path '../state/j.sqlite3' is taken relative to the config file {file}"),
    ] {
        assert!(r.stdout.contains(&line), "{line}\n{}", r.stdout);
    }
    assert!(!r.stdout.contains("destinations[1].path"), "{}", r.stdout);
}

/// A relative destination `path` that cannot be a directory: the conflict says it was taken
/// relative to the config file.
#[test]
fn a_relative_destination_path_in_trouble_says_it_is_relative_to_the_config_file() {
    let env = Env::new();
    env.write("conf/file.txt", "a file");
    let cfg = env.config(
        "conf/c.yaml",
        "version: 1\npipeline:\n  id: w\ndestinations:\n  - id: d\n    path: file.txt/sub\n",
    );
    let b = env.bundle("b", "s1", T6, &[("a.txt", "a")], &[]);
    let r = env.plan(&cfg, &b, &[]);
    r.expect_code(3);
    let c = &r.dest(0)["conflicts"][0];
    assert_eq!(c["kind"], "unsafe_storage");
    let says = format!(
        "destinations[0].path 'file.txt/sub' is taken relative to the config file {}",
        s(&cfg)
    );
    assert!(c["message"].as_str().unwrap().contains(&says), "{c}");
}

/// A destination path under a file is refused as a path that is a file is: exit 3, the
/// conflict `unsafe_storage` (not forceable), nothing created, and the message names the
/// file in the way. `status` and `verify` report both the same way.
#[test]
fn a_destination_path_under_a_file_is_refused_like_a_path_that_is_a_file() {
    let env = Env::new();
    env.write("x/file.txt", "a file");
    let b = env.bundle("b", "s1", T6, &[("a.txt", "a")], &[]);
    let file = env.path("x/file.txt");
    let mut looked = Vec::new();
    for (name, path, says) in [
        (
            "is.yaml",
            "x/file.txt",
            format!("{} is a file", file.display()),
        ),
        (
            "under.yaml",
            "x/file.txt/sub",
            format!("{} is a file", file.display()),
        ),
        (
            "deep.yaml",
            "x/file.txt/sub/deeper",
            format!("{} is a file", file.display()),
        ),
    ] {
        let cfg = env.simple_config(name, "w", "d", path, "");
        let before = env.snapshot("x");
        for extra in [&[][..], &["--force"][..]] {
            let r = env.publish(&cfg, &b, extra);
            r.expect_code(3);
            let d = r.dest(0);
            assert_eq!(d["decision"], "conflict", "{path}");
            let c = &d["conflicts"][0];
            assert_eq!(c["kind"], "unsafe_storage", "{path}: {c}");
            assert_eq!(c["forceable"], false, "{path}: {c}");
            assert!(
                c["message"].as_str().unwrap().contains(&says),
                "{path}: {c}"
            );
        }
        assert_eq!(env.snapshot("x"), before, "{path}: nothing is created");
        let p = env.plan(&cfg, &b, &[]);
        p.expect_code(3);
        for cmd in ["status", "verify"] {
            let r = env.run(&[cmd, "--config", s(&cfg)]);
            assert!(
                format!("{}{}", r.stdout, r.stderr).contains(&says),
                "{cmd} {path}: {}{}",
                r.stdout,
                r.stderr
            );
            looked.push((cmd, r.code));
        }
    }
    // The same exit code whether the path is the file or lies under it, and not success.
    for cmd in ["status", "verify"] {
        let codes: Vec<i32> = (looked.iter())
            .filter(|(c, _)| *c == cmd)
            .map(|(_, code)| *code)
            .collect();
        assert!(
            codes.iter().all(|c| *c == codes[0] && *c != 0),
            "{cmd}: {codes:?}"
        );
    }
}

/// `--journal`, `DISTRIBUTOR_JOURNAL` or `journal.path` naming a directory: every command
/// says it is a directory and that a journal is a file, and suggests one in it.
#[test]
fn a_journal_path_that_is_a_directory_is_named_as_such() {
    let env = Env::new();
    let dir = env.path("journals");
    std::fs::create_dir_all(&dir).unwrap();
    let b = env.bundle("b", "s1", T6, &[("a.txt", "a")], &[]);
    let cfg = env.simple_config("c.yaml", "w", "d", "dest", "");
    let with_path = env.config(
        "j.yaml",
        &format!(
            "version: 1\npipeline:\n  id: w\njournal:\n  path: journals\ndestinations:\n  - id: d\n    path: {}\n",
            env.path("dest").display()
        ),
    );
    let says = [
        format!("journal {}: is a directory", dir.display()),
        "the journal is a file".to_string(),
        format!("{}", dir.join("journal.sqlite3").display()),
    ];
    let check = |what: &str, r: crate::common::Run| {
        r.expect_code(1);
        for s in &says {
            assert!(r.stderr.contains(s.as_str()), "{what}: {}", r.stderr);
        }
    };
    let c = s(&cfg);
    let bundle = s(&b);
    let d = s(&dir);
    for args in [
        vec!["publish", "--config", c, "--source", bundle],
        vec!["plan", "--config", c, "--source", bundle],
        vec!["history", "--config", c],
        vec!["recover", "--config", c],
        vec!["status", "--config", c],
    ] {
        // `history` takes --config or --journal, not both.
        let mut flagged = if args[0] == "history" {
            vec!["history"]
        } else {
            args.clone()
        };
        flagged.extend(["--journal", d]);
        check(&format!("--journal: {flagged:?}"), env.run(&flagged));
        check(
            &format!("DISTRIBUTOR_JOURNAL: {args:?}"),
            env.run_env_without_journal(&args, &[("DISTRIBUTOR_JOURNAL", d)]),
        );
    }
    let j = s(&with_path);
    check(
        "journal.path",
        env.run_env_without_journal(&["publish", "--config", j, "--source", bundle], &[]),
    );
    assert!(!env.exists("dest/a.txt"), "nothing was published");
}

/// Two pipelines publish into one shared root; the other owner's content at a colliding
/// path is newer. `transfer.destination_newer: skip` keeps newer content even under
/// `--force`, so the conflict is not forceable, says why, and a forced run refuses it
/// (exit 3) instead of skipping with exit 0: nothing is written, not even the paths that
/// do not collide (a destination is published whole or not at all).
#[test]
fn force_in_a_shared_root_refuses_another_owners_newer_content() {
    let env = Env::new();
    let shared = "    state:\n      mode: shared_root\n";
    let radar = env.simple_config("radar.yaml", "radar", "site", "site", shared);
    let weather = env.simple_config("weather.yaml", "weather", "site", "site", shared);
    let r7 = env.bundle(
        "r7",
        "radar-1",
        T7,
        &[("index.html", "radar"), ("radar.png", "png")],
        &[],
    );
    env.publish(&radar, &r7, &[]).expect_code(0);
    let w6 = env.bundle(
        "w6",
        "weather-1",
        T6,
        &[("index.html", "weather"), ("weather.json", "{}")],
        &[],
    );
    let before = env.snapshot_unlocked("site");

    let plain = env.plan(&weather, &w6, &[]);
    plain.expect_code(3);
    let d = plain.dest(0);
    assert_eq!(d["decision"], "conflict");
    let c = &d["conflicts"][0];
    assert_eq!(c["kind"], "owner_conflict");
    assert_eq!(c["path"], "index.html");
    assert_eq!(c["owner"], "radar/site");
    assert_eq!(c["forceable"], false, "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("newer than this source"),
        "{c}"
    );
    let reason = d["message"].as_str().unwrap();
    assert!(reason.contains("not forceable"), "{reason}");
    assert!(!reason.contains("--force would"), "{reason}");
    // The text report's conflict line agrees with the reason.
    let text = env.run(&[
        "plan",
        "--config",
        s(&weather),
        "--source",
        s(&w6),
        "--force",
    ]);
    text.expect_code(3);
    assert!(
        text.stdout.contains("owner_conflict") && text.stdout.contains("(not forceable)"),
        "{}",
        text.stdout
    );
    assert!(!text.stdout.contains("(forceable)"), "{}", text.stdout);

    for cmd in ["plan", "publish"] {
        let r = if cmd == "plan" {
            env.plan(&weather, &w6, &["--force"])
        } else {
            env.publish(&weather, &w6, &["--force"])
        };
        r.expect_code(3);
        assert_eq!(r.decision(), "conflict", "{cmd}: {}", r.stdout);
        assert_eq!(r.dest(0)["conflicts"][0]["forceable"], false);
        assert_eq!(r.json()["summary"]["files_written"], 0);
    }
    assert_eq!(
        env.snapshot_unlocked("site"),
        before,
        "nothing written, not even weather.json"
    );

    // Under destination_newer: conflict, --force replaces the newer path and publishes
    // the whole bundle.
    let forcing = env.simple_config(
        "forcing.yaml",
        "weather",
        "site",
        "site",
        &format!("{shared}    transfer:\n      destination_newer: conflict\n"),
    );
    let r = env.plan(&forcing, &w6, &[]);
    r.expect_code(3);
    for c in r.dest(0)["conflicts"].as_array().unwrap() {
        assert_eq!(c["forceable"], true, "{c}");
    }
    assert!(
        r.dest(0)["message"]
            .as_str()
            .unwrap()
            .contains("--force would replace"),
        "{}",
        r.dest(0)["message"]
    );
    let r = env.publish(&forcing, &w6, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    assert_eq!(env.read("site/index.html"), "weather");
    assert_eq!(env.read("site/weather.json"), "{}");
    assert_eq!(
        env.read("site/radar.png"),
        "png",
        "radar keeps its other path"
    );
}

/// The other owner's content is older: the conflict is forceable and `--force` takes the
/// colliding path over and writes the rest of the bundle.
#[test]
fn force_in_a_shared_root_takes_over_another_owners_older_content() {
    let env = Env::new();
    let shared = "    state:\n      mode: shared_root\n";
    let radar = env.simple_config("radar.yaml", "radar", "site", "site", shared);
    let weather = env.simple_config("weather.yaml", "weather", "site", "site", shared);
    let r6 = env.bundle(
        "r6",
        "radar-1",
        T6,
        &[("index.html", "radar"), ("radar.png", "png")],
        &[],
    );
    env.publish(&radar, &r6, &[]).expect_code(0);
    let w7 = env.bundle(
        "w7",
        "weather-1",
        T7,
        &[("index.html", "weather"), ("weather.json", "{}")],
        &[],
    );
    let r = env.plan(&weather, &w7, &[]);
    r.expect_code(3);
    let c = &r.dest(0)["conflicts"][0];
    assert_eq!(
        (&c["kind"], &c["forceable"]),
        (&"owner_conflict".into(), &true.into())
    );
    assert!(
        r.dest(0)["message"]
            .as_str()
            .unwrap()
            .contains("--force would replace"),
        "{}",
        r.dest(0)["message"]
    );
    let r = env.publish(&weather, &w7, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    assert_eq!(r.dest(0)["takeovers"][0]["from_owner"], "radar/site");
    assert_eq!(env.read("site/index.html"), "weather");
    assert_eq!(env.read("site/weather.json"), "{}");
    assert_eq!(env.read("site/radar.png"), "png");
}

/// Every curl upload in the docs and the README says what it sends: curl's
/// `--data-binary` alone sends `application/x-www-form-urlencoded`, which the server
/// refuses.
#[test]
fn every_documented_upload_sends_a_content_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                pages.push(p);
            }
        }
    }
    let mut uploads = 0;
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        // One command: a line and its `\` continuations.
        let mut command = String::new();
        for line in text.lines() {
            command.push_str(line);
            command.push('\n');
            if line.trim_end().ends_with('\\') {
                continue;
            }
            if command.contains("curl ") && command.contains("--data-binary") {
                uploads += 1;
                assert!(
                    command.contains("Content-Type: application/"),
                    "{}: an upload without a Content-Type header:\n{command}",
                    page.display()
                );
            }
            command.clear();
        }
    }
    assert!(uploads >= 4, "{uploads} documented uploads");
}

/// docs/operations.md says which of distributor's files sit inside a served directory and
/// gives nginx and Apache configuration that denies every one of them.
#[test]
fn operations_page_denies_distributor_files_in_a_web_root() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let start = page
        .find("## Serving a destination")
        .expect("docs/operations.md has a section on serving a destination");
    let section = &page[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    for name in [
        ".distributor.json",
        ".distributor.lock",
        ".distributor-staging/",
        "releases.dir",
    ] {
        assert!(section.contains(name), "the section does not name {name}");
    }
    let block = |info: &str| -> &str {
        let open = format!("```{info}\n");
        let at = section
            .find(&open)
            .unwrap_or_else(|| panic!("the section has no ```{info} block"));
        let body = &section[at + open.len()..];
        &body[..body.find("```").unwrap()]
    };
    let nginx = block("nginx");
    assert!(nginx.contains(r"/\.distributor"), "{nginx}");
    assert!(nginx.contains(r"\.releases"), "{nginx}");
    let apache = block("apache");
    assert!(apache.contains(r"\.distributor"), "{apache}");
    assert!(apache.contains(r"\.releases"), "{apache}");
    assert!(apache.contains("Require all denied"), "{apache}");
}

/// "Which publication last wrote a path" in docs/integrations/journal.md filters by the
/// bundle path: two destinations write `forecast.json`, and the query (with the documented
/// bundle path replaced by each real one) finds each destination's own publication.
#[test]
fn the_last_writer_query_filters_by_bundle_path() {
    let env = Env::new();
    let cfg = env.config(
        "weather.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: latest\n    path: {}\n  - id: archive\n    path: {}\n    path_mapping:\n      mode: source_id\n",
            env.path("www/latest").display(),
            env.path("www/archive").display()
        ),
    );
    let b6 = env.bundle("b6", "run-6", T6, &[("forecast.json", "6")], &[]);
    env.publish(&cfg, &b6, &[]).expect_code(0);
    // A later publication to the archive only.
    let b7 = env.bundle("b7", "run-7", T7, &[("forecast.json", "7")], &[]);
    env.publish(&cfg, &b7, &["--destination", "archive"])
        .expect_code(0);

    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/integrations/journal.md"
    ))
    .unwrap();
    let at = page
        .find("Which publication last wrote a path")
        .expect("the query is documented");
    let body = &page[at..];
    let body = &body[body.find("```sql\n").unwrap() + 7..];
    let query = &body[..body.find("```").unwrap()];
    const DOC_BUNDLE: &str = "/srv/reports/weather/latest";
    assert!(
        query.contains("bundle_path") && query.contains(DOC_BUNDLE),
        "the query does not filter by bundle_path:\n{query}"
    );
    let c = rusqlite::Connection::open(env.journal()).unwrap();
    for (bundle, source) in [
        (env.path("www/latest"), "run-6"),
        (env.path("www/archive/run-6"), "run-6"),
        (env.path("www/archive/run-7"), "run-7"),
    ] {
        let q = query.replace(DOC_BUNDLE, s(&bundle));
        let rows: Vec<(String, String)> = c
            .prepare(&q)
            .unwrap()
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>("source_id")?,
                    r.get::<_, String>("kind")?,
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            rows,
            [(source.to_string(), "file_create".to_string())],
            "{}",
            bundle.display()
        );
    }
}
