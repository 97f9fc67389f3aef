//! `distributor serve` end to end: a real server on a loopback port, a real HTTP client.
//! Publishing, dry runs, authentication, parameters, status codes, logs and shutdown.

use crate::common::Env;
use crate::common::server::*;
use serde_json::Value;
use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[test]
fn upload_publishes_and_journals_the_token_name_never_the_secret() {
    let env = Env::new();
    let (w, t) = weather_and_traffic(&env);
    let mut server = Server::start(&env, &[&w, &t], &[]);
    let tar = tar_with_manifest(
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("forecast.json", b"{}"), ("maps/temp.png", b"png")],
        &[],
    );
    let r = server.upload("weather", "", &tar);
    r.expect(200);
    let report = r.json();
    assert_eq!(report["report_version"], 1);
    assert_eq!(report["dry_run"], false);
    assert_eq!(report["pipeline_id"], "weather");
    assert_eq!(report["destinations"][0]["decision"], "create");
    assert_eq!(report["destinations"][0]["status"], "applied");
    assert!(report.get("error").is_none(), "{report}");
    assert_eq!(env.read("dest/latest/forecast.json"), "{}");
    assert_eq!(env.read("dest/latest/maps/temp.png"), "png");
    assert_eq!(state_source_id(&env, "dest/latest"), "tomorrow");

    let ops = journal_operations(&env);
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].0, report["destinations"][0]["operation_id"]);
    assert_eq!(ops[0].1, "token:forecast-job");
    assert_eq!(ops[0].3, "applied");

    let logs = server.wait_for_request_logs(1);
    let line = &logs[0];
    assert_eq!(line["method"], "POST");
    assert_eq!(line["path"], "/v1/pipelines/weather/bundles");
    assert_eq!(line["status"], 200);
    assert_eq!(line["pipeline"], "weather");
    assert_eq!(line["token"], "forecast-job");
    assert_eq!(line["destinations"][0]["destination"], "latest");
    assert_eq!(line["destinations"][0]["decision"], "create");
    assert!(line["duration_ms"].is_number());
    assert_eq!(server.stop().code(), Some(0));
    assert!(!server.log_lines().join("\n").contains(SECRET));
    assert!(!journal_bytes(&env).contains(SECRET));
    assert!(server.spool_leftovers().is_empty());
}

#[test]
fn gzip_upload_of_a_bundle_made_by_distributor_manifest_publishes_links() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let dir = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("forecast.json", "{}"), ("maps/temp.png", "png")],
        &[("current.png", "maps/temp.png")],
    );
    let r = server.post_raw(
        "/v1/pipelines/weather/bundles",
        Some(SECRET),
        Some("application/gzip"),
        &gzip(&bundle_tar(&dir)),
    );
    r.expect(200);
    assert_eq!(
        r.json()["destinations"][0]["links"][0]["path"],
        "current.png"
    );
    assert_eq!(
        std::fs::read_link(env.path("dest/latest/current.png")).unwrap(),
        PathBuf::from("maps/temp.png")
    );
    // The same bundle again: unchanged, nothing journaled.
    let r = server.post_raw(
        "/v1/pipelines/weather/bundles",
        Some(SECRET),
        None,
        &bundle_tar(&dir),
    );
    r.expect(200);
    assert_eq!(r.json()["destinations"][0]["decision"], "unchanged");
    assert_eq!(journal_operations(&env).len(), 1);
}

#[test]
fn dry_run_plans_and_writes_nothing() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"a")], &[]);
    let r = server.upload("weather", "?dry_run=true", &tar);
    r.expect(200);
    let report = r.json();
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["destinations"][0]["status"], "planned");
    assert_eq!(report["destinations"][0]["decision"], "create");
    assert!(report["destinations"][0]["operation_id"].is_null());
    assert!(!env.exists("dest/latest"));
    assert!(journal_operations(&env).is_empty());
    // The real run's report matches the dry run's but for dry_run, status, operation id.
    let real = server.upload("weather", "?dry_run=false", &tar);
    real.expect(200);
    let mut a = report.clone();
    let mut b = real.json();
    for v in [&mut a, &mut b] {
        v["dry_run"] = Value::Null;
        v["destinations"][0]["status"] = Value::Null;
        v["destinations"][0]["operation_id"] = Value::Null;
    }
    assert_eq!(a, b);
}

