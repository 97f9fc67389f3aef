//! Configuration through the real binary (SPEC §2, §10): every kind of invalid config is
//! refused by `validate` and `publish` with exit 2, a message naming the file, the key
//! path, the line and column where known and what is accepted, and nothing is created
//! anywhere. Also `validate --source` and the journal location precedence.

use crate::common::{Env, Run};
use std::path::{Path, PathBuf};

const T0: &str = "2026-12-02T06:00:00Z";

/// A config with pipeline `weather` and the given `destinations:` block (YAML, starting
/// at column 0 with `destinations:`); `{D}` is replaced by the env's `dest` directory.
fn config(env: &Env, body: &str) -> PathBuf {
    let body = body.replace("{D}", &env.path("dest").display().to_string());
    env.config(
        "conf/c.yaml",
        &format!("version: 1\npipeline:\n  id: weather\n{body}"),
    )
}

/// Runs `validate` and `publish` (real and dry run) on `cfg`: each must exit 2 with a
/// message containing the config file and every needle, and nothing may be created.
fn refused(env: &Env, cfg: &Path, needles: &[&str]) -> Run {
    let bundle = env.bundle("b", "tomorrow", T0, &[("a.txt", "one")], &[]);
    let before = env.snapshot("");
    let c = cfg.to_str().unwrap();
    let b = bundle.to_str().unwrap();
    let runs = [
        env.run(&["validate", "--config", c]),
        env.run(&["validate", "--config", c, "--source", b]),
        env.run(&["publish", "--config", c, "--source", b]),
        env.run(&["publish", "--json", "--config", c, "--source", b, "--force"]),
        env.run(&["plan", "--config", c, "--source", b]),
    ];
    for r in &runs {
        r.expect_code(2);
        assert!(
            r.stderr.contains(&format!("config {c}: ")),
            "message does not name the file:\n{}",
            r.stderr
        );
        for n in needles {
            assert!(r.stderr.contains(n), "stderr lacks {n:?}:\n{}", r.stderr);
        }
        assert!(
            !r.stderr.contains("struct "),
            "message names an internal type:\n{}",
            r.stderr
        );
        assert_eq!(
            r.stderr.lines().count(),
            1,
            "one error line expected:\n{}",
            r.stderr
        );
        let key = r.stderr[format!("error: config {c}: ").len()..]
            .split(": ")
            .next()
            .unwrap()
            .to_string();
        assert!(
            !r.stderr.contains(&format!("{key}: {key}")),
            "key path repeated: {}",
            r.stderr
        );
    }
    assert_eq!(
        runs[3].json()["error"]["kind"],
        "config",
        "{}",
        runs[3].stdout
    );
    assert_eq!(env.snapshot(""), before, "something was created");
    assert!(!env.exists("dest"));
    assert!(!env.journal().exists());
    runs.into_iter().next().unwrap()
}

fn refused_body(body: &str, needles: &[&str]) -> Run {
    let env = Env::new();
    let cfg = config(&env, body);
    refused(&env, &cfg, needles)
}

#[test]
fn unknown_top_level_key() {
    let env = Env::new();
    let cfg = env.config(
        "conf/c.yaml",
        &format!(
            "version: 1\npipline:\n  id: weather\ndestinations:\n  - id: a\n    path: {}\n",
            env.path("dest").display()
        ),
    );
    refused(
        &env,
        &cfg,
        &[
            "pipline: unknown field `pipline`",
            "expected one of `version`, `pipeline`",
            "line 2 column 1",
        ],
    );
}

#[test]
fn unknown_nested_keys_name_their_key_path() {
    refused_body(
        "destinations:\n  - id: a\n    path: {D}/a\n  - id: b\n    path: {D}/b\n    takeover:\n      mode: never\n      mdoe: never\n",
        &[
            "destinations[1].takeover.mdoe: unknown field `mdoe`, expected `mode`",
            "line 11 column 7",
        ],
    );
    refused_body(
        "destinations:\n  - id: a\n    path: {D}/a\n    transfer:\n      on_conflicts: refuse\n",
        &[
            "destinations[0].transfer.on_conflicts: unknown field",
            "`destination_newer`, `same_created_digest_mismatch`, `on_conflict`",
            "line 8 column 7",
        ],
    );
    refused_body(
        "destinations:\n  - id: a\n    path: {D}/a\n    owner: me\n",
        &[
            "destinations[0].owner: unknown field `owner`",
            "line 7 column 5",
        ],
    );
    refused_body(
        "journal:\n  file: j.sqlite3\ndestinations:\n  - id: a\n    path: {D}/a\n",
        &[
            "journal.file: unknown field `file`, expected `path`",
            "line",
        ],
    );
}

