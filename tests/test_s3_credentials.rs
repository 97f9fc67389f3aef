//! The AWS credential chain of s3 destinations (SPEC §21), with real files in a temporary
//! HOME: `[default]` in `~/.aws/credentials`, a named profile through `AWS_PROFILE`,
//! `credential_process`, a role assumed from a `source_profile`, an SSO profile with its
//! cached token, web identity and container credentials; and that only credentials come from a profile, never the region
//! or endpoint distributor writes to.
//!
//! moto accepts any key, so each test puts `tests/fixtures/s3_ignoring_proxy.py` in front
//! of it in recording mode (it drops nothing) and reads from its log which access key
//! signed each request, for which region and service. Every run clears the environment
//! and sets `AWS_EC2_METADATA_DISABLED=true`, so nothing waits for an instance metadata
//! service and nothing but the temporary HOME can provide credentials.

use crate::common::s3::{IgnoringProxy, Moto, require_moto};
use crate::common::{Env, F, Run};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const FILES: &[F] = &[
    ("index.html", "<h1>hi</h1>"),
    ("a.txt", "a"),
    ("b.txt", "b"),
    ("c/d.txt", "d"),
    ("c/e.txt", "e"),
];

/// One test's world: moto behind a recording proxy, a fresh bucket, a temporary HOME.
struct World {
    env: Env,
    moto: &'static Moto,
    proxy: IgnoringProxy,
    bucket: String,
    config: PathBuf,
}

impl World {
    fn new(moto: &'static Moto) -> World {
        let env = Env::new();
        let proxy = IgnoringProxy::recording(moto, &env.path("requests.log"));
        let bucket = moto.fresh_bucket();
        // No s3.region: the region is §14's (AWS_REGION, else us-east-1), whatever a
        // profile says.
        let config = env.config(
            "s3.yaml",
            &format!(
                "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n    backend: s3\n    path: s3://{bucket}/site\n    s3:\n      endpoint: {}\n      allow_http: true\n",
                proxy.endpoint
            ),
        );
        World {
            env,
            moto,
            proxy,
            bucket,
            config,
        }
    }

    /// Writes `~/.aws/<name>` in the temporary HOME.
    fn aws_file(&self, name: &str, text: &str) -> PathBuf {
        self.env.write(&format!("home/.aws/{name}"), text)
    }

