//! The S3 test harness (tests/common/s3.rs) and the servers under it (moto, SeaweedFS)
//! behave as the s3 backend's tests rely on: buckets, objects, listings past one page,
//! awkward keys, and the conditional writes that the backend's concurrency control is
//! built on. On SeaweedFS, distributor's signed requests are checked against the
//! credentials the harness configured.

use crate::common::s3::{self, ObjectInfo, S3Server, require_moto, require_seaweedfs};
use crate::common::{Env, F};
use std::process::Command;

/// MD5 of `hello`: the ETag S3 gives an object written by one plain PUT.
const HELLO_ETAG: &str = "\"5d41402abc4b2a76b9719d911017c592\"";

#[test]
fn xml_unescape_replaces_each_entity_once() {
    assert_eq!(
        s3::xml_unescape("a&amp;b &lt;c&gt; &quot;q&quot; &apos;x&apos; &#233;&#x1F389;"),
        "a&b <c> \"q\" 'x' é🎉"
    );
    assert_eq!(s3::xml_unescape("&amp;lt;"), "&lt;");
    assert_eq!(
        s3::xml_elements("<R><Key>a&amp;b</Key><Key/><Key>c</Key></R>", "Key"),
        ["a&b", "", "c"]
    );
}

#[test]
fn percent_encode_keeps_only_unreserved_and_slash() {
    assert_eq!(
        s3::percent_encode("dir with space/é+&=?#%~._-", true),
        "dir%20with%20space/%C3%A9%2B%26%3D%3F%23%25~._-"
    );
    assert_eq!(s3::percent_encode("a/b", false), "a%2Fb");
}

#[test]
fn fresh_buckets_are_distinct_and_empty() {
    fresh_buckets_are_distinct_and_empty_on(require_moto!());
}

#[test]
fn fresh_buckets_are_distinct_and_empty_on_seaweedfs() {
    fresh_buckets_are_distinct_and_empty_on(require_seaweedfs!());
}

fn fresh_buckets_are_distinct_and_empty_on(moto: &S3Server) {
    let a = moto.fresh_bucket();
    let b = moto.fresh_bucket();
    assert_ne!(a, b);
    assert_eq!(moto.list(&a, ""), []);
    moto.put(&a, "only-in-a", b"x");
    assert_eq!(moto.list(&b, ""), []);
    let missing = moto.raw("GET", "/no-such-bucket-here?list-type=2", &[], &[]);
    assert_eq!(missing.status, 404, "{}", missing.text());
    assert_eq!(missing.error_code().as_deref(), Some("NoSuchBucket"));
}

#[test]
fn put_get_head_list_delete_round_trip() {
    put_get_head_list_delete_round_trip_on(require_moto!());
}

#[test]
fn put_get_head_list_delete_round_trip_on_seaweedfs() {
    put_get_head_list_delete_round_trip_on(require_seaweedfs!());
}

