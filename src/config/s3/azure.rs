//! The configuration of `backend: azure` destinations (SPEC §21): the
//! `az://<container>/<prefix>` path and the optional `azure:` block. The settings are the
//! object-store settings s3 destinations have ([`S3Settings`]), with the account in
//! [`AzureAccount`]; the values both blocks share (`lease_seconds`, `content_types`,
//! `cache_control`, `allow_http`) are checked by the same rules, with errors naming the
//! `azure.` key.
//!
//! Credentials are never part of the config: a credential-like key in `azure:` is refused
//! with an error saying where they come from.

use super::{
    Bounded, CacheRule, ContentTypes, DEFAULT_CONCURRENCY, DEFAULT_LEASE_SECONDS, RawCacheRule,
    S3Settings, StrRule, StrVisitor, check_authority, check_prefix, is_credential_key, is_http,
    set,
};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

const PATH_ACCEPTED: &str = "accepted for backend azure: az://<container>/<key prefix>";

const CONTAINER_ACCEPTED: &str = "accepted: 3 to 63 lowercase letters, digits and hyphens, starting with a letter or digit, without '--' and not ending with '-'";

/// The keys of the `azure:` block, as error messages list them.
const AZURE_KEYS: &[&str] = &[
    "account",
    "endpoint",
    "use_emulator",
    "allow_http",
    "lease_seconds",
    "content_types",
    "cache_control",
];

const CREDENTIALS: &str = "credentials are never read from the config file; they come only from the standard Azure environment (AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_TOKEN, or workload identity: AZURE_FEDERATED_TOKEN_FILE with AZURE_CLIENT_ID and AZURE_TENANT_ID)";

/// Which Azure storage account holds an azure destination's container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AzureAccount {
    /// `azure.account`; `None`: `AZURE_STORAGE_ACCOUNT_NAME`, decided at use (the
    /// emulator's `devstoreaccount1` with `use_emulator`).
    pub account: Option<String>,
    /// `azure.use_emulator`: Azurite, at `http://127.0.0.1:10000/<account>` unless
    /// `azure.endpoint` says otherwise, with its well-known key when no credentials are set.
    pub use_emulator: bool,
}

/// Splits and checks an azure destination path: `az://<container>/<key prefix>`. The
/// error is the message for `destinations[i].path`.
pub(in crate::config) fn parse_path(text: &str) -> Result<(String, String), String> {
    let Some(rest) = text.strip_prefix("az://") else {
        return Err(format!("'{text}' is not an az:// URL; {PATH_ACCEPTED}"));
    };
    let (container, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    check_container(container).map_err(|why| {
        format!("container '{container}' in '{text}' {why}; {CONTAINER_ACCEPTED}")
    })?;
    if prefix.is_empty() {
        return Err(format!(
            "'{text}' has an empty key prefix: a container root is never a bundle path; {PATH_ACCEPTED}, e.g. az://{container}/site"
        ));
    }
    check_prefix(prefix)
        .and_then(|()| check_segments(prefix))
        .map_err(|why| format!("key prefix '{prefix}' in '{text}' {why}; {PATH_ACCEPTED}"))?;
    Ok((container.to_string(), prefix.to_string()))
}

/// Azure's container naming rules; the error says which one failed.
fn check_container(c: &str) -> Result<(), &'static str> {
    if c.len() < 3 || c.len() > 63 {
        return Err("is not 3 to 63 characters long");
    }
    if !c
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("has a character other than a lowercase letter, digit or '-'");
    }
    if c.starts_with('-') || c.ends_with('-') {
        return Err("starts or ends with '-'");
    }
    if c.contains("--") {
        return Err("contains '--'");
    }
    Ok(())
}

/// Azure drops a trailing `.` of a key segment (SPEC §21: such a key is unsupported).
fn check_segments(prefix: &str) -> Result<(), String> {
    match prefix.split('/').find(|s| s.ends_with('.')) {
        Some(s) => Err(format!(
            "has the segment '{s}', which ends in '.': Azure Blob Storage drops a trailing '.' from a name's segments"
        )),
        None => Ok(()),
    }
}