    /// Runs distributor with nothing in its environment but `extra`, loopback without a
    /// proxy, and the metadata service off.
    fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        let mut vars = vec![
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("NO_PROXY", "127.0.0.1,localhost"),
            ("no_proxy", "127.0.0.1,localhost"),
        ];
        vars.extend_from_slice(extra);
        self.env.run_env(args, &vars)
    }

    fn publish(&self, extra: &[(&str, &str)]) -> Run {
        let b = self.env.bundle(
            &format!("b{}", uuid()),
            "site",
            "2026-12-02T06:00:00Z",
            FILES,
            &[],
        );
        self.run(
            &[
                "publish",
                "--json",
                "--config",
                path(&self.config),
                "--source",
                path(&b),
            ],
            extra,
        )
    }

    /// The signer (`<key id>/<region>/<service>`) of every request to the bucket.
    fn s3_signers(&self) -> Vec<String> {
        let marker = format!(" /{}", self.bucket);
        (self.proxy.requests().iter())
            .filter(|l| l.contains(&marker))
            .map(|l| signer(l).to_string())
            .collect()
    }

    /// The signer of every request that is not to the bucket (STS, through the proxy).
    fn other_signers(&self) -> Vec<String> {
        let marker = format!(" /{}", self.bucket);
        (self.proxy.requests().iter())
            .filter(|l| !l.contains(&marker))
            .map(|l| format!("{} {}", l.split(' ').next().unwrap_or(""), signer(l)))
            .collect()
    }

    /// Asserts the publish went through and every request to the bucket was signed by
    /// `key` (a prefix of the key id) for us-east-1.
    fn expect_signed_by(&self, r: &Run, key: &str) {
        r.expect_code(0);
        let signers = self.s3_signers();
        assert!(
            signers.len() >= FILES.len(),
            "too few requests through the proxy: {signers:?}\n{}",
            r.stderr
        );
        for s in &signers {
            assert!(
                s.starts_with(key) && s.ends_with("/us-east-1/s3"),
                "a request signed by {s}, not {key}…/us-east-1/s3: {signers:?}"
            );
        }
        let got = self.moto.get(&self.bucket, "site/index.html");
        assert_eq!(got.as_deref(), Some(&b"<h1>hi</h1>"[..]));
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn uuid() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// `key=<signer>` of a proxy log line.
fn signer(line: &str) -> &str {
    line.split(' ')
        .find_map(|w| w.strip_prefix("key="))
        .unwrap_or("")
}

/// An RFC 3339 time an hour from now, for credentials that expire.
fn in_an_hour() -> String {
    (chrono::Utc::now() + chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A 127.0.0.1 port nothing listens on.
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn default_profile_in_the_credentials_file_signs_every_request() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.aws_file(
        "credentials",
        "[default]\naws_access_key_id = AKIDDEFAULTPROFILE\naws_secret_access_key = secret\n",
    );
    let r = w.publish(&[]);
    w.expect_signed_by(&r, "AKIDDEFAULTPROFILE");
}

#[test]
fn aws_profile_picks_a_named_profile_of_the_config_file() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.aws_file(
        "credentials",
        "[default]\naws_access_key_id = AKIDDEFAULTPROFILE\naws_secret_access_key = secret\n",
    );
    w.aws_file(
        "config",
        "[profile reports]\naws_access_key_id = AKIDREPORTSPROFILE\naws_secret_access_key = secret\n",
    );
    let r = w.publish(&[("AWS_PROFILE", "reports")]);
    w.expect_signed_by(&r, "AKIDREPORTSPROFILE");
    // Environment keys come before any profile.
    let r = w.publish(&[
        ("AWS_PROFILE", "reports"),
        ("AWS_ACCESS_KEY_ID", "AKIDFROMENVIRONMENT"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
    ]);
    r.expect_code(0);
    assert!(
        w.s3_signers()
            .last()
            .is_some_and(|s| s.starts_with("AKIDFROMENVIRONMENT")),
        "{:?}",
        w.s3_signers()
    );
}

/// Only credentials come from a profile (SPEC §21): its `region` and `endpoint_url` do
/// not move the destination, which follows its `s3:` block (and AWS_REGION,
/// AWS_ENDPOINT_URL).
#[test]
fn a_profile_region_and_endpoint_never_move_the_destination() {
    let moto = require_moto!();
    let w = World::new(moto);
    let closed = format!("http://127.0.0.1:{}", closed_port());
    w.aws_file(
        "config",
        &format!(
            "[default]\nregion = eu-west-3\nendpoint_url = {closed}\nservices = here\naws_access_key_id = AKIDWITHREGION\naws_secret_access_key = secret\n\n[services here]\ns3 =\n  endpoint_url = {closed}\n"
        ),
    );
    let r = w.publish(&[]);
    // Signed for us-east-1 and sent to the configured endpoint (the proxy), not to the
    // profile's closed port.
    w.expect_signed_by(&r, "AKIDWITHREGION");
}

/// `credential_process` runs once per run, however many requests the run makes: its
/// credentials are cached until 5 minutes before they expire.
#[test]
fn credential_process_runs_once_per_run() {
    let moto = require_moto!();
    let w = World::new(moto);
    let marker = w.env.path("process-runs");
    let script = w.env.write(
        "credentials.sh",
        &format!(
            "#!/bin/sh\necho run >> '{}'\nprintf '%s\\n' '{{\"Version\": 1, \"AccessKeyId\": \"AKIDFROMPROCESS\", \"SecretAccessKey\": \"secret\", \"SessionToken\": \"token\", \"Expiration\": \"{}\"}}'\n",
            marker.display(),
            in_an_hour()
        ),
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    w.aws_file(
        "config",
        &format!("[profile ci]\ncredential_process = {}\n", script.display()),
    );
    let r = w.publish(&[("AWS_PROFILE", "ci")]);
    w.expect_signed_by(&r, "AKIDFROMPROCESS");
    let requests = w.s3_signers().len();
    let runs = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(
        runs.lines().count(),
        1,
        "credential_process ran {} times for {requests} requests",
        runs.lines().count()
    );
}

/// A `credential_process` helper that never exits stops the run after the load timeout
/// (a test build shortens the minute to 2 s), with an error naming the profile and the
/// timeout; nothing reaches the bucket.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_hung_credential_process_times_out_naming_the_profile() {
    let moto = require_moto!();
    let w = World::new(moto);
    let started = w.env.path("helper-pid");
    // The helper says it started (its pid, for the test to end it), then hangs.
    let script = w.env.write(
        "credentials.sh",
        &format!(
            "#!/bin/sh\necho $$ > '{}.tmp'\nmv '{0}.tmp' '{0}'\nexec sleep 600\n",
            started.display()
        ),
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    w.aws_file(
        "config",
        &format!(
            "[profile slow]\ncredential_process = {}\n",
            script.display()
        ),
    );
    let began = std::time::Instant::now();
    let r = w.publish(&[
        ("AWS_PROFILE", "slow"),
        ("DISTRIBUTOR_AWS_CREDENTIALS_TIMEOUT_SECONDS", "2"),
    ]);
    let took = began.elapsed();
    // The helper ran (and hangs still): end it by the pid it wrote.
    let pid = std::fs::read_to_string(&started).expect("the helper started and wrote its pid");
    if let Some(pid) = pid
        .trim()
        .parse()
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    r.expect_code(1);
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(
        said.contains("no answer within 2 s")
            && said.contains("the profile `slow` (AWS_PROFILE")
            && said.contains("credential_process"),
        "{said}"
    );
    assert!(
        took < std::time::Duration::from_secs(120),
        "the run took {took:?}: the helper's 600 s, not the timeout"
    );
    assert!(
        w.s3_signers().is_empty(),
        "requests reached the bucket: {:?}",
        w.s3_signers()
    );
}

/// A role assumed from a `source_profile`: STS is called with the source profile's keys
/// (AWS_ENDPOINT_URL_STS points it at moto, through the proxy), and the bucket sees only
/// the role's temporary keys.
#[test]
fn an_assumed_role_signs_with_the_credentials_sts_returned() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.aws_file(
        "config",
        "[profile deploy]\nrole_arn = arn:aws:iam::123456789012:role/distributor-publisher\nsource_profile = base\n\n[profile base]\naws_access_key_id = AKIDSOURCEPROFILE\naws_secret_access_key = secret\n",
    );
    let r = w.publish(&[
        ("AWS_PROFILE", "deploy"),
        ("AWS_ENDPOINT_URL_STS", &w.proxy.endpoint),
    ]);
    r.expect_code(0);
    let sts = w.other_signers();
    assert!(
        sts.iter()
            .any(|s| s.starts_with("POST AKIDSOURCEPROFILE/") && s.ends_with("/sts")),
        "no AssumeRole signed by the source profile: {sts:?}"
    );
    let signers = w.s3_signers();
    assert!(!signers.is_empty());
    for s in &signers {
        assert!(
            !s.starts_with("AKIDSOURCEPROFILE") && s.starts_with("ASIA"),
            "a bucket request not signed by the role's temporary keys: {signers:?}"
        );
    }
    // One AssumeRole for the whole run.
    assert_eq!(
        sts.iter().filter(|s| s.ends_with("/sts")).count(),
        1,
        "{sts:?}"
    );
}

/// Web identity: AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, exchanged at STS
/// (AssumeRoleWithWebIdentity, unsigned) for the keys that sign every bucket request.
#[test]
fn web_identity_exchanges_its_token_at_sts() {
    let moto = require_moto!();
    let w = World::new(moto);
    let token = w.env.write("token", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln");
    let r = w.publish(&[
        ("AWS_WEB_IDENTITY_TOKEN_FILE", path(&token)),
        (
            "AWS_ROLE_ARN",
            "arn:aws:iam::123456789012:role/distributor-publisher",
        ),
        ("AWS_ROLE_SESSION_NAME", "distributor-test"),
        ("AWS_ENDPOINT_URL_STS", &w.proxy.endpoint),
    ]);
    r.expect_code(0);
    let sts = w.other_signers();
    assert_eq!(
        sts.iter().filter(|s| s.starts_with("POST ")).count(),
        1,
        "one exchange at STS for the whole run: {sts:?}"
    );
    let signers = w.s3_signers();
    assert!(!signers.is_empty());
    for s in &signers {
        assert!(
            s.starts_with("ASIA"),
            "a bucket request not signed by the web identity's keys: {signers:?}"
        );
    }
}

/// A loopback HTTP server answering every request with `body` (JSON); keeps each
/// request's head (request line and headers). Its base URL, `http://127.0.0.1:PORT`.
fn json_server(body: String) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut line = String::new();
            // The request head, up to its empty line.
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                head.push_str(&line);
                line.clear();
            }
            seen.lock().unwrap().push(head);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, heads)
}

