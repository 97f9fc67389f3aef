//! Hostile and broken uploads to `distributor serve`: each is refused with 400 or 413 and a
//! clear message, nothing is written outside the spool (destinations untouched, nothing
//! escapes), and the per-request spool directory is gone afterwards.

use crate::common::Env;
use crate::common::server::{
    OTHER_SECRET, RawEntry, SECRET, Server, chunk, file, gzip, journal_operations, manifest_json,
    raw_request, raw_tar, read_response, tar_with_manifest, weather_and_traffic,
};
use std::io::Write;
use std::time::{Duration, Instant};
use tar::EntryType;

const CREATED: &str = "2026-12-02T06:00:00Z";

fn entry<'a>(name: &'a str, ty: EntryType, data: &'a [u8], link: &'a str) -> RawEntry<'a> {
    RawEntry {
        name: name.as_bytes(),
        ty,
        data,
        link: link.as_bytes(),
    }
}

/// Uploads `body`, expects `status` and `kind` and a message containing `needle`; checks
/// that nothing was published, nothing journaled and the spool is empty.
fn refused(env: &Env, server: &Server, body: &[u8], status: u16, kind: &str, needle: &str) {
    let r = server.upload("weather", "", body);
    r.expect(status);
    assert_eq!(r.kind(), kind, "{}", r.body);
    assert!(
        r.message().contains(needle),
        "message {:?} lacks {needle:?}",
        r.message()
    );
    assert!(
        !r.message().contains(&server.spool.display().to_string()),
        "spool path leaked: {}",
        r.message()
    );
    assert!(!env.exists("dest/latest"), "destination written");
    assert!(journal_operations(env).is_empty());
    assert!(
        server.spool_leftovers().is_empty(),
        "spool left: {:?}",
        server.spool_leftovers()
    );
}

fn setup(extra: &[&str]) -> (Env, Server) {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], extra);
    (env, server)
}

#[test]
fn links_devices_and_fifos_are_refused() {
    let (env, server) = setup(&[]);
    let cases: Vec<(RawEntry, &str)> = vec![
        (
            entry("evil", EntryType::Symlink, b"", "/etc"),
            "a symbolic link",
        ),
        (entry("hard", EntryType::Link, b"", "a.txt"), "a hard link"),
        (entry("tty", EntryType::Char, b"", ""), "a character device"),
        (entry("disk", EntryType::Block, b"", ""), "a block device"),
        (entry("pipe", EntryType::Fifo, b"", ""), "a FIFO"),
    ];
    for (e, what) in cases {
        let tar = tar_with_manifest("t", CREATED, &[("a.txt", b"a")], &[e]);
        refused(&env, &server, &tar, 400, "invalid_bundle", what);
    }
    // A symlink followed by a file through it must not write through the link.
    let tar = tar_with_manifest(
        "t",
        CREATED,
        &[("a.txt", b"a")],
        &[
            entry("out", EntryType::Symlink, b"", "../../.."),
            file("out/escaped.txt", b"x"),
        ],
    );
    refused(&env, &server, &tar, 400, "invalid_bundle", "symbolic link");
    assert!(!env.exists("escaped.txt"));
}

#[test]
fn unsafe_names_are_refused() {
    let (env, server) = setup(&[]);
    let cases: &[(&str, &str)] = &[
        ("../../../escaped.txt", "'..' segment"),
        ("a/../../b", "'..' segment"),
        ("/tmp/absolute.txt", "absolute path"),
        (".distributor.json", "reserved"),
        ("back\\slash", "backslash"),
        ("dir//file", "empty segment"),
    ];
    for (name, needle) in cases {
        let tar = tar_with_manifest("t", CREATED, &[("a.txt", b"a")], &[file(name, b"x")]);
        refused(&env, &server, &tar, 400, "invalid_bundle", needle);
    }
    assert!(!env.exists("escaped.txt"));
    assert!(!std::path::Path::new("/tmp/absolute.txt").exists());
}

