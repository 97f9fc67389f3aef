//! Unit tests of config parsing: defaults for every key, path resolution, the rules of
//! SPEC §2 that need no binary, and the shape of error messages.

use super::diagnose::strip_yaml_path;
use super::paths::normalize;
use super::*;
use chrono::DateTime;

fn parse(yaml: &str) -> Result<Config> {
    Config::parse(yaml, Path::new("/etc/distributor/weather.yaml"))
}

fn parse_err(yaml: &str) -> String {
    match parse(yaml) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(Error::Config(m)) => m.to_string(),
        Err(e) => panic!("not a config error: {e}"),
    }
}

const MINIMAL: &str =
    "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: latest\n    path: /srv/latest\n";

#[test]
fn defaults_for_every_key() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.file, Path::new("/etc/distributor/weather.yaml"));
    assert_eq!(c.pipeline_id, "weather");
    assert_eq!(c.source_path, None);
    assert_eq!(c.journal_path, None);
    assert!(c.upload_tokens.is_empty());
    assert_eq!(c.destinations.len(), 1);
    let d = &c.destinations[0];
    assert_eq!(d.id, "latest");
    assert_eq!(d.backend, Backend::Local);
    assert_eq!(d.path, Path::new("/srv/latest"));
    assert_eq!(d.path_mapping, PathMapping::Fixed);
    assert_eq!(d.path_mapping.mode(), PathMappingMode::Fixed);
    assert_eq!(d.state_mode, StateMode::SingleOwner);
    assert_eq!(d.reconciliation, ReconciliationMode::Replace);
    assert_eq!(d.transfer.destination_newer, DestinationNewer::Skip);
    assert_eq!(
        d.transfer.same_created_digest_mismatch,
        SameCreatedDigestMismatch::Conflict
    );
    assert_eq!(d.transfer.on_conflict, OnConflict::Replace);
    assert_eq!(d.takeover, TakeoverMode::SamePipeline);
    assert_eq!(
        c.destination("latest").map(|d| d.id.as_str()),
        Some("latest")
    );
    assert!(c.destination("other").is_none());
}

#[test]
fn empty_sections_take_their_defaults_too() {
    let c = parse(
        "version: 1\npipeline:\n  id: weather\nsource: {}\njournal: {}\nserver: {}\ndestinations:\n  - id: latest\n    path: /srv/latest\n    path_mapping: {}\n    state: {}\n    reconciliation: {}\n    transfer: {}\n    takeover: {}\n",
    )
    .unwrap();
    assert_eq!(c.source_path, None);
    assert_eq!(c.journal_path, None);
    assert!(c.upload_tokens.is_empty());
    let d = &c.destinations[0];
    assert_eq!(d.path_mapping, PathMapping::Fixed);
    assert_eq!(d.state_mode, StateMode::SingleOwner);
    assert_eq!(d.reconciliation, ReconciliationMode::Replace);
    assert_eq!(d.transfer, Transfer::default());
    assert_eq!(d.takeover, TakeoverMode::SamePipeline);
}

#[test]
fn every_key_set_explicitly() {
    let token = "a".repeat(64);
    let c = parse(&format!(
        "version: 1
pipeline:
  id: weather
source:
  path: ./out
journal:
  path: ../state/journal.sqlite3
server:
  upload_tokens:
    - name: forecast-job
      sha256: \"{token}\"
destinations:
  - id: dated
    backend: local
    path: reports
    path_mapping:
      mode: template
      template: \"{{created:%Y/%m/%d}}/{{source_id}}\"
    state:
      mode: shared_root
    reconciliation:
      mode: merge
    transfer:
      destination_newer: conflict
      same_created_digest_mismatch: replace
      on_conflict: refuse
    takeover:
      mode: never
  - id: by-id
    path: /srv/by-id
    path_mapping:
      mode: source_id
"
    ))
    .unwrap();
    assert_eq!(c.source_path, Some(PathBuf::from("/etc/distributor/out")));
    assert_eq!(
        c.journal_path,
        Some(PathBuf::from("/etc/state/journal.sqlite3"))
    );
    assert_eq!(c.upload_tokens.len(), 1);
    assert_eq!(c.upload_tokens[0].name, "forecast-job");
    assert_eq!(c.upload_tokens[0].sha256, token);
    let d = &c.destinations[0];
    assert_eq!(d.path, Path::new("/etc/distributor/reports"));
    assert_eq!(d.path_mapping.mode(), PathMappingMode::Template);
    assert_eq!(d.state_mode, StateMode::SharedRoot);
    assert_eq!(d.reconciliation, ReconciliationMode::Merge);
    assert_eq!(
        d.transfer,
        Transfer {
            destination_newer: DestinationNewer::Conflict,
            same_created_digest_mismatch: SameCreatedDigestMismatch::Replace,
            on_conflict: OnConflict::Refuse,
        }
    );
    assert_eq!(d.takeover, TakeoverMode::Never);
    assert_eq!(c.destinations[1].path_mapping, PathMapping::SourceId);
}

