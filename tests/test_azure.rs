//! azure destinations (SPEC §21) against Azurite on 127.0.0.1 (`tests/common/s3.rs` starts
//! it; `tests/common/azurite.rs` signs the harness's own requests): what only Azure has.
//! The promises both object stores share run on Azurite through the same bodies as on s3
//! (`test_s3.rs`'s `per_store!`, the planning matrix and reconciliation's `per_backend!`).
//!
//! Here: the first-contact errors (a container that does not exist, no credentials, an
//! endpoint nothing listens on) name the destination and the fix and write nothing; a key
//! segment ending in `.` is the conflict `key_unsupported`; `use_emulator` needs no
//! credentials and records the emulator for `recover --journal`; the conditional-write
//! check runs and leaves nothing behind; large files go in blocks and keep their headers,
//! moved-aside copies included.

use crate::common::s3::{Moto, require_azurite, s3_env};
use crate::common::{Env, F, Run};
use std::path::{Path, PathBuf};

const PREFIX: &str = "weather/latest";

const V1: &[F] = &[
    ("index.html", "<h1>v1</h1>"),
    ("forecast.json", "{\"t\": 1}"),
];

/// One container and the environment to reach it.
struct World {
    env: Env,
    azurite: &'static Moto,
    container: String,
    vars: Vec<(&'static str, String)>,
}

impl World {
    fn new(azurite: &'static Moto) -> World {
        World {
            env: Env::new(),
            azurite,
            container: azurite.fresh_bucket(),
            vars: s3_env(azurite),
        }
    }

    /// A config with one azure destination `site` at `az://<container>/<PREFIX>` and the
    /// `azure:` block `block` (keys indented 6).
    fn config_with(&self, rel: &str, container: &str, block: &str) -> PathBuf {
        self.env.config(
            rel,
            &format!(
                "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n    backend: azure\n    path: az://{container}/{PREFIX}\n    azure:\n{block}"
            ),
        )
    }

    /// The usual block: Azurite's endpoint, the emulator's account, plain http.
    fn block(&self) -> String {
        format!(
            "      endpoint: {}\n      account: devstoreaccount1\n      allow_http: true\n",
            self.azurite.endpoint
        )
    }

    fn run(&self, args: &[&str], vars: &[(&str, &str)]) -> Run {
        self.env.run_env(args, vars)
    }