/// The `azure:` block as written.
#[derive(Debug, Default)]
pub(in crate::config) struct RawAzure {
    account: Option<Account>,
    endpoint: Option<AccountEndpoint>,
    use_emulator: Option<bool>,
    allow_http: Option<bool>,
    lease_seconds: Option<Bounded<10, 3600>>,
    content_types: Option<ContentTypes>,
    cache_control: Option<Vec<RawCacheRule>>,
}

/// Builds the settings of an azure destination from its checked path and `azure:` block.
/// `key` is the destination's key path (`destinations[1]`); the error is (key path,
/// message).
pub(in crate::config) fn settings(
    key: &str,
    container: String,
    prefix: String,
    raw: Option<RawAzure>,
) -> Result<S3Settings, (String, String)> {
    let raw = raw.unwrap_or_default();
    let allow_http = raw.allow_http.unwrap_or(false);
    let use_emulator = raw.use_emulator.unwrap_or(false);
    let endpoint = raw.endpoint.map(|e| e.0);
    if use_emulator && !allow_http {
        return Err((
            format!("{key}.azure.use_emulator"),
            format!(
                "requires {key}.azure.allow_http: true (the emulator speaks plain http); accepted: use_emulator: true with allow_http: true, or no use_emulator"
            ),
        ));
    }
    if let Some(e) = &endpoint
        && is_http(e)
        && !allow_http
    {
        return Err((
            format!("{key}.azure.endpoint"),
            format!(
                "'{e}' is plain http, which sends requests unencrypted; set {key}.azure.allow_http: true to use it, accepted otherwise: an https:// URL"
            ),
        ));
    }
    Ok(S3Settings {
        bucket: container,
        prefix,
        endpoint,
        region: None,
        allow_http,
        virtual_hosted_style: false,
        lease_seconds: raw.lease_seconds.map_or(DEFAULT_LEASE_SECONDS, |b| b.0),
        concurrency: DEFAULT_CONCURRENCY,
        content_types: raw.content_types.map(|c| c.0).unwrap_or_default(),
        cache_control: raw
            .cache_control
            .unwrap_or_default()
            .into_iter()
            .map(CacheRule::from)
            .collect(),
        azure: Some(AzureAccount {
            account: raw.account.map(|a| a.0),
            use_emulator,
        }),
    })
}

/// Keys that would hold Azure credentials: the s3 block's, and an account key, a SAS, a
/// token or a connection string under any name.
fn is_azure_credential_key(k: &str) -> bool {
    let lower = k.to_ascii_lowercase();
    is_credential_key(k)
        || ["key", "sas", "token", "connection_string"]
            .iter()
            .any(|w| lower.contains(w))
}

enum AzureKey {
    Account,
    Endpoint,
    UseEmulator,
    AllowHttp,
    LeaseSeconds,
    ContentTypes,
    CacheControl,
}

