//! AWS credentials for s3 destinations (SPEC §21): the standard chain as the AWS CLI
//! resolves it, through `aws-config`, handed to object_store as its credential provider.
//!
//! The chain, in order: the environment (`AWS_ACCESS_KEY_ID` …); the shared config and
//! credentials files (`~/.aws/config`, `~/.aws/credentials`, or `AWS_CONFIG_FILE` /
//! `AWS_SHARED_CREDENTIALS_FILE`) for `AWS_PROFILE` or `default`, with static keys,
//! `credential_process`, SSO and assumed roles (`role_arn` with `source_profile` or
//! `credential_source`); web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN`);
//! container credentials (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` / `_FULL_URI`); the
//! instance metadata service. distributor parses none of it: `aws-config` does.
//!
//! Only credentials come from there. A profile's `region` and `endpoint_url` never decide
//! where distributor writes: that is the destination's `s3:` block and `AWS_ENDPOINT_URL`
//! (§14). They do apply to the calls the chain itself makes (STS for an assumed role or
//! web identity, SSO), as they would for the AWS CLI.
//!
//! One chain serves the whole process, so `serve` and a publish to many destinations
//! resolve credentials once. Credentials are cached until 5 minutes before they expire and
//! refreshed on the first request after that; concurrent requests wait for one refresh.
//! aws-config's own identity cache (`LazyCache`) is built for its generated clients (it
//! wants their runtime components); the few lines of [`Cache`] do the same job here.
//!
//! Loading is bounded: a source that does not answer (a `credential_process` helper that
//! hangs, an SSO or STS endpoint that never replies) fails after [`LOAD_TIMEOUT`] with an
//! error naming the profile, instead of holding the run forever. aws-config 1.x has no
//! bound of its own there (its `LazyCache` has one, which this module does not use, and
//! its `credential_process` waits for the helper without a limit), so [`ChainCredentials`] puts one
//! around the whole chain. A helper still running then is left to finish on its own:
//! aws-config does not hand out its child process to be killed.
//!
//! This module never logs, prints or journals a credential; an error says which source
//! failed and why, never the instance-metadata address.

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::environment::region::EnvironmentVariableRegionProvider;
use aws_config::meta::region::RegionProviderChain;
use aws_config::profile::region::ProfileFileRegionProvider;
use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::provider::error::CredentialsError;
use object_store::aws::AwsCredential;
use object_store::client::CredentialProvider;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

/// How long loading credentials from the chain may take before it fails: enough for a
/// `credential_process` helper that asks a vault, or for a person to answer an MFA
/// prompt it shows; a helper that hangs stops the run after this, not never.
const LOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// [`LOAD_TIMEOUT`], which test builds may shorten
/// (`DISTRIBUTOR_AWS_CREDENTIALS_TIMEOUT_SECONDS`), so a test of a hung helper need not
/// wait a minute.
fn load_timeout() -> Duration {
    crate::failpoint::test_setting("DISTRIBUTOR_AWS_CREDENTIALS_TIMEOUT_SECONDS")
        .map_or(LOAD_TIMEOUT, Duration::from_secs)
}

/// How long before they expire cached credentials are replaced.
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);

/// The region the chain's own calls (STS, SSO) use when neither the environment nor the
/// profile names one: AWS's default, as for an s3 destination (§14).
const CHAIN_FALLBACK_REGION: &str = "us-east-1";

/// Where distributor looks for credentials, for the errors that say none was found.
pub(crate) const CREDENTIAL_CHAIN: &str = "distributor looks for AWS credentials as the AWS CLI does, in this order: AWS_ACCESS_KEY_ID with AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) in the environment; the profile AWS_PROFILE names (else `default`) in ~/.aws/credentials and ~/.aws/config (static keys, credential_process, sso_session, role_arn with source_profile); AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN; AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or AWS_CONTAINER_CREDENTIALS_FULL_URI; else the instance metadata service, unless AWS_EC2_METADATA_DISABLED=true. Set one of them (docs/operations.md#credentials)";

/// The process's credential provider for s3 destinations: every [`super::S3Backend`]
/// gets this one, so the chain runs once per process, not once per destination.
pub(crate) fn shared() -> Arc<ChainCredentials> {
    static SHARED: OnceLock<Arc<ChainCredentials>> = OnceLock::new();
    Arc::clone(SHARED.get_or_init(|| Arc::new(ChainCredentials::default())))
}

