//! The documentation is part of the product: every full config example in the docs
//! validates with the real binary, every state, manifest and report example is what it
//! claims to be, the pages that list conflict kinds, decisions, config values, operation
//! statuses, journal events and recovery outcomes name every one the code knows, the
//! messages troubleshooting quotes are spelled as the code spells them, the README quick
//! start runs, and relative links resolve.
//!
//! Fences: ```yaml is a full config (required to be one in docs/config.md); ```yaml partial
//! is a fragment and skipped. ```json state, ```json manifest, ```json report,
//! ```json status and ```json recover are full examples checked as such; plain ```json in
//! the integration pages must parse.

use crate::common::Env;
use distributor::journal::query::STATUSES;
use distributor::model::{
    Backend, ConflictKind, Decision, DestinationNewer, OnConflict, PathMappingMode,
    ReconciliationMode, SameCreatedDigestMismatch, StateMode, TakeoverMode,
};
use distributor::ops::recover::{Outcome, RecoverSummary};
use distributor::source::Manifest;
use distributor::state::StateFile;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Integration pages whose plain ```json blocks must all parse.
const STRICT_JSON_PAGES: &[&str] = &[
    "docs/integrations/destination-state.md",
    "docs/integrations/source-manifest.md",
    "docs/integrations/json-output.md",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// A fenced code block of a page.
struct Block {
    info: String,
    body: String,
    line: usize,
}

/// The fenced blocks of a markdown text (fences may be indented, as in list items).
fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        match open.as_mut() {
            None => {
                if let Some(info) = t.strip_prefix("```") {
                    open = Some(Block {
                        info: info.trim().to_string(),
                        body: String::new(),
                        line: i + 1,
                    });
                }
            }
            Some(b) => {
                if t == "```" {
                    out.push(open.take().expect("open block"));
                } else {
                    b.body.push_str(line);
                    b.body.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "unclosed code fence");
    out
}

/// README.md and every page under docs/, as repository-relative paths.
fn pages() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut files = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut files);
    let mut out: Vec<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix(repo())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    out.sort();
    out
}

fn is_full_config(body: &str) -> bool {
    body.lines().any(|l| l.starts_with("version:"))
}

#[test]
fn config_examples_validate() {
    let env = Env::new();
    let mut in_config_page = 0;
    for page in pages() {
        for (n, b) in blocks(&read(&page)).iter().enumerate() {
            if b.info != "yaml" {
                continue;
            }
            if !is_full_config(&b.body) {
                assert_ne!(
                    page, "docs/config.md",
                    "docs/config.md:{}: a ```yaml block without `version:`; fence fragments as ```yaml partial",
                    b.line
                );
                continue;
            }
            let file = env.write(&format!("docs-examples/{n}-{}.yaml", b.line), &b.body);
            let r = env.run(&["validate", "--config", file.to_str().unwrap()]);
            assert_eq!(
                r.code, 0,
                "{page}:{}: example config does not validate:\n{}{}",
                b.line, r.stdout, r.stderr
            );
            if page == "docs/config.md" {
                in_config_page += 1;
            }
        }
    }
    assert!(
        in_config_page >= 5,
        "docs/config.md shows only {in_config_page} full config examples"
    );
}

#[test]
fn state_examples_are_valid_state_in_on_disk_form() {
    let mut seen = 0;
    for page in pages() {
        for b in blocks(&read(&page))
            .iter()
            .filter(|b| b.info == "json state")
        {
            match StateFile::parse(b.body.as_bytes()) {
                StateFile::Valid(s) => {
                    assert_eq!(
                        String::from_utf8(s.render()).unwrap(),
                        b.body,
                        "{page}:{}: state example is not in the form distributor writes",
                        b.line
                    );
                }
                other => panic!("{page}:{}: not valid state: {other:?}", b.line),
            }
            seen += 1;
        }
    }
    assert!(seen >= 2, "expected single-owner and shared-root examples");
}

#[test]
fn manifest_examples_are_valid_and_show_their_digest() {
    let mut seen = 0;
    for page in pages() {
        let text = read(&page);
        for b in blocks(&text).iter().filter(|b| b.info == "json manifest") {
            let m: Manifest = serde_json::from_str(&b.body)
                .unwrap_or_else(|e| panic!("{page}:{}: not a manifest: {e}", b.line));
            m.validate()
                .unwrap_or_else(|e| panic!("{page}:{}: invalid manifest: {e}", b.line));
            assert!(
                text.contains(&m.digest()),
                "{page}:{}: the page does not state the example's digest {}",
                b.line,
                m.digest()
            );
            seen += 1;
        }
    }
    assert!(seen >= 1, "no ```json manifest example found");
}

