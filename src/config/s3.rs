//! The configuration of `backend: s3` destinations (SPEC §14): the `s3://<bucket>/<prefix>`
//! path and the optional `s3:` block.
//!
//! Everything is checked at load, so `distributor validate` refuses a bad bucket name, an
//! empty key prefix, a plain-http endpoint without `allow_http`, an out-of-range lease or a
//! glob that does not compile, without a network or credentials. Values that can be checked
//! alone are checked while they are deserialized, so their errors carry the YAML line and
//! column; rules between keys (`allow_http` and `endpoint`) are checked afterwards.
//!
//! Credentials are never part of the config: a credential-like key in `s3:` is refused with
//! an error saying where they come from, and no error here ever echoes a value that could
//! be a secret (an endpoint with `user:password@` is refused without repeating it).

pub(super) mod azure;

use super::bounded::Bounded;
use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// Longest key prefix accepted, in bytes: keys below it (the manifest's paths, the state,
/// lock and staging objects) must fit S3's 1024-byte key limit with room to spare.
pub(super) const MAX_PREFIX: usize = 900;

/// Default `s3.lease_seconds`.
pub(super) const DEFAULT_LEASE_SECONDS: u64 = 60;

/// Default `s3.concurrency`.
pub(super) const DEFAULT_CONCURRENCY: usize = 16;

const MAX_SEGMENT: usize = 255;

const PATH_ACCEPTED: &str = "accepted for backend s3: s3://<bucket>/<key prefix>";

const BUCKET_ACCEPTED: &str = "accepted: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit, without '..', not an IPv4 address, not starting with 'xn--' nor ending with '-s3alias'";

/// The keys of the `s3:` block, as error messages list them.
const S3_KEYS: &[&str] = &[
    "endpoint",
    "region",
    "allow_http",
    "virtual_hosted_style",
    "lease_seconds",
    "concurrency",
    "content_types",
    "cache_control",
];

/// The validated settings of one `backend: s3` destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    /// Bucket name, checked against S3's naming rules.
    pub bucket: String,
    /// Key prefix of the destination path: non-empty, no leading or trailing `/`.
    pub prefix: String,
    /// `s3.endpoint` as configured; `None` means AWS. `AWS_ENDPOINT_URL` overrides it at
    /// use, which is the backend's business, not the config's.
    pub endpoint: Option<String>,
    /// `s3.region`; `None` means `AWS_REGION`, else `us-east-1`, decided at use.
    pub region: Option<String>,
    /// `s3.allow_http`: plain http endpoints are allowed.
    pub allow_http: bool,
    /// `s3.virtual_hosted_style`: `bucket.host/key` requests instead of `host/bucket/key`.
    pub virtual_hosted_style: bool,
    /// `s3.lease_seconds`: the lock lease, 10 to 3600.
    pub lease_seconds: u64,
    /// `s3.concurrency`: uploads, copies and deletes in flight, 1 to 64.
    pub concurrency: usize,
    /// `s3.content_types`: lowercase extension (with its leading `.`) and MIME type, in
    /// file order.
    pub content_types: Vec<(String, String)>,
    /// `s3.cache_control`, in file order; the first matching rule wins.
    pub cache_control: Vec<CacheRule>,
    /// The storage account of a `backend: azure` destination (whose container is
    /// `bucket`); `None` for s3. An azure destination's settings are these object-store
    /// settings, its `azure:` block's keys checked by the same rules ([`azure`]).
    pub azure: Option<azure::AzureAccount>,
}

/// One `s3.cache_control` rule.
///
/// A glob without `/` matches the file name at any depth (`*.html` matches `index.html`
/// and `a/b/page.html`), as in `.gitignore`; a glob with `/` matches the whole
/// bundle-relative path, `*` not crossing `/` and `**` crossing any number of directories.
/// A leading `/` anchors a name at the bundle root (`/index.html`).
#[derive(Clone)]
pub struct CacheRule {
    /// The glob as configured.
    pub glob: String,
    matcher: GlobMatcher,
    whole_path: bool,
    /// The `Cache-Control` value.
    pub value: String,
}