#[test]
fn bad_enum_values_list_accepted_values() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "    takeover:\n      mode: anyone\n",
            "destinations[0].takeover.mode",
            &["same_pipeline", "same_source", "any_managed", "never"],
        ),
        (
            "    state:\n      mode: shared\n",
            "destinations[0].state.mode",
            &["single_owner", "shared_root"],
        ),
        (
            "    reconciliation:\n      mode: mirror\n",
            "destinations[0].reconciliation.mode",
            &["replace", "merge"],
        ),
        (
            "    transfer:\n      destination_newer: overwrite\n",
            "destinations[0].transfer.destination_newer",
            &["skip", "conflict"],
        ),
        (
            "    transfer:\n      same_created_digest_mismatch: skip\n",
            "destinations[0].transfer.same_created_digest_mismatch",
            &["conflict", "replace"],
        ),
        (
            "    transfer:\n      on_conflict: force\n",
            "destinations[0].transfer.on_conflict",
            &["replace", "refuse"],
        ),
        (
            "    path_mapping:\n      mode: date\n",
            "destinations[0].path_mapping.mode",
            &["fixed", "source_id", "template"],
        ),
        (
            "    backend: ftp\n",
            "destinations[0].backend",
            &["local", "s3"],
        ),
    ];
    for (extra, key, accepted) in cases {
        let r = refused_body(
            &format!("destinations:\n  - id: a\n    path: {{D}}/a\n{extra}"),
            &[&format!("{key}: unknown variant"), "line "],
        );
        for a in *accepted {
            assert!(r.stderr.contains(&format!("`{a}`")), "{a}: {}", r.stderr);
        }
    }
}

#[test]
fn wrong_types() {
    refused_body(
        "destinations:\n  - id: a\n    path: {D}/a\n    takeover: never\n",
        &[
            "destinations[0].takeover: invalid type: string \"never\", expected a mapping",
            "line 7 column 15",
        ],
    );
    refused_body(
        "destinations:\n  id: a\n  path: {D}/a\n",
        &[
            "destinations: invalid type: map, expected a sequence",
            "line 5",
        ],
    );
    refused_body(
        "destinations:\n  - id: a\n    path: [{D}/a]\n",
        &["destinations[0].path: invalid type: sequence", "line 6"],
    );
    let env = Env::new();
    let cfg = env.config(
        "conf/c.yaml",
        &format!(
            "version: one\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: {}\n",
            env.path("dest").display()
        ),
    );
    refused(&env, &cfg, &["version: invalid type", "line 1 column 10"]);
    let env = Env::new();
    let cfg = env.config("conf/c.yaml", "- version: 1\n");
    refused(
        &env,
        &cfg,
        &["(top level): invalid type: sequence, expected a mapping with keys version"],
    );
    let env = Env::new();
    let cfg = env.config(
        "conf/c.yaml",
        "version: 1\npipeline: weather\ndestinations: []\n",
    );
    refused(
        &env,
        &cfg,
        &["pipeline: invalid type: string \"weather\", expected a mapping with keys id, hooks"],
    );
}

#[test]
fn bad_ids() {
    let env = Env::new();
    let cfg = env.config(
        "conf/c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: Weather\ndestinations:\n  - id: a\n    path: {}\n",
            env.path("dest").display()
        ),
    );
    refused(
        &env,
        &cfg,
        &[
            "pipeline.id: invalid id 'Weather'",
            "lowercase letters, digits",
            "line 3",
        ],
    );
    refused_body(
        "destinations:\n  - id: a\n    path: {D}/a\n  - id: -b\n    path: {D}/b\n",
        &["destinations[1].id: invalid id '-b'", "line 7 column 5"],
    );
    let long = "x".repeat(65);
    refused_body(
        &format!("destinations:\n  - id: {long}\n    path: {{D}}/a\n"),
        &[
            &format!("destinations[0].id: invalid id '{long}'"),
            "at most 64",
        ],
    );
}

#[test]
fn unsupported_version() {
    let env = Env::new();
    let cfg = env.config(
        "conf/c.yaml",
        &format!(
            "version: 2\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: {}\n",
            env.path("dest").display()
        ),
    );
    refused(&env, &cfg, &["version: unsupported version 2, accepted: 1"]);
    let cfg = env.config(
        "conf/c.yaml",
        &format!(
            "pipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: {}\n",
            env.path("dest").display()
        ),
    );
    refused(&env, &cfg, &["missing field `version`"]);
}

