//! The auditor's questions (docs/audit.md), each one command, on a shared web root that two
//! pipelines publish into, each with its own journal: `blog` owns `blog/`, `docs` owns
//! `docs/` and then takes `blog/p1.html` with `--force`. `history` merges both journals
//! by time and filters by path, by cross-owner takeover, by actor and by a duration back
//! from now; `--jsonl` writes one object per operation (history_version 1); text never
//! prints more than 10 paths of one takeover, and `history show OP --files` prints all.

use crate::common::{Env, F};
use serde_json::Value;
use std::path::{Path, PathBuf};

const ROOT: &str = "www";
const SHARED: &str = "    state:\n      mode: shared_root\n";

struct Root {
    env: Env,
    blog: PathBuf,
    docs: PathBuf,
    blog_journal: PathBuf,
    docs_journal: PathBuf,
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

impl Root {
    fn new() -> Root {
        let env = Env::new();
        let blog = env.simple_config("blog.yaml", "blog", "web", ROOT, SHARED);
        let docs = env.simple_config("docs.yaml", "docs", "web", ROOT, SHARED);
        let blog_journal = env.path("blog.sqlite3");
        let docs_journal = env.path("docs.sqlite3");
        Root {
            env,
            blog,
            docs,
            blog_journal,
            docs_journal,
        }
    }

    /// Publishes `bundle` with `cfg`'s pipeline, through its own journal, as `actor`.
    fn publish(&self, cfg: &Path, journal: &Path, bundle: &Path, actor: &str, extra: &[&str]) {
        let mut args = vec![
            "publish",
            "--json",
            "--config",
            s(cfg),
            "--source",
            s(bundle),
            "--journal",
            s(journal),
            "--actor",
            actor,
        ];
        args.extend_from_slice(extra);
        self.env.run(&args).expect_code(0);
    }

    /// `history` over both journals (those that exist yet), plus `extra`.
    fn history(&self, extra: &[&str]) -> crate::common::Run {
        let mut args = vec!["history"];
        for j in [&self.blog_journal, &self.docs_journal] {
            if j.exists() {
                args.extend(["--journal", s(j)]);
            }
        }
        args.extend_from_slice(extra);
        let r = self.env.run(&args);
        r.expect_code(0);
        r
    }