fn put_get_head_list_delete_round_trip_on(moto: &S3Server) {
    let bucket = moto.fresh_bucket();
    assert_eq!(moto.put(&bucket, "site/index.html", b"hello"), HELLO_ETAG);
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let big_etag = moto.put(&bucket, "site/data/big.bin", &big);
    moto.put(&bucket, "site/empty", b"");
    moto.put(&bucket, "other/x", b"x");

    assert_eq!(moto.get(&bucket, "site/index.html").unwrap(), b"hello");
    assert_eq!(moto.get(&bucket, "site/data/big.bin").unwrap(), big);
    assert_eq!(moto.get(&bucket, "site/empty").unwrap(), b"");
    assert_eq!(moto.get(&bucket, "site/nothing"), None);

    let head = moto.head(&bucket, "site/data/big.bin").unwrap();
    assert_eq!(head.size, big.len() as u64);
    assert_eq!(head.etag, big_etag);
    assert_eq!(moto.head(&bucket, "site/nothing"), None);

    let listed = moto.list(&bucket, "site/");
    assert_eq!(
        listed,
        [
            ObjectInfo {
                key: "site/data/big.bin".into(),
                size: big.len() as u64,
                etag: big_etag.clone(),
            },
            ObjectInfo {
                key: "site/empty".into(),
                size: 0,
                etag: "\"d41d8cd98f00b204e9800998ecf8427e\"".into(),
            },
            ObjectInfo {
                key: "site/index.html".into(),
                size: 5,
                etag: HELLO_ETAG.into(),
            },
        ]
    );
    assert_eq!(moto.list(&bucket, "").len(), 4);
    // A plain string prefix, not a folder.
    assert_eq!(moto.list(&bucket, "site/e").len(), 1);

    let before = moto.snapshot(&bucket, "site/");
    assert_eq!(before.len(), 3);
    assert_eq!(
        before["site/index.html"],
        (HELLO_ETAG.to_string(), b"hello".to_vec())
    );
    assert_eq!(moto.snapshot(&bucket, "site/"), before);
    moto.put(&bucket, "site/index.html", b"hellO");
    assert_ne!(moto.snapshot(&bucket, "site/"), before);
    moto.put(&bucket, "site/index.html", b"hello");
    assert_eq!(moto.snapshot(&bucket, "site/"), before);

    moto.delete(&bucket, "site/index.html");
    moto.delete(&bucket, "site/index.html"); // deleting nothing is no error
    assert_eq!(moto.get(&bucket, "site/index.html"), None);
    assert_eq!(moto.head(&bucket, "site/index.html"), None);
    let keys: Vec<_> = moto.list(&bucket, "").into_iter().map(|o| o.key).collect();
    assert_eq!(keys, ["other/x", "site/data/big.bin", "site/empty"]);
}

#[test]
fn keys_with_spaces_unicode_and_xml_specials_round_trip() {
    keys_with_spaces_unicode_and_xml_specials_round_trip_on(require_moto!());
}

#[test]
fn keys_with_spaces_unicode_and_xml_specials_round_trip_on_seaweedfs() {
    keys_with_spaces_unicode_and_xml_specials_round_trip_on(require_seaweedfs!());
}

fn keys_with_spaces_unicode_and_xml_specials_round_trip_on(moto: &S3Server) {
    let bucket = moto.fresh_bucket();
    let keys = [
        "dir with space/file name.txt",
        "ünïcödé/日本語 ファイル.txt",
        "xml/a&b <c> \"q\" 'x'.txt",
        "signs/plus+equals=percent%hash#question?.txt",
        "emoji/🎉 party.bin",
        "tilde~/.dot/_under-score",
    ];
    for (i, k) in keys.iter().enumerate() {
        moto.put(&bucket, k, format!("content {i}").as_bytes());
    }
    let mut sorted = keys.to_vec();
    sorted.sort(); // S3 lists in UTF-8 byte order, which str's order is
    let listed: Vec<_> = moto.list(&bucket, "").into_iter().map(|o| o.key).collect();
    assert_eq!(listed, sorted);
    for (i, k) in keys.iter().enumerate() {
        let want = format!("content {i}");
        assert_eq!(
            moto.get(&bucket, k).as_deref(),
            Some(want.as_bytes()),
            "{k}"
        );
        assert_eq!(
            moto.head(&bucket, k).unwrap().size,
            want.len() as u64,
            "{k}"
        );
    }
    // The listing really escaped them, so the unescaping above was exercised.
    let xml = moto
        .raw("GET", &format!("/{bucket}?list-type=2"), &[], &[])
        .text();
    assert!(xml.contains("a&amp;b &lt;c&gt;"), "{xml}");
    // Prefixes with spaces and unicode.
    let under: Vec<_> = moto
        .list(&bucket, "ünïcödé/日本")
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(under, ["ünïcödé/日本語 ファイル.txt"]);
    assert_eq!(moto.list(&bucket, "dir with space/").len(), 1);
    moto.delete(&bucket, "xml/a&b <c> \"q\" 'x'.txt");
    assert_eq!(moto.get(&bucket, "xml/a&b <c> \"q\" 'x'.txt"), None);
    assert_eq!(moto.list(&bucket, "").len(), keys.len() - 1);
}