#[test]
fn destination_parameter_selects_destinations_and_unknown_ones_are_refused() {
    let env = Env::new();
    let cfg = server_config(
        &env,
        "w.yaml",
        "weather",
        &[("a", "dest/a"), ("b", "dest/b")],
        &[("forecast-job", SECRET)],
    );
    let server = Server::start(&env, &[&cfg], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("x", b"x")], &[]);
    let r = server.upload("weather", "?destination=b", &tar);
    r.expect(200);
    assert_eq!(r.json()["destinations"].as_array().unwrap().len(), 1);
    assert!(env.exists("dest/b/x") && !env.exists("dest/a"));
    let r = server.upload("weather", "?destination=nope", &tar);
    r.expect(400);
    assert_eq!(r.kind(), "invalid_parameter");
    assert!(r.message().contains("'nope'") && r.message().contains("a, b"));
    assert!(
        !r.message().contains("w.yaml"),
        "no server paths: {}",
        r.message()
    );
}

#[test]
fn authentication_statuses() {
    let env = Env::new();
    let (w, t) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w, &t], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a", b"a")], &[]);
    let path = "/v1/pipelines/weather/bundles";
    let ct = Some("application/x-tar");
    let r = server.post_raw(path, None, ct, &tar);
    r.expect(401);
    assert_eq!(r.kind(), "unauthorized");
    server.post_raw(path, Some("wrong"), ct, &tar).expect(401);
    let r = server.post_raw(path, Some(OTHER_SECRET), ct, &tar);
    r.expect(403);
    assert_eq!(r.kind(), "forbidden");
    assert!(r.message().contains("traffic-job"));
    // Unknown pipeline: 404 for a valid token, 401 without one (no enumeration).
    let r = server.post_raw("/v1/pipelines/nope/bundles", Some(SECRET), ct, &tar);
    r.expect(404);
    assert_eq!(r.kind(), "unknown_pipeline");
    server
        .post_raw("/v1/pipelines/nope/bundles", None, ct, &tar)
        .expect(401);
    // A non-bearer scheme is not a token.
    let mut resp = Server::agent()
        .post(server.url(path))
        .header("Authorization", "Basic d2VhdGhlcjpzZWNyZXQ=")
        .send(&tar[..])
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(
        resp.headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer realm=\"distributor\"")
    );
    assert!(
        resp.body_mut()
            .read_to_string()
            .unwrap()
            .contains("unauthorized")
    );
    // The destinations view takes the same checks.
    server
        .get("/v1/pipelines/weather/destinations", None)
        .expect(401);
    server
        .get("/v1/pipelines/weather/destinations", Some(OTHER_SECRET))
        .expect(403);
    server.get("/v1/health", None).expect(200);
    assert!(!env.exists("dest/latest"));
    let logs = server.wait_for_request_logs(9);
    let forbidden = logs.iter().find(|l| l["status"] == 403).unwrap();
    assert_eq!(forbidden["token"], "traffic-job");
    let all = server.log_lines().join("\n");
    assert!(!all.contains(SECRET) && !all.contains(OTHER_SECRET) && !all.contains("d2Vh"));
}