#[test]
fn missing_or_empty_destinations() {
    refused_body("", &["missing field `destinations`"]);
    refused_body(
        "destinations: []\n",
        &["destinations: at least one destination is required"],
    );
    refused_body(
        "destinations:\n  - id: a\n",
        &["destinations[0]: missing field `path`"],
    );
}

#[test]
fn duplicate_destination_ids() {
    // Issue 27 item 13: the duplicate's line and column, and the first's.
    refused_body(
        "destinations:\n  - id: a\n    path: {D}/a\n  - id: b\n    path: {D}/b\n  - id: a\n    path: {D}/c\n",
        &[
            "destinations[2].id: duplicate destination id 'a' at line 9 column 9",
            "destinations[0].id at line 5 column 9 has it already",
        ],
    );
    // Flow style counts its columns as written.
    refused_body(
        "destinations: [{id: a, path: {D}/a}, {path: {D}/b, id: a}]\n",
        &[
            "destinations[1].id: duplicate destination id 'a' at line 4 column ",
            "destinations[0].id at line 4 column 21 has it already",
        ],
    );
}

/// Issue 27 item 13: a misspelt key, in any map of the config, or a misspelt enum value,
/// is answered with the accepted name it is closest to, beside the list of them all.
#[test]
fn misspelt_keys_get_a_suggestion_in_every_map() {
    let env = Env::new();
    let dest = env.path("dest").display().to_string();
    let top = env.config(
        "conf/c.yaml",
        &format!(
            "version: 1\npipline:\n  id: weather\ndestinations:\n  - id: a\n    path: {dest}\n"
        ),
    );
    refused(
        &env,
        &top,
        &[
            "pipline: unknown field `pipline`, expected one of `version`, `pipeline`",
            "at line 2 column 1; did you mean `pipeline`?",
        ],
    );
    let env = Env::new();
    let nested = env.config(
        "conf/c.yaml",
        &format!("version: 1\npipeline:\n  id: weather\n  hoks: {{}}\ndestinations:\n  - id: a\n    path: {dest}\n"),
    );
    refused(
        &env,
        &nested,
        &["pipeline.hoks: unknown field", "did you mean `hooks`?"],
    );
    let cases: &[(&str, &str, &str)] = &[
        (
            "    pth_mapping: {mode: fixed}\n",
            "destinations[0].pth_mapping",
            "path_mapping",
        ),
        (
            "    takeover:\n      mdoe: never\n",
            "destinations[0].takeover.mdoe",
            "mode",
        ),
        (
            "    transfer:\n      on_conflicts: refuse\n",
            "destinations[0].transfer.on_conflicts",
            "on_conflict",
        ),
        (
            "    releases:\n      kep: 3\n",
            "destinations[0].releases.kep",
            "keep",
        ),
        (
            "    guard:\n      max_delet: 5\n",
            "destinations[0].guard.max_delet",
            "max_delete",
        ),
        (
            "    hooks:\n      after_comit: []\n",
            "destinations[0].hooks.after_comit",
            "after_commit",
        ),
        (
            "    hooks:\n      after_commit:\n        - run: [/bin/true]\n          timout: 5s\n",
            "destinations[0].hooks.after_commit[0].timout",
            "timeout",
        ),
        (
            "    verify:\n      ignores: []\n",
            "destinations[0].verify.ignores",
            "ignore",
        ),
        (
            "    state:\n      Mode: shared_root\n",
            "destinations[0].state.Mode",
            "mode",
        ),
        (
            "    takeover:\n      mode: same_pipline\n",
            "destinations[0].takeover.mode: unknown variant",
            "same_pipeline",
        ),
        (
            "    backend: lcoal\n",
            "destinations[0].backend: unknown variant",
            "local",
        ),
    ];
    for (extra, key, meant) in cases {
        refused_body(
            &format!("destinations:\n  - id: a\n    path: {{D}}/a\n{extra}"),
            &[key, "at line ", &format!("; did you mean `{meant}`?")],
        );
    }
    refused_body(
        &s3_body("s3://reports-bucket/site", "concurency: 4"),
        &[
            "destinations[0].s3.concurency: unknown field",
            "did you mean `concurrency`?",
        ],
    );
    refused_body(
        "server:\n  upload_token: []\ndestinations:\n  - id: a\n    path: {D}/a\n",
        &[
            "server.upload_token: unknown field",
            "did you mean `upload_tokens`?",
        ],
    );
    // Nothing close: the accepted keys, and no guess.
    let r = refused_body(
        "destinations:\n  - id: a\n    path: {D}/a\n    owner: me\n",
        &["destinations[0].owner: unknown field `owner`, expected one of `id`"],
    );
    assert!(!r.stderr.contains("did you mean"), "{}", r.stderr);
}

