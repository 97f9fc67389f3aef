//! Unit tests of `backend: s3` destinations: the path, every key of the `s3:` block with
//! its default, each refusal naming its key path and what is accepted, and the matching
//! rules of `cache_control` and `content_types`.

use super::*;
use crate::config::{Config, PathMapping};
use crate::error::Error;
use crate::model::Backend;
use std::path::{Path, PathBuf};

fn parse(yaml: &str) -> crate::error::Result<Config> {
    Config::parse(yaml, Path::new("/etc/distributor/weather.yaml"))
}

/// A one-destination config: backend s3, `path`, and `extra` destination lines.
fn s3_yaml(path: &str, extra: &str) -> String {
    format!(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n    backend: s3\n    path: \"{path}\"\n{extra}"
    )
}

/// Like [`s3_yaml`] with `block` as the lines of the `s3:` block (indented by 6).
fn with_block(block: &str) -> String {
    let lines: String = block.lines().map(|l| format!("      {l}\n")).collect();
    s3_yaml(
        "s3://reports-bucket/weather/latest",
        &format!("    s3:\n{lines}"),
    )
}

fn settings(yaml: &str) -> S3Settings {
    let c = parse(yaml).unwrap_or_else(|e| panic!("refused: {e}\n{yaml}"));
    c.destinations[0].s3.clone().expect("s3 settings")
}

fn parse_err(yaml: &str) -> String {
    match parse(yaml) {
        Ok(c) => panic!("accepted: {c:?}\n{yaml}"),
        Err(Error::Config(m)) => m.to_string(),
        Err(e) => panic!("not a config error: {e}"),
    }
}

/// Asserts the error starts with the file and `key`, and contains every needle.
fn refused(yaml: &str, key: &str, needles: &[&str]) {
    let m = parse_err(yaml);
    let head = format!("config /etc/distributor/weather.yaml: {key}: ");
    assert!(m.starts_with(&head), "expected key {key}:\n{m}");
    for n in needles {
        assert!(m.contains(n), "lacks {n:?}:\n{m}");
    }
}

#[test]
fn defaults_for_every_s3_key() {
    let c = parse(&s3_yaml("s3://reports-bucket/weather/latest", "")).unwrap();
    let d = &c.destinations[0];
    assert_eq!(d.backend, Backend::S3);
    assert_eq!(d.path, PathBuf::from("s3://reports-bucket/weather/latest"));
    assert_eq!(
        d.path.to_str(),
        Some("s3://reports-bucket/weather/latest"),
        "the path is the URL text, never resolved against the config file"
    );
    let s = d.s3.as_ref().unwrap();
    assert_eq!(
        *s,
        S3Settings {
            bucket: "reports-bucket".into(),
            prefix: "weather/latest".into(),
            endpoint: None,
            region: None,
            allow_http: false,
            virtual_hosted_style: false,
            lease_seconds: 60,
            concurrency: 16,
            content_types: vec![],
            cache_control: vec![],
            azure: None,
        }
    );
    // An empty block and a null one mean the same.
    assert_eq!(settings(&with_block("{}")), *s);
    assert_eq!(
        settings(&s3_yaml("s3://reports-bucket/weather/latest", "    s3:\n")),
        *s
    );
    // Local destinations have none.
    let c =
        parse("version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: /srv/a\n")
            .unwrap();
    assert!(c.destinations[0].s3.is_none());
}