#[test]
fn producers_cannot_choose_ownership_takeover_transfer_or_force() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a", b"a")], &[]);
    for q in [
        "?force=true",
        "?takeover=any_managed",
        "?on_conflict=replace",
        "?transfer.destination_newer=conflict",
        "?owner=weather/old",
        "?dry_run=true&force=1",
    ] {
        let r = server.upload("weather", q, &tar);
        r.expect(400);
        assert_eq!(r.kind(), "forbidden_parameter", "{q}");
    }
    let r = server.upload("weather", "?colour=red", &tar);
    r.expect(400);
    assert_eq!(r.kind(), "invalid_parameter");
    assert!(r.message().contains("dry_run and destination"));
    assert!(!env.exists("dest/latest"));
    assert!(journal_operations(&env).is_empty());
}

#[test]
fn conflict_is_409_with_the_report_and_writes_nothing() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    env.write("dest/latest/a.txt", "hand-made");
    let server = Server::start(&env, &[&w], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"new")], &[]);
    let r = server.upload("weather", "", &tar);
    r.expect(409);
    assert_eq!(r.kind(), "conflict");
    let report = r.json();
    assert_eq!(report["destinations"][0]["decision"], "conflict");
    assert_eq!(
        report["destinations"][0]["conflicts"][0]["kind"],
        "unmanaged_content"
    );
    assert_eq!(env.read("dest/latest/a.txt"), "hand-made");
    // A dry run reaches the same verdict.
    server.upload("weather", "?dry_run=true", &tar).expect(409);
    // The refused upload is journaled, the dry run is not.
    let ops = journal_operations(&env);
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].3, "refused");
}

#[test]
fn pending_recovery_is_423() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let first = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    server.upload("weather", "", &first).expect(200);
    env.write("dest/latest/.distributor-staging/leftover/x", "half-done");
    let second = tar_with_manifest("t", "2026-12-02T07:00:00Z", &[("a.txt", b"two")], &[]);
    let r = server.upload("weather", "", &second);
    r.expect(423);
    assert_eq!(r.kind(), "recovery_required");
    assert!(
        r.message().contains("distributor recover"),
        "{}",
        r.message()
    );
    assert_eq!(r.json()["destinations"][0]["status"], "failed");
    assert_eq!(env.read("dest/latest/a.txt"), "one");
}

#[test]
fn an_unusable_journal_is_500() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", env.journal().display()));
    }
    std::fs::create_dir_all(env.journal()).unwrap();
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    let r = server.upload("weather", "", &tar);
    r.expect(500);
    assert_eq!(r.kind(), "journal");
    assert!(!env.exists("dest/latest/a.txt"));
    assert!(server.spool_leftovers().is_empty());
}

#[test]
fn destinations_view_summarises_state() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let r = server.get("/v1/pipelines/weather/destinations", Some(SECRET));
    r.expect(200);
    assert_eq!(r.json()["destinations"][0]["state"], "absent");
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    server.upload("weather", "", &tar).expect(200);
    let v = server
        .get("/v1/pipelines/weather/destinations", Some(SECRET))
        .json();
    assert_eq!(v["pipeline_id"], "weather");
    let d = &v["destinations"][0];
    assert_eq!(d["destination_id"], "latest");
    assert_eq!(d["state"], "valid");
    assert_eq!(d["owners"][0]["owner"], "weather/latest");
    assert_eq!(d["owners"][0]["source"]["id"], "t");
    assert_eq!(d["owners"][0]["outputs"], 1);
    assert_eq!(d["recovery_pending"], false);
}

#[test]
fn unknown_routes_and_methods_answer_json_errors() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let r = server.get("/v2/whatever", None);
    r.expect(404);
    assert_eq!(r.kind(), "not_found");
    let r = server.get("/v1/pipelines/weather/bundles", Some(SECRET));
    r.expect(405);
    assert_eq!(r.kind(), "method_not_allowed");
    let h = server.get("/v1/health", None);
    h.expect(200);
    assert_eq!(h.json()["status"], "ok");
}