#[test]
fn duplicate_entries_are_refused() {
    let (env, server) = setup(&[]);
    let tar = tar_with_manifest("t", CREATED, &[("a.txt", b"a")], &[file("a.txt", b"b")]);
    refused(&env, &server, &tar, 400, "invalid_bundle", "more than once");
    let tar = tar_with_manifest("t", CREATED, &[("a.txt", b"a")], &[file("./a.txt", b"b")]);
    refused(&env, &server, &tar, 400, "invalid_bundle", "more than once");
    let tar = tar_with_manifest(
        "t",
        CREATED,
        &[("a.txt", b"a")],
        &[
            entry("d/", EntryType::Directory, b"", ""),
            entry("d", EntryType::Directory, b"", ""),
        ],
    );
    refused(&env, &server, &tar, 400, "invalid_bundle", "more than once");
    // A file standing where a later entry needs a directory.
    let tar = tar_with_manifest(
        "t",
        CREATED,
        &[("a.txt", b"a")],
        &[file("x", b"1"), file("x/y", b"2")],
    );
    refused(
        &env,
        &server,
        &tar,
        400,
        "invalid_bundle",
        "needs it as a directory",
    );
}

#[test]
fn directories_and_dot_prefixed_names_are_accepted() {
    let (env, server) = setup(&[]);
    let manifest = crate::common::server::manifest_json("t", CREATED, &[("d/a.txt", b"a")]);
    let tar = raw_tar(&[
        entry("./", EntryType::Directory, b"", ""),
        entry(
            "./distributor-manifest.json",
            EntryType::Regular,
            &manifest,
            "",
        ),
        entry("./d/", EntryType::Directory, b"", ""),
        entry("./d/a.txt", EntryType::Regular, b"a", ""),
        entry("./d/unlisted.txt", EntryType::Regular, b"not published", ""),
    ]);
    server.upload("weather", "", &tar).expect(200);
    assert_eq!(env.read("dest/latest/d/a.txt"), "a");
    assert!(!env.exists("dest/latest/d/unlisted.txt"));
    assert!(server.spool_leftovers().is_empty());
}

#[test]
fn long_names_via_gnu_and_pax_headers_are_read() {
    let (env, server) = setup(&[]);
    let long = format!("{}/file.txt", "d".repeat(150));
    // GNU long name (the tar crate's builder writes one for names over 100 bytes).
    let manifest = crate::common::server::manifest_json("t", CREATED, &[(&long, b"gnu")]);
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in [
        ("distributor-manifest.json", &manifest[..]),
        (&long, b"gnu"),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, data).unwrap();
    }
    let tar = b.into_inner().unwrap();
    server.upload("weather", "", &tar).expect(200);
    assert_eq!(env.read(&format!("dest/latest/{long}")), "gnu");

    // PAX path record, as Python's tarfile and bsdtar write.
    let long2 = format!("{}/pax.txt", "p".repeat(150));
    let manifest =
        crate::common::server::manifest_json("t", "2026-12-02T07:00:00Z", &[(&long2, b"pax")]);
    let record = {
        let body = format!(" path={long2}\n");
        let mut n = body.len() + 3;
        if format!("{n}{body}").len() != n {
            n += 1;
        }
        format!("{n}{body}")
    };
    let tar = raw_tar(&[
        file("distributor-manifest.json", &manifest),
        entry("PaxHeaders/x", EntryType::XHeader, record.as_bytes(), ""),
        file("truncated-name-ignored", b"pax"),
    ]);
    let r = server.upload("weather", "", &tar);
    r.expect(200);
    assert_eq!(env.read(&format!("dest/latest/{long2}")), "pax");
    assert!(!env.exists("dest/latest/truncated-name-ignored"));
}

#[test]
fn oversized_extension_records_are_refused_without_reading_them() {
    let (env, server) = setup(&[]);
    let huge = vec![b'a'; 70 * 1024];
    let tar = raw_tar(&[entry("././@LongLink", EntryType::GNULongName, &huge, "")]);
    refused(
        &env,
        &server,
        &tar,
        400,
        "invalid_bundle",
        "long name record",
    );
}

#[test]
fn too_many_entries_is_413() {
    let (env, server) = setup(&["--max-entries", "5"]);
    let files: Vec<(String, Vec<u8>)> = (0..6).map(|i| (format!("f{i}"), vec![b'x'])).collect();
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(p, c)| (p.as_str(), &c[..])).collect();
    let tar = tar_with_manifest("t", CREATED, &refs, &[]);
    refused(&env, &server, &tar, 413, "too_large", "--max-entries");
    // At the limit it goes through.
    let tar = tar_with_manifest("t", CREATED, &refs[..4], &[]);
    server.upload("weather", "", &tar).expect(200);
}