impl<'de> Deserialize<'de> for AzureKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = AzureKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an azure key")
            }
            fn visit_str<E: de::Error>(self, k: &str) -> Result<AzureKey, E> {
                Ok(match k {
                    "account" => AzureKey::Account,
                    "endpoint" => AzureKey::Endpoint,
                    "use_emulator" => AzureKey::UseEmulator,
                    "allow_http" => AzureKey::AllowHttp,
                    "lease_seconds" => AzureKey::LeaseSeconds,
                    "content_types" => AzureKey::ContentTypes,
                    "cache_control" => AzureKey::CacheControl,
                    k if is_azure_credential_key(k) => {
                        return Err(E::custom(format!("{CREDENTIALS}; remove this key")));
                    }
                    k => return Err(E::unknown_field(k, AZURE_KEYS)),
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for RawAzure {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct AzureVisitor;
        impl<'de> Visitor<'de> for AzureVisitor {
            type Value = RawAzure;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a mapping with keys {}", AZURE_KEYS.join(", "))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawAzure, A::Error> {
                let mut r = RawAzure::default();
                while let Some(k) = map.next_key::<AzureKey>()? {
                    let m = &mut map;
                    match k {
                        AzureKey::Account => set(&mut r.account, "account", m)?,
                        AzureKey::Endpoint => set(&mut r.endpoint, "endpoint", m)?,
                        AzureKey::UseEmulator => set(&mut r.use_emulator, "use_emulator", m)?,
                        AzureKey::AllowHttp => set(&mut r.allow_http, "allow_http", m)?,
                        AzureKey::LeaseSeconds => set(&mut r.lease_seconds, "lease_seconds", m)?,
                        AzureKey::ContentTypes => set(&mut r.content_types, "content_types", m)?,
                        AzureKey::CacheControl => set(&mut r.cache_control, "cache_control", m)?,
                    }
                }
                Ok(r)
            }
        }
        d.deserialize_map(AzureVisitor)
    }
}

/// `azure.account`: a storage account name.
#[derive(Debug)]
struct Account(String);

impl StrRule for Account {
    const EXPECTING: &'static str = "a storage account name";
    fn check(s: &str) -> Result<Self, String> {
        if !(3..=24).contains(&s.len())
            || !s
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        {
            return Err(format!(
                "invalid storage account name '{}', accepted: 3 to 24 lowercase letters and digits (the emulator's: devstoreaccount1)",
                s.escape_debug()
            ));
        }
        Ok(Account(s.to_string()))
    }
}

/// `azure.endpoint`: the account's blob endpoint, `http(s)://host[:port][/<account>]` (the
/// emulator names the account in the path).
#[derive(Debug)]
struct AccountEndpoint(String);

impl StrRule for AccountEndpoint {
    const EXPECTING: &'static str = "an http:// or https:// URL";
    fn check(s: &str) -> Result<Self, String> {
        const ACCEPTED: &str = "accepted: the account's blob endpoint, https://<account>.blob.core.windows.net or http(s)://host[:port]/<account> (http:// with allow_http: true)";
        let lower = s.to_ascii_lowercase();
        let rest = if lower.starts_with("https://") {
            &s[8..]
        } else if lower.starts_with("http://") {
            &s[7..]
        } else {
            return Err(format!(
                "'{s}' is not an http:// or https:// URL; {ACCEPTED}"
            ));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') || tail.contains('?') {
            // Never echo it: it may hold a password or a SAS.
            return Err(format!(
                "the URL holds user information or a query (a SAS?); {CREDENTIALS}; remove it from the URL"
            ));
        }
        let path = tail.trim_matches('/');
        if tail.contains('#') || path.contains('/') {
            return Err(format!(
                "'{s}' has more than one path segment or a fragment; {ACCEPTED} (the container and key prefix go in the destination's path)"
            ));
        }
        check_authority(authority).map_err(|why| format!("'{s}' {why}; {ACCEPTED}"))?;
        Ok(AccountEndpoint(s.trim_end_matches('/').to_string()))
    }
}

macro_rules! str_rule_deserialize {
    ($($t:ty),+) => {$(
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(StrVisitor::<$t>(PhantomData))
            }
        }
    )+};
}