/// Issue 27 item 13: a numeric setting names its key path, where it is, and its range
/// (never a Rust type like `i64`).
#[test]
fn numbers_name_their_range() {
    for (value, says) in [
        (
            "three",
            "invalid type: string \"three\", expected an integer from 0 to 1000",
        ),
        (
            "1001",
            "invalid value: integer `1001`, expected an integer from 0 to 1000",
        ),
        (
            "-1",
            "invalid value: integer `-1`, expected an integer from 0 to 1000",
        ),
        ("2.5", "expected an integer from 0 to 1000"),
    ] {
        let r = refused_body(
            &format!(
                "destinations:\n  - id: a\n    path: {{D}}/a\n    releases:\n      keep: {value}\n"
            ),
            &[
                "destinations[0].releases.keep: ",
                says,
                "at line 8 column 13",
            ],
        );
        assert!(!r.stderr.contains("i64"), "{}", r.stderr);
    }
    refused_body(
        &s3_body("s3://reports-bucket/site", "concurrency: many"),
        &[
            "destinations[0].s3.concurrency: ",
            "expected an integer from 1 to 64",
            "line 9",
        ],
    );
}

/// Issue 27 item 13: a map or a string where a list belongs says which key, and what a
/// list looks like there.
#[test]
fn a_list_where_a_map_was_written_shows_what_a_list_looks_like() {
    refused_body(
        "destinations:\n  id: a\n  path: {D}/a\n",
        &[
            "destinations: invalid type: map, expected a sequence at line 5 column 3",
            "accepted at destinations: a list with one item per destination, each starting with `- `",
            "destinations: [{id: latest, path: /srv/latest}]",
        ],
    );
    let cases: &[(&str, &str, &str)] = &[
        (
            "    verify:\n      ignore: \"*.tmp\"\n",
            "destinations[0].verify.ignore: invalid type: string",
            "accepted at destinations[0].verify.ignore: a list of globs: ignore: [\"robots.txt\", \"*.tmp\"]",
        ),
        (
            "    hooks:\n      after_commit:\n        run: [/bin/true]\n",
            "destinations[0].hooks.after_commit: invalid type: map",
            "accepted at destinations[0].hooks.after_commit: a list with one item per hook",
        ),
        (
            "    hooks:\n      after_failure:\n        - run: /bin/true\n",
            "destinations[0].hooks.after_failure[0].run: invalid type: string",
            "the program's absolute path first: run: [/usr/local/bin/notify, --ok]",
        ),
    ];
    for (extra, key, example) in cases {
        refused_body(
            &format!("destinations:\n  - id: a\n    path: {{D}}/a\n{extra}"),
            &[key, "expected a sequence at line ", example],
        );
    }
    refused_body(
        "server:\n  upload_tokens:\n    name: ci\ndestinations:\n  - id: a\n    path: {D}/a\n",
        &[
            "server.upload_tokens: invalid type: map, expected a sequence",
            "accepted at server.upload_tokens: a list with one item per token",
        ],
    );
}

/// Mistakes found after the file is read name where the value is written, as YAML errors
/// do.
#[test]
fn checks_after_reading_give_the_line_and_column() {
    refused_body(
        "destinations:\n  - id: a\n    path: \"\"\n",
        &["destinations[0].path: must not be empty at line 6 column 11"],
    );
    refused_body(
        "destinations:\n  - id: a\n    path: {D}/a\n    path_mapping:\n      template: \"{source_id}\"\n",
        &[
            "destinations[0].path_mapping.template: only allowed when path_mapping.mode is template at line 8 column 17",
        ],
    );
}

#[test]
fn path_resolving_to_root() {
    for p in ["/", "/tmp/..", "//", "/./"] {
        refused_body(
            &format!("destinations:\n  - id: a\n    path: {p}\n"),
            &["destinations[0].path: ", "resolves to '/'"],
        );
    }
    // Relative paths resolve against the config file's directory, `..` included.
    let ups = "../".repeat(40);
    refused_body(
        &format!("destinations:\n  - id: a\n    path: {ups}\n"),
        &["destinations[0].path: ", "resolves to '/'"],
    );
    refused_body(
        "destinations:\n  - id: a\n    path: \"\"\n",
        &["destinations[0].path: must not be empty"],
    );
    // `path: ~` is YAML for null, and `~/x` is no shell: neither may become a directory
    // named `~` beside the config file.
    for p in ["~", "~/reports"] {
        refused_body(
            &format!("destinations:\n  - id: a\n    path: {p}\n"),
            &["destinations[0].path: ", "'~' is not expanded"],
        );
    }
    refused_body(
        "journal:\n  path: \"\"\ndestinations:\n  - id: a\n    path: {D}\n",
        &["journal.path: must not be empty"],
    );
}

