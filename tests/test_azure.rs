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