    fn vars(&self) -> Vec<(&str, &str)> {
        self.vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    fn publish(&self, config: &Path, bundle: &Path, vars: &[(&str, &str)]) -> Run {
        self.run(
            &[
                "publish",
                "--json",
                "--config",
                path(config),
                "--source",
                path(bundle),
            ],
            vars,
        )
    }

    fn keys(&self) -> Vec<String> {
        (self.azurite.list(&self.container, ""))
            .into_iter()
            .map(|o| o.key)
            .collect()
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn key(rel: &str) -> String {
    format!("{PREFIX}/{rel}")
}

/// stdout and stderr of a run, for messages.
fn all(r: &Run) -> String {
    format!("{}\n{}", r.stdout, r.stderr)
}

#[test]
fn a_container_that_does_not_exist_is_a_clear_error() {
    let azurite = require_azurite!();
    let w = World::new(azurite);
    let missing = format!("no-such-container-{}", std::process::id());
    let config = w.config_with("d.yaml", &missing, &w.block());
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    for extra in [&[][..], &["--dry-run"][..]] {
        let mut args = vec!["publish", "--config", path(&config), "--source", path(&b1)];
        args.extend_from_slice(extra);
        let r = w.run(&args, &w.vars());
        let text = all(&r);
        assert_eq!(r.code, 1, "{extra:?}: {text}");
        for needle in [
            format!("az://{missing}/{PREFIX}"),
            format!("container {missing} does not exist"),
            "create it first".to_string(),
            "az storage container create".to_string(),
        ] {
            assert!(text.contains(&needle), "{extra:?} {needle}: {text}");
        }
        assert!(!text.contains('<'), "raw XML: {text}");
    }
    let r = azurite.raw("GET", &format!("/{missing}?restype=container"), &[], &[]);
    assert_eq!(r.status, 404, "the container appeared: {}", r.text());
}

#[test]
fn missing_credentials_are_a_clear_error_naming_where_they_come_from() {
    let azurite = require_azurite!();
    let w = World::new(azurite);
    let config = w.config_with("d.yaml", &w.container, &w.block());
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    // No AZURE_STORAGE_ACCOUNT_KEY, no SAS, no token, no workload identity.
    let r = w.publish(&config, &b1, &[("NO_PROXY", "127.0.0.1")]);
    let text = all(&r);
    assert_eq!(r.code, 1, "{text}");
    for needle in [
        format!("az://{}", w.container),
        "no Azure credentials found".to_string(),
        "AZURE_STORAGE_ACCOUNT_KEY".to_string(),
        "AZURE_STORAGE_SAS_TOKEN".to_string(),
        "AZURE_FEDERATED_TOKEN_FILE".to_string(),
    ] {
        assert!(text.contains(&needle), "{needle}: {text}");
    }
    assert!(!text.contains("169.254"), "{text}");
    assert!(w.keys().is_empty(), "something was written: {:?}", w.keys());

    // A wrong key: the store refuses it, and says so in words.
    let wrong = "d3Jvbmc=";
    let r = w.publish(&config, &b1, &[("AZURE_STORAGE_ACCOUNT_KEY", wrong)]);
    let text = all(&r);
    assert_eq!(r.code, 1, "{text}");
    assert!(text.contains("refused these credentials"), "{text}");
    assert!(!text.contains('<'), "raw XML: {text}");
    assert!(w.keys().is_empty(), "something was written: {:?}", w.keys());
}

#[test]
fn an_endpoint_nothing_listens_on_is_a_clear_error() {
    let azurite = require_azurite!();
    let w = World::new(azurite);
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{closed}/devstoreaccount1");
    let config = w.config_with(
        "d.yaml",
        &w.container,
        &format!(
            "      endpoint: {endpoint}\n      account: devstoreaccount1\n      allow_http: true\n"
        ),
    );
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    let r = w.publish(&config, &b1, &w.vars());
    let text = all(&r);
    assert_eq!(r.code, 1, "{text}");
    for needle in [
        format!("cannot reach the store at http://127.0.0.1:{closed}"),
        "azure.endpoint".to_string(),
        "nothing was written".to_string(),
    ] {
        assert!(text.contains(&needle), "{needle}: {text}");
    }
}

#[test]
fn a_key_segment_ending_in_a_dot_is_key_unsupported_and_nothing_is_written() {
    let azurite = require_azurite!();
    let w = World::new(azurite);
    let config = w.config_with("d.yaml", &w.container, &w.block());
    for bad in ["notes.", "v1./index.html"] {
        let b = w.env.bundle(
            &format!("b-{}", bad.replace('/', "-")),
            "site",
            "2026-12-02T06:00:00Z",
            &[("ok.txt", "ok"), (bad, "x")],
            &[],
        );
        let r = w.run(
            &[
                "publish",
                "--json",
                "--force",
                "--config",
                path(&config),
                "--source",
                path(&b),
            ],
            &w.vars(),
        );
        r.expect_code(3);
        assert_eq!(r.conflict_kinds(), ["key_unsupported"], "{bad}");
        let c = &r.dest(0)["conflicts"][0];
        assert_eq!(c["forceable"], false, "{bad}");
        assert_eq!(c["path"], bad, "{bad}");
        assert!(
            w.keys().is_empty(),
            "{bad}: something was written: {:?}",
            w.keys()
        );
    }
}

#[test]
fn the_emulator_needs_no_credentials_and_recover_finds_it_from_the_journal() {
    let azurite = require_azurite!();
    let w = World::new(azurite);
    let config = w.config_with(
        "d.yaml",
        &w.container,
        &format!(
            "      use_emulator: true\n      endpoint: {}\n      allow_http: true\n",
            azurite.endpoint
        ),
    );
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    let no_credentials = [("NO_PROXY", "127.0.0.1")];
    let r = w.publish(&config, &b1, &no_credentials);
    r.expect_code(0);
    assert_eq!(r.decision(), "create");
    let state: serde_json::Value = serde_json::from_slice(
        &azurite
            .get(&w.container, &key(".distributor.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(state["state_version"], 2);
    // Nothing of the conditional-write check is left.
    let keys = w.keys();
    assert!(
        !keys.iter().any(|k| k.contains(".distributor-probe-")),
        "{keys:?}"
    );

    // A run killed after its decision: `recover` with the journal alone (no config)
    // finds the store from the record (account, endpoint, emulator) and rolls forward.
    let v2: &[F] = &[
        ("index.html", "<h1>v2</h1>"),
        ("forecast.json", "{\"t\": 2}"),
    ];
    let b2 = w.env.bundle("b2", "site", "2026-12-02T07:00:00Z", v2, &[]);
    let mut vars = no_credentials.to_vec();
    vars.push(("DISTRIBUTOR_FAILPOINT", "s3_before_log_entry"));
    let r = w.publish(&config, &b2, &vars);
    if cfg!(feature = "failpoints") {
        assert_ne!(r.code, 0, "{}", all(&r));
        let journal = w.env.journal();
        let r = w.run(
            &["recover", "--json", "--journal", path(&journal)],
            &no_credentials,
        );
        r.expect_code(0);
        let op = &r.json()["operations"][0];
        assert_eq!(op["outcome"], "rolled_forward", "{}", r.stdout);
        let text = all(&r);
        assert!(
            text.contains(&format!("az://{}/{PREFIX}", w.container)),
            "{text}"
        );
    } else {
        r.expect_code(0);
    }
    assert_eq!(
        azurite.get(&w.container, &key("index.html")).unwrap(),
        b"<h1>v2</h1>"
    );
    let head = azurite.head(&w.container, &key("index.html")).unwrap();
    assert_eq!(head.content_type.as_deref(), Some("text/html"));
}

/// A bundle of V1's files and a big one (9 MiB: two blocks of at most 8 MiB).
fn big_bundle(w: &World, name: &str, at: &str, big: &str, index: &str) -> PathBuf {
    w.env.bundle(
        name,
        "site",
        at,
        &[
            ("index.html", index),
            ("forecast.json", "{\"t\": 1}"),
            ("data/big.bin", big),
        ],
        &[],
    )
}

/// Every object under the prefix but distributor's records: key -> content.
fn contents(w: &World) -> std::collections::BTreeMap<String, Vec<u8>> {
    w.keys()
        .into_iter()
        .filter(|k| !k.contains("/.distributor"))
        .map(|k| {
            let bytes = w.azurite.get(&w.container, &k).unwrap();
            (k, bytes)
        })
        .collect()
}

/// SPEC §21: Content-MD5 on every PUT and block, so the store refuses a body that changed
/// on the way; distributor still checks each file's sha256 as it sends it.
#[test]
fn every_put_carries_content_md5_and_the_store_refuses_a_body_damaged_on_the_way() {
    let azurite = require_azurite!();
    let w = World::new(azurite);
    let big = "0123456789abcdef".repeat(9 * 1024 * 1024 / 16);
    let through = |proxy: &crate::common::s3::IgnoringProxy| {
        w.config_with(
            "d.yaml",
            &w.container,
            &format!(
                "      endpoint: {}/devstoreaccount1\n      account: devstoreaccount1\n      allow_http: true\n",
                proxy.endpoint
            ),
        )
    };

    // Recorded: every PUT with a body (lease, staging records, blobs, blocks, block
    // lists, the state object) names its MD5, and the store accepted each.
    let log = w.env.path("recording.log");
    let proxy = crate::common::s3::IgnoringProxy::corrupting(azurite, &log, "/nothing-ends-so");
    let config = through(&proxy);
    let b1 = big_bundle(&w, "b1", "2026-12-02T06:00:00Z", &big, "<h1>v1</h1>");
    w.publish(&config, &b1, &w.vars()).expect_code(0);
    drop(proxy);
    let text = std::fs::read_to_string(&log).unwrap();
    let puts: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("PUT ") && !l.contains(" len=0 "))
        .collect();
    for kind in [
        "comp=block&",
        "comp=blocklist",
        "/index.html ",
        ".distributor.json ",
    ] {
        assert!(
            puts.iter().any(|l| l.contains(kind)),
            "no PUT of {kind}:\n{text}"
        );
    }
    for l in &puts {
        assert!(!l.contains(" md5=- "), "a PUT without Content-MD5: {l}");
    }
    let published = contents(&w);
    assert_eq!(published[&key("data/big.bin")], big.as_bytes());

    // Damaged on the way: one small file (Put Blob), then the big one (Put Block). The
    // store refuses the body, the run rolls back: nothing of it is visible.
    for (changed, at) in [
        ("/index.html", "2026-12-02T07:00:00Z"),
        ("/data/big.bin", "2026-12-02T08:00:00Z"),
    ] {
        let log = w
            .env
            .path(&format!("corrupting-{}.log", changed.replace('/', "-")));
        let proxy = crate::common::s3::IgnoringProxy::corrupting(azurite, &log, changed);
        let config = through(&proxy);
        let bigger = format!("{big}more");
        let b = big_bundle(&w, &format!("b{at}"), at, &bigger, "<h1>v2</h1>");
        let r = w.publish(&config, &b, &w.vars());
        drop(proxy);
        let text = all(&r);
        assert_ne!(r.code, 0, "{changed}: {text}");
        assert!(text.contains("Md5Mismatch"), "{changed}: {text}");
        assert!(!text.contains('<'), "{changed}: raw XML: {text}");
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(
            log.lines()
                .any(|l| l.starts_with("PUT ") && l.contains(changed) && !l.contains(" md5=- ")),
            "{changed}: not sent:\n{log}"
        );
        // The proxy damages an undo's restoring PUT of that key too: where the run could
        // not roll back, `recover` (straight to the store) does.
        let direct = w.config_with("direct.yaml", &w.container, &w.block());
        w.run(&["recover", "--json", "--config", path(&direct)], &w.vars())
            .expect_code(0);
        assert_eq!(
            contents(&w),
            published,
            "{changed}: something became visible"
        );
        let status = w.run(&["status", "--json", "--config", path(&direct)], &w.vars());
        assert_eq!(status.code, 0, "{changed}: {}", all(&status));
    }
}

/// Large files go in blocks with their Content-Type and Cache-Control; a replaced one is
/// moved aside through this host (Copy Blob may be pending when it returns), and a run
/// killed after placing its new content rolls back to the old bytes and headers.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn large_files_go_in_blocks_and_a_rollback_restores_them_with_their_headers() {
    let azurite = require_azurite!();
    let w = World::new(azurite);
    let config = w.config_with(
        "d.yaml",
        &w.container,
        &format!(
            "{}      content_types: {{\".bin\": application/x-weather}}\n      cache_control: [{{glob: \"data/*\", value: \"max-age=60\"}}]\n",
            w.block()
        ),
    );
    let big = "0123456789abcdef".repeat(9 * 1024 * 1024 / 16);
    let b1 = big_bundle(&w, "b1", "2026-12-02T06:00:00Z", &big, "<h1>v1</h1>");
    w.publish(&config, &b1, &w.vars()).expect_code(0);
    let headers = |what: &str| {
        let h = azurite.head(&w.container, &key("data/big.bin")).unwrap();
        assert_eq!(
            h.content_type.as_deref(),
            Some("application/x-weather"),
            "{what}"
        );
        let r = azurite.raw_object("HEAD", &w.container, &key("data/big.bin"), &[], &[]);
        assert_eq!(r.header("cache-control"), Some("max-age=60"), "{what}");
    };
    headers("published");
    let before = contents(&w);
    assert_eq!(before[&key("data/big.bin")], big.as_bytes());

    let bigger = format!("{big}and more");
    let b2 = big_bundle(&w, "b2", "2026-12-02T07:00:00Z", &bigger, "<h1>v2</h1>");
    let mut vars = w.vars();
    vars.push(("DISTRIBUTOR_FAILPOINT", "after_placement"));
    let r = w.publish(&config, &b2, &vars);
    assert_ne!(r.code, 0, "{}", all(&r));
    assert_eq!(
        azurite.get(&w.container, &key("data/big.bin")).unwrap(),
        bigger.as_bytes(),
        "the new content was not placed"
    );
    w.run(&["recover", "--json", "--config", path(&config)], &w.vars())
        .expect_code(0);
    assert_eq!(contents(&w), before, "not restored byte for byte");
    headers("restored");
    // The restored object has a new ETag; its recorded sha256 proves it: nothing is drift.
    let v = w.run(&["verify", "--json", "--config", path(&config)], &w.vars());
    v.expect_code(0);
    let v = w.run(
        &["verify", "--deep", "--json", "--config", path(&config)],
        &w.vars(),
    );
    v.expect_code(0);
    w.publish(&config, &b2, &w.vars()).expect_code(0);
    assert_eq!(
        azurite.get(&w.container, &key("data/big.bin")).unwrap(),
        bigger.as_bytes()
    );
    headers("replaced");
}

/// Path lists and the hash chain on azure: `blame --destination-only` with the journal
/// deleted gives the same owner, operation and actor as `blame` with it, and every entry
/// after the first carries the sha256 of the one before.
#[test]
fn blame_from_the_destination_alone_on_azure() {
    let azurite = require_azurite!();
    let w = World::new(azurite);
    let config = w.config_with("d.yaml", &w.container, &w.block());
    let vars = w.vars();
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    w.publish(&config, &b1, &vars).expect_code(0);
    let b2 = w.env.bundle(
        "b2",
        "site",
        "2026-12-02T07:00:00Z",
        &[
            ("index.html", "<h1>v2</h1>"),
            ("forecast.json", "{\"t\": 1}"),
        ],
        &[],
    );
    w.publish(&config, &b2, &vars).expect_code(0);
    let second: serde_json::Value = serde_json::from_slice(
        &azurite
            .get(
                &w.container,
                &key(".distributor/log/00000000000000000002.json"),
            )
            .unwrap(),
    )
    .unwrap();
    let first = azurite
        .get(
            &w.container,
            &key(".distributor/log/00000000000000000001.json"),
        )
        .unwrap();
    assert_eq!(
        second["prev_entry_sha256"],
        distributor::hash::sha256_hex(&first).as_str()
    );
    let answers = |extra: &[&str]| -> Vec<(String, String, String, String)> {
        let mut args = vec!["blame", "--jsonl", "--config", path(&config)];
        args.extend_from_slice(extra);
        args.push("**");
        let r = w.run(&args, &vars);
        r.expect_code(0);
        (r.stdout.lines())
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|b| {
                (
                    b["path"].as_str().unwrap().to_string(),
                    b["owner"].as_str().unwrap_or_default().to_string(),
                    b["last"]["operation_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    b["last"]["actor"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    let with = answers(&[]);
    assert_eq!(with.len(), 2, "{with:?}");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", w.env.journal().display()));
    }
    assert_eq!(answers(&["--destination-only"]), with);
}