#[test]
fn container_credentials_are_fetched_once_per_run() {
    let moto = require_moto!();
    let w = World::new(moto);
    let (url, heads) = json_server(format!(
        "{{\"AccessKeyId\": \"AKIDFROMCONTAINER\", \"SecretAccessKey\": \"secret\", \"Token\": \"token\", \"Expiration\": \"{}\"}}",
        in_an_hour()
    ));
    let r = w.publish(&[(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        &format!("{url}/v2/credentials/test"),
    )]);
    w.expect_signed_by(&r, "AKIDFROMCONTAINER");
    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 1, "fetched more than once: {heads:?}");
    assert!(
        heads[0].starts_with("GET /v2/credentials/test "),
        "{heads:?}"
    );
}

/// An SSO profile (`sso_session`), logged in: the token `aws sso login` cached under
/// `~/.aws/sso/cache/` is exchanged at the SSO portal (AWS_ENDPOINT_URL_SSO points it at a
/// loopback server) for the role's credentials, once per run.
#[test]
fn an_sso_profile_exchanges_its_cached_token_once() {
    let moto = require_moto!();
    let w = World::new(moto);
    let expires = (chrono::Utc::now() + chrono::Duration::hours(1)).timestamp_millis();
    let (url, heads) = json_server(format!(
        "{{\"roleCredentials\": {{\"accessKeyId\": \"AKIDFROMSSO\", \"secretAccessKey\": \"secret\", \"sessionToken\": \"token\", \"expiration\": {expires}}}}}"
    ));
    w.aws_file(
        "config",
        "[profile sso]\nsso_session = corp\nsso_account_id = 123456789012\nsso_role_name = publisher\n\n[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\nsso_region = us-east-1\n",
    );
    // The cache file of the session `corp`: the SHA-1 of its name.
    w.aws_file(
        "sso/cache/ee0bfd2552fbd840c02cc48b6e823320543c450f.json",
        &format!(
            "{{\"accessToken\": \"cached-sso-token\", \"expiresAt\": \"{}\", \"region\": \"us-east-1\", \"startUrl\": \"https://corp.awsapps.com/start\"}}",
            in_an_hour()
        ),
    );
    let r = w.publish(&[("AWS_PROFILE", "sso"), ("AWS_ENDPOINT_URL_SSO", &url)]);
    w.expect_signed_by(&r, "AKIDFROMSSO");
    let heads = heads.lock().unwrap();
    assert_eq!(
        heads.len(),
        1,
        "the portal was asked more than once: {heads:?}"
    );
    let head = heads[0].to_ascii_lowercase();
    assert!(
        head.starts_with("get /federation/credentials?")
            && head.contains("role_name=publisher")
            && head.contains("x-amz-sso_bearer_token: cached-sso-token"),
        "{head}"
    );
}

/// `recover --journal` with no config builds its store from the journal's record, with
/// the same chain: a profile-only HOME is enough.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_from_the_journal_alone_reads_the_profile() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.aws_file(
        "credentials",
        "[default]\naws_access_key_id = AKIDDEFAULTPROFILE\naws_secret_access_key = secret\n",
    );
    let r = w.publish(&[("DISTRIBUTOR_FAILPOINT", "after_staging")]);
    assert_ne!(r.code, 0, "the failpoint did not stop the run");
    let before = w.s3_signers().len();
    let r = w.run(
        &["recover", "--json", "--journal", path(&w.env.journal())],
        &[],
    );
    r.expect_code(0);
    assert_eq!(
        r.json()["operations"][0]["outcome"],
        "rolled_back",
        "{}",
        r.stdout
    );
    let signers = w.s3_signers();
    assert!(signers.len() > before, "recover sent nothing to the bucket");
    for s in &signers[before..] {
        assert!(s.starts_with("AKIDDEFAULTPROFILE"), "{signers:?}");
    }
}