#[test]
fn refuses_to_start_on_bad_setups() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let open = server_config(&env, "open.yaml", "open", &[("d", "dest/open")], &[]);
    let twin = server_config(
        &env,
        "twin.yaml",
        "weather",
        &[("d", "dest/twin")],
        &[("x", "y")],
    );
    let bad = env.config(
        "bad.yaml",
        "version: 1\npipeline:\n  id: Bad Id\ndestinations: []\n",
    );
    let serve = |args: &[&str]| {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0", "--spool"];
        let spool = env.path("spool");
        all.push(spool.to_str().unwrap());
        all.extend_from_slice(args);
        env.run(&all)
    };
    let r = serve(&["--config", open.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stderr.contains("no upload token") && r.stderr.contains("--allow-unauthenticated"));
    let r = serve(&[
        "--config",
        w.to_str().unwrap(),
        "--config",
        twin.to_str().unwrap(),
    ]);
    r.expect_code(2);
    assert!(r.stderr.contains("already served"), "{}", r.stderr);
    let r = serve(&["--config", bad.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stderr.contains("bad.yaml"), "{}", r.stderr);
    let r = env.run(&[
        "serve",
        "--config",
        open.to_str().unwrap(),
        "--allow-unauthenticated",
        "--listen",
        "0.0.0.0:0",
    ]);
    r.expect_code(2);
    assert!(r.stderr.contains("loopback"), "{}", r.stderr);
    let r = env.run(&[
        "serve",
        "--config",
        w.to_str().unwrap(),
        "--listen",
        "nonsense",
    ]);
    r.expect_code(2);
    assert!(r.stderr.contains("--listen nonsense"), "{}", r.stderr);
    // A limit of zero would refuse every upload.
    for flag in [
        "--max-upload-bytes",
        "--max-entries",
        "--max-extracted-bytes",
        "--upload-idle-timeout",
        "--max-concurrent-uploads",
    ] {
        let r = serve(&["--config", w.to_str().unwrap(), flag, "0"]);
        r.expect_code(2);
        assert!(
            r.stderr
                .contains(&format!("{flag} 0: accepted is a number >= 1")),
            "{}",
            r.stderr
        );
    }
    // A second server on the same spool is refused.
    let _first = Server::start(&env, &[&w], &[]);
    let r = serve(&["--config", w.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stderr.contains("in use"), "{}", r.stderr);
}

#[test]
fn allow_unauthenticated_serves_tokenless_pipelines_on_loopback() {
    let env = Env::new();
    let open = server_config(&env, "open.yaml", "open", &[("d", "dest/open")], &[]);
    let server = Server::start(&env, &[&open], &["--allow-unauthenticated"]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    let r = server.post_raw(
        "/v1/pipelines/open/bundles",
        None,
        Some("application/x-tar"),
        &tar,
    );
    r.expect(200);
    assert_eq!(journal_operations(&env)[0].1, "unauthenticated");
    // A wrong token is still refused rather than ignored.
    server
        .post_raw("/v1/pipelines/open/bundles", Some("guess"), None, &tar)
        .expect(401);
    server
        .post_raw("/v1/pipelines/nope/bundles", None, None, &tar)
        .expect(404);
}

#[test]
fn sigterm_during_an_upload_finishes_it_and_exits_0() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let mut server = Server::start(&env, &[&w], &[]);
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    let head = format!(
        "POST /v1/pipelines/weather/bundles HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {SECRET}\r\nContent-Type: application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n",
        server.addr
    );
    let (first, rest) = tar.split_at(1024);
    let mut s = raw_request(&server.addr, &head, &chunk(first));
    // The upload is in flight once the server has taken a slot and made its spool entry.
    let start = Instant::now();
    while server.spool_leftovers().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the upload never reached the spool"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    server.signal_term();
    // The server stops accepting: new connections are refused once it has seen the signal.
    let start = Instant::now();
    while TcpStream::connect(&server.addr).is_ok() {
        assert!(start.elapsed() < Duration::from_secs(60), "still accepting");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.child_running(), "exited with an upload in flight");
    s.write_all(&chunk(rest)).unwrap();
    s.write_all(b"0\r\n\r\n").unwrap();
    let (status, body) = read_response(&mut s);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"applied\""), "{body}");
    drop(s);
    assert_eq!(server.wait_exit(30).code(), Some(0));
    assert_eq!(env.read("dest/latest/a.txt"), "one");
    assert!(server.spool_leftovers().is_empty());
    let lines = server.log_lines().join("\n");
    assert!(lines.contains("\"shutdown\"") && lines.contains("\"stopped\""));
}