#[test]
fn an_archive_of_empty_directories_over_the_entry_limit_is_413_and_leaves_nothing() {
    // The default --max-entries (100,000), and 120,000 empty directories: a body of about
    // half a megabyte (it used to take minutes to refuse; a directory entry now costs no
    // mkdir, so the refusal comes at the speed the body decompresses).
    let (env, server) = setup(&[]);
    let mut b = tar::Builder::new(Vec::new());
    for i in 0..120_000 {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(EntryType::Directory);
        h.set_size(0);
        h.set_mode(0o755);
        h.set_mtime(1_700_000_000);
        b.append_data(&mut h, format!("d{i:06}/"), &[][..])
            .expect("append a directory");
    }
    let body = gzip(&b.into_inner().expect("tar"));
    refused(
        &env,
        &server,
        &body,
        413,
        "too_large",
        "more than 100000 entries (--max-entries)",
    );
}

#[test]
fn files_below_directory_entries_named_before_or_after_them_are_unpacked() {
    let (env, server) = setup(&[]);
    let manifest = crate::common::server::manifest_json(
        "t",
        CREATED,
        &[
            ("a/b/c/one.txt", b"1"),
            ("a/two.txt", b"2"),
            ("x/y/three.txt", b"3"),
        ],
    );
    let tar = raw_tar(&[
        entry("a/", EntryType::Directory, b"", ""),
        entry("a/b/", EntryType::Directory, b"", ""),
        entry("empty/", EntryType::Directory, b"", ""),
        entry("empty/deeper/", EntryType::Directory, b"", ""),
        entry(
            "distributor-manifest.json",
            EntryType::Regular,
            &manifest,
            "",
        ),
        entry("a/b/c/one.txt", EntryType::Regular, b"1", ""),
        entry("a/two.txt", EntryType::Regular, b"2", ""),
        entry("x/y/three.txt", EntryType::Regular, b"3", ""),
        // Named only after a file below them made them.
        entry("x/", EntryType::Directory, b"", ""),
        entry("x/y/", EntryType::Directory, b"", ""),
    ]);
    server.upload("weather", "", &tar).expect(200);
    assert_eq!(env.read("dest/latest/a/b/c/one.txt"), "1");
    assert_eq!(env.read("dest/latest/a/two.txt"), "2");
    assert_eq!(env.read("dest/latest/x/y/three.txt"), "3");
    assert!(server.spool_leftovers().is_empty());
    // An empty directory entry still takes its name: a file there is a duplicate.
    let (env, server) = setup(&[]);
    let tar = tar_with_manifest(
        "t",
        CREATED,
        &[("a.txt", b"a")],
        &[entry("e/", EntryType::Directory, b"", ""), file("e", b"1")],
    );
    refused(&env, &server, &tar, 400, "invalid_bundle", "more than once");
}

#[test]
fn extracted_size_over_the_limit_is_413_even_when_the_body_is_small() {
    let (env, server) = setup(&["--max-extracted-bytes", "100000"]);
    let big = vec![0u8; 200_000];
    let tar = gzip(&tar_with_manifest(
        "t",
        CREATED,
        &[("zeros.bin", &big)],
        &[],
    ));
    assert!(tar.len() < 10_000, "gzip of zeros is small");
    refused(
        &env,
        &server,
        &tar,
        413,
        "too_large",
        "--max-extracted-bytes",
    );
}

#[test]
fn body_over_the_limit_is_413() {
    let (env, server) = setup(&["--max-upload-bytes", "4096"]);
    let tar = tar_with_manifest("t", CREATED, &[("a.txt", &[7u8; 6000])], &[]);
    refused(&env, &server, &tar, 413, "too_large", "");
    // A small upload still works on the same server.
    let ok = tar_with_manifest("t", CREATED, &[("a.txt", b"a")], &[]);
    assert!(ok.len() <= 4096);
    server.upload("weather", "", &ok).expect(200);
}