str_rule_deserialize!(Account, AccountEndpoint);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_paths_are_checked_with_what_is_accepted() {
        assert_eq!(
            parse_path("az://site-container/weather/latest").unwrap(),
            ("site-container".into(), "weather/latest".into())
        );
        for (bad, needle) in [
            ("s3://bkt/p", "not an az:// URL"),
            ("az://Upper/p", "lowercase letter"),
            ("az://a--b/p", "contains '--'"),
            ("az://ctr", "empty key prefix"),
            ("az://ctr/a./b", "ends in '.'"),
            ("az://ctr/a//b", "empty segment"),
        ] {
            let m = parse_path(bad).unwrap_err();
            assert!(m.contains(needle), "{bad}: {m}");
            assert!(m.contains("az://"), "{bad}: {m}");
        }
    }

    fn parse(block: &str) -> crate::error::Result<crate::config::Config> {
        let yaml = format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n    backend: azure\n    path: az://reports/weather/latest\n{block}"
        );
        crate::config::Config::parse(&yaml, std::path::Path::new("/etc/d/weather.yaml"))
    }

    fn refused(block: &str, needles: &[&str]) {
        let m = match parse(block) {
            Ok(c) => panic!("accepted: {c:?}\n{block}"),
            Err(e) => e.to_string(),
        };
        for n in needles {
            assert!(m.contains(n), "lacks {n:?}:\n{m}");
        }
    }

    #[test]
    fn an_azure_block_has_its_keys_and_defaults() {
        let c = parse("").unwrap();
        let d = &c.destinations[0];
        assert_eq!(d.backend, crate::model::Backend::Azure);
        assert_eq!(
            d.path,
            std::path::PathBuf::from("az://reports/weather/latest")
        );
        let s = d.s3.as_ref().expect("object-store settings");
        assert_eq!(
            (s.bucket.as_str(), s.prefix.as_str()),
            ("reports", "weather/latest")
        );
        assert_eq!(s.lease_seconds, DEFAULT_LEASE_SECONDS);
        assert_eq!(s.azure, Some(AzureAccount::default()));
        let c = parse(
            "    azure:\n      account: reportsprod\n      endpoint: http://127.0.0.1:10000/reportsprod\n      use_emulator: true\n      allow_http: true\n      lease_seconds: 30\n      content_types: {\".wasm\": application/wasm}\n      cache_control: [{glob: \"*.html\", value: no-cache}]\n",
        )
        .unwrap();
        let s = c.destinations[0].s3.clone().unwrap();
        assert_eq!(
            s.azure,
            Some(AzureAccount {
                account: Some("reportsprod".into()),
                use_emulator: true
            })
        );
        assert_eq!(
            s.endpoint.as_deref(),
            Some("http://127.0.0.1:10000/reportsprod")
        );
        assert_eq!(s.cache_control_for("index.html"), Some("no-cache"));
        assert_eq!(s.extra_content_type("a.wasm"), Some("application/wasm"));
    }

    #[test]
    fn credential_keys_are_refused_by_any_name() {
        for k in [
            "account_key",
            "sas_token",
            "sas",
            "token",
            "connection_string",
            "client_secret",
        ] {
            assert!(is_azure_credential_key(k), "{k}");
        }
        for k in AZURE_KEYS {
            assert!(!is_azure_credential_key(k), "{k}");
        }
    }

    #[test]
    fn bad_azure_blocks_name_the_key_and_what_is_accepted() {
        refused(
            "    azure:\n      use_emulator: true\n",
            &["destinations[0].azure.use_emulator", "allow_http: true"],
        );
        refused(
            "    azure:\n      endpoint: http://127.0.0.1:10000/devstoreaccount1\n",
            &[
                "destinations[0].azure.endpoint",
                "plain http",
                "allow_http: true",
            ],
        );
        refused(
            "    azure:\n      account_key: c2VjcmV0\n",
            &[
                "destinations[0].azure.account_key",
                "never read from the config",
                "AZURE_STORAGE_ACCOUNT_KEY",
            ],
        );
        refused(
            "    azure:\n      region: westeurope\n",
            &[
                "destinations[0].azure",
                "unknown field `region`",
                "`account`, `endpoint`, `use_emulator`, `allow_http`, `lease_seconds`, `content_types`, `cache_control`",
            ],
        );
        refused(
            "    azure:\n      account: Bad_Name\n",
            &[
                "destinations[0].azure.account",
                "3 to 24 lowercase letters and digits",
            ],
        );
        refused(
            "    s3:\n      region: us-east-1\n",
            &[
                "destinations[0].s3",
                "applies to backend s3 only; this destination is backend azure",
            ],
        );
        refused(
            "    azure:\n      lease_seconds: 5\n",
            &["destinations[0].azure.lease_seconds"],
        );
    }

    #[test]
    fn account_endpoints_may_name_the_account_in_their_path() {
        assert!(AccountEndpoint::check("http://127.0.0.1:10000/devstoreaccount1").is_ok());
        assert!(AccountEndpoint::check("https://acct.blob.core.windows.net").is_ok());
        assert!(AccountEndpoint::check("https://h/a/b").is_err());
        let m = AccountEndpoint::check("https://h/acct?sv=2020&sig=SECRET").unwrap_err();
        assert!(!m.contains("SECRET"), "{m}");
    }
}