#[test]
fn listing_follows_continuation_tokens_past_1000_keys() {
    let moto = require_moto!();
    let bucket = moto.fresh_bucket();
    let keys: Vec<String> = (0..1003).map(|i| format!("many/{i:05}.txt")).collect();
    std::thread::scope(|s| {
        for chunk in keys.chunks(keys.len().div_ceil(4)) {
            let bucket = &bucket;
            s.spawn(move || {
                for k in chunk {
                    moto.put(bucket, k, k.as_bytes());
                }
            });
        }
    });
    moto.put(&bucket, "manx", b"not under many/");

    let pages = moto.list_pages(&bucket, "many/", None);
    let sizes: Vec<_> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [1000, 3], "moto's page is 1000 keys");
    let listed: Vec<_> = moto
        .list(&bucket, "many/")
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(listed, keys);
    let small: Vec<_> = moto
        .list_pages(&bucket, "many/", Some(400))
        .iter()
        .map(Vec::len)
        .collect();
    assert_eq!(small, [400, 400, 203]);
    assert_eq!(moto.list(&bucket, "").len(), 1004);
}

#[test]
fn put_if_none_match_star_refuses_an_existing_key() {
    put_if_none_match_star_refuses_an_existing_key_on(require_moto!());
}

#[test]
fn put_if_none_match_star_refuses_an_existing_key_on_seaweedfs() {
    put_if_none_match_star_refuses_an_existing_key_on(require_seaweedfs!());
}

fn put_if_none_match_star_refuses_an_existing_key_on(moto: &S3Server) {
    let bucket = moto.fresh_bucket();
    let create = [("If-None-Match", "*")];
    let first = moto.raw_object("PUT", &bucket, "lock file", &create, b"first");
    assert_eq!(first.status, 200, "{}", first.text());
    let second = moto.raw_object("PUT", &bucket, "lock file", &create, b"second");
    assert_eq!(second.status, 412, "{}", second.text());
    assert_eq!(second.error_code().as_deref(), Some("PreconditionFailed"));
    assert_eq!(moto.get(&bucket, "lock file").unwrap(), b"first");
    // Once deleted the key can be created again.
    moto.delete(&bucket, "lock file");
    let again = moto.raw_object("PUT", &bucket, "lock file", &create, b"third");
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(moto.get(&bucket, "lock file").unwrap(), b"third");
}

#[test]
fn put_if_match_replaces_only_the_expected_version() {
    let moto = require_moto!();
    let bucket = moto.fresh_bucket();
    let v1 = moto.put(&bucket, "state.json", b"hello");
    assert_eq!(v1, HELLO_ETAG);

    let wrong = "\"00000000000000000000000000000000\"";
    let r = moto.raw_object("PUT", &bucket, "state.json", &[("If-Match", wrong)], b"v2");
    assert_eq!(r.status, 412, "{}", r.text());
    assert_eq!(r.error_code().as_deref(), Some("PreconditionFailed"));
    assert_eq!(moto.get(&bucket, "state.json").unwrap(), b"hello");

    let r = moto.raw_object("PUT", &bucket, "state.json", &[("If-Match", &v1)], b"v2");
    assert_eq!(r.status, 200, "{}", r.text());
    let v2 = r.header("etag").unwrap().to_string();
    assert_ne!(v2, v1);
    assert_eq!(moto.get(&bucket, "state.json").unwrap(), b"v2");

    // The old ETag no longer matches.
    let r = moto.raw_object("PUT", &bucket, "state.json", &[("If-Match", &v1)], b"v3");
    assert_eq!(r.status, 412, "{}", r.text());
    assert_eq!(moto.get(&bucket, "state.json").unwrap(), b"v2");

    // If-Match on a missing key: 404 NoSuchKey, as S3 answers, and nothing is written.
    let r = moto.raw_object("PUT", &bucket, "missing.json", &[("If-Match", &v2)], b"v");
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.error_code().as_deref(), Some("NoSuchKey"));
    assert_eq!(moto.get(&bucket, "missing.json"), None);
}