/// object_store's [`CredentialProvider`] over aws-config's default credential chain,
/// with a cache in front.
#[derive(Debug, Default)]
pub(crate) struct ChainCredentials {
    chain: tokio::sync::OnceCell<DefaultCredentialsChain>,
    cache: tokio::sync::Mutex<Option<Cached>>,
    /// The last load that failed, and when it ended: requests that waited for it get its
    /// error instead of each starting a load of their own (with a hung helper, one
    /// timeout each, one after the other).
    failed: std::sync::Mutex<Option<(std::time::Instant, CredentialError)>>,
}

/// Credentials in the cache, and when they are to be replaced (never, for keys without
/// an expiry).
#[derive(Debug)]
struct Cached {
    credential: Arc<AwsCredential>,
    refresh_at: Option<SystemTime>,
}

/// Why the chain gave no credentials. Travels inside object_store's error as its source,
/// so [`super::store_error`] can say it plainly.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum CredentialError {
    /// No source of the chain had any; the text says what was half set, if anything.
    #[error("no AWS credentials: none was found{0}; {CREDENTIAL_CHAIN}")]
    NotFound(String),
    /// A source was configured but failed (a profile that is not defined, a
    /// `credential_process` that exited non-zero, a role STS refused, an expired SSO
    /// session…).
    #[error(
        "AWS credentials could not be loaded: {0}. Fix that source, or set credentials another way; {CREDENTIAL_CHAIN}"
    )]
    Failed(String),
    /// The chain did not answer in time (a `credential_process` that does not exit…).
    #[error(
        "AWS credentials could not be loaded: no answer within {} s from the credential chain for {profile} (a credential_process that does not exit, or an SSO, STS or container endpoint that does not answer); make that source answer, or set credentials another way; {CREDENTIAL_CHAIN}",
        .seconds
    )]
    TimedOut { profile: String, seconds: u64 },
}

/// The profile the chain reads, as an error names it.
fn profile_named(var: impl Fn(&str) -> Option<String>) -> String {
    let config = var("AWS_CONFIG_FILE")
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "~/.aws/config".into());
    match var("AWS_PROFILE").filter(|v| !v.trim().is_empty()) {
        Some(p) => format!("the profile `{p}` (AWS_PROFILE; {config})"),
        None => format!("the profile `default` ({config})"),
    }
}

impl ChainCredentials {
    async fn chain(&self) -> &DefaultCredentialsChain {
        self.chain
            .get_or_init(|| async {
                // The region of the chain's own requests; never the region of a
                // destination's requests. No instance-metadata lookup for it: that would
                // cost every run off EC2 a timeout.
                let region =
                    RegionProviderChain::first_try(EnvironmentVariableRegionProvider::new())
                        .or_else(ProfileFileRegionProvider::new())
                        .or_else(CHAIN_FALLBACK_REGION);
                DefaultCredentialsChain::builder()
                    .region(region)
                    .build()
                    .await
            })
            .await
    }

    /// Credentials from the cache, or fresh ones from the chain when there are none or
    /// they expire within [`REFRESH_BEFORE_EXPIRY`].
    async fn credential(&self) -> Result<Arc<AwsCredential>, CredentialError> {
        self.cached(self.chain().await, load_timeout()).await
    }

    /// Credentials from the cache, or fresh ones from `source`, which has `limit` to
    /// give them.
    async fn cached(
        &self,
        source: &impl ProvideCredentials,
        limit: Duration,
    ) -> Result<Arc<AwsCredential>, CredentialError> {
        let asked = std::time::Instant::now();
        let mut cache = self.cache.lock().await;
        let now = SystemTime::now();
        if let Some(c) = cache.as_ref()
            && c.refresh_at.is_none_or(|at| now < at)
        {
            return Ok(Arc::clone(&c.credential));
        }
        // A load that ended while this request waited for it: its error.
        if let Some((ended, e)) = lock(&self.failed).as_ref()
            && *ended >= asked
        {
            return Err(e.clone());
        }
        let loaded = match tokio::time::timeout(limit, source.provide_credentials()).await {
            Ok(loaded) => loaded.map_err(describe),
            Err(_) => Err(CredentialError::TimedOut {
                profile: profile_named(|k| std::env::var(k).ok()),
                seconds: limit.as_secs(),
            }),
        };
        let fresh = match loaded {
            Ok(fresh) => fresh,
            Err(e) => {
                *lock(&self.failed) = Some((std::time::Instant::now(), e.clone()));
                return Err(e);
            }
        };
        let credential = Arc::new(AwsCredential {
            key_id: fresh.access_key_id().to_string(),
            secret_key: fresh.secret_access_key().to_string(),
            token: fresh.session_token().map(str::to_string),
        });
        *cache = Some(Cached {
            credential: Arc::clone(&credential),
            refresh_at: fresh.expiry().map(|e| refresh_at(now, e)),
        });
        Ok(credential)
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// When credentials fetched at `now` that expire at `expiry` are replaced: 5 minutes
/// before they expire; for credentials that live less than 10 minutes, halfway, so that
/// short-lived ones are not fetched again for every request.
fn refresh_at(now: SystemTime, expiry: SystemTime) -> SystemTime {
    let life = expiry.duration_since(now).unwrap_or_default();
    expiry - REFRESH_BEFORE_EXPIRY.min(life / 2)
}

#[async_trait::async_trait]
impl CredentialProvider for ChainCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        self.credential()
            .await
            .map_err(|e| object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            })
    }
}