/// A client that sends half a request head and then nothing is dropped after
/// `--upload-idle-timeout`, so it neither holds its connection nor a graceful shutdown.
#[test]
fn a_stalled_request_head_is_dropped_and_does_not_hold_shutdown() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let mut server = Server::start(&env, &[&w], &["--upload-idle-timeout", "1"]);
    let half = "POST /v1/pipelines/weather/bundles HTTP/1.1\r\nHost: x\r\n";
    // Without a shutdown: the server closes the connection (the read ends, rather than
    // running into the client's own 30 s read timeout), and not before the idle timeout
    // (counted from before the connection was made, so the server's clock started later).
    let start = Instant::now();
    let mut s = raw_request(&server.addr, half, b"");
    let mut buf = [0u8; 512];
    let read = std::io::Read::read(&mut s, &mut buf);
    let waited = start.elapsed();
    let timed_out = read.as_ref().is_err_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    });
    assert!(
        !timed_out,
        "the stalled head was not dropped: {read:?} after {waited:?}"
    );
    assert!(
        waited >= Duration::from_millis(900),
        "dropped after {waited:?}"
    );
    // During a shutdown: SIGTERM with a stalled head in flight still exits 0. The server
    // is seen to hold the connection first: it answers a whole request on it, and the
    // stalled head is the next request on the same connection.
    let mut s = raw_request(
        &server.addr,
        "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"",
    );
    let (status, body) = read_response(&mut s);
    assert_eq!(status, 200, "{body}");
    s.write_all(half.as_bytes()).unwrap();
    s.flush().unwrap();
    server.signal_term();
    assert_eq!(server.wait_exit(30).code(), Some(0));
}

/// The lock a publication through `serve` holds names the token's actor (SPEC §16): the
/// lock record, read while the publication is paused after its staging record, says
/// `token:<name>` and the operation, not the server process's own user.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature")]
fn a_served_publication_holds_its_lock_as_the_tokens_actor() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let pause = env.path("pause");
    std::fs::create_dir_all(&pause).unwrap();
    let server = Server::start_env(
        &env,
        &[&w],
        &[],
        &[
            ("DISTRIBUTOR_FAILPOINT", "after_staging_record=pause"),
            ("DISTRIBUTOR_FAILPOINT_PAUSE", pause.to_str().unwrap()),
        ],
    );
    let tar = tar_with_manifest("t", "2026-12-02T06:00:00Z", &[("a.txt", b"one")], &[]);
    std::thread::scope(|s| {
        let upload = s.spawn(|| server.upload("weather", "", &tar));
        let paused = pause.join("after_staging_record.paused");
        let start = Instant::now();
        while !paused.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the publication never reached its staging record"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let lock: Value = serde_json::from_str(&env.read("dest/latest/.distributor.lock")).unwrap();
        assert_eq!(lock["actor"], "token:forecast-job", "{lock}");
        assert_eq!(lock["pid"], server.child.id(), "{lock}");
        let op = lock["operation"].as_str().unwrap_or_default().to_string();
        assert!(uuid_like(&op), "{lock}");
        std::fs::write(pause.join("after_staging_record.resume"), "").unwrap();
        let r = upload.join().unwrap();
        r.expect(200);
        assert_eq!(r.json()["destinations"][0]["operation_id"], op.as_str());
    });
    assert_eq!(env.read("dest/latest/a.txt"), "one");
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.bytes().filter(|&b| b == b'-').count() == 4
}