#[test]
fn two_single_owner_destinations_on_one_fixed_path() {
    refused_body(
        "destinations:\n  - id: a\n    path: {D}/x\n  - id: b\n    path: {D}/y/../x/\n",
        &[
            "destinations[1].path: ",
            "'a' and 'b'",
            "same fixed path",
            "shared_root",
        ],
    );
    // One shared_root and one single_owner still collide.
    refused_body(
        "destinations:\n  - id: a\n    path: {D}/x\n    state:\n      mode: shared_root\n  - id: b\n    path: {D}/x\n",
        &["destinations[1].path: ", "same fixed path"],
    );
    // Both shared_root: fine; and a mapped destination under the same path: fine.
    let env = Env::new();
    let cfg = config(
        &env,
        "destinations:\n  - id: a\n    path: {D}/x\n    state:\n      mode: shared_root\n  - id: b\n    path: {D}/x\n    state:\n      mode: shared_root\n  - id: c\n    path: {D}/x\n    path_mapping:\n      mode: source_id\n",
    );
    env.run(&["validate", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
}

#[test]
fn template_errors() {
    refused_body(
        "destinations:\n  - id: a\n    path: {D}\n    path_mapping:\n      mode: template\n      template: \"{created:%Y}/{source}\"\n",
        &[
            "destinations[0].path_mapping.template: unknown placeholder '{source}'",
            "{source_id}, {pipeline_id}, {destination_id}, {created:<strftime>}",
        ],
    );
    refused_body(
        "destinations:\n  - id: a\n    path: {D}\n    path_mapping:\n      mode: template\n      template: \"{source_id\"\n",
        &["destinations[0].path_mapping.template: unclosed '{'"],
    );
    refused_body(
        "destinations:\n  - id: a\n    path: {D}\n    path_mapping:\n      mode: template\n",
        &["destinations[0].path_mapping.template: required when path_mapping.mode is template"],
    );
    refused_body(
        "destinations:\n  - id: a\n    path: {D}\n    path_mapping:\n      mode: source_id\n      template: \"{source_id}\"\n",
        &["destinations[0].path_mapping.template: only allowed when path_mapping.mode is template"],
    );
}

#[test]
fn template_whose_rendering_is_never_safe() {
    for (template, why) in [
        ("../{source_id}", "'..' segment"),
        ("/abs/{source_id}", "absolute"),
        ("{source_id}/", "empty segment"),
        ("{created:%Y}//{source_id}", "empty segment"),
        (".distributor-{source_id}", "reserved"),
    ] {
        refused_body(
            &format!(
                "destinations:\n  - id: a\n    path: {{D}}\n    path_mapping:\n      mode: template\n      template: \"{template}\"\n"
            ),
            &[
                "destinations[0].path_mapping.template: ",
                "not a safe relative path",
                why,
            ],
        );
    }
    let env = Env::new();
    let cfg = config(
        &env,
        "destinations:\n  - id: a\n    path: {D}\n    path_mapping:\n      mode: template\n      template: \"{pipeline_id}/{created:%Y/%m/%d}/{source_id}.d\"\n",
    );
    env.run(&["validate", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
}

/// An s3 destination validates offline: the environment is cleared (no AWS credentials)
/// and the endpoint is an address nobody answers on, so any connection attempt would fail.
#[test]
fn s3_config_validates_without_network_or_credentials() {
    let env = Env::new();
    let cfg = config(
        &env,
        "destinations:
  - id: site
    backend: s3
    path: s3://reports-bucket/weather/latest
    s3:
      endpoint: http://192.0.2.1:9
      region: us-east-1
      allow_http: true
      virtual_hosted_style: false
      lease_seconds: 60
      concurrency: 8
      content_types: {\".wasm\": application/wasm}
      cache_control: [{glob: \"*.html\", value: no-cache}]
  - id: local
    path: {D}/a
",
    );
    let before = env.snapshot("");
    let r = env.run(&["validate", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    assert!(
        r.stdout
            .contains("destination site: s3://reports-bucket/weather/latest (fixed)"),
        "{}",
        r.stdout
    );
    assert_eq!(env.snapshot(""), before, "validate wrote something");
    assert!(!env.exists("s3:"), "the s3 path was taken for a local one");
}

/// SPEC §14 accepts `lease_seconds` 10 to 3600, and the config does; but under 14 s the
/// amendments' deadline (`max(L - 10, L / 2)`) less the 5 s in which nothing is sent leaves
/// a holder no time to renew, so `validate` warns (exit 0) naming the key, the value and
/// what works, and a run that locks refuses it (exit 2, `test_s3`).
#[test]
fn an_s3_lease_too_short_to_work_validates_with_a_warning() {
    let env = Env::new();
    for (secs, warned) in [(10, true), (13, true), (14, false), (3600, false)] {
        let cfg = config(
            &env,
            &format!(
                "destinations:
  - id: site
    backend: s3
    path: s3://reports-bucket/weather/latest
    s3:
      lease_seconds: {secs}
"
            ),
        );
        let r = env.run(&["validate", "--config", cfg.to_str().unwrap()]);
        r.expect_code(0);
        assert_eq!(
            r.stdout.contains("warning:"),
            warned,
            "{secs}: {}",
            r.stdout
        );
        if warned {
            for needle in [
                format!("s3.lease_seconds {secs} is too short to publish with"),
                "set s3.lease_seconds to 14 or more (default 60)".into(),
                "publish and recover refuse it".into(),
            ] {
                assert!(r.stdout.contains(&needle), "{needle}: {}", r.stdout);
            }
        }
    }
}

fn s3_body(path: &str, block: &str) -> String {
    let block: String = block.lines().map(|l| format!("      {l}\n")).collect();
    let block = if block.is_empty() {
        String::new()
    } else {
        format!("    s3:\n{block}")
    };
    format!("destinations:\n  - id: a\n    backend: s3\n    path: \"{path}\"\n{block}")
}

#[test]
fn s3_path_errors_name_the_path_and_what_is_accepted() {
    for (path, needles) in [
        (
            "s3://reports-bucket",
            &[
                "destinations[0].path: ",
                "empty key prefix",
                "s3://<bucket>/<key prefix>",
            ][..],
        ),
        (
            "s3://reports-bucket/site/",
            &[
                "destinations[0].path: ",
                "empty segment",
                "(write 's3://reports-bucket/site')",
            ],
        ),
        (
            "s3://Reports/site",
            &[
                "destinations[0].path: ",
                "bucket 'Reports'",
                "accepted: 3 to 63 lowercase letters",
            ],
        ),
        (
            "s3://10.0.0.1/site",
            &["destinations[0].path: ", "formatted like an IPv4 address"],
        ),
        (
            "s3://bkt/a/../b",
            &["destinations[0].path: ", "'..' segment"],
        ),
        (
            "./site",
            &[
                "destinations[0].path: ",
                "not an s3:// URL; accepted for backend s3: s3://<bucket>/<key prefix>",
            ],
        ),
    ] {
        refused_body(&s3_body(path, ""), needles);
    }
    refused_body(
        "destinations:\n  - id: a\n    path: s3://bkt/site\n",
        &["destinations[0].path: ", "backend local; set backend: s3"],
    );
}

#[test]
fn s3_block_errors_name_their_key_path_and_what_is_accepted() {
    let p = "s3://reports-bucket/site";
    let cases: &[(&str, &[&str])] = &[
        (
            "endpoint: http://minio:9000",
            &[
                "destinations[0].s3.endpoint: ",
                "set destinations[0].s3.allow_http: true",
            ],
        ),
        (
            "endpoint: https://minio:9000/bucket",
            &[
                "destinations[0].s3.endpoint: ",
                "accepted: https://host[:port]",
                "line 9 column 17",
            ],
        ),
        (
            "region: EU",
            &[
                "destinations[0].s3.region: ",
                "lowercase letters, digits and '-'",
                "line 9",
            ],
        ),
        (
            "lease_seconds: 5",
            &[
                "destinations[0].s3.lease_seconds: ",
                "expected an integer from 10 to 3600",
                "line 9 column 22",
            ],
        ),
        (
            "concurrency: 100",
            &[
                "destinations[0].s3.concurrency: ",
                "expected an integer from 1 to 64",
            ],
        ),
        (
            "allow_http: maybe",
            &["destinations[0].s3.allow_http: ", "expected a boolean"],
        ),
        (
            "content_types: {wasm: application/wasm}",
            &[
                "destinations[0].s3.content_types.wasm: ",
                "accepted: '.' followed by",
            ],
        ),
        (
            "content_types: {\".wasm\": wasm}",
            &["invalid MIME type 'wasm', accepted: type/subtype"],
        ),
        (
            "cache_control: [{glob: \"[x\", value: no-cache}]",
            &[
                "destinations[0].s3.cache_control[0].glob: ",
                "accepted: a glob",
            ],
        ),
        (
            "cache_control: [{glob: \"*.html\", value: \"\"}]",
            &[
                "destinations[0].s3.cache_control[0].value: ",
                "printable ASCII",
            ],
        ),
        (
            "bucket: other",
            &[
                "destinations[0].s3.bucket: unknown field `bucket`, expected one of `endpoint`, `region`, `allow_http`, `virtual_hosted_style`, `lease_seconds`, `concurrency`, `content_types`, `cache_control`",
            ],
        ),
    ];
    for (block, needles) in cases {
        refused_body(&s3_body(p, block), needles);
    }
    refused_body(
        "destinations:\n  - id: a\n    path: {D}\n    s3:\n      region: eu-central-1\n",
        &["destinations[0].s3: applies to backend s3 only"],
    );
}

#[test]
fn s3_credentials_in_the_config_are_refused_without_echoing_them() {
    for key in [
        "access_key_id",
        "secret_access_key",
        "session_token",
        "aws_access_key_id",
        "aws_secret_access_key",
    ] {
        let r = refused_body(
            &s3_body("s3://reports-bucket/site", &format!("{key}: hunter2")),
            &[
                &format!(
                    "destinations[0].s3.{key}: credentials are never read from the config file"
                ),
                "the environment and the standard AWS credential chain",
            ],
        );
        assert!(!r.stderr.contains("hunter2"), "{}", r.stderr);
    }
    let r = refused_body(
        &s3_body(
            "s3://reports-bucket/site",
            "endpoint: https://AKIAX:hunter2@minio:9000",
        ),
        &[
            "destinations[0].s3.endpoint: ",
            "credentials are never read from the config file",
        ],
    );
    assert!(!r.stderr.contains("hunter2"), "{}", r.stderr);
}

#[test]
fn bad_upload_tokens() {
    refused_body(
        "server:\n  upload_tokens:\n    - name: job\n      sha256: secret\ndestinations:\n  - id: a\n    path: {D}\n",
        &["server.upload_tokens[0].sha256: ", "64 lowercase hex"],
    );
    refused_body(
        "server:\n  upload_tokens:\n    - name: job\n      token: x\ndestinations:\n  - id: a\n    path: {D}\n",
        &["server.upload_tokens[0].token: unknown field `token`"],
    );
}

#[test]
fn unreadable_config_is_a_config_error() {
    let env = Env::new();
    let r = env.run(&["validate", "--config", "nowhere.yaml"]);
    r.expect_code(2);
    assert!(r.stderr.contains("nowhere.yaml"), "{}", r.stderr);
    assert!(r.stderr.contains("cannot read"), "{}", r.stderr);
}

#[test]
fn validate_accepts_a_good_config_and_source() {
    let env = Env::new();
    let cfg = config(
        &env,
        "destinations:\n  - id: a\n    path: {D}/a\n    takeover:\n      mode: never\n",
    );
    let b = env.bundle("b", "tomorrow", T0, &[("a.txt", "one")], &[("l", "a.txt")]);
    let before = env.snapshot("");
    let c = cfg.to_str().unwrap();
    let r = env.run(&["validate", "--config", c]);
    r.expect_code(0);
    assert!(r.stdout.contains("valid, pipeline weather"), "{}", r.stdout);
    assert!(r.stdout.contains("takeover never"), "{}", r.stdout);
    let r = env.run(&["validate", "--config", c, "--source", b.to_str().unwrap()]);
    r.expect_code(0);
    assert!(
        r.stdout
            .contains("valid, id tomorrow, 1 outputs, digest sha256:"),
        "{}",
        r.stdout
    );
    assert_eq!(env.snapshot(""), before, "validate wrote something");
    assert!(!env.journal().exists());
}

#[test]
fn validate_refuses_a_bad_source() {
    let env = Env::new();
    let cfg = config(&env, "destinations:\n  - id: a\n    path: {D}/a\n");
    let b = env.bundle("b", "tomorrow", T0, &[("a.txt", "one")], &[]);
    std::fs::write(b.join("a.txt"), "longer").unwrap();
    let c = cfg.to_str().unwrap();
    let r = env.run(&["validate", "--config", c, "--source", b.to_str().unwrap()]);
    r.expect_code(1);
    assert!(
        r.stderr.contains("invalid source: output 'a.txt'"),
        "{}",
        r.stderr
    );
    let r = env.run(&[
        "validate",
        "--config",
        c,
        "--source",
        env.path("nope").to_str().unwrap(),
    ]);
    r.expect_code(1);
    assert!(r.stderr.contains("cannot read manifest"), "{}", r.stderr);
    // Same size, other bytes: validate reads every output, as a publication would.
    std::fs::write(b.join("a.txt"), "ONE").unwrap();
    let r = env.run(&["validate", "--config", c, "--source", b.to_str().unwrap()]);
    r.expect_code(1);
    assert!(
        r.stderr
            .contains("invalid source: output 'a.txt' changed: read 3 bytes with sha256"),
        "{}",
        r.stderr
    );
    assert!(!env.exists("dest"));
}

/// Journal precedence (SPEC §2): `--journal`, `DISTRIBUTOR_JOURNAL`, `journal.path`
/// (relative to the config file), `$XDG_STATE_HOME/distributor/journal.sqlite3`,
/// `~/.local/state/distributor/journal.sqlite3`.
#[test]
fn journal_location_precedence() {
    let candidates = [
        "flag.sqlite3",
        "env.sqlite3",
        "conf/state/cfg.sqlite3",
        "xdg/distributor/journal.sqlite3",
        "home/.local/state/distributor/journal.sqlite3",
    ];
    // (use flag, env value, journal.path in config, XDG_STATE_HOME) → expected winner
    let cases: &[(bool, Option<&str>, bool, bool, usize)] = &[
        (true, Some("env.sqlite3"), true, true, 0),
        (false, Some("env.sqlite3"), true, true, 1),
        (false, None, true, true, 2),
        (false, Some(""), true, true, 2),
        (false, None, false, true, 3),
        (false, None, false, false, 4),
    ];
    for &(flag, env_val, cfg_path, xdg, winner) in cases {
        let env = Env::new();
        let journal_key = if cfg_path {
            "journal:\n  path: state/cfg.sqlite3\n"
        } else {
            ""
        };
        let cfg = config(
            &env,
            &format!("{journal_key}destinations:\n  - id: a\n    path: {{D}}/a\n"),
        );
        let b = env.bundle("b", "tomorrow", T0, &[("a.txt", "one")], &[]);
        let flag_path = env.path("flag.sqlite3");
        let mut args = vec![
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ];
        if flag {
            args.extend(["--journal", flag_path.to_str().unwrap()]);
        }
        let env_path = env.path(env_val.unwrap_or_default());
        let xdg_path = env.path("xdg");
        let mut vars: Vec<(&str, &str)> = vec![];
        match env_val {
            Some("") => vars.push(("DISTRIBUTOR_JOURNAL", "")),
            Some(_) => vars.push(("DISTRIBUTOR_JOURNAL", env_path.to_str().unwrap())),
            None => {}
        }
        if xdg {
            vars.push(("XDG_STATE_HOME", xdg_path.to_str().unwrap()));
        }
        // The cwd is the root while the config is in conf/: journal.path must resolve
        // against the config file's directory.
        let r = env.run_env_without_journal(&args, &vars);
        r.expect_code(0);
        for (i, c) in candidates.iter().enumerate() {
            assert_eq!(
                env.exists(c),
                i == winner,
                "case {:?}: journal {c} exists={}",
                (flag, env_val, cfg_path, xdg),
                env.exists(c)
            );
        }
        let r = env.run_env_without_journal(
            &["status", "--config", cfg.to_str().unwrap(), "--json"],
            &vars,
        );
        r.expect_code(0);
    }
}

#[test]
fn no_journal_location_at_all_is_a_usage_error() {
    let env = Env::new();
    let cfg = config(&env, "destinations:\n  - id: a\n    path: {D}/a\n");
    let b = env.bundle("b", "tomorrow", T0, &[("a.txt", "one")], &[]);
    let r = env.run_env_without_journal(
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ],
        &[("HOME", "")],
    );
    r.expect_code(2);
    assert!(r.stderr.contains("no journal location"), "{}", r.stderr);
    assert!(!env.exists("dest"));
}

#[test]
fn an_invalid_source_is_reported_before_a_missing_journal_location() {
    // publish checks the source's files while it reads the destination; without a
    // journal location it never gets that far, and the invalid source still comes first.
    let env = Env::new();
    let cfg = config(&env, "destinations:\n  - id: a\n    path: {D}/a\n");
    let b = env.bundle("b", "tomorrow", T0, &[("a.txt", "one")], &[]);
    std::fs::write(b.join("a.txt"), "longer than listed").unwrap();
    let r = env.run_env_without_journal(
        &[
            "publish",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ],
        &[("HOME", "")],
    );
    r.expect_code(1);
    assert_eq!(r.json()["error"]["kind"], "invalid_source", "{}", r.stderr);
    assert!(r.stderr.contains("size is 18 bytes"), "{}", r.stderr);
    assert!(!env.exists("dest"));
}