#[test]
fn every_s3_key_set_explicitly() {
    let s = settings(&with_block(
        "endpoint: http://127.0.0.1:9000
region: eu-central-1
allow_http: true
virtual_hosted_style: true
lease_seconds: 3600
concurrency: 64
content_types: {\".WASM\": application/wasm, \".txt\": \"text/plain; charset=utf-8\"}
cache_control:
  - {glob: \"*.html\", value: no-cache}
  - {glob: \"assets/**\", value: \"public, max-age=31536000, immutable\"}",
    ));
    assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
    assert_eq!(s.region.as_deref(), Some("eu-central-1"));
    assert!(s.allow_http);
    assert!(s.virtual_hosted_style);
    assert_eq!(s.lease_seconds, 3600);
    assert_eq!(s.concurrency, 64);
    assert_eq!(
        s.content_types,
        vec![
            (".wasm".to_string(), "application/wasm".to_string()),
            (".txt".to_string(), "text/plain; charset=utf-8".to_string()),
        ]
    );
    let globs: Vec<(&str, &str)> = s
        .cache_control
        .iter()
        .map(|r| (r.glob.as_str(), r.value.as_str()))
        .collect();
    assert_eq!(
        globs,
        [
            ("*.html", "no-cache"),
            ("assets/**", "public, max-age=31536000, immutable")
        ]
    );
    let low = settings(&with_block("lease_seconds: 10\nconcurrency: 1"));
    assert_eq!((low.lease_seconds, low.concurrency), (10, 1));
}

#[test]
fn bucket_names_follow_s3_rules() {
    for good in [
        "abc",
        "reports-bucket",
        "my.bucket.example",
        "1bucket9",
        &"a".repeat(63),
        "xn-bucket",
        "a-s3alias-b",
        "1.2.3",
        "1.2.3.4a",
    ] {
        let s = settings(&s3_yaml(&format!("s3://{good}/p"), ""));
        assert_eq!(s.bucket, good);
    }
    for (bad, why) in [
        ("ab", "3 to 63 characters"),
        (&"a".repeat(64), "3 to 63 characters"),
        ("Reports", "other than a lowercase letter"),
        ("my_bucket", "other than a lowercase letter"),
        ("-bucket", "start and end with a letter or digit"),
        ("bucket.", "start and end with a letter or digit"),
        ("my..bucket", "contains '..'"),
        ("192.168.5.4", "IPv4"),
        ("xn--bucket", "'xn--'"),
        ("mybucket-s3alias", "'-s3alias'"),
        ("", "3 to 63 characters"),
    ] {
        refused(
            &s3_yaml(&format!("s3://{bad}/p"), ""),
            "destinations[0].path",
            &[
                &format!("bucket '{bad}'"),
                why,
                "accepted: 3 to 63 lowercase letters",
            ],
        );
    }
}

#[test]
fn key_prefix_is_required_and_safe() {
    for (path, prefix) in [
        ("s3://bkt/a", "a"),
        ("s3://bkt/weather/latest", "weather/latest"),
        ("s3://bkt/with space/ü~/.hidden", "with space/ü~/.hidden"),
    ] {
        assert_eq!(settings(&s3_yaml(path, "")).prefix, prefix);
    }
    let long = format!("s3://bkt/{}", vec!["a".repeat(255); 4].join("/"));
    assert!(long.len() - "s3://bkt/".len() > MAX_PREFIX);
    let max = format!(
        "s3://bkt/{}/{}",
        vec!["a".repeat(255); 3].join("/"),
        "b".repeat(MAX_PREFIX - 768)
    );
    assert_eq!(settings(&s3_yaml(&max, "")).prefix.len(), MAX_PREFIX);
    for (path, needles) in [
        (
            "s3://bkt",
            &["empty key prefix", "a bucket root is never a bundle path"][..],
        ),
        ("s3://bkt/", &["empty key prefix"]),
        ("s3://bkt/p/", &["empty segment", "(write 's3://bkt/p')"]),
        ("s3://bkt//p", &["empty segment"]),
        ("s3://bkt/a//b", &["empty segment"]),
        ("s3://bkt/a/./b", &["'.' segment"]),
        ("s3://bkt/a/../b", &["'..' segment"]),
        ("s3://bkt/a\\\\b", &["backslash"]),
        ("s3://bkt/a\\tb", &["control character"]),
        (long.as_str(), &["1023 bytes long, accepted: at most 900"]),
        ("/srv/site", &["'/srv/site' is not an s3:// URL"]),
        ("S3://bkt/p", &["not an s3:// URL"]),
        ("https://bkt.s3.amazonaws.com/p", &["not an s3:// URL"]),
    ] {
        let mut needles = needles.to_vec();
        if !path.starts_with("s3://bkt/p/") {
            needles.push("s3://<bucket>/<key prefix>");
        }
        refused(&s3_yaml(path, ""), "destinations[0].path", &needles);
    }
    let seg = format!("s3://bkt/{}", "a".repeat(256));
    refused(
        &s3_yaml(&seg, ""),
        "destinations[0].path",
        &["segment longer than 255 bytes"],
    );
}

#[test]
fn s3_paths_and_blocks_belong_to_backend_s3() {
    refused(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: /srv/a\n    s3:\n      region: eu-central-1\n",
        "destinations[0].s3",
        &[
            "applies to backend s3 only",
            "this destination is backend local",
        ],
    );
    refused(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: s3://bkt/site\n",
        "destinations[0].path",
        &["object-store URL", "set backend: s3"],
    );
}

#[test]
fn endpoint_rules() {
    for good in [
        "https://s3.eu-central-1.amazonaws.com",
        "https://minio.internal:9000/",
        "HTTPS://storage.example",
        "https://[::1]:9000",
        "https://10.0.0.5",
        "https://minio_1:9000",
    ] {
        let s = settings(&with_block(&format!("endpoint: \"{good}\"")));
        assert_eq!(s.endpoint.as_deref(), Some(good), "stored as configured");
    }
    let s = settings(&with_block(
        "endpoint: http://127.0.0.1:9000\nallow_http: true",
    ));
    assert!(s.allow_http);
    let key = "destinations[0].s3.endpoint";
    for (bad, needle) in [
        ("ftp://host", "not an http:// or https:// URL"),
        ("host:9000", "not an http:// or https:// URL"),
        ("https://", "has no host"),
        ("https://:9000", "has no host"),
        ("https://host/bucket", "has a path, query or fragment"),
        ("https://host?x=1", "has a path, query or fragment"),
        ("https://host#f", "has a path, query or fragment"),
        ("https://host:0", "invalid port"),
        ("https://host:65536", "invalid port"),
        ("https://host:", "invalid port"),
        ("https://host:x", "invalid port"),
        ("https://ho st", "invalid host name"),
        ("https://host..example", "invalid host name"),
        ("https://[::1", "unclosed '['"),
        ("https://[zz]", "invalid IPv6"),
    ] {
        refused(
            &with_block(&format!("endpoint: \"{bad}\"")),
            key,
            &[needle, "accepted: https://host[:port]", "at line 9 column"],
        );
    }
    refused(
        &with_block("endpoint: http://127.0.0.1:9000"),
        key,
        &[
            "plain http",
            "set destinations[0].s3.allow_http: true",
            "accepted otherwise: an https:// URL",
        ],
    );
    refused(
        &with_block("endpoint: http://127.0.0.1:9000\nallow_http: false"),
        key,
        &["destinations[0].s3.allow_http: true"],
    );
    // User information may be a password: refused without being repeated.
    let m = parse_err(&with_block("endpoint: https://AKIAX:hunter2@minio:9000"));
    assert!(m.contains(&format!("{key}: ")), "{m}");
    assert!(
        m.contains("credentials are never read from the config"),
        "{m}"
    );
    assert!(!m.contains("hunter2") && !m.contains("AKIAX"), "{m}");
}

#[test]
fn region_lease_and_concurrency_ranges() {
    for good in ["us-east-1", "eu-central-1", "garage", "x"] {
        assert_eq!(
            settings(&with_block(&format!("region: {good}")))
                .region
                .as_deref(),
            Some(good)
        );
    }
    for bad in ["\"\"", "US-EAST-1", "eu central", "eu_central_1", "1.5"] {
        refused(
            &with_block(&format!("region: {bad}")),
            "destinations[0].s3.region",
            &["accepted: 1 to 64 lowercase letters, digits and '-'"],
        );
    }
    for (key, bad, range) in [
        ("lease_seconds", "9", "10 to 3600"),
        ("lease_seconds", "3601", "10 to 3600"),
        ("lease_seconds", "-60", "10 to 3600"),
        ("lease_seconds", "60.5", "10 to 3600"),
        ("lease_seconds", "\"60\"", "10 to 3600"),
        ("concurrency", "0", "1 to 64"),
        ("concurrency", "65", "1 to 64"),
        ("concurrency", "many", "1 to 64"),
    ] {
        refused(
            &with_block(&format!("{key}: {bad}")),
            &format!("destinations[0].s3.{key}"),
            &[
                &format!("expected an integer from {range}"),
                "at line 9 column",
            ],
        );
    }
    for key in ["allow_http", "virtual_hosted_style"] {
        refused(
            &with_block(&format!("{key}: \"yes\"")),
            &format!("destinations[0].s3.{key}"),
            &["expected a boolean"],
        );
    }
}

#[test]
fn unknown_and_credential_keys_are_refused() {
    refused(
        &with_block("endpont: https://minio"),
        "destinations[0].s3.endpont",
        &[
            "unknown field `endpont`, expected one of `endpoint`, `region`, `allow_http`, `virtual_hosted_style`, `lease_seconds`, `concurrency`, `content_types`, `cache_control`",
            "at line 9 column 7",
        ],
    );
    for key in [
        "access_key_id",
        "secret_access_key",
        "session_token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "AWS_SECRET_ACCESS_KEY",
        "credentials",
        "password",
        "profile",
    ] {
        let m = parse_err(&with_block(&format!("{key}: hunter2")));
        assert!(
            m.contains(&format!("destinations[0].s3.{key}: credentials are never read from the config file; they come only from the environment and the standard AWS credential chain")),
            "{m}"
        );
        assert!(m.contains("remove this key"), "{m}");
        assert!(
            !m.contains("hunter2") && !m.contains("unknown field"),
            "{m}"
        );
    }
    refused(
        &with_block("region: a\nregion: b"),
        "destinations[0].s3",
        &["duplicate field `region`"],
    );
    refused(
        &s3_yaml("s3://bkt/p", "    s3: true\n"),
        "destinations[0].s3",
        &[
            "expected a mapping with keys endpoint, region, allow_http, virtual_hosted_style, lease_seconds, concurrency, content_types, cache_control",
        ],
    );
}

#[test]
fn content_type_entries() {
    let key = "destinations[0].s3.content_types";
    for (block, k, needle) in [
        (
            "content_types: {wasm: application/wasm}",
            format!("{key}.wasm"),
            "invalid extension 'wasm', accepted: '.' followed by",
        ),
        (
            "content_types: {\".\": a/b}",
            format!("{key}.."),
            "invalid extension '.'",
        ),
        (
            "content_types: {\"..gz\": a/b}",
            format!("{key}...gz"),
            "invalid extension",
        ),
        (
            "content_types: {\".a/b\": a/b}",
            format!("{key}..a/b"),
            "invalid extension",
        ),
        (
            "content_types: {\".wasm\": wasm}",
            format!("{key}..wasm"),
            "invalid MIME type 'wasm', accepted: type/subtype",
        ),
        (
            "content_types: {\".wasm\": \"application/\"}",
            format!("{key}..wasm"),
            "invalid MIME type",
        ),
        (
            "content_types: {\".txt\": \"text/plain; charset\"}",
            format!("{key}..txt"),
            "invalid MIME type",
        ),
        (
            "content_types: {\".txt\": \"text/plain;\"}",
            format!("{key}..txt"),
            "invalid MIME type",
        ),
        (
            "content_types: {\".wasm\": application/wasm, \".WASM\": a/b}",
            key.to_string(),
            "extension '.wasm' is listed twice",
        ),
        (
            "content_types: [.wasm]",
            key.to_string(),
            "expected a mapping from extension",
        ),
    ] {
        refused(&with_block(block), &k, &[needle]);
    }
    let s = settings(&with_block(
        "content_types: {\".tar.gz\": \"application/x-gtar\", \".GZ\": \"application/gzip\", \".json\": \"application/json; charset=\\\"utf-8\\\"\"}",
    ));
    assert_eq!(
        s.extra_content_type("a/b/x.tar.gz"),
        Some("application/x-gtar")
    );
    assert_eq!(s.extra_content_type("X.TAR.GZ"), Some("application/x-gtar"));
    assert_eq!(s.extra_content_type("x.gz"), Some("application/gzip"));
    assert_eq!(
        s.extra_content_type("forecast.json"),
        Some("application/json; charset=\"utf-8\"")
    );
    assert_eq!(s.extra_content_type("gz"), None);
    assert_eq!(
        s.extra_content_type("dir/.gz"),
        None,
        "a dotfile has no extension"
    );
    assert_eq!(
        s.extra_content_type("x.gz/readme"),
        None,
        "only the file name counts"
    );
    assert_eq!(s.extra_content_type("x.png"), None);
}

#[test]
fn cache_control_globs_match_names_anywhere_and_paths_from_the_root() {
    let s = settings(&with_block(
        "cache_control:
  - {glob: \"/index.html\", value: no-store}
  - {glob: \"*.html\", value: no-cache}
  - {glob: \"assets/**\", value: immutable}
  - {glob: \"maps/*.png\", value: max-age=60}
  - {glob: \"**/*.json\", value: max-age=5}
  - {glob: \"{a,b}.txt\", value: ab}",
    ));
    for (path, want) in [
        ("index.html", Some("no-store")),
        ("docs/index.html", Some("no-cache")),
        ("page.html", Some("no-cache")),
        ("a/b/c/page.html", Some("no-cache")),
        ("assets/app.js", Some("immutable")),
        ("assets/x/y/app.html", Some("no-cache")),
        ("assets/x/y/app.js", Some("immutable")),
        ("sub/assets/app.js", None),
        ("maps/temp.png", Some("max-age=60")),
        ("maps/2026/temp.png", None),
        ("forecast.json", Some("max-age=5")),
        ("a/b/forecast.json", Some("max-age=5")),
        ("a.txt", Some("ab")),
        ("x/b.txt", Some("ab")),
        ("c.txt", None),
        ("page.HTML", None),
    ] {
        assert_eq!(s.cache_control_for(path), want, "{path}");
    }
    assert!(s.cache_control[1].matches("x/y.html"));
    // The table in docs/config.md: `?` never crosses `/` either, braces pick alternatives.
    let s = settings(&with_block(
        "cache_control:\n  - {glob: \"maps/?.png\", value: one}\n  - {glob: \"*.{css,js}\", value: two}",
    ));
    assert_eq!(s.cache_control_for("maps/a.png"), Some("one"));
    assert_eq!(s.cache_control_for("maps/ab.png"), None);
    assert_eq!(s.cache_control_for("mapsx/a.png"), None);
    assert_eq!(s.cache_control_for("site.css"), Some("two"));
    assert_eq!(s.cache_control_for("js/app.js"), Some("two"));
    assert!(!s.cache_control[0].matches("x/index.html"));
}

#[test]
fn cache_control_entries_are_checked() {
    let key = "destinations[0].s3.cache_control[0]";
    for (entry, k, needle) in [
        (
            "{glob: \"*.html\"}",
            key.to_string(),
            "missing field `value`",
        ),
        ("{value: x}", key.to_string(), "missing field `glob`"),
        (
            "{glob: a, value: x, when: y}",
            format!("{key}.when"),
            "unknown field `when`, expected `glob` or `value`",
        ),
        (
            "{glob: \"[a\", value: x}",
            format!("{key}.glob"),
            "invalid glob '[a': unclosed character class",
        ),
        (
            "{glob: \"\", value: x}",
            format!("{key}.glob"),
            "empty glob",
        ),
        (
            "{glob: \"/\", value: x}",
            format!("{key}.glob"),
            "empty glob",
        ),
        (
            "{glob: \"assets/\", value: x}",
            format!("{key}.glob"),
            "write 'assets/**'",
        ),
        (
            "{glob: \"a//b\", value: x}",
            format!("{key}.glob"),
            "empty segment",
        ),
        (
            "{glob: a, value: \"\"}",
            format!("{key}.value"),
            "invalid Cache-Control value ''",
        ),
        (
            "{glob: a, value: \" x\"}",
            format!("{key}.value"),
            "without leading or trailing spaces",
        ),
        (
            "{glob: a, value: \"x\\ny\"}",
            format!("{key}.value"),
            "printable ASCII",
        ),
        (
            "{glob: a, value: \"max-age=60 ü\"}",
            format!("{key}.value"),
            "printable ASCII",
        ),
        (
            "{glob: a, value: [60]}",
            format!("{key}.value"),
            "expected a Cache-Control value",
        ),
        (
            "a",
            key.to_string(),
            "expected a mapping with keys glob, value",
        ),
    ] {
        let m = parse_err(&with_block(&format!("cache_control: [{entry}]")));
        assert!(
            m.contains(&format!(": {k}: ")),
            "{entry}: expected key {k}:\n{m}"
        );
        assert!(m.contains(needle), "{entry}: lacks {needle:?}:\n{m}");
        if k.ends_with(".glob") {
            assert!(
                m.contains("accepted: a glob matched against the file name"),
                "{m}"
            );
        }
    }
}

#[test]
fn s3_destinations_collide_only_on_one_store() {
    let two = |b_extra: &str| {
        format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    backend: s3\n    path: s3://bkt/site\n  - id: b\n    backend: s3\n    path: s3://bkt/site\n{b_extra}"
        )
    };
    refused(
        &two(""),
        "destinations[1].path",
        &["destinations 'a' and 'b' resolve to the same fixed path s3://bkt/site"],
    );
    parse(&two("    s3:\n      endpoint: https://minio.internal\n")).unwrap();
    parse(&two("    state:\n      mode: shared_root\n").replace(
        "path: s3://bkt/site\n  - id: b",
        "path: s3://bkt/site\n    state:\n      mode: shared_root\n  - id: b",
    ))
    .unwrap();
}

#[test]
fn path_mapping_renders_below_the_prefix() {
    let c = parse(&s3_yaml(
        "s3://bkt/weather",
        "    path_mapping:\n      mode: template\n      template: \"{created:%Y/%m/%d}/{source_id}\"\n",
    ))
    .unwrap();
    let d = &c.destinations[0];
    assert!(matches!(d.path_mapping, PathMapping::Template(_)));
    assert_eq!(
        d.path.join("2026/12/02/x").to_str(),
        Some("s3://bkt/weather/2026/12/02/x")
    );
}
