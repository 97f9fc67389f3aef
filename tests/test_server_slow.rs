//! `distributor serve` under slow clients (issue 16, item 5): an upload whose body
//! trickles is cut off with 408 by `--upload-min-rate` (averaged over
//! `--upload-rate-window`), one that keeps the rate but takes too long by
//! `--upload-deadline`; either way its spool is removed and its upload slot comes free,
//! so a legitimate upload queued behind slow ones is answered. Real sockets on 127.0.0.1
//! with windows of a second or two, so every test ends in seconds; the only waits are
//! bounds for correctness.

use crate::common::Env;
use crate::common::server::{
    SECRET, Server, journal_operations, raw_request, read_response, tar_with_manifest,
    weather_and_traffic,
};
use serde_json::Value;
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const CREATED: &str = "2026-12-02T06:00:00Z";

/// How long a test waits for something that must happen (a reply, a spool removed).
const BOUND: Duration = Duration::from_secs(20);

/// An upload on a raw socket whose body goes out in pieces of `piece` bytes, one every
/// `every`, from its own thread, until the body is sent, the server closes the
/// connection, or this is dropped.
struct PacedUpload {
    reader: TcpStream,
    stop: Arc<AtomicBool>,
    sender: Option<JoinHandle<()>>,
}

impl PacedUpload {
    fn start(addr: &str, body: Vec<u8>, piece: usize, every: Duration) -> PacedUpload {
        let head = format!(
            "POST /v1/pipelines/weather/bundles HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {SECRET}\r\nContent-Type: application/x-tar\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let reader = raw_request(addr, &head, b"");
        reader.set_read_timeout(Some(BOUND)).unwrap();
        let mut writer = reader.try_clone().expect("clone socket");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let sender = std::thread::spawn(move || {
            for p in body.chunks(piece) {
                if stopped.load(Ordering::Relaxed) || writer.write_all(p).is_err() {
                    return;
                }
                std::thread::sleep(every);
            }
        });
        PacedUpload {
            reader,
            stop,
            sender: Some(sender),
        }
    }

    /// One byte every 200 ms of a 100,000-byte body: it never stalls for the idle
    /// timeout, and never ends.
    fn trickle(addr: &str) -> PacedUpload {
        PacedUpload::start(addr, vec![0; 100_000], 1, Duration::from_millis(200))
    }

    /// The reply: status and JSON body.
    fn reply(&mut self) -> (u16, Value) {
        let (status, body) = read_response(&mut self.reader);
        let json = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("reply is not JSON ({e}): {body}"));
        (status, json)
    }
}

impl Drop for PacedUpload {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.reader.shutdown(Shutdown::Both);
        if let Some(t) = self.sender.take() {
            let _ = t.join();
        }
    }
}

fn setup(extra: &[&str]) -> (Env, Server) {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], extra);
    (env, server)
}