// The compiled matcher is the glob again, and its Debug output is a page of regex internals.
impl fmt::Debug for CacheRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheRule")
            .field("glob", &self.glob)
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

impl PartialEq for CacheRule {
    fn eq(&self, other: &Self) -> bool {
        self.glob == other.glob && self.value == other.value
    }
}

impl Eq for CacheRule {}

impl CacheRule {
    /// Whether this rule applies to a bundle-relative path (`maps/temp.png`).
    pub fn matches(&self, rel_path: &str) -> bool {
        if self.whole_path {
            self.matcher.is_match(rel_path)
        } else {
            self.matcher.is_match(file_name(rel_path))
        }
    }
}

impl S3Settings {
    /// The `Cache-Control` value for a bundle-relative path: the first matching rule's.
    pub fn cache_control_for(&self, rel_path: &str) -> Option<&str> {
        self.cache_control
            .iter()
            .find(|r| r.matches(rel_path))
            .map(|r| r.value.as_str())
    }

    /// The configured `Content-Type` for a bundle-relative path, if `s3.content_types`
    /// names its extension. Extensions compare case-insensitively; when several match
    /// (`.gz` and `.tar.gz`) the longest wins. A name that is only the extension (a file
    /// called `.wasm`) has none. `None` leaves the choice to the MIME table.
    pub fn extra_content_type(&self, rel_path: &str) -> Option<&str> {
        let name = file_name(rel_path).to_ascii_lowercase();
        self.content_types
            .iter()
            .filter(|(ext, _)| name.len() > ext.len() && name.ends_with(ext.as_str()))
            .max_by_key(|(ext, _)| ext.len())
            .map(|(_, mime)| mime.as_str())
    }
}

fn file_name(rel_path: &str) -> &str {
    rel_path.rsplit('/').next().unwrap_or(rel_path)
}

/// Splits and checks an s3 destination path: `s3://<bucket>/<key prefix>`. The error is
/// the message for `destinations[i].path`.
pub(super) fn parse_path(text: &str) -> Result<(String, String), String> {
    let Some(rest) = text.strip_prefix("s3://") else {
        return Err(format!("'{text}' is not an s3:// URL; {PATH_ACCEPTED}"));
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    check_bucket(bucket)
        .map_err(|why| format!("bucket '{bucket}' in '{text}' {why}; {BUCKET_ACCEPTED}"))?;
    if prefix.is_empty() {
        return Err(format!(
            "'{text}' has an empty key prefix: a bucket root is never a bundle path; {PATH_ACCEPTED}, e.g. s3://{bucket}/site"
        ));
    }
    check_prefix(prefix).map_err(|why| {
        let hint = match prefix.trim_end_matches('/') {
            p if p != prefix && check_prefix(p).is_ok() => format!(" (write 's3://{bucket}/{p}')"),
            _ => String::new(),
        };
        format!("key prefix '{prefix}' in '{text}' {why}{hint}; {PATH_ACCEPTED}")
    })?;
    Ok((bucket.to_string(), prefix.to_string()))
}

/// S3's bucket naming rules (general purpose buckets); the error says which one failed.
fn check_bucket(b: &str) -> Result<(), &'static str> {
    if b.len() < 3 || b.len() > 63 {
        return Err("is not 3 to 63 characters long");
    }
    if !b
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
    {
        return Err("has a character other than a lowercase letter, digit, '.' or '-'");
    }
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !edge(b.as_bytes()[0]) || !edge(b.as_bytes()[b.len() - 1]) {
        return Err("does not start and end with a letter or digit");
    }
    if b.contains("..") {
        return Err("contains '..'");
    }
    let parts: Vec<&str> = b.split('.').collect();
    if parts.len() == 4 && parts.iter().all(|p| p.bytes().all(|c| c.is_ascii_digit())) {
        return Err("is formatted like an IPv4 address");
    }
    if b.starts_with("xn--") {
        return Err("starts with the reserved 'xn--'");
    }
    if b.ends_with("-s3alias") {
        return Err("ends with the reserved '-s3alias'");
    }
    Ok(())
}