#[test]
fn body_limit_is_enforced_while_streaming_not_after_buffering() {
    let (env, server) = setup(&["--max-upload-bytes", "65536"]);
    // Chunked, no length: send past the limit, then stall. The 413 must come without the
    // rest of the body (the server never waits for, or buffers, the whole upload).
    let head = format!(
        "POST /v1/pipelines/weather/bundles HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {SECRET}\r\nContent-Type: application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n",
        server.addr
    );
    let data = vec![0u8; 100_000];
    let mut body = format!("{:x}\r\n", data.len()).into_bytes();
    body.extend_from_slice(&data);
    body.extend_from_slice(b"\r\n");
    let mut s = raw_request(&server.addr, &head, &body);
    let (status, reply) = read_response(&mut s);
    assert_eq!(status, 413, "{reply}");
    // The reply came although the rest of the body never will: read_response would have
    // run into the client's 30 s read timeout and panicked otherwise.
    assert!(reply.contains("too_large"), "{reply}");
    // A declared length over the limit is refused before any body byte is sent.
    let head = format!(
        "POST /v1/pipelines/weather/bundles HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {SECRET}\r\nContent-Type: application/x-tar\r\nContent-Length: 10000000000\r\n\r\n",
        server.addr
    );
    let mut s = raw_request(&server.addr, &head, b"");
    let (status, reply) = read_response(&mut s);
    assert_eq!(status, 413, "{reply}");
    assert!(reply.contains("\"error\""), "JSON error: {reply}");
    drop(s);
    let start = Instant::now();
    while !server.spool_leftovers().is_empty() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.spool_leftovers().is_empty());
    assert!(!env.exists("dest/latest"));
}

#[test]
fn truncated_garbage_and_empty_bodies_are_400() {
    let (env, server) = setup(&[]);
    let tar = tar_with_manifest("t", CREATED, &[("a.txt", &[1u8; 3000])], &[]);
    // Cut inside the content of a.txt (after its header).
    refused(
        &env,
        &server,
        &tar[..2048],
        400,
        "invalid_bundle",
        "truncated",
    );
    // Cut inside a header.
    refused(
        &env,
        &server,
        &tar[..1024 + 100],
        400,
        "invalid_bundle",
        "truncated",
    );
    let gz = gzip(&tar);
    refused(
        &env,
        &server,
        &gz[..gz.len() / 2],
        400,
        "invalid_bundle",
        "",
    );
    refused(
        &env,
        &server,
        b"this is not a tar archive at all, just some text that goes on for a while; \
          it is long enough to fill a header block? no, it is not, so let us pad it out \
          with more and more words until it is certainly longer than anything sensible \
          and then some more words to be sure that it spans a whole 512 byte block of data \
          which is what a tar header is, and a tar reader will look at its checksum field \
          and find that it does not match what the header bytes add up to, and refuse it \
          with an error saying so, which is exactly the behaviour that this test expects",
        400,
        "invalid_bundle",
        "not a valid tar",
    );
    let mut garbage_gz = vec![0x1f, 0x8b];
    garbage_gz.extend_from_slice(&[0xff; 600]);
    refused(&env, &server, &garbage_gz, 400, "invalid_bundle", "gzip");
    refused(&env, &server, b"", 400, "invalid_bundle", "empty");
}

#[test]
fn bad_manifests_and_content_mismatches_are_400_invalid_source() {
    let (env, server) = setup(&[]);
    let no_manifest = raw_tar(&[file("a.txt", b"a")]);
    refused(
        &env,
        &server,
        &no_manifest,
        400,
        "invalid_source",
        "distributor-manifest.json",
    );
    let bad_json = raw_tar(&[file("distributor-manifest.json", b"{not json")]);
    refused(
        &env,
        &server,
        &bad_json,
        400,
        "invalid_source",
        "distributor-manifest.json",
    );
    // Listed output missing from the archive.
    let manifest =
        crate::common::server::manifest_json("t", CREATED, &[("a.txt", b"a"), ("b.txt", b"b")]);
    let missing = raw_tar(&[
        file("distributor-manifest.json", &manifest),
        file("a.txt", b"a"),
    ]);
    refused(&env, &server, &missing, 400, "invalid_source", "b.txt");
    // Same size, other content: caught by hashing before any destination is planned, for
    // a dry run as for a real one.
    let manifest = crate::common::server::manifest_json("t", CREATED, &[("a.txt", b"a")]);
    let mismatch = raw_tar(&[
        file("distributor-manifest.json", &manifest),
        file("a.txt", b"z"),
    ]);
    refused(&env, &server, &mismatch, 400, "invalid_source", "sha256");
    let r = server.upload("weather", "?dry_run=true", &mismatch);
    r.expect(400);
    assert_eq!(r.kind(), "invalid_source");
}