/// The chain's error as distributor says it.
fn describe(e: CredentialsError) -> CredentialError {
    match e {
        CredentialsError::CredentialsNotLoaded(_) => {
            CredentialError::NotFound(half_set(|k| std::env::var(k).ok()))
        }
        e => CredentialError::Failed(without_metadata_address(&chain_text(&e))),
    }
}

/// What the environment half says, which the chain passes over in silence: a key pair
/// set by half, a profile named that gave nothing.
fn half_set(var: impl Fn(&str) -> Option<String>) -> String {
    let value = |k: &str| var(k).filter(|v| !v.trim().is_empty());
    let mut said = Vec::new();
    match (value("AWS_ACCESS_KEY_ID"), value("AWS_SECRET_ACCESS_KEY")) {
        (Some(_), None) => {
            said.push("AWS_ACCESS_KEY_ID is set without AWS_SECRET_ACCESS_KEY".to_string())
        }
        (None, Some(_)) => {
            said.push("AWS_SECRET_ACCESS_KEY is set without AWS_ACCESS_KEY_ID".to_string())
        }
        _ => {}
    }
    if let Some(p) = value("AWS_PROFILE") {
        let config = value("AWS_CONFIG_FILE").unwrap_or_else(|| "~/.aws/config".into());
        let creds =
            value("AWS_SHARED_CREDENTIALS_FILE").unwrap_or_else(|| "~/.aws/credentials".into());
        said.push(format!(
            "AWS_PROFILE is `{p}`, and neither {config} nor {creds} defines that profile"
        ));
    }
    if said.is_empty() {
        String::new()
    } else {
        format!(" ({})", said.join("; "))
    }
}