/// Every key path of a JSON value; array elements are merged under `[]`.
fn shape(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}.{k}");
                out.insert(p.clone());
                shape(x, &p, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                shape(x, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn report_example_has_the_fields_of_a_real_report() {
    // A real dry-run takeover, with a conflict on a second destination so conflict
    // objects are part of the real shape too.
    let env = Env::new();
    let cfg = env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: latest\n    path: {}\n  - id: other\n    path: {}\n",
            env.path("dest/latest").display(),
            env.path("dest/other").display()
        ),
    );
    let first = env.bundle(
        "b1",
        "tomorrow-2026-12-02",
        "2026-12-02T06:00:00Z",
        &[("forecast.json", "{}"), ("maps/temp.png", "png")],
        &[("current.png", "maps/temp.png")],
    );
    env.publish(&cfg, &first, &[]).expect_code(0);
    env.write("dest/other/summary.txt", "hand-made");
    let second = env.bundle(
        "b2",
        "nowcast-0900",
        "2026-12-02T09:00:00Z",
        &[("forecast.json", "{\"x\":1}"), ("summary.txt", "rain")],
        &[],
    );
    let real = env.plan(&cfg, &second, &[]);
    real.expect_code(3);
    assert_eq!(real.decision(), "replace_takeover");
    let mut real_shape = BTreeSet::new();
    shape(&real.json(), "", &mut real_shape);

    let mut seen = 0;
    for page in pages() {
        for b in blocks(&read(&page))
            .iter()
            .filter(|b| b.info == "json report")
        {
            let doc: Value = serde_json::from_str(&b.body)
                .unwrap_or_else(|e| panic!("{page}:{}: not JSON: {e}", b.line));
            let mut doc_shape = BTreeSet::new();
            shape(&doc, "", &mut doc_shape);
            let missing: Vec<_> = real_shape
                .difference(&doc_shape)
                .filter(|p| !p.contains(".conflicts[]"))
                .collect();
            let unknown: Vec<_> = doc_shape.difference(&real_shape).collect();
            assert!(
                missing.is_empty() && unknown.is_empty(),
                "{page}:{}: report example differs from a real report\nmissing: {missing:?}\nnot in a real report: {unknown:?}",
                b.line
            );
            seen += 1;
        }
    }
    assert!(seen >= 1, "no ```json report example found");
}

#[test]
fn status_example_has_the_fields_of_a_real_status() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest/latest", "");
    let b = env.bundle(
        "b",
        "tomorrow-2026-12-02",
        "2026-12-02T06:00:00Z",
        &[("forecast.json", "{}")],
        &[],
    );
    env.publish(&cfg, &b, &[]).expect_code(0);
    let real = env.run(&["status", "--json", "--config", cfg.to_str().unwrap()]);
    real.expect_code(0);
    let mut real_shape = BTreeSet::new();
    shape(&real.json(), "", &mut real_shape);
    let mut seen = 0;
    for page in pages() {
        for b in blocks(&read(&page))
            .iter()
            .filter(|b| b.info == "json status")
        {
            let doc: Value = serde_json::from_str(&b.body)
                .unwrap_or_else(|e| panic!("{page}:{}: not JSON: {e}", b.line));
            let mut doc_shape = BTreeSet::new();
            shape(&doc, "", &mut doc_shape);
            assert_eq!(
                doc_shape, real_shape,
                "{page}:{}: status example differs from a real status",
                b.line
            );
            seen += 1;
        }
    }
    assert!(seen >= 1, "no ```json status example found");
}

#[test]
fn plain_json_in_integration_pages_parses() {
    for page in STRICT_JSON_PAGES {
        for b in blocks(&read(page)).iter().filter(|b| b.info == "json") {
            serde_json::from_str::<Value>(&b.body)
                .unwrap_or_else(|e| panic!("{page}:{}: not JSON: {e}", b.line));
        }
    }
}

#[test]
fn troubleshooting_has_an_entry_per_conflict_kind() {
    let text = read("docs/troubleshooting.md");
    for kind in ConflictKind::ALL {
        assert!(
            text.contains(&format!("\n### {kind}\n")),
            "docs/troubleshooting.md has no '### {kind}' entry"
        );
    }
}