#[test]
fn template_renders_in_utc_and_must_be_safe() {
    let t = PathTemplate::parse("{pipeline_id}/{destination_id}/{created:%Y/%m/%d}/{source_id}")
        .unwrap();
    let created = DateTime::parse_from_rfc3339("2026-12-02T01:00:00+02:00").unwrap();
    assert_eq!(
        t.render("tomorrow", created, "weather", "dated").unwrap(),
        "weather/dated/2026/12/01/tomorrow"
    );
    let t = PathTemplate::parse("../{source_id}").unwrap();
    let e = t.render("x", created, "weather", "dated").unwrap_err();
    assert!(e.contains("not a safe relative path"), "{e}");
    let t = PathTemplate::parse("{source_id}").unwrap();
    assert!(t.render(".distributor.json", created, "w", "d").is_err());
    for bad in ["{source}", "{created:}", "{source_id", "source_id}", ""] {
        assert!(PathTemplate::parse(bad).is_err(), "{bad} accepted");
    }
}

#[test]
fn paths_are_normalised_and_root_refused() {
    let yaml = |p: &str| {
        format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: \"{p}\"\n"
        )
    };
    let c = parse(&yaml("/srv/./a/../b/")).unwrap();
    assert_eq!(c.destinations[0].path, Path::new("/srv/b"));
    for root in ["/", "/srv/..", "../../..", "/.."] {
        let m = parse_err(&yaml(root));
        assert!(m.contains("destinations[0].path: "), "{m}");
        assert!(m.contains("resolves to '/'"), "{m}");
    }
    assert_eq!(normalize(Path::new("/a/./b/../c")), Path::new("/a/c"));
}

#[test]
fn errors_name_file_key_path_and_location_once() {
    let m = parse_err(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: /x\n    takeover:\n      mode: sometimes\n",
    );
    assert!(
        m.starts_with("config /etc/distributor/weather.yaml: destinations[0].takeover.mode: unknown variant `sometimes`"),
        "{m}"
    );
    assert!(m.contains("at line 8 column 13"), "{m}");
    assert_eq!(m.matches("destinations[0]").count(), 1, "{m}");
    let m = parse_err("version: 1\npipeline:\n  id: Weather\ndestinations: []\n");
    assert!(m.contains(": pipeline.id: invalid id 'Weather'"), "{m}");
}

#[test]
fn yaml_path_prefix_is_dropped_only_when_it_is_the_key() {
    assert_eq!(strip_yaml_path("a.b", "a.b: bad".into()), "bad");
    assert_eq!(strip_yaml_path("a.b", "a: bad".into()), "bad");
    assert_eq!(strip_yaml_path("a[0].b", "a[0]: bad".into()), "bad");
    assert_eq!(strip_yaml_path("ab", "a: bad".into()), "a: bad");
    assert_eq!(
        strip_yaml_path("version", "invalid type: x".into()),
        "invalid type: x"
    );
}