#[test]
fn form_encoded_bodies_are_refused_with_a_hint() {
    let (env, server) = setup(&[]);
    let tar = tar_with_manifest("t", CREATED, &[("a.txt", b"a")], &[]);
    let r = server.post_raw(
        "/v1/pipelines/weather/bundles",
        Some(SECRET),
        Some("application/x-www-form-urlencoded"),
        &tar,
    );
    r.expect(400);
    assert!(r.message().contains("--data-binary"), "{}", r.message());
    assert!(!env.exists("dest/latest"));
}

#[test]
fn a_client_that_disconnects_mid_upload_leaves_no_spool() {
    let (env, server) = setup(&[]);
    let head = format!(
        "POST /v1/pipelines/weather/bundles HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {SECRET}\r\nContent-Type: application/x-tar\r\nContent-Length: 100000\r\n\r\n",
        server.addr
    );
    let mut s = raw_request(&server.addr, &head, &[0u8; 5000]);
    s.flush().unwrap();
    let start = Instant::now();
    while server.spool_leftovers().is_empty() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        server.spool_leftovers().len(),
        1,
        "upload in progress is spooled"
    );
    drop(s);
    let start = Instant::now();
    while !server.spool_leftovers().is_empty() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.spool_leftovers().is_empty());
    assert!(!env.exists("dest/latest"));
}

#[test]
fn a_stalled_upload_is_abandoned_after_the_idle_timeout() {
    let (env, server) = setup(&["--upload-idle-timeout", "1"]);
    let head = format!(
        "POST /v1/pipelines/weather/bundles HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {SECRET}\r\nContent-Type: application/x-tar\r\nContent-Length: 100000\r\n\r\n",
        server.addr
    );
    let start = Instant::now();
    let mut s = raw_request(&server.addr, &head, &[0u8; 3000]);
    let (status, reply) = read_response(&mut s);
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("upload_timeout"), "{reply}");
    assert!(reply.contains("after 3000 bytes"), "{reply}");
    // Not before the idle timeout: `start` was taken before the connection was made, so
    // the server's clock started later. (A reply at all, rather than the client's own
    // 30 s read timeout, is the stalled upload being abandoned.)
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert!(server.spool_leftovers().is_empty());
    assert!(!env.exists("dest/latest"));
}

/// With `--max-concurrent-uploads 1`, a second upload waits while the first holds the slot:
/// its body is not read (nothing spooled for it) and it is answered only after the first,
/// even though it is complete and the first is stalled. The server is seen to make it wait
/// (the `upload_waits_for_slot` failpoint, logged) before the first goes on.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn uploads_beyond_max_concurrent_uploads_wait_for_a_slot() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let failpoints = env.path("failpoints.log");
    let server = Server::start_env(
        &env,
        &[&w],
        &["--max-concurrent-uploads", "1"],
        &[("DISTRIBUTOR_FAILPOINT_LOG", failpoints.to_str().unwrap())],
    );
    let slow = tar_with_manifest("forecast", CREATED, &[("a.txt", b"one")], &[]);
    let head = format!(
        "POST /v1/pipelines/weather/bundles HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {SECRET}\r\nContent-Type: application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n",
        server.addr
    );
    let (first, rest) = slow.split_at(1024);
    let mut a = raw_request(&server.addr, &head, &chunk(first));
    let start = Instant::now();
    while server.spool_leftovers().is_empty() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        server.spool_leftovers().len(),
        1,
        "the first upload holds the slot"
    );
    let quick = tar_with_manifest(
        "forecast",
        "2026-12-02T07:00:00Z",
        &[("a.txt", b"two")],
        &[],
    );
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let (server, quick) = (&server, &quick);
        s.spawn(move || {
            let r = server.upload("weather", "", quick);
            tx.send(r).unwrap();
        });
        let start = Instant::now();
        while !std::fs::read_to_string(&failpoints)
            .is_ok_and(|t| t.lines().any(|l| l == "upload_waits_for_slot"))
        {
            assert!(
                rx.try_recv().is_err(),
                "the second upload was answered while the first held the only slot"
            );
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the second upload never waited for a slot"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // It waits for the slot now: it can be answered only once the first lets it go.
        assert!(
            rx.try_recv().is_err(),
            "the second upload was answered while the first held the only slot"
        );
        assert_eq!(
            server.spool_leftovers().len(),
            1,
            "the waiting upload was spooled"
        );
        a.write_all(&chunk(rest)).unwrap();
        a.write_all(b"0\r\n\r\n").unwrap();
        let (status, body) = read_response(&mut a);
        assert_eq!(status, 200, "{body}");
        let second = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        second.expect(200);
        assert_eq!(second.json()["destinations"][0]["status"], "applied");
    });
    assert_eq!(env.read("dest/latest/a.txt"), "two");
    let logs = server.wait_for_request_logs(2);
    let queued: Vec<u64> = logs
        .iter()
        .filter_map(|l| l["queued_ms"].as_u64())
        .collect();
    assert_eq!(queued.len(), 2, "{logs:?}");
    // The second waited for the whole of the first's publication.
    assert!(queued.iter().any(|&q| q > 0), "{queued:?}");
    assert!(server.spool_leftovers().is_empty());
}