#[test]
fn pages_name_every_decision() {
    for page in ["docs/integrations/json-output.md", "docs/operations.md"] {
        let text = read(page);
        for d in Decision::ALL {
            assert!(
                text.contains(&format!("`{d}`")),
                "{page} does not name decision `{d}`"
            );
        }
    }
}

/// Every outcome `recover` reports, as its JSON spells it. The match fails to compile when
/// an outcome is added, so this list (and the pages checked against it) cannot fall behind.
fn recover_outcomes() -> Vec<String> {
    let all = [
        Outcome::RolledForward,
        Outcome::RolledBack,
        Outcome::Diverged,
        Outcome::Failed,
        Outcome::Abandoned,
        Outcome::Closed,
        Outcome::Untrusted,
        Outcome::StagingMoved,
        Outcome::ReleaseMoved,
    ];
    for o in all {
        match o {
            Outcome::RolledForward
            | Outcome::RolledBack
            | Outcome::Diverged
            | Outcome::Failed
            | Outcome::Abandoned
            | Outcome::Closed
            | Outcome::Untrusted
            | Outcome::StagingMoved
            | Outcome::ReleaseMoved => {}
        }
    }
    all.iter()
        .map(|o| {
            serde_json::to_value(o)
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// The counters of a recover report's `summary`.
fn recover_counters() -> Vec<String> {
    match serde_json::to_value(RecoverSummary::default()).unwrap() {
        Value::Object(m) => m.keys().cloned().collect(),
        other => panic!("summary is not an object: {other}"),
    }
}

/// The journal's event names: the string constants of `pub mod event` in
/// src/journal/mod.rs.
fn journal_events() -> Vec<String> {
    let text = read("src/journal/mod.rs");
    let start = text
        .find("impl Event {")
        .expect("impl Event in src/journal/mod.rs");
    let body = &text[start..start + text[start..].find("\n}").expect("end of impl Event")];
    let events: Vec<String> = body
        .lines()
        .filter(|l| l.trim().starts_with("Event::"))
        .filter_map(|l| l.split('"').nth(1))
        .map(str::to_string)
        .collect();
    assert!(events.len() >= 10, "only {events:?} found in impl Event");
    events
}

/// The part of `text` from the first `from` to the next `to` after it.
fn between<'t>(text: &'t str, from: &str, to: &str) -> &'t str {
    let start = text
        .find(from)
        .unwrap_or_else(|| panic!("{from:?} not found"));
    let len = text[start..]
        .find(to)
        .unwrap_or_else(|| panic!("{to:?} not found after {from:?}"));
    &text[start..start + len]
}

#[test]
fn pages_name_every_status_event_and_recover_outcome() {
    let journal = read("docs/integrations/journal.md");
    let json = read("docs/integrations/json-output.md");
    let operations = read("docs/operations.md");
    let status_table = between(
        &journal,
        "\n`operations`: one row per operation",
        "\n`placements`:",
    );
    let event_table = between(&journal, "\n## Events\n", "\n## Views\n");
    // The `operations` view's status table, and the lists scripts and operators read.
    for status in STATUSES {
        assert!(
            status_table.contains(&format!("\n| `{status}` |")),
            "docs/integrations/journal.md: the status table has no row for `{status}`"
        );
        for (page, text) in [
            ("docs/integrations/json-output.md", &json),
            ("docs/operations.md", &operations),
        ] {
            assert!(
                text.contains(&format!("`{status}`")),
                "{page} does not name status `{status}`"
            );
        }
    }
    // A row may name several events in its first cell (`hook_ok`, `hook_failed`).
    let named: Vec<&str> = (event_table.lines())
        .filter_map(|l| l.strip_prefix("| ")?.split(" | ").next())
        .collect();
    for ev in journal_events() {
        assert!(
            named
                .iter()
                .any(|c| c.split(", ").any(|e| e == format!("`{ev}`"))),
            "docs/integrations/journal.md: the events table has no row for `{ev}`"
        );
    }
    for (page, text) in [
        ("docs/integrations/journal.md", &journal),
        ("docs/integrations/json-output.md", &json),
    ] {
        for o in recover_outcomes() {
            assert!(
                text.contains(&format!("`{o}`")),
                "{page} does not name recover outcome `{o}`"
            );
        }
        for c in recover_counters() {
            assert!(
                text.contains(&format!("`{c}`")) || text.contains(&format!("\"{c}\":")),
                "{page} does not name the recover summary counter `{c}`"
            );
        }
    }
    // Outcomes that need explaining to an operator have their own entry.
    let ts = read("docs/troubleshooting.md");
    assert!(
        ts.contains("\n### recover: closed\n"),
        "docs/troubleshooting.md has no '### recover: closed' entry"
    );
}

#[test]
fn recover_example_has_the_fields_of_a_real_recover_report() {
    // A real recover that closes an operation: an unfinished staging record (`.tmp-<op>`)
    // that no journal knows, found through the config.
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest/latest", "");
    let b = env.bundle(
        "b",
        "tomorrow-2026-12-02",
        "2026-12-02T06:00:00Z",
        &[("forecast.json", "{}")],
        &[],
    );
    env.publish(&cfg, &b, &[]).expect_code(0);
    fs::create_dir_all(
        env.path("dest/latest/.distributor/staging/.tmp-9a49144d-e9d4-436c-9a21-a442c850067f"),
    )
    .unwrap();
    crate::common::as_records(&env.path("dest/latest"));
    let real = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
    real.expect_code(0);
    assert_eq!(
        real.json()["operations"][0]["outcome"],
        "closed",
        "{}",
        real.stdout
    );
    assert!(
        !env.staging_left("dest/latest"),
        "recover left the unfinished record"
    );
    let mut real_shape = BTreeSet::new();
    shape(&real.json(), "", &mut real_shape);
    let mut seen = 0;
    for page in pages() {
        for b in blocks(&read(&page))
            .iter()
            .filter(|b| b.info == "json recover")
        {
            let doc: Value = serde_json::from_str(&b.body)
                .unwrap_or_else(|e| panic!("{page}:{}: not JSON: {e}", b.line));
            let mut doc_shape = BTreeSet::new();
            shape(&doc, "", &mut doc_shape);
            assert_eq!(
                doc_shape, real_shape,
                "{page}:{}: recover example differs from a real recover report",
                b.line
            );
            seen += 1;
        }
    }
    assert!(seen >= 1, "no ```json recover example found");
}

/// Every source file's text, for looking up the messages the docs quote.
fn sources() -> String {
    fn walk(dir: &Path, out: &mut String) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = String::new();
    walk(&repo().join("src"), &mut out);
    out
}

/// The storage layer's errors and recovery outcomes, as docs/troubleshooting.md quotes
/// them: each fragment is literal text of a message in the sources and must appear in the
/// page as it is, so a reworded message fails here until the page follows.
#[test]
fn troubleshooting_quotes_storage_messages_as_the_code_spells_them() {
    const QUOTED: &[&str] = &[
        "is not a real directory (a symlink or something else took its place); distributor never goes through it",
        "no longer names the directory distributor locked (it was replaced while the operation ran); nothing was committed",
        "changed after planning (it is ",
        "now); distributor moves aside only the content it planned to",
        "appeared after planning; distributor does not replace it",
        "distributor never makes that in a staging entry, so ",
        " is not recovered: inspect it and remove it by hand",
        ", which the record does not move aside",
        ", which the record does not stage",
        "not an operation's staging directory; distributor did not make it",
        "not a regular file (",
        "; a bundle holds regular files only",
        "applied elsewhere: its staging entry is gone and .distributor.json is its post-state (it was finished by its own run before that stopped, or rolled forward by another journal's recover)",
        "not applied: its staging entry does not exist and .distributor.json is not its post-state (it never reached the destination, or was rolled back elsewhere)",
        "; removed its unfinished staging record (it changed nothing)",
        "; nothing else was touched",
    ];
    let src = sources();
    let page = read("docs/troubleshooting.md");
    for q in QUOTED {
        assert!(src.contains(q), "no message in src/ contains {q:?}");
        assert!(
            page.contains(q),
            "docs/troubleshooting.md does not quote {q:?}"
        );
    }
}

#[test]
fn config_page_names_every_accepted_value() {
    let text = read("docs/config.md");
    let all = [
        Backend::ALL,
        PathMappingMode::ALL,
        StateMode::ALL,
        ReconciliationMode::ALL,
        DestinationNewer::ALL,
        SameCreatedDigestMismatch::ALL,
        OnConflict::ALL,
        TakeoverMode::ALL,
    ];
    for v in all.iter().flat_map(|a| a.iter()) {
        assert!(
            text.contains(&format!("`{v}`")),
            "docs/config.md does not name `{v}`"
        );
    }
    // The defaults column says what the code defaults to.
    let c = distributor::config::Config::parse(
        "version: 1\npipeline:\n  id: p\ndestinations:\n  - id: d\n    path: /srv/d\n",
        Path::new("/etc/distributor/p.yaml"),
    )
    .expect("minimal config");
    let d = &c.destinations[0];
    for (key, default) in [
        ("backend", d.backend.to_string()),
        ("path_mapping.mode", d.path_mapping.mode().to_string()),
        ("state.mode", d.state_mode.to_string()),
        ("reconciliation.mode", d.reconciliation.to_string()),
        (
            "transfer.destination_newer",
            d.transfer.destination_newer.to_string(),
        ),
        (
            "transfer.same_created_digest_mismatch",
            d.transfer.same_created_digest_mismatch.to_string(),
        ),
        ("transfer.on_conflict", d.transfer.on_conflict.to_string()),
        ("takeover.mode", d.takeover.to_string()),
    ] {
        let row = format!("| `destinations[].{key}` | ");
        let line = text
            .lines()
            .find(|l| l.starts_with(&row))
            .unwrap_or_else(|| panic!("docs/config.md has no keys-table row for {key}"));
        assert!(
            line.contains(&format!("| `{default}` |")),
            "docs/config.md: {key} defaults to `{default}` in the code, the table says: {line}"
        );
    }
}

#[test]
fn readme_quick_start_runs() {
    let readme = read("README.md");
    for cmd in [
        "cargo run -- publish --config examples/weather/distributor.yaml",
        "cargo test --all-features",
    ] {
        assert!(
            readme.contains(&format!("```sh\n{cmd}\n```")),
            "README quick start lost `{cmd}`"
        );
    }
    // The example, copied to a fresh tree, publishes with the README's arguments.
    let env = Env::new();
    let from = repo().join("examples/weather");
    copy_tree(&from, &env.path("examples/weather"));
    let r = env.run(&[
        "publish",
        "--json",
        "--config",
        "examples/weather/distributor.yaml",
    ]);
    r.expect_code(0);
    assert_eq!(r.json()["summary"]["create"], 2, "{}", r.stdout);
    assert!(env.exists("target/example-publish/latest/.distributor.json"));
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            copy_tree(&src, &dst);
        } else if ft.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src).unwrap(), &dst).unwrap();
        } else {
            fs::copy(&src, &dst).unwrap();
        }
    }
}