#[test]
fn duplicate_and_colliding_destinations() {
    let m = parse_err(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: /x\n  - id: a\n    path: /y\n",
    );
    assert!(
        m.contains("destinations[1].id: duplicate destination id 'a'"),
        "{m}"
    );
    let m = parse_err(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: /x\n  - id: b\n    path: /x/\n",
    );
    assert!(m.contains("destinations[1].path: "), "{m}");
    parse("version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: /x\n    state:\n      mode: shared_root\n  - id: b\n    path: /x\n    state:\n      mode: shared_root\n")
        .unwrap();
}

#[test]
fn upload_token_rules() {
    let yaml = |name: &str, sha: &str| {
        format!(
            "version: 1\npipeline:\n  id: weather\nserver:\n  upload_tokens:\n    - name: \"{name}\"\n      sha256: \"{sha}\"\n    - name: other\n      sha256: \"{}\"\ndestinations:\n  - id: a\n    path: /x\n",
            "b".repeat(64)
        )
    };
    let good = "a".repeat(64);
    parse(&yaml("job", &good)).unwrap();
    assert!(parse_err(&yaml("job", &"A".repeat(64))).contains("upload_tokens[0].sha256"));
    assert!(parse_err(&yaml("", &good)).contains("upload_tokens[0].name"));
    assert!(parse_err(&yaml("other", &good)).contains("duplicate token name"));
}

#[test]
fn unsupported_version() {
    let m =
        parse_err("version: 2\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: /x\n");
    assert!(
        m.contains("version: unsupported version 2, accepted: 1"),
        "{m}"
    );
}

#[test]
fn backend_s3_takes_an_s3_url_and_is_never_resolved_against_the_file() {
    let c = parse(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    backend: s3\n    path: s3://reports-bucket/weather\n",
    )
    .unwrap();
    assert_eq!(c.destinations[0].backend, Backend::S3);
    assert_eq!(
        c.destinations[0].path,
        Path::new("s3://reports-bucket/weather")
    );
    let m = parse_err(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    backend: s3\n    path: /x\n",
    );
    assert!(
        m.contains("destinations[0].path: '/x' is not an s3:// URL; accepted for backend s3: s3://<bucket>/<key prefix>"),
        "{m}"
    );
}

#[test]
fn template_that_never_renders_safely_is_refused_at_load() {
    let yaml = |t: &str| {
        format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: /x\n    path_mapping:\n      mode: template\n      template: \"{t}\"\n"
        )
    };
    for bad in [
        "../{source_id}",
        "/x/{source_id}",
        "{source_id}/",
        "{created:%n}",
    ] {
        let m = parse_err(&yaml(bad));
        assert!(
            m.contains("destinations[0].path_mapping.template: ") && m.contains("not a safe"),
            "{bad}: {m}"
        );
    }
    let c = parse(&yaml("{destination_id}/{created:%Y/%m}/{source_id}")).unwrap();
    assert_eq!(
        c.destinations[0].path_mapping.mode(),
        PathMappingMode::Template
    );
}

#[test]
fn empty_and_tilde_paths_are_refused() {
    let base = |key: &str, p: &str| {
        let dest = if key == "dest" { p } else { "/x" };
        let extra = match key {
            "source" => format!("source:\n  path: \"{p}\"\n"),
            "journal" => format!("journal:\n  path: \"{p}\"\n"),
            _ => String::new(),
        };
        format!(
            "version: 1\npipeline:\n  id: weather\n{extra}destinations:\n  - id: a\n    path: \"{dest}\"\n"
        )
    };
    for (key, path) in [
        ("source", "source.path: "),
        ("journal", "journal.path: "),
        ("dest", "destinations[0].path: "),
    ] {
        let m = parse_err(&base(key, ""));
        assert!(m.contains(path) && m.contains("must not be empty"), "{m}");
        for tilde in ["~", "~/reports"] {
            let m = parse_err(&base(key, tilde));
            assert!(m.contains(path) && m.contains("'~' is not expanded"), "{m}");
        }
    }
    // `~` inside a name is an ordinary character; a YAML null journal path is no path.
    parse(&base("dest", "/srv/a~b")).unwrap();
    let c = parse("version: 1\npipeline:\n  id: weather\njournal:\n  path: ~\ndestinations:\n  - id: a\n    path: /x\n").unwrap();
    assert_eq!(c.journal_path, None);
}