    /// `history --jsonl` over both journals, parsed.
    fn jsonl(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["--jsonl"];
        args.extend_from_slice(extra);
        (self.history(&args).stdout.lines())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// `n` blog posts `blog/p1.html` ...
fn posts(n: usize, v: &str) -> Vec<(String, String)> {
    (1..=n)
        .map(|i| (format!("blog/p{i}.html"), format!("<p>post {i} {v}</p>")))
        .collect()
}

fn files(v: &[(String, String)]) -> Vec<F<'_>> {
    v.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect()
}

#[test]
fn each_audit_question_is_one_command_over_both_journals() {
    let r = Root::new();
    // blog publishes twice under its stable source id (replace_older, no takeover).
    let v1 = posts(25, "v1");
    let b1 = r
        .env
        .bundle("b1", "blog", "2026-12-08T01:00:00Z", &files(&v1), &[]);
    r.publish(&r.blog, &r.blog_journal, &b1, "blog-ci", &[]);
    let v2 = posts(25, "v2");
    let b2 = r
        .env
        .bundle("b2", "blog", "2026-12-08T02:00:00Z", &files(&v2), &[]);
    r.publish(&r.blog, &r.blog_journal, &b2, "blog-ci", &[]);
    // docs publishes its own pages, then takes every blog post with --force.
    let d1 = r.env.bundle(
        "d1",
        "docs",
        "2026-12-08T01:30:00Z",
        &[("docs/index.html", "docs")],
        &[],
    );
    r.publish(&r.docs, &r.docs_journal, &d1, "docs-bot", &[]);
    let mut taken = posts(25, "docs");
    taken.push(("docs/index.html".into(), "docs".into()));
    let d2 = r
        .env
        .bundle("d2", "docs", "2026-12-08T03:00:00Z", &files(&taken), &[]);
    r.publish(&r.docs, &r.docs_journal, &d2, "docs-bot", &["--force"]);

    // Every takeover in the last hour: only docs' cross-owner one.
    let t = r.jsonl(&["--takeovers", "--since", "1h"]);
    assert_eq!(t.len(), 1, "{t:#?}");
    assert_eq!(t[0]["pipeline_id"], "docs");
    assert_eq!(t[0]["decision"], "force_replace");
    assert_eq!(t[0]["cross_owner"], true);
    assert_eq!(t[0]["takeovers"][0]["from_owner"], "blog/web");
    assert_eq!(t[0]["takeovers"][0]["cross_owner"], true);
    assert_eq!(t[0]["history_version"], 1);
    assert!(t[0]["journal_id"].is_string(), "{}", t[0]);
    // Nothing before the window.
    assert!(
        r.jsonl(&["--takeovers", "--until", "1h"]).is_empty(),
        "no takeover is older than an hour"
    );

    // Who replaced blog/p1.html, and when: both journals, newest first.
    let p = r.jsonl(&["--path", "blog/p1.html"]);
    let who: Vec<(&str, &str)> = (p.iter())
        .map(|o| {
            (
                o["pipeline_id"].as_str().unwrap(),
                o["decision"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        who,
        [
            ("docs", "force_replace"),
            ("blog", "replace_older"),
            ("blog", "create")
        ]
    );
    let started: Vec<&str> = p
        .iter()
        .map(|o| o["started_at"].as_str().unwrap())
        .collect();
    assert!(started.windows(2).all(|w| w[0] >= w[1]), "{started:?}");
    // A glob, and a path no operation touched.
    // (d2 left docs/index.html unchanged: only d1 wrote it.)
    assert_eq!(r.jsonl(&["--path", "docs/**"]).len(), 1);
    assert!(r.jsonl(&["--path", "nothing/*"]).is_empty());

    // What did docs take from blog: the takeover names every path, capped in text.
    let text = r.history(&["--takeovers"]).stdout;
    assert!(
        text.contains("takeover from blog/web (another owner, source blog): 25 path(s)"),
        "{text}"
    );
    assert!(
        text.contains("... and 15 more; `distributor history show"),
        "{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.trim_start().starts_with("blog/p"))
            .count(),
        10
    );
    let op = t[0]["operation_id"].as_str().unwrap();
    let all = r.history(&["show", op, "--files"]).stdout;
    for i in 1..=25 {
        assert!(all.contains(&format!("blog/p{i}.html\n")), "p{i}: {all}");
    }
    let capped = r.history(&["show", op]).stdout;
    assert!(
        capped.contains("more; `distributor history show"),
        "{capped}"
    );

    // By actor, with or without the channel.
    assert_eq!(r.jsonl(&["--actor", "docs-bot"]).len(), 2);
    assert_eq!(r.jsonl(&["--actor", "cli:blog-ci"]).len(), 2);
    assert!(r.jsonl(&["--actor", "someone"]).is_empty());
    // The four operations, merged by time, newest first; --limit after the merge.
    let everything = r.jsonl(&[]);
    assert_eq!(everything.len(), 4);
    assert_eq!(r.jsonl(&["--limit", "1"])[0]["pipeline_id"], "docs");
}

/// A publication under a new source id of the same owner is a takeover, but not a
/// cross-owner one: `--takeovers` leaves it out and the text says "new source id".
#[test]
fn a_new_source_id_of_the_same_owner_is_no_cross_owner_takeover() {
    let r = Root::new();
    let v = posts(2, "v1");
    let b1 = r
        .env
        .bundle("b1", "blog-1041", "2026-12-08T01:00:00Z", &files(&v), &[]);
    r.publish(&r.blog, &r.blog_journal, &b1, "blog-ci", &[]);
    let b2 = r
        .env
        .bundle("b2", "blog-1042", "2026-12-08T02:00:00Z", &files(&v), &[]);
    r.publish(&r.blog, &r.blog_journal, &b2, "blog-ci", &[]);
    let all = r.jsonl(&["--action", "replace_takeover"]);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!(all[0]["cross_owner"], false);
    assert!(r.jsonl(&["--takeovers"]).is_empty());
    let text = r.history(&["--action", "replace_takeover"]).stdout;
    assert!(
        text.contains("new source id for blog/web (same owner, was source blog-1041)"),
        "{text}"
    );
}

/// Bad filter values are usage errors that say what is accepted.
#[test]
fn bad_history_filters_say_what_is_accepted() {
    let r = Root::new();
    let b1 = r.env.bundle(
        "b1",
        "blog",
        "2026-12-08T01:00:00Z",
        &[("blog/a", "a")],
        &[],
    );
    r.publish(&r.blog, &r.blog_journal, &b1, "blog-ci", &[]);
    for (args, says) in [
        (&["--since", "7y"][..], "90m, 12h, 7d"),
        (&["--path", "/abs"][..], "bundle-relative"),
        (&["--json", "--jsonl"][..], "cannot be used with"),
    ] {
        let mut all = vec!["history", "--journal", s(&r.blog_journal)];
        all.extend_from_slice(args);
        let out = r.env.run(&all);
        out.expect_code(2);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    let missing = r.env.path("missing.sqlite3");
    let out = r.env.run(&[
        "history",
        "--journal",
        s(&r.blog_journal),
        "--journal",
        s(&missing),
    ]);
    out.expect_code(2);
    assert!(out.stderr.contains("no journal there"), "{}", out.stderr);
}

/// The Python that has DuckDB (PyPI `duckdb`): `DISTRIBUTOR_DUCKDB_PYTHON`, else the test
/// venv `.ci/run` makes (`target/ci-venv/bin/python`). `None`, with a loud skip, when
/// neither imports duckdb and `DISTRIBUTOR_REQUIRE_DUCKDB` (or `CI`) does not require it.
fn duckdb_python() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-venv/bin/python");
    let candidate = std::env::var_os("DISTRIBUTOR_DUCKDB_PYTHON")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or(venv);
    let works = std::process::Command::new(&candidate)
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(candidate);
    }
    let on = |v: &str| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false");
    let required = match std::env::var("DISTRIBUTOR_REQUIRE_DUCKDB") {
        Ok(v) => on(&v),
        Err(_) => std::env::var("CI").is_ok_and(|v| on(&v)),
    };
    let how = format!(
        "{} cannot import duckdb: python3 -m venv target/ci-venv && target/ci-venv/bin/pip install duckdb (or set DISTRIBUTOR_DUCKDB_PYTHON)",
        candidate.display()
    );
    assert!(!required, "DuckDB is required here: {how}");
    crate::common::left_out::skip("DuckDB (PyPI duckdb)", &how);
    None
}

/// The SQL blocks of docs/audit.md tagged `sql <name>`, by name.
fn audit_queries() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/audit.md"))
        .unwrap();
    let mut out = Vec::new();
    let mut lines = doc.lines();
    while let Some(l) = lines.next() {
        if let Some(name) = l.strip_prefix("```sql ") {
            let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
            out.push((name.to_string(), body.join("\n")));
        }
    }
    out
}

/// Every DuckDB query of docs/audit.md runs, as written, against real `history --jsonl`
/// output of the shared root, and answers the question it is there for.
#[test]
fn the_auditors_duckdb_queries_answer_from_history_jsonl() {
    let Some(python) = duckdb_python() else {
        return;
    };
    let r = Root::new();
    let v1 = posts(3, "v1");
    let b1 = r
        .env
        .bundle("b1", "blog", "2026-12-08T01:00:00Z", &files(&v1), &[]);
    r.publish(&r.blog, &r.blog_journal, &b1, "blog-ci", &[]);
    let mut taken = posts(2, "docs");
    taken.push(("docs/index.html".into(), "docs".into()));
    let d1 = r
        .env
        .bundle("d1", "docs", "2026-12-08T03:00:00Z", &files(&taken), &[]);
    r.publish(&r.docs, &r.docs_journal, &d1, "docs-bot", &["--force"]);
    let jsonl = r.history(&["--jsonl"]).stdout;
    std::fs::write(r.env.path("history.jsonl"), &jsonl).unwrap();

    let queries = audit_queries();
    let names: Vec<&str> = queries.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "audit-takeovers",
            "audit-last-taker",
            "audit-actors",
            "audit-journals"
        ]
    );
    let run = |sql: &str| -> Vec<Vec<String>> {
        let script = "import duckdb, json, sys\nrows = duckdb.sql(sys.stdin.read()).fetchall()\nprint(json.dumps([[str(c) for c in r] for r in rows]))\n";
        let mut child = std::process::Command::new(&python)
            .args(["-c", script])
            .current_dir(r.env.path(""))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(sql.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{sql}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let q = |name: &str| &queries.iter().find(|(n, _)| n == name).unwrap().1;
    let takeovers = run(q("audit-takeovers"));
    assert_eq!(takeovers.len(), 1, "{takeovers:?}");
    assert_eq!(takeovers[0][2], "docs/web");
    assert_eq!(takeovers[0][3], "blog/web");
    assert_eq!(takeovers[0][4], "2");
    assert_eq!(takeovers[0][5], "cli:docs-bot");
    let last = run(q("audit-last-taker"));
    assert_eq!(last.len(), 1);
    assert_eq!(last[0][1], "docs/web");
    assert_eq!(last[0][2], "cli:docs-bot");
    let actors = run(q("audit-actors"));
    assert_eq!(
        actors,
        [
            ["cli:blog-ci", "create", "1"],
            ["cli:docs-bot", "force_replace", "1"]
        ]
    );
    let journals = run(q("audit-journals"));
    assert_eq!(journals.len(), 2, "one row per journal: {journals:?}");
}

/// `blame`: who owns a path now (from the state), which operation last wrote it and,
/// with `--all`, every operation that wrote, deleted or was refused on it, from both
/// journals; a deleted path is `unmanaged` and still names its deletion; a PATH nothing
/// knows is named, exit 1.
#[test]
fn blame_says_who_owns_a_path_and_who_wrote_it() {
    let r = Root::new();
    let v1 = posts(2, "v1");
    let b1 = r
        .env
        .bundle("b1", "blog", "2026-12-08T01:00:00Z", &files(&v1), &[]);
    r.publish(&r.blog, &r.blog_journal, &b1, "blog-ci", &[]);
    let d1 = r.env.bundle(
        "d1",
        "docs",
        "2026-12-08T02:00:00Z",
        &[("docs/index.html", "docs"), ("blog/p1.html", "taken")],
        &[],
    );
    // Refused first (another owner's path), then forced.
    let refused = r.env.run(&[
        "publish",
        "--config",
        s(&r.docs),
        "--source",
        s(&d1),
        "--journal",
        s(&r.docs_journal),
        "--actor",
        "docs-bot",
    ]);
    refused.expect_code(3);
    r.publish(&r.docs, &r.docs_journal, &d1, "docs-bot", &["--force"]);
    // blog drops p2.
    let v2 = vec![("blog/p3.html".to_string(), "p3".to_string())];
    let b2 = r
        .env
        .bundle("b2", "blog", "2026-12-08T03:00:00Z", &files(&v2), &[]);
    r.publish(&r.blog, &r.blog_journal, &b2, "blog-ci", &[]);

    let blame = |extra: &[&str]| {
        let mut args = vec![
            "blame",
            "--config",
            s(&r.blog),
            "--journal",
            s(&r.blog_journal),
            "--journal",
            s(&r.docs_journal),
        ];
        args.extend_from_slice(extra);
        r.env.run(&args)
    };
    let out = blame(&["--jsonl", "--all", "blog/p1.html"]);
    out.expect_code(0);
    let b: Value = serde_json::from_str(out.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(b["blame_version"], 1);
    assert_eq!(b["status"], "managed");
    assert_eq!(b["owner"], "docs/web");
    assert_eq!(b["source"]["id"], "docs");
    assert_eq!(b["last"]["decision"], "force_replace");
    assert_eq!(b["last"]["action"], "file_overwrite");
    assert_eq!(b["last"]["actor"], "cli:docs-bot");
    assert!(b["last"]["from"].as_str().unwrap().starts_with("journal "));
    let chain: Vec<(&str, &str)> = (b["chain"].as_array().unwrap().iter())
        .map(|e| (e["owner"].as_str().unwrap(), e["action"].as_str().unwrap()))
        .collect();
    assert_eq!(
        chain,
        [
            ("docs/web", "file_overwrite"),
            ("docs/web", "refused"),
            ("blog/web", "file_create")
        ]
    );
    assert_eq!(b["chain"][1]["conflict"], "owner_conflict");

    // A deleted path: unmanaged, its deletion the last write.
    let out = blame(&["--json", "blog/p2.html"]);
    out.expect_code(0);
    let b = &out.json()["paths"][0];
    assert_eq!(b["status"], "unmanaged");
    assert_eq!(b["present"], false);
    assert_eq!(b["owner"], Value::Null);
    assert_eq!(b["last"]["action"], "file_delete");
    assert_eq!(b["last"]["owner"], "blog/web");

    // A glob, and text.
    let out = blame(&["blog/*"]);
    out.expect_code(0);
    for p in [
        "blog/p1.html (destination web",
        "blog/p2.html",
        "blog/p3.html",
    ] {
        assert!(out.stdout.contains(p), "{p}: {}", out.stdout);
    }
    assert!(
        out.stdout.contains("owner   none: unmanaged"),
        "{}",
        out.stdout
    );

    // Nothing known: named, exit 1; the others still answered.
    let out = blame(&["blog/p3.html", "blog/none.html"]);
    out.expect_code(1);
    assert!(out.stdout.contains("blog/p3.html"), "{}", out.stdout);
    assert!(
        out.stderr.contains("blog/none.html: nothing known"),
        "{}",
        out.stderr
    );

    // From the journals alone (no config): the last writer is the owner it names.
    let out = r.env.run(&[
        "blame",
        "--journal",
        s(&r.blog_journal),
        "--journal",
        s(&r.docs_journal),
        "--jsonl",
        "blog/p1.html",
    ]);
    out.expect_code(0);
    let b: Value = serde_json::from_str(out.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(b["owner"], "docs/web");
    assert_eq!(b["destination_id"], Value::Null);

    // Bad PATHs are usage errors.
    for bad in ["/etc/passwd", "../x", "[z"] {
        let out = blame(&[bad]);
        out.expect_code(2);
        assert!(
            out.stderr.contains(&format!("PATH {bad}")),
            "{}",
            out.stderr
        );
    }
}

/// `--reason` (else `DISTRIBUTOR_REASON`) is recorded in the journal, the destination
/// log's entry, the report and a hook's environment (`DISTRIBUTOR_REASON`); `history
/// --reason-contains` and `blame` show it. Over 1 KiB or with a control character it is
/// a usage error before anything is written.
#[test]
fn the_reason_is_recorded_everywhere_and_bounded() {
    let env = Env::new();
    let seen = env.path("hook-saw.txt");
    let hook = env.program(
        "say-reason.sh",
        &format!(
            "#!/bin/sh\nprintf '%s' \"$DISTRIBUTOR_REASON\" > {}\n",
            seen.display()
        ),
    );
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "site",
        "www/site",
        &format!(
            "    hooks:\n      after_commit:\n        - run: [\"{}\"]\n",
            hook.display()
        ),
    );
    let b1 = env.bundle(
        "b1",
        "site",
        "2026-12-08T01:00:00Z",
        &[("a.html", "1")],
        &[],
    );
    let r = env.publish(&cfg, &b1, &["--reason", "OPS-42: rotate the banner"]);
    r.expect_code(0);
    assert_eq!(r.json()["reason"], "OPS-42: rotate the banner");
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "OPS-42: rotate the banner"
    );
    let entry: Value = serde_json::from_slice(
        &std::fs::read(env.path("www/site/.distributor/log/00000000000000000001.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(entry["reason"], "OPS-42: rotate the banner");

    // From the environment.
    let b2 = env.bundle(
        "b2",
        "site",
        "2026-12-08T02:00:00Z",
        &[("a.html", "2")],
        &[],
    );
    let r = env.run_env(
        &["publish", "--json", "--config", s(&cfg), "--source", s(&b2)],
        &[("DISTRIBUTOR_REASON", "nightly rebuild")],
    );
    r.expect_code(0);
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "nightly rebuild");

    let h = env.run(&["history", "--jsonl", "--reason-contains", "ops-42"]);
    h.expect_code(0);
    let lines: Vec<Value> = h
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{}", h.stdout);
    assert_eq!(lines[0]["reason"], "OPS-42: rotate the banner");
    let text = env.run(&["history"]).stdout;
    assert!(text.contains("reason: nightly rebuild"), "{text}");
    let b = env.run(&["blame", "--config", s(&cfg), "--jsonl", "a.html"]);
    b.expect_code(0);
    let b: Value = serde_json::from_str(b.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(b["last"]["reason"], "nightly rebuild");

    // Bounded before anything is written: nothing journaled, nothing placed.
    let b3 = env.bundle(
        "b3",
        "site",
        "2026-12-08T03:00:00Z",
        &[("a.html", "3")],
        &[],
    );
    let long = "r".repeat(1025);
    for (args, vars, says) in [
        (vec!["--reason", long.as_str()], vec![], "--reason"),
        (vec!["--reason", "two\nlines"], vec![], "--reason"),
        (
            vec![],
            vec![("DISTRIBUTOR_REASON", "bell\u{7}")],
            "DISTRIBUTOR_REASON",
        ),
    ] {
        let mut all = vec!["publish", "--config", s(&cfg), "--source", s(&b3)];
        all.extend(args);
        let r = env.run_env(&all, &vars);
        r.expect_code(2);
        assert!(r.stderr.contains(says), "{says}: {}", r.stderr);
    }
    assert_eq!(env.read("www/site/a.html"), "2");
    let ops = env.run(&["history", "--jsonl"]).stdout.lines().count();
    assert_eq!(ops, 2, "the refused reasons journaled nothing");
    // recover takes none (it finishes other runs' operations).
    let r = env.run(&["recover", "--reason", "x"]);
    r.expect_code(2);
    assert!(r.stderr.contains("--reason"), "{}", r.stderr);
}

/// serve: `X-Distributor-Reason` is the upload's reason; a bad one is a 400
/// `invalid_parameter` and publishes nothing.
#[test]
fn serve_takes_the_reason_from_a_header() {
    use crate::common::server::*;
    let env = Env::new();
    let (w, t) = weather_and_traffic(&env);
    let mut server = Server::start(&env, &[&w, &t], &[]);
    let tar = tar_with_manifest(
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("forecast.json", b"{}")],
        &[],
    );
    let post = |reason: &[u8]| {
        let mut resp = Server::agent()
            .post(server.url("/v1/pipelines/weather/bundles"))
            .header("Authorization", &format!("Bearer {SECRET}"))
            .header("Content-Type", "application/x-tar")
            .header(
                "X-Distributor-Reason",
                ureq::http::HeaderValue::from_bytes(reason).unwrap(),
            )
            .send(&tar[..])
            .expect("POST");
        (
            resp.status().as_u16(),
            resp.body_mut().read_to_string().unwrap_or_default(),
        )
    };
    let (status, body) = post("r".repeat(1025).as_bytes());
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("invalid_parameter") && body.contains("X-Distributor-Reason"),
        "{body}"
    );
    assert!(
        !env.exists("dest/latest/forecast.json"),
        "nothing was published"
    );
    let (status, body) = post(b"deploy from CI run 7");
    assert_eq!(status, 200, "{body}");
    let report: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["reason"], "deploy from CI run 7");
    let c = rusqlite::Connection::open(env.journal()).unwrap();
    let reason: String = c
        .query_row("SELECT reason FROM journal_operations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(reason, "deploy from CI run 7");
    assert_eq!(server.stop().code(), Some(0));
}

/// The destination log is a hash chain (docs/operations.md, "The hash chain"): each entry
/// carries the sha256 of the previous entry's exact bytes (null for seq 1). An entry
/// changed by hand, owner and mode kept, is `log_chain_broken` (drift, exit 3) naming the
/// entry after it; the newest entry, which no later entry vouches for, is checked against
/// the sha256 the journal kept when it wrote it (`log_mismatch`).
#[test]
fn a_hand_edited_log_entry_breaks_the_chain() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "site", "www/site", "");
    for i in 1..=3 {
        let b = env.bundle(
            &format!("b{i}"),
            "site",
            &format!("2026-12-08T0{i}:00:00Z"),
            &[("a.html", &format!("v{i}"))],
            &[],
        );
        env.publish(&cfg, &b, &[]).expect_code(0);
    }
    let entry = |seq: u64| env.path(&format!("www/site/.distributor/log/{seq:020}.json"));
    let read = |seq: u64| -> Value {
        serde_json::from_slice(&std::fs::read(entry(seq)).unwrap()).unwrap()
    };
    let sha = |seq: u64| distributor::hash::sha256_hex(&std::fs::read(entry(seq)).unwrap());
    assert_eq!(read(1)["prev_entry_sha256"], Value::Null);
    assert_eq!(read(2)["prev_entry_sha256"], sha(1).as_str());
    assert_eq!(read(3)["prev_entry_sha256"], sha(2).as_str());
    env.run(&["verify", "--config", s(&cfg)]).expect_code(0);

    // Entry 2 edited in place: same file, owner and mode (root, 0600).
    let edit = |seq: u64, from: &str, to: &str| {
        let text = std::fs::read_to_string(entry(seq))
            .unwrap()
            .replace(from, to);
        std::fs::write(entry(seq), text).unwrap();
    };
    edit(2, "cli:tester", "cli:someone");
    let r = env.run(&["verify", "--json", "--config", s(&cfg)]);
    r.expect_code(3);
    let m = r.dest(0)["log_chain_broken"].as_str().unwrap().to_string();
    assert!(
        m.starts_with("entry 3 says the entry before it had sha256"),
        "{m}"
    );
    assert!(
        m.contains("entry 2 was changed after it was written"),
        "{m}"
    );
    assert_eq!(r.json()["drift"], true);
    edit(2, "cli:someone", "cli:tester");
    env.run(&["verify", "--config", s(&cfg)]).expect_code(0);

    // The newest entry: no later entry vouches for it, the journal does.
    edit(3, "cli:tester", "cli:someone");
    let r = env.run(&["verify", "--json", "--config", s(&cfg)]);
    r.expect_code(3);
    let m = r.dest(0)["log_mismatch"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        m.contains("entry 3 of the destination log is not the entry this journal wrote"),
        "{}",
        r.stdout
    );
}

/// The answers `blame` gives for `paths` through `cfg`, by path: owner, source id, last
/// operation and its actor.
fn answers(env: &Env, args: &[&str]) -> Vec<(String, String, String, String, String)> {
    let r = env.run(args);
    r.expect_code(0);
    (r.stdout.lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|b| {
            (
                b["path"].as_str().unwrap().to_string(),
                b["owner"].as_str().unwrap_or_default().to_string(),
                b["source"]["id"].as_str().unwrap_or_default().to_string(),
                b["last"]["operation_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                b["last"]["actor"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// `blame --destination-only` after every journal is deleted gives the same owner,
/// source, operation and actor as `blame` with the journals: the destination log's path
/// lists (`<seq>.paths.jsonl`, named in each entry by sha256) answer from the destination
/// alone. A path list changed by hand is refused by its sha256.
fn destination_only_agrees(env: &Env, cfg: &Path, journals: &[&Path], list_dir: &Path) {
    let mut with = vec!["blame", "--config", s(cfg), "--jsonl"];
    for j in journals {
        with.extend(["--journal", s(j)]);
    }
    with.push("**");
    let from_journals = answers(env, &with);
    assert!(!from_journals.is_empty());
    for j in journals {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", j.display()));
        }
    }
    let alone = answers(
        env,
        &[
            "blame",
            "--config",
            s(cfg),
            "--destination-only",
            "--jsonl",
            "**",
        ],
    );
    assert_eq!(alone, from_journals);
    let r = env.run(&[
        "blame",
        "--config",
        s(cfg),
        "--destination-only",
        "--jsonl",
        "--all",
        "**",
    ]);
    r.expect_code(0);
    assert!(r.stdout.contains("\"from\":\"log "), "{}", r.stdout);
    // A path list edited in place (owner and mode kept) is refused by its sha256.
    let list = std::fs::read_dir(list_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".paths.jsonl"))
        .expect("a path list");
    let text = std::fs::read_to_string(&list)
        .unwrap()
        .replacen("\"path\":\"", "\"path\":\"x", 1);
    std::fs::write(&list, text).unwrap();
    let r = env.run(&["blame", "--config", s(cfg), "--destination-only", "**"]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("path list refused") && r.stderr.contains("not the"),
        "{}",
        r.stderr
    );
}

#[test]
fn blame_from_the_destination_alone_agrees_with_the_journals() {
    let r = Root::new();
    let v1 = posts(3, "v1");
    let b1 = r
        .env
        .bundle("b1", "blog", "2026-12-08T01:00:00Z", &files(&v1), &[]);
    r.publish(&r.blog, &r.blog_journal, &b1, "blog-ci", &[]);
    let d1 = r.env.bundle(
        "d1",
        "docs",
        "2026-12-08T02:00:00Z",
        &[("docs/index.html", "docs"), ("blog/p1.html", "taken")],
        &[],
    );
    r.publish(&r.docs, &r.docs_journal, &d1, "docs-bot", &["--force"]);
    destination_only_agrees(
        &r.env,
        &r.blog,
        &[&r.blog_journal, &r.docs_journal],
        &r.env.path("www/.distributor/log"),
    );
}

#[test]
fn blame_from_the_destination_alone_on_a_releases_destination() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "www/latest",
        "    releases:\n      keep: 2\n",
    );
    for i in 1..=3 {
        let b = env.bundle(
            &format!("b{i}"),
            "site",
            &format!("2026-12-08T0{i}:00:00Z"),
            &[("index.html", &format!("v{i}")), ("same.css", "same")],
            &[],
        );
        env.publish(&cfg, &b, &[]).expect_code(0);
    }
    let journal = env.journal();
    destination_only_agrees(
        &env,
        &cfg,
        &[&journal],
        &env.path("www/.latest.releases/.distributor/log"),
    );
}