/// The key prefix: `/`-separated safe segments (SPEC §3.2), at most [`MAX_PREFIX`] bytes.
fn check_prefix(p: &str) -> Result<(), String> {
    if p.len() > MAX_PREFIX {
        return Err(format!(
            "is {} bytes long, accepted: at most {MAX_PREFIX} (object keys are limited to 1024 bytes)",
            p.len()
        ));
    }
    if p.contains('\\') {
        return Err("contains a backslash".into());
    }
    if p.chars().any(|c| c.is_control()) {
        return Err("contains NUL or a control character".into());
    }
    for seg in p.split('/') {
        match seg {
            "" => return Err("has an empty segment (a leading, trailing or double '/')".into()),
            "." | ".." => return Err(format!("has a '{seg}' segment")),
            s if s.len() > MAX_SEGMENT => {
                return Err(format!("has a segment longer than {MAX_SEGMENT} bytes"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The `s3:` block as written. Deserialized by hand so that a credential-like key gets its
/// own error instead of "unknown field", and the accepted keys listed for an unknown one
/// are only the real ones.
#[derive(Debug, Default)]
pub(super) struct RawS3 {
    endpoint: Option<Endpoint>,
    region: Option<Region>,
    allow_http: Option<bool>,
    virtual_hosted_style: Option<bool>,
    lease_seconds: Option<Bounded<10, 3600>>,
    concurrency: Option<Bounded<1, 64>>,
    content_types: Option<ContentTypes>,
    cache_control: Option<Vec<RawCacheRule>>,
}

/// Builds the settings of an s3 destination from its checked path and `s3:` block. `key`
/// is the destination's key path (`destinations[1]`); the error is (key path, message).
pub(super) fn settings(
    key: &str,
    bucket: String,
    prefix: String,
    raw: Option<RawS3>,
) -> Result<S3Settings, (String, String)> {
    let raw = raw.unwrap_or_default();
    let allow_http = raw.allow_http.unwrap_or(false);
    let endpoint = raw.endpoint.map(|e| e.0);
    if let Some(e) = &endpoint
        && is_http(e)
        && !allow_http
    {
        return Err((
            format!("{key}.s3.endpoint"),
            format!(
                "'{e}' is plain http, which sends requests unencrypted; set {key}.s3.allow_http: true to use it, accepted otherwise: an https:// URL"
            ),
        ));
    }
    Ok(S3Settings {
        bucket,
        prefix,
        endpoint,
        region: raw.region.map(|r| r.0),
        allow_http,
        virtual_hosted_style: raw.virtual_hosted_style.unwrap_or(false),
        lease_seconds: raw.lease_seconds.map_or(DEFAULT_LEASE_SECONDS, |b| b.0),
        concurrency: raw
            .concurrency
            .map_or(DEFAULT_CONCURRENCY, |b| b.0 as usize),
        content_types: raw.content_types.map(|c| c.0).unwrap_or_default(),
        cache_control: raw
            .cache_control
            .unwrap_or_default()
            .into_iter()
            .map(CacheRule::from)
            .collect(),
        azure: None,
    })
}

impl From<RawCacheRule> for CacheRule {
    fn from(r: RawCacheRule) -> CacheRule {
        CacheRule {
            glob: r.glob.text,
            matcher: r.glob.matcher,
            whole_path: r.glob.whole_path,
            value: r.value.0,
        }
    }
}

fn is_http(endpoint: &str) -> bool {
    endpoint
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
}

/// Keys that would hold credentials (compared in lowercase). Refused with their own
/// message: an operator who writes one expects it to be used, and it never is.
fn is_credential_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    [
        "secret",
        "password",
        "access_key",
        "session_token",
        "credential",
    ]
    .iter()
    .any(|w| k.contains(w))
        || matches!(k.as_str(), "token" | "profile" | "aws_profile" | "role_arn")
}

const CREDENTIALS: &str = "credentials are never read from the config file; they come only from the environment and the standard AWS credential chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN; the profile AWS_PROFILE names, else `default`, in ~/.aws/config and ~/.aws/credentials, with credential_process, SSO or role_arn; web identity; container or instance metadata)";

enum S3Key {
    Endpoint,
    Region,
    AllowHttp,
    VirtualHostedStyle,
    LeaseSeconds,
    Concurrency,
    ContentTypes,
    CacheControl,
}

impl<'de> Deserialize<'de> for S3Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = S3Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an s3 key")
            }
            fn visit_str<E: de::Error>(self, k: &str) -> Result<S3Key, E> {
                Ok(match k {
                    "endpoint" => S3Key::Endpoint,
                    "region" => S3Key::Region,
                    "allow_http" => S3Key::AllowHttp,
                    "virtual_hosted_style" => S3Key::VirtualHostedStyle,
                    "lease_seconds" => S3Key::LeaseSeconds,
                    "concurrency" => S3Key::Concurrency,
                    "content_types" => S3Key::ContentTypes,
                    "cache_control" => S3Key::CacheControl,
                    k if is_credential_key(k) => {
                        return Err(E::custom(format!("{CREDENTIALS}; remove this key")));
                    }
                    k => return Err(E::unknown_field(k, S3_KEYS)),
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

/// Fills `slot` with the map's next value, once: a key given twice is an error naming it
/// (the `s3:` and `azure:` blocks are read key by key).
fn set<'de, T: Deserialize<'de>, A: MapAccess<'de>>(
    slot: &mut Option<T>,
    name: &'static str,
    map: &mut A,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(de::Error::duplicate_field(name));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

impl<'de> Deserialize<'de> for RawS3 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct S3Visitor;
        impl<'de> Visitor<'de> for S3Visitor {
            type Value = RawS3;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a mapping with keys {}", S3_KEYS.join(", "))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawS3, A::Error> {
                let mut r = RawS3::default();
                while let Some(k) = map.next_key::<S3Key>()? {
                    let m = &mut map;
                    match k {
                        S3Key::Endpoint => set(&mut r.endpoint, "endpoint", m)?,
                        S3Key::Region => set(&mut r.region, "region", m)?,
                        S3Key::AllowHttp => set(&mut r.allow_http, "allow_http", m)?,
                        S3Key::VirtualHostedStyle => {
                            set(&mut r.virtual_hosted_style, "virtual_hosted_style", m)?
                        }
                        S3Key::LeaseSeconds => set(&mut r.lease_seconds, "lease_seconds", m)?,
                        S3Key::Concurrency => set(&mut r.concurrency, "concurrency", m)?,
                        S3Key::ContentTypes => set(&mut r.content_types, "content_types", m)?,
                        S3Key::CacheControl => set(&mut r.cache_control, "cache_control", m)?,
                    }
                }
                Ok(r)
            }
        }
        d.deserialize_map(S3Visitor)
    }
}

/// A string value checked as it is deserialized: `EXPECTING` is what a wrong type is told
/// it should have been, `check` turns the text into the value or says what is accepted.
trait StrRule: Sized {
    const EXPECTING: &'static str;
    fn check(s: &str) -> Result<Self, String>;
}

struct StrVisitor<T>(PhantomData<T>);

impl<T: StrRule> Visitor<'_> for StrVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        T::check(s).map_err(E::custom)
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

str_rule_deserialize!(
    Endpoint,
    Region,
    Extension,
    MimeType,
    HeaderValue,
    CacheGlob
);

/// `s3.endpoint`: `http(s)://host[:port]`, optionally with a trailing `/`.
#[derive(Debug)]
struct Endpoint(String);

impl StrRule for Endpoint {
    const EXPECTING: &'static str = "an http:// or https:// URL";
    fn check(s: &str) -> Result<Self, String> {
        const ACCEPTED: &str =
            "accepted: https://host[:port] (or http:// with allow_http: true), without a path";
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
        if authority.contains('@') {
            // Never echo it: the part before '@' may be a password.
            return Err(format!(
                "the URL holds user information ('user:password@'); {CREDENTIALS}; remove it from the URL"
            ));
        }
        if !(tail.is_empty() || tail == "/") {
            return Err(format!(
                "'{s}' has a path, query or fragment; {ACCEPTED} (the bucket and key prefix go in the destination's path)"
            ));
        }
        check_authority(authority).map_err(|why| format!("'{s}' {why}; {ACCEPTED}"))?;
        Ok(Endpoint(s.to_string()))
    }
}

/// `host[:port]` where host is a DNS name, an IPv4 address or a bracketed IPv6 address.
fn check_authority(a: &str) -> Result<(), &'static str> {
    let (host, port) = if let Some(v6) = a.strip_prefix('[') {
        let (inner, after) = v6.split_once(']').ok_or("has an unclosed '['")?;
        if inner.is_empty()
            || !inner
                .bytes()
                .all(|c| c.is_ascii_hexdigit() || c == b':' || c == b'.')
        {
            return Err("has an invalid IPv6 address");
        }
        match after {
            "" => (inner, None),
            p => (
                inner,
                Some(p.strip_prefix(':').ok_or("has text after ']'")?),
            ),
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    if host.is_empty() {
        return Err("has no host");
    }
    if !a.starts_with('[')
        && (host.split('.').any(str::is_empty)
            || !host
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_')))
    {
        return Err("has an invalid host name");
    }
    if let Some(p) = port
        && !(!p.is_empty()
            && p.len() <= 5
            && p.bytes().all(|c| c.is_ascii_digit())
            && (1..=65535).contains(&p.parse::<u32>().unwrap_or(0)))
    {
        return Err("has an invalid port (accepted: 1 to 65535)");
    }
    Ok(())
}

/// `s3.region`: an AWS-style region name (`eu-central-1`), or whatever lowercase name an
/// S3-compatible service uses.
#[derive(Debug)]
struct Region(String);

impl StrRule for Region {
    const EXPECTING: &'static str = "a region name of lowercase letters, digits and '-'";
    fn check(s: &str) -> Result<Self, String> {
        if s.is_empty()
            || s.len() > 64
            || !s
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        {
            return Err(format!(
                "invalid region '{s}', accepted: 1 to 64 lowercase letters, digits and '-' (e.g. eu-central-1)"
            ));
        }
        Ok(Region(s.to_string()))
    }
}

/// A `s3.content_types` key: `.ext`, stored in lowercase.
#[derive(Debug)]
struct Extension(String);

impl StrRule for Extension {
    const EXPECTING: &'static str = "a file extension starting with '.'";
    fn check(s: &str) -> Result<Self, String> {
        let ok = s.len() <= 32
            && s.strip_prefix('.').is_some_and(|rest| {
                rest.split('.').all(|part| {
                    !part.is_empty()
                        && part.bytes().all(|c| {
                            c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'+' | b'~')
                        })
                })
            });
        if !ok {
            return Err(format!(
                "invalid extension '{s}', accepted: '.' followed by letters, digits, '-', '_', '+' or '~' (dots between parts, as in .tar.gz), at most 32 bytes"
            ));
        }
        Ok(Extension(s.to_ascii_lowercase()))
    }
}

/// A `s3.content_types` value: `type/subtype`, optionally with `; name=value` parameters.
#[derive(Debug)]
struct MimeType(String);

impl StrRule for MimeType {
    const EXPECTING: &'static str = "a MIME type 'type/subtype'";
    fn check(s: &str) -> Result<Self, String> {
        if !is_mime_type(s) {
            return Err(format!(
                "invalid MIME type '{s}', accepted: type/subtype (e.g. application/wasm), optionally followed by parameters ('; charset=utf-8')"
            ));
        }
        Ok(MimeType(s.to_string()))
    }
}

fn is_mime_type(s: &str) -> bool {
    // RFC 6838 restricted names for type and subtype; RFC 9110 tokens for parameters.
    let restricted = |t: &str| {
        !t.is_empty()
            && t.len() <= 127
            && t.as_bytes()[0].is_ascii_alphanumeric()
            && t.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&c))
    };
    let token = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
    };
    let quoted = |t: &str| {
        t.len() >= 2
            && t.starts_with('"')
            && t.ends_with('"')
            && t[1..t.len() - 1]
                .bytes()
                .all(|c| (b' '..=b'~').contains(&c) && c != b'"' && c != b'\\')
    };
    let mut parts = s.split(';');
    let essence = parts.next().unwrap_or("");
    let Some((ty, sub)) = essence.split_once('/') else {
        return false;
    };
    restricted(ty)
        && restricted(sub)
        && parts.all(|p| {
            p.trim_start_matches(' ')
                .split_once('=')
                .is_some_and(|(n, v)| token(n) && (token(v) || quoted(v)))
        })
}

/// `s3.content_types`, in file order; an extension listed twice (in any case) is an error.
#[derive(Debug)]
struct ContentTypes(Vec<(String, String)>);

impl<'de> Deserialize<'de> for ContentTypes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ContentTypes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping from extension ('.wasm') to MIME type")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ContentTypes, A::Error> {
                let mut out: Vec<(String, String)> = Vec::new();
                while let Some(Extension(ext)) = map.next_key()? {
                    let MimeType(mime) = map.next_value()?;
                    if out.iter().any(|(e, _)| *e == ext) {
                        return Err(de::Error::custom(format!(
                            "extension '{ext}' is listed twice (extensions compare case-insensitively)"
                        )));
                    }
                    out.push((ext, mime));
                }
                Ok(ContentTypes(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// One `s3.cache_control` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with keys glob, value")]
struct RawCacheRule {
    glob: CacheGlob,
    value: HeaderValue,
}

/// A `cache_control` glob, compiled; see [`CacheRule`] for what it matches.
#[derive(Debug)]
struct CacheGlob {
    text: String,
    matcher: GlobMatcher,
    whole_path: bool,
}

impl StrRule for CacheGlob {
    const EXPECTING: &'static str = "a glob such as '*.html' or 'assets/**'";
    fn check(s: &str) -> Result<Self, String> {
        const ACCEPTED: &str = "accepted: a glob matched against the file name ('*.html') or, when it contains '/', against the whole path in the bundle ('assets/**', '/index.html')";
        let anchored = s.strip_prefix('/');
        let pattern = anchored.unwrap_or(s);
        if pattern.is_empty() {
            return Err(format!("empty glob; {ACCEPTED}"));
        }
        if pattern.ends_with('/') {
            return Err(format!(
                "glob '{s}' ends with '/' and would match no file (write '{s}**' for everything below it); {ACCEPTED}"
            ));
        }
        if pattern.split('/').any(|seg| seg.is_empty()) {
            return Err(format!(
                "glob '{s}' has an empty segment ('//') and would match no file; {ACCEPTED}"
            ));
        }
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| format!("invalid glob '{s}': {}; {ACCEPTED}", glob_error(&e)))?;
        Ok(CacheGlob {
            text: s.to_string(),
            matcher: glob.compile_matcher(),
            whole_path: anchored.is_some() || pattern.contains('/'),
        })
    }
}

/// globset's message without its own repetition of the glob.
fn glob_error(e: &globset::Error) -> String {
    e.kind().to_string()
}

/// A `Cache-Control` value: printable ASCII, not empty, no surrounding spaces.
#[derive(Debug)]
struct HeaderValue(String);

impl StrRule for HeaderValue {
    const EXPECTING: &'static str = "a Cache-Control value such as 'no-cache'";
    fn check(s: &str) -> Result<Self, String> {
        if s.is_empty()
            || s.len() > 1024
            || s.starts_with(' ')
            || s.ends_with(' ')
            || !s.bytes().all(|c| (b' '..=b'~').contains(&c))
        {
            return Err(format!(
                "invalid Cache-Control value '{}', accepted: 1 to 1024 printable ASCII characters without leading or trailing spaces (e.g. 'no-cache', 'public, max-age=300')",
                s.escape_debug()
            ));
        }
        Ok(HeaderValue(s.to_string()))
    }
}

#[cfg(test)]
mod tests;