/// A body over `--max-upload-bytes` from a caller without a valid token is answered for
/// the token (401, 403) and only a valid token learns it is too large (413): the limit is
/// checked after authentication.
#[test]
fn the_token_is_checked_before_the_body_size() {
    let env = Env::new();
    let (w, t) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w, &t], &["--max-upload-bytes", "5000"]);
    let big = tar_with_manifest("forecast", CREATED, &[("a.txt", &[b'x'; 8000])], &[]);
    let path = "/v1/pipelines/weather/bundles";
    let ct = Some("application/x-tar");
    let r = server.post_raw(path, None, ct, &big);
    r.expect(401);
    let r = server.post_raw(path, Some(OTHER_SECRET), ct, &big);
    r.expect(403);
    let r = server.post_raw(path, Some(SECRET), ct, &big);
    r.expect(413);
    assert_eq!(r.kind(), "too_large");
    assert!(server.spool_leftovers().is_empty());
    assert!(!env.exists("dest/latest"));
}

/// The manifest is parsed in memory, so it has a bound of its own: a gzip of a few
/// hundred KiB that unpacks to a 64 MiB manifest is refused (413) while unpacking.
#[test]
fn an_oversized_manifest_is_refused_while_unpacking() {
    let (env, server) = setup(&[]);
    let mut manifest = manifest_json("forecast", CREATED, &[("a.txt", b"one")]);
    manifest.resize((64 << 20) + 1, b' ');
    let body = gzip(&raw_tar(&[
        file("distributor-manifest.json", &manifest),
        file("a.txt", b"one"),
    ]));
    assert!(body.len() < 1 << 20, "{}", body.len());
    let r = server.post_raw(
        "/v1/pipelines/weather/bundles",
        Some(SECRET),
        Some("application/gzip"),
        &body,
    );
    r.expect(413);
    assert_eq!(r.kind(), "too_large");
    assert!(r.message().contains("largest manifest"), "{}", r.message());
    assert!(server.spool_leftovers().is_empty());
    assert!(!env.exists("dest/latest"));
}

/// An archive that lost its end (cut at an entry boundary, a gzip without its trailer or
/// with a wrong checksum) or has something appended is refused, though every entry in it
/// reads fine.
#[test]
fn an_archive_without_its_end_or_with_data_after_it_is_400() {
    let (env, server) = setup(&[]);
    let tar = tar_with_manifest("t", CREATED, &[("a.txt", b"one")], &[]);
    // The end of the last entry: the last non-zero byte, rounded up to a block.
    let last = tar.iter().rposition(|&b| b != 0).unwrap() + 1;
    let cut = last.div_ceil(512) * 512;
    assert!(cut + 1024 <= tar.len(), "the tar ends with two zero blocks");
    refused(
        &env,
        &server,
        &tar[..cut],
        400,
        "invalid_bundle",
        "no end-of-archive marker",
    );
    let mut appended = tar.clone();
    appended.extend_from_slice(b"and something else");
    refused(
        &env,
        &server,
        &appended,
        400,
        "invalid_bundle",
        "data follows",
    );
    let gz = gzip(&tar);
    refused(
        &env,
        &server,
        &gz[..gz.len() - 8],
        400,
        "invalid_bundle",
        "",
    );
    let mut bad_crc = gz.clone();
    let at = bad_crc.len() - 8;
    bad_crc[at] ^= 0xff;
    refused(&env, &server, &bad_crc, 400, "invalid_bundle", "");
    // The whole archive, as sent, is fine.
    server.upload("weather", "", &gz).expect(200);
    server.upload("weather", "", &tar).expect(200);
}