/// `a/b/../c` as `a/c`.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// GitHub's anchor for a heading: lowercase, spaces to '-', other punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_fence = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// `(target)` of every `[text](target)` outside code fences and inline code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Drop inline code spans so `a[0](b)` in code is not a link.
        let plain: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(j) = after.find(')') else { break };
            out.push(after[..j].to_string());
            rest = &after[j..];
        }
    }
    out
}

#[test]
fn relative_links_and_anchors_resolve() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = read(&page);
        let dir = Path::new(&page).parent().unwrap().to_path_buf();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match link.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                lexical(&dir.join(file)).to_string_lossy().into_owned()
            };
            let path = repo().join(&target);
            let Ok(target_text) = fs::read_to_string(&path) else {
                broken.push(format!("{page}: ({link}): {target} does not exist"));
                continue;
            };
            if let Some(a) = anchor.filter(|a| !anchors(&target_text).contains(*a)) {
                broken.push(format!("{page}: ({link}): no heading #{a} in {target}"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// json-output.md: a run exits with its most serious code and a failed destination never
/// exits 0. A template can pass the load-time check and still render an unsafe path for
/// one bundle (here a segment over 255 bytes): that destination's config error is exit 2.
#[test]
fn documented_exit_code_of_a_destination_config_error() {
    let env = Env::new();
    let cfg = env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: archive\n    path: {}\n    path_mapping:\n      mode: template\n      template: \"{{source_id}}{{source_id}}\"\n",
            env.path("dest/archive").display()
        ),
    );
    env.run(&["validate", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    let long_id = "a".repeat(128);
    let b = env.bundle(
        "b",
        &long_id,
        "2026-12-02T06:00:00Z",
        &[("a.txt", "a")],
        &[],
    );
    for r in [env.plan(&cfg, &b, &[]), env.publish(&cfg, &b, &[])] {
        r.expect_code(2);
        assert_eq!(r.dest(0)["status"], "failed", "{}", r.stdout);
    }
    assert!(!env.exists("dest"));
}