/// Waits (at most [`BOUND`]) until the spool holds `n` request directories; returns them.
fn wait_for_spool(server: &Server, n: usize) -> Vec<String> {
    let start = Instant::now();
    loop {
        let left = server.spool_leftovers();
        if left.len() == n || start.elapsed() > BOUND {
            return left;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `listening` log line (the harness learns the address from it a moment before it
/// is stored with the others).
fn listening_line(server: &Server) -> Value {
    let start = Instant::now();
    loop {
        let line = server
            .log_lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["event"] == "listening");
        match line {
            Some(v) => return v,
            None if start.elapsed() < BOUND => std::thread::sleep(Duration::from_millis(10)),
            None => panic!("no listening line: {:?}", server.log_lines()),
        }
    }
}

fn kind(reply: &Value) -> &str {
    reply["error"]["kind"].as_str().unwrap_or_default()
}

fn message(reply: &Value) -> &str {
    reply["error"]["message"].as_str().unwrap_or_default()
}

#[test]
fn a_trickling_upload_is_cut_with_408_and_its_spool_removed() {
    let (env, server) = setup(&["--upload-rate-window", "1", "--upload-min-rate", "1024"]);
    let listening = listening_line(&server);
    assert_eq!(listening["upload_min_rate"], 1024, "{listening}");
    assert_eq!(listening["upload_rate_window_secs"], 1.0, "{listening}");
    assert_eq!(listening["upload_deadline_secs"], 1800.0, "{listening}");

    let mut slow = PacedUpload::trickle(&server.addr);
    let spooled = wait_for_spool(&server, 1);
    assert_eq!(spooled.len(), 1, "the trickling upload is spooled");
    let (status, reply) = slow.reply();
    assert_eq!(status, 408, "{reply}");
    assert_eq!(kind(&reply), "upload_too_slow", "{reply}");
    assert!(message(&reply).contains("--upload-min-rate"), "{reply}");
    assert!(
        !message(&reply).contains(&server.spool.display().to_string()),
        "spool path leaked: {reply}"
    );
    // Its spool directory is gone (removed as the reply goes; waited for, bounded).
    assert!(wait_for_spool(&server, 0).is_empty(), "spool left");
    assert!(!server.spool.join(&spooled[0]).exists());
    let logs = server.wait_for_request_logs(1);
    assert_eq!(logs[0]["status"], 408, "{logs:?}");
    assert_eq!(logs[0]["error_kind"], "upload_too_slow", "{logs:?}");
    assert!(!env.exists("dest/latest"));
    assert!(journal_operations(&env).is_empty());
    // The server goes on serving.
    drop(slow);
    let tar = tar_with_manifest("forecast", CREATED, &[("a.txt", b"one")], &[]);
    server.upload("weather", "", &tar).expect(200);
    assert_eq!(env.read("dest/latest/a.txt"), "one");
}

/// The scenario: every upload slot is held by a client trickling its body; a
/// legitimate upload waits for a slot, and gets one once the slow ones are cut.
#[test]
fn a_legitimate_upload_is_answered_while_trickling_clients_hold_every_slot() {
    let (env, server) = setup(&[
        "--max-concurrent-uploads",
        "4",
        "--upload-rate-window",
        "3",
        "--upload-min-rate",
        "1024",
    ]);
    let mut slow: Vec<PacedUpload> = (0..4).map(|_| PacedUpload::trickle(&server.addr)).collect();
    assert_eq!(wait_for_spool(&server, 4).len(), 4, "four slots held");
    let tar = tar_with_manifest("forecast", CREATED, &[("a.txt", b"legitimate")], &[]);
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let (server, tar) = (&server, &tar);
        s.spawn(move || tx.send(server.upload("weather", "", tar)).unwrap());
        let legitimate = rx
            .recv_timeout(BOUND)
            .expect("the legitimate upload was not answered while slow clients held the slots");
        legitimate.expect(200);
        assert_eq!(legitimate.json()["destinations"][0]["status"], "applied");
    });
    for s in &mut slow {
        let (status, reply) = s.reply();
        assert_eq!(status, 408, "{reply}");
        assert_eq!(kind(&reply), "upload_too_slow", "{reply}");
    }
    assert_eq!(env.read("dest/latest/a.txt"), "legitimate");
    let logs = server.wait_for_request_logs(5);
    let ok: Vec<&Value> = logs.iter().filter(|l| l["status"] == 200).collect();
    assert_eq!(ok.len(), 1, "{logs:?}");
    // It really waited for a slot: the slow ones held all four when it came.
    assert!(ok[0]["queued_ms"].as_u64().unwrap() > 0, "{:?}", ok[0]);
    assert_eq!(logs.iter().filter(|l| l["status"] == 408).count(), 4);
    assert!(wait_for_spool(&server, 0).is_empty(), "spool left");
}

#[test]
fn an_upload_above_the_minimum_rate_is_never_cut() {
    let (env, server) = setup(&["--upload-rate-window", "1", "--upload-min-rate", "1024"]);
    // About 44 KiB in 4 KiB pieces every 250 ms: 16 KiB/s, sixteen times the minimum,
    // over about three windows.
    let content = vec![b'x'; 40 * 1024];
    let tar = tar_with_manifest("forecast", CREATED, &[("big.txt", &content)], &[]);
    let mut upload =
        PacedUpload::start(&server.addr, tar.clone(), 4096, Duration::from_millis(250));
    let (status, reply) = upload.reply();
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["destinations"][0]["status"], "applied", "{reply}");
    assert_eq!(env.read("dest/latest/big.txt").len(), content.len());
    let logs = server.wait_for_request_logs(1);
    assert_eq!(logs[0]["upload_bytes"], tar.len(), "{logs:?}");
    assert!(wait_for_spool(&server, 0).is_empty(), "spool left");
}

#[test]
fn the_deadline_cuts_an_upload_that_keeps_the_rate() {
    let (env, server) = setup(&[
        "--upload-deadline",
        "2",
        "--upload-rate-window",
        "1",
        "--upload-min-rate",
        "1024",
    ]);
    // 4 KiB every 100 ms (40 KiB/s, forty times the minimum) of a 10 MB body: it would
    // take four minutes.
    let start = Instant::now();
    let mut upload = PacedUpload::start(
        &server.addr,
        vec![0; 10_000_000],
        4096,
        Duration::from_millis(100),
    );
    assert_eq!(wait_for_spool(&server, 1).len(), 1);
    let (status, reply) = upload.reply();
    assert_eq!(status, 408, "{reply}");
    assert_eq!(kind(&reply), "upload_deadline", "{reply}");
    assert!(message(&reply).contains("--upload-deadline"), "{reply}");
    // Not before the deadline: the rate was kept all along.
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert!(wait_for_spool(&server, 0).is_empty(), "spool left");
    assert!(!env.exists("dest/latest"));
    let logs = server.wait_for_request_logs(1);
    assert_eq!(logs[0]["error_kind"], "upload_deadline", "{logs:?}");
}

#[test]
fn bad_slow_client_flags_are_usage_errors_naming_the_flag() {
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let spool = env.path("spool");
    let serve = |args: &[&str]| {
        let mut all = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--spool",
            spool.to_str().unwrap(),
            "--config",
            w.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        env.run(&all)
    };
    for flag in [
        "--upload-min-rate",
        "--upload-rate-window",
        "--upload-deadline",
    ] {
        let r = serve(&[flag, "0"]);
        r.expect_code(2);
        assert!(
            r.stderr
                .contains(&format!("{flag} 0: accepted is a number >= 1")),
            "{}",
            r.stderr
        );
        for bad in ["abc", "-5", "1.5"] {
            let r = serve(&[&format!("{flag}={bad}")]);
            r.expect_code(2);
            assert!(r.stderr.contains(flag), "{flag}={bad}: {}", r.stderr);
        }
    }
    // A window longer than the deadline would never be measured.
    let r = serve(&["--upload-rate-window", "60", "--upload-deadline", "30"]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("--upload-rate-window 60") && r.stderr.contains("--upload-deadline 30"),
        "{}",
        r.stderr
    );
    // None of them started a server.
    assert!(!spool.join(".distributor-serve.lock").exists());
}