/// The text of an error and all its sources, each once (aws-config's errors often
/// repeat their source in their own text).
fn chain_text(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// `text` with every URL or address of the instance-metadata and container credential
/// services (link-local addresses a user cannot act on) replaced by what they are.
pub(crate) fn without_metadata_address(text: &str) -> String {
    const NAMED: [(&str, &str); 3] = [
        ("169.254.169.254", "the instance metadata service"),
        ("fd00:ec2::254", "the instance metadata service"),
        ("169.254.170.2", "the container credentials service"),
    ];
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match NAMED.iter().find(|(addr, _)| word.contains(addr)) {
            Some((_, name)) => out.push_str(name),
            None => out.push_str(word),
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_whitespace() || matches!(c, '"' | '\'' | '(' | ')' | ',' | '`') {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_replaced_five_minutes_before_they_expire() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = now + Duration::from_secs(3600);
        assert_eq!(refresh_at(now, hour), hour - Duration::from_secs(300));
        // Short-lived ones halfway, not at once.
        let four_minutes = now + Duration::from_secs(240);
        assert_eq!(
            refresh_at(now, four_minutes),
            now + Duration::from_secs(120)
        );
        // Already expired: at once.
        assert_eq!(
            refresh_at(now, now - Duration::from_secs(1)),
            now - Duration::from_secs(1)
        );
    }

    /// A source that counts its calls and gives keys expiring `life` after each call.
    #[derive(Debug)]
    struct Counting {
        calls: std::sync::atomic::AtomicUsize,
        life: Option<Duration>,
    }

    impl ProvideCredentials for Counting {
        fn provide_credentials<'a>(
            &'a self,
        ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let n = 1 + self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let creds = aws_credential_types::Credentials::new(
                format!("AKID{n}"),
                "secret",
                None,
                self.life.map(|l| SystemTime::now() + l),
                "test",
            );
            aws_credential_types::provider::future::ProvideCredentials::ready(Ok(creds))
        }
    }

    fn fetch_twice(life: Option<Duration>) -> (String, String, usize) {
        let source = Counting {
            calls: Default::default(),
            life,
        };
        let cache = ChainCredentials::default();
        let (a, b) = crate::backend::s3::block_on(async {
            let a = cache.cached(&source, LOAD_TIMEOUT).await.unwrap();
            let b = cache.cached(&source, LOAD_TIMEOUT).await.unwrap();
            (a.key_id.clone(), b.key_id.clone())
        });
        (a, b, source.calls.load(std::sync::atomic::Ordering::SeqCst))
    }

    #[test]
    fn credentials_are_fetched_once_and_again_only_near_their_expiry() {
        // Static keys and keys with an hour left: fetched once.
        assert_eq!(fetch_twice(None), ("AKID1".into(), "AKID1".into(), 1));
        let hour = Some(Duration::from_secs(3600));
        assert_eq!(fetch_twice(hour), ("AKID1".into(), "AKID1".into(), 1));
        // Keys already expired when fetched: the next request fetches again.
        let gone = Some(Duration::ZERO);
        assert_eq!(fetch_twice(gone), ("AKID1".into(), "AKID2".into(), 2));
    }

    /// A source that never answers, counting how often it was asked.
    #[derive(Debug, Default)]
    struct Hung {
        calls: std::sync::atomic::AtomicUsize,
    }

    impl ProvideCredentials for Hung {
        fn provide_credentials<'a>(
            &'a self,
        ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            aws_credential_types::provider::future::ProvideCredentials::new(std::future::pending())
        }
    }

    #[test]
    fn a_source_that_never_answers_times_out_once_for_every_request_that_waited() {
        let source = Hung::default();
        let cache = ChainCredentials::default();
        let limit = Duration::from_millis(200);
        let (a, b, c) = crate::backend::s3::block_on(async {
            futures_util::join!(
                cache.cached(&source, limit),
                cache.cached(&source, limit),
                cache.cached(&source, limit)
            )
        });
        for r in [a, b, c] {
            let e = r.expect_err("no credentials from a source that never answers");
            assert!(
                matches!(e, CredentialError::TimedOut { seconds: 0, .. }),
                "{e}"
            );
        }
        // One load for the three requests: the two that waited got its error.
        assert_eq!(source.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        // A request after it loads again.
        let again = crate::backend::s3::block_on(cache.cached(&source, limit));
        assert!(again.is_err());
        assert_eq!(source.calls.load(std::sync::atomic::Ordering::SeqCst), 2);
        // The message names the profile and the timeout.
        let e = CredentialError::TimedOut {
            profile: profile_named(|k| (k == "AWS_PROFILE").then(|| "ci".to_string())),
            seconds: 60,
        };
        let text = e.to_string();
        assert!(
            text.contains("no answer within 60 s")
                && text.contains("the profile `ci` (AWS_PROFILE; ~/.aws/config)")
                && text.contains("credential_process"),
            "{text}"
        );
    }

    #[test]
    fn messages_never_show_the_metadata_address() {
        let t = without_metadata_address(
            "failed to load IMDS session token: dispatch failure: http://169.254.169.254/latest/api/token: io error",
        );
        assert!(!t.contains("169.254"), "{t}");
        assert!(
            t.ends_with("dispatch failure: the instance metadata service io error"),
            "{t}"
        );
        let e = describe(CredentialsError::provider_error(std::io::Error::other(
            "container credentials from 169.254.170.2 refused",
        )));
        assert!(!e.to_string().contains("169.254"), "{e}");
        assert!(matches!(
            describe(CredentialsError::not_loaded_no_source()),
            CredentialError::NotFound(_)
        ));
    }

    #[test]
    fn a_half_set_key_pair_is_named() {
        let only = |k: &'static str| move |v: &str| (v == k).then(|| "x".to_string());
        assert!(half_set(only("AWS_ACCESS_KEY_ID")).contains("without AWS_SECRET_ACCESS_KEY"));
        assert!(half_set(only("AWS_PROFILE")).contains("AWS_PROFILE is `x`"));
        assert!(half_set(only("AWS_SECRET_ACCESS_KEY")).contains("without AWS_ACCESS_KEY_ID"));
        assert_eq!(half_set(|_| None), "");
    }
}