#[test]
fn delete_if_match_deletes_only_the_expected_version() {
    let moto = require_moto!();
    let bucket = moto.fresh_bucket();
    let etag = moto.put(&bucket, "lease", b"hello");
    let wrong = "\"00000000000000000000000000000000\"";
    let r = moto.raw_object("DELETE", &bucket, "lease", &[("If-Match", wrong)], b"");
    assert_eq!(r.status, 412, "{}", r.text());
    assert_eq!(moto.get(&bucket, "lease").unwrap(), b"hello");
    let r = moto.raw_object("DELETE", &bucket, "lease", &[("If-Match", &etag)], b"");
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(moto.get(&bucket, "lease"), None);
    // On a missing key: 404 NoSuchKey (a plain DELETE would say 204).
    let r = moto.raw_object("DELETE", &bucket, "lease", &[("If-Match", &etag)], b"");
    assert_eq!(r.status, 404, "{}", r.text());
}

#[test]
fn head_reports_content_type_cache_control_and_dates() {
    let moto = require_moto!();
    let bucket = moto.fresh_bucket();
    let r = moto.raw_object(
        "PUT",
        &bucket,
        "page.html",
        &[
            ("Content-Type", "text/html; charset=utf-8"),
            ("Cache-Control", "public, max-age=60"),
        ],
        b"<p>hi</p>",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.header("date").is_some(),
        "no Date on PUT: {:?}",
        r.headers
    );
    let head = moto.head(&bucket, "page.html").unwrap();
    assert_eq!(head.size, 9);
    assert_eq!(
        head.content_type.as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(head.cache_control.as_deref(), Some("public, max-age=60"));
    let modified = head.last_modified.expect("Last-Modified");
    chrono::DateTime::parse_from_rfc2822(&modified)
        .unwrap_or_else(|e| panic!("Last-Modified {modified:?}: {e}"));
    let raw = moto.raw_object("HEAD", &bucket, "page.html", &[], b"");
    let date = raw.header("date").expect("Date on HEAD");
    chrono::DateTime::parse_from_rfc2822(date).unwrap_or_else(|e| panic!("Date {date:?}: {e}"));
}

/// Not something to rely on, but to know: moto stores an object whose
/// `x-amz-checksum-sha256` does not match its body (real S3 answers 400 BadDigest), so
/// tests against moto cannot show that the backend's checksums are checked by S3.
#[test]
fn moto_does_not_verify_sha256_checksums() {
    let moto = require_moto!();
    let bucket = moto.fresh_bucket();
    // base64 SHA-256 of "other", sent with "hello".
    let wrong = "2SmKENGwc1g33EvYXaxkGw887yekfl1TpU8vP1svz/o=";
    let r = moto.raw_object(
        "PUT",
        &bucket,
        "mismatch",
        &[("x-amz-checksum-sha256", wrong)],
        b"hello",
    );
    assert_eq!(
        r.status,
        200,
        "moto now rejects a wrong checksum ({}): tests may rely on it, update this test",
        r.text()
    );
    assert_eq!(moto.get(&bucket, "mismatch").unwrap(), b"hello");
}

#[test]
fn s3_env_keeps_outer_aws_settings_out() {
    let moto = require_moto!();
    let mut cmd = Command::new("env");
    cmd.env("AWS_ENDPOINT_URL", "http://leaked.invalid")
        .env("AWS_PROFILE", "leaked")
        .env("HTTPS_PROXY", "http://leaked.invalid:3128")
        .env("KEEP_ME", "1");
    s3::apply_s3_env(&mut cmd, moto);
    let out = String::from_utf8(cmd.output().expect("env").stdout).unwrap();
    let vars: Vec<&str> = out.lines().collect();
    for want in [
        "AWS_ACCESS_KEY_ID=test",
        "AWS_SECRET_ACCESS_KEY=test",
        "AWS_REGION=us-east-1",
        "KEEP_ME=1",
    ] {
        assert!(vars.contains(&want), "{want} missing from {vars:?}");
    }
    let aws: Vec<_> = vars.iter().filter(|v| v.starts_with("AWS_")).collect();
    assert_eq!(aws.len(), 3, "only the harness's AWS_ variables: {aws:?}");
    assert!(!out.contains("leaked"), "{out}");
}

/// SeaweedFS checks signatures: distributor publishes with the credentials [`s3::s3_env`]
/// gives, and the same run with a wrong secret or an unknown access key is refused by the
/// store and writes nothing (the harness's own unsigned requests go as its anonymous
/// identity).
#[test]
fn seaweedfs_checks_distributors_credentials() {
    let server = require_seaweedfs!();
    let bucket = server.fresh_bucket();
    let env = Env::new();
    let config = env.config(
        "d.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n    backend: s3\n    path: s3://{bucket}/site\n    s3:\n      endpoint: {}\n      allow_http: true\n",
            server.endpoint
        ),
    );
    let files: &[F] = &[("index.html", "<h1>hi</h1>")];
    let b = env.bundle("b1", "site", "2026-12-02T06:00:00Z", files, &[]);
    let args = [
        "publish",
        "--config",
        config.to_str().unwrap(),
        "--source",
        b.to_str().unwrap(),
    ];
    let good = s3::s3_env(server);
    let with = |key: &'static str, value: &str| -> Vec<(&'static str, String)> {
        let mut v = good.clone();
        v.retain(|(k, _)| *k != key);
        v.push((key, value.to_string()));
        v
    };
    for (case, vars) in [
        (
            "a wrong secret",
            with("AWS_SECRET_ACCESS_KEY", "not-the-secret"),
        ),
        ("an unknown access key", with("AWS_ACCESS_KEY_ID", "nobody")),
    ] {
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = env.run_env(&args, &vars);
        assert_ne!(r.code, 0, "{case}: published\n{}", r.stdout);
        let all = format!("{}{}", r.stdout, r.stderr);
        assert!(
            all.contains("403")
                || all.contains("SignatureDoesNotMatch")
                || all.contains("InvalidAccessKeyId"),
            "{case}: not refused by the store: {all}"
        );
        assert_eq!(
            server.list(&bucket, ""),
            [],
            "{case}: something was written"
        );
    }
    let vars: Vec<(&str, &str)> = good.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.run_env(&args, &vars).expect_code(0);
    assert_eq!(
        server.get(&bucket, "site/index.html").as_deref(),
        Some(&b"<h1>hi</h1>"[..])
    );
}

