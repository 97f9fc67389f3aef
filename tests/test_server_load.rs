//! `distributor serve` under concurrency: uploads racing for one destination are
//! serialized by its lock, and a load of 200+ uploads from 16 clients is answered in full
//! with journal, state and spool consistent afterwards.

use crate::common::Env;
use crate::common::server::{Server, journal_operations, server_config, tar_with_manifest};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One upload's outcome: HTTP status and the report.
struct Outcome {
    status: u16,
    report: Value,
}

/// Source `n`: id `load`, created at base + n seconds, one file whose content names n.
fn upload_n(n: usize) -> Vec<u8> {
    let created = chrono::DateTime::parse_from_rfc3339("2026-12-02T06:00:00Z").unwrap()
        + chrono::Duration::seconds(n as i64);
    let created = created.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let content = format!("upload {n}\n");
    let other = format!("extra {n}\n");
    tar_with_manifest(
        "load",
        &created,
        &[
            ("data.txt", content.as_bytes()),
            (&format!("per/{}.txt", n % 3), other.as_bytes()),
        ],
        &[],
    )
}

/// Runs `total` uploads from `clients` threads, each taking the next number.
fn run_load(server: &Server, total: usize, clients: usize) -> Vec<(usize, Outcome)> {
    let next = Arc::new(Mutex::new(0usize));
    let results = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        for _ in 0..clients {
            let next = Arc::clone(&next);
            let results = Arc::clone(&results);
            s.spawn(move || {
                loop {
                    let n = {
                        let mut g = next.lock().unwrap();
                        if *g >= total {
                            break;
                        }
                        *g += 1;
                        *g - 1
                    };
                    let r = server.upload("weather", "", &upload_n(n));
                    let report = serde_json::from_str(&r.body).unwrap_or(Value::Null);
                    results.lock().unwrap().push((
                        n,
                        Outcome {
                            status: r.status,
                            report,
                        },
                    ));
                }
            });
        }
    });
    Arc::try_unwrap(results).ok().unwrap().into_inner().unwrap()
}

/// Checks every destination's final state and the journal against the replies.
fn check_consistency(env: &Env, results: &[(usize, Outcome)], dests: &[(&str, &str)]) {
    let ops = journal_operations(env);
    let mut applied_ops = HashSet::new();
    for (n, o) in results {
        assert_eq!(o.status, 200, "upload {n}: {}", o.report);
        for d in o.report["destinations"].as_array().unwrap() {
            let status = d["status"].as_str().unwrap();
            match status {
                "applied" => {
                    assert!(applied_ops.insert(d["operation_id"].as_str().unwrap().to_string()));
                }
                "skipped" => assert!(
                    ["skip_destination_newer", "unchanged"]
                        .contains(&d["decision"].as_str().unwrap()),
                    "{d}"
                ),
                other => panic!("upload {n}: unexpected status {other}: {d}"),
            }
        }
    }
    // Every applied reply is one finished operation in the journal, and nothing else is.
    assert_eq!(
        ops.len(),
        applied_ops.len(),
        "journal rows vs applied replies"
    );
    for (op, actor, _, status) in &ops {
        assert!(
            applied_ops.contains(op),
            "journal has an operation no reply reported"
        );
        assert_eq!(status, "applied");
        assert_eq!(actor, "token:forecast-job");
    }
    // The newest source wins everywhere: an older upload arriving late is skipped.
    let newest = results.iter().map(|(n, _)| *n).max().unwrap();
    for (id, rel) in dests {
        let state: Value =
            serde_json::from_str(&env.read(&format!("{rel}/.distributor.json"))).unwrap();
        let expected = chrono::DateTime::parse_from_rfc3339("2026-12-02T06:00:00Z").unwrap()
            + chrono::Duration::seconds(newest as i64);
        let created =
            chrono::DateTime::parse_from_rfc3339(state["source"]["created_at"].as_str().unwrap())
                .unwrap();
        assert_eq!(created, expected, "destination {id}");
        assert_eq!(
            env.read(&format!("{rel}/data.txt")),
            format!("upload {newest}\n")
        );
        let recorded: Vec<&str> = state["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            recorded,
            vec!["data.txt", &format!("per/{}.txt", newest % 3)],
            "state of {id}"
        );
        for k in 0..3 {
            let p = format!("{rel}/per/{k}.txt");
            assert_eq!(
                env.exists(&p),
                k == newest % 3,
                "{p}: only the newest's file"
            );
        }
        assert!(!env.staging_left(rel));
    }
}

#[test]
fn concurrent_uploads_to_one_destination_are_serialized() {
    let env = Env::new();
    let cfg = server_config(
        &env,
        "w.yaml",
        "weather",
        &[("latest", "dest/latest")],
        &[("forecast-job", crate::common::server::SECRET)],
    );
    let server = Server::start(&env, &[&cfg], &[]);
    let results = run_load(&server, 24, 8);
    assert_eq!(results.len(), 24);
    check_consistency(&env, &results, &[("latest", "dest/latest")]);
    assert!(server.spool_leftovers().is_empty());
}

#[test]
fn load_of_200_uploads_from_16_clients_is_answered_and_consistent() {
    let env = Env::new();
    let dests = [("latest", "dest/latest"), ("archive", "dest/archive")];
    let cfg = server_config(
        &env,
        "w.yaml",
        "weather",
        &dests,
        &[("forecast-job", crate::common::server::SECRET)],
    );
    let mut server = Server::start(&env, &[&cfg], &[]);
    let start = Instant::now();
    let results = run_load(&server, 200, 16);
    let elapsed = start.elapsed();
    eprintln!(
        "load: 200 uploads from 16 clients in {:.2}s ({:.1} uploads/s)",
        elapsed.as_secs_f64(),
        200.0 / elapsed.as_secs_f64()
    );
    assert_eq!(results.len(), 200, "every request answered");
    let numbers: HashSet<usize> = results.iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers.len(), 200, "none lost or doubled");
    check_consistency(&env, &results, &dests);
    // One log line per request.
    let logs = server.wait_for_request_logs(200);
    assert_eq!(logs.len(), 200);
    assert!(logs.iter().all(|l| l["status"] == 200));
    assert!(server.spool_leftovers().is_empty());
    assert_eq!(server.stop().code(), Some(0));
}