/// Not something to rely on, but to know: SeaweedFS (4.48) keeps a folder `p/x/` after the
/// last key under it is deleted (listings no longer show it), and a `PUT p/x` with
/// `If-None-Match: *` is refused there (412) though no key `p/x` exists; a plain PUT
/// succeeds. So on SeaweedFS a publication that creates a file where the bundle before
/// had a directory ends in `concurrent_change` (docs/operations.md, "Self-hosted
/// stores"). moto has no folders. When this fails, SeaweedFS has changed: move
/// `test_s3::unmanaged_objects_are_refused_unless_forced` onto it and update the docs.
#[test]
fn seaweedfs_refuses_a_create_where_a_deleted_folder_was() {
    let server = require_seaweedfs!();
    let bucket = server.fresh_bucket();
    server.put(&bucket, "p/x/inside", b"x");
    server.delete(&bucket, "p/x/inside");
    assert_eq!(server.list(&bucket, ""), []);
    let create = [("If-None-Match", "*")];
    let r = server.raw_object("PUT", &bucket, "p/x", &create, b"y");
    assert_eq!(
        r.status,
        412,
        "SeaweedFS now creates a key where a deleted folder was ({}): see this test's doc",
        r.text()
    );
    assert_eq!(server.get(&bucket, "p/x"), None);
}
