//! Metrics (SPEC §20): `serve`'s `/metrics` on its own listener, and `--metrics-file` in
//! node_exporter's textfile format, read by a real Prometheus (scraping `serve`) and a
//! real node_exporter (its textfile collector) when they are installed (`.ci/run`
//! installs them; `DISTRIBUTOR_REQUIRE_PROMETHEUS=1` makes their absence a failure).

use crate::common::Env;
use crate::common::server::{Server, tar_with_manifest};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const T6: &str = "2026-12-02T06:00:00Z";

fn get(url: &str) -> (u16, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    // Not listening yet (a daemon starting): no answer.
    let Ok(mut r) = agent.get(url).call() else {
        return (0, String::new(), String::new());
    };
    let ct = (r.headers().get("content-type"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (
        r.status().as_u16(),
        ct,
        r.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// The value of the series `name{labels}` (labels given as they are written) in a text
/// exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// `serve` counts publications, files, bytes, conflicts and refused uploads, per
/// configured pipeline and destination only, on its own listener.
#[test]
fn serve_exposes_metrics_on_its_own_listener() {
    let env = Env::new();
    let (w, _) = crate::common::server::weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let metrics = server.metrics_addr.clone().expect("a metrics listener");
    assert_ne!(metrics, server.addr);
    let tar = tar_with_manifest(T6, T6, &[("a.txt", b"one"), ("b.txt", b"two!")], &[]);
    server.upload("weather", "", &tar).expect(200);
    // A hand-made file where the next bundle puts one: a conflict.
    env.write("dest/latest/c.txt", "hand-made");
    let tar2 = tar_with_manifest("t2", "2026-12-02T07:00:00Z", &[("c.txt", b"three")], &[]);
    assert_eq!(server.upload("weather", "", &tar2).status, 409);
    // Refused before publishing: a bad token.
    let r = server.post_raw(
        "/v1/pipelines/weather/bundles",
        Some("not-the-token"),
        Some("application/x-tar"),
        &tar,
    );
    assert_eq!(r.status, 401, "{}", r.body);

    let (status, ct, text) = get(&format!("http://{metrics}/metrics"));
    assert_eq!(status, 200);
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let d = "pipeline=\"weather\",destination=\"latest\"";
    assert_eq!(
        sample(
            &text,
            &format!("distributor_publications_total{{{d},outcome=\"applied\"}}")
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!("distributor_files_written_total{{{d}}}")),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!("distributor_bytes_written_total{{{d}}}")),
        Some(7.0),
        "{text}"
    );
    assert!(
        text.contains("distributor_publication_duration_seconds_bucket{le=\"0.1\""),
        "{text}"
    );
    assert!(
        text.contains("distributor_lock_wait_seconds_count 2"),
        "{text}"
    );
    assert!(text.contains("distributor_build_info{version=\""), "{text}");
    assert_eq!(
        sample(
            &text,
            &format!("distributor_publications_total{{{d},outcome=\"conflict\"}}")
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!("distributor_conflicts_total{{{d},kind=\"unmanaged_content\"}}")
        ),
        Some(1.0),
        "{text}"
    );
    let rejected: f64 = text
        .lines()
        .filter(|l| l.starts_with("distributor_uploads_rejected_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert_eq!(rejected, 1.0, "{text}");
    // Nothing a request carried, and no path, is a label.
    for never in [
        "not-the-token",
        "a.txt",
        env.root.to_str().unwrap(),
        crate::common::server::SECRET,
    ] {
        assert!(!text.contains(never), "{never} in the metrics:\n{text}");
    }
    // The upload listener does not serve /metrics.
    assert_eq!(get(&format!("http://{}/metrics", server.addr)).0, 404);
}

/// `--no-metrics`: no metrics listener.
#[test]
fn no_metrics_means_no_listener() {
    let env = Env::new();
    let (w, _) = crate::common::server::weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &["--no-metrics"]);
    assert_eq!(server.metrics_addr, None);
}

/// `--metrics-file`: the §20 gauges per destination, last success carried over across
/// runs and destinations, written whole (no temporary file left).
#[test]
fn metrics_file_holds_the_last_run_per_destination() {
    let env = Env::new();
    let cfg = env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: latest\n    path: {}\n  - id: copy\n    path: {}\n",
            env.path("dest/latest").display(),
            env.path("dest/copy").display()
        ),
    );
    let prom = env.path("textfile/distributor.prom");
    std::fs::create_dir_all(prom.parent().unwrap()).unwrap();
    let b = env.bundle("b", "site", T6, &[("a.txt", "1"), ("b.txt", "2")], &[]);
    let run = |extra: &[&str]| {
        let mut args = vec![
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
            "--metrics-file",
            prom.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        env.run(&args)
    };
    run(&[]).expect_code(0);
    let first = std::fs::read_to_string(&prom).unwrap();
    let l = |d: &str| format!("{{command=\"publish\",pipeline=\"weather\",destination=\"{d}\"}}");
    assert_eq!(
        sample(
            &first,
            &format!("distributor_last_run_files_written{}", l("latest"))
        ),
        Some(2.0),
        "{first}"
    );
    assert_eq!(
        sample(
            &first,
            &format!("distributor_last_run_exit_code{}", l("copy"))
        ),
        Some(0.0),
        "{first}"
    );
    let success = sample(
        &first,
        &format!("distributor_last_success_timestamp_seconds{}", l("copy")),
    )
    .unwrap();
    assert!(success > 1.7e9, "{first}");
    assert!(
        first.contains("# HELP distributor_last_run_duration_seconds"),
        "{first}"
    );
    // Now only `latest`, refused for a hand-made file: its last success stays, and so
    // does `copy`'s, which this run did not touch.
    env.write("dest/latest/c.txt", "hand-made");
    let b2 = env.bundle(
        "b",
        "site",
        "2026-12-02T07:00:00Z",
        &[("a.txt", "1"), ("c.txt", "3")],
        &[],
    );
    let r = env.run(&[
        "publish",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        b2.to_str().unwrap(),
        "--destination",
        "latest",
        "--metrics-file",
        prom.to_str().unwrap(),
    ]);
    r.expect_code(3);
    let second = std::fs::read_to_string(&prom).unwrap();
    assert_eq!(
        sample(
            &second,
            &format!("distributor_last_run_exit_code{}", l("latest"))
        ),
        Some(3.0),
        "{second}"
    );
    assert_eq!(
        sample(
            &second,
            &format!("distributor_last_run_conflicts{}", l("latest"))
        ),
        Some(1.0),
        "{second}"
    );
    assert_eq!(
        sample(
            &second,
            &format!("distributor_last_success_timestamp_seconds{}", l("copy"))
        ),
        Some(success),
        "{second}"
    );
    assert_eq!(
        sample(
            &second,
            &format!("distributor_last_success_timestamp_seconds{}", l("latest"))
        ),
        sample(
            &first,
            &format!("distributor_last_success_timestamp_seconds{}", l("latest"))
        ),
        "{second}"
    );
    let names: Vec<String> = std::fs::read_dir(prom.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    // verify writes its own series.
    env.run(&[
        "verify",
        "--config",
        cfg.to_str().unwrap(),
        "--metrics-file",
        prom.to_str().unwrap(),
    ]);
    // verify, status and recover, each into a file of its own (the documented practice:
    // a file holds one command's last run, and carries over only last_success).
    for command in ["verify", "status", "recover"] {
        let file = env.path(&format!("textfile/{command}.prom"));
        env.run(&[
            command,
            "--config",
            cfg.to_str().unwrap(),
            "--metrics-file",
            file.to_str().unwrap(),
        ]);
        let text = std::fs::read_to_string(&file).unwrap();
        for d in ["latest", "copy"] {
            let series = format!(
                "distributor_last_run_timestamp_seconds{{command=\"{command}\",pipeline=\"weather\",destination=\"{d}\"}}"
            );
            assert!(text.contains(&series), "{series}: {text}");
        }
    }
    let recover = std::fs::read_to_string(env.path("textfile/recover.prom")).unwrap();
    let ok = "distributor_last_success_timestamp_seconds{command=\"recover\",pipeline=\"weather\",destination=\"copy\"}";
    assert!(recover.contains(ok), "{recover}");
}

/// Processes killed when the test ends, whatever happens.
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn installed(name: &str) -> Option<PathBuf> {
    for dir in ["/usr/bin", "/usr/local/bin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return Some(p);
        }
    }
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Asks Prometheus's HTTP API for `query` until it answers with a sample; its value.
fn query(prometheus: &str, q: &str) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(90);
    let url = format!(
        "http://{prometheus}/api/v1/query?query={}",
        crate::common::s3::percent_encode(q, false)
    );
    loop {
        if let Ok(v) = serde_json::from_str::<Value>(&get(&url).2)
            && let Some(s) = v["data"]["result"][0]["value"][1].as_str()
        {
            return s.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "Prometheus never had {q}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A real Prometheus scrapes `serve`'s `/metrics` and node_exporter's textfile collector
/// reading a `--metrics-file`; its query API gives what a publication counted.
#[test]
fn a_real_prometheus_reads_serve_and_the_metrics_file() {
    let (Some(prometheus), Some(node_exporter)) = (
        installed("prometheus"),
        installed("prometheus-node-exporter"),
    ) else {
        assert!(
            std::env::var_os("DISTRIBUTOR_REQUIRE_PROMETHEUS").is_none(),
            "DISTRIBUTOR_REQUIRE_PROMETHEUS is set but prometheus or prometheus-node-exporter is not installed"
        );
        return crate::common::left_out::skip(
            "Prometheus",
            "prometheus and prometheus-node-exporter are not installed (.ci/run installs them). \
             DISTRIBUTOR_REQUIRE_PROMETHEUS=1 makes this a failure.",
        );
    };
    let env = Env::new();
    let (w, _) = crate::common::server::weather_and_traffic(&env);
    let server = Server::start(&env, &[&w], &[]);
    let tar = tar_with_manifest(T6, T6, &[("a.txt", b"one")], &[]);
    server.upload("weather", "", &tar).expect(200);
    // A CLI publication writes its textfile.
    let textfiles = env.path("textfiles");
    std::fs::create_dir_all(&textfiles).unwrap();
    let cli = env.simple_config("cli.yaml", "nightly", "archive", "archive", "");
    let b = env.bundle(
        "b",
        "site",
        T6,
        &[("x.txt", "x"), ("y.txt", "y"), ("z.txt", "z")],
        &[],
    );
    env.run(&[
        "publish",
        "--config",
        cli.to_str().unwrap(),
        "--source",
        b.to_str().unwrap(),
        "--metrics-file",
        textfiles.join("nightly.prom").to_str().unwrap(),
    ])
    .expect_code(0);

    let exporter_port = free_port();
    let mut daemons = Daemons(Vec::new());
    daemons.0.push(
        Command::new(node_exporter)
            .args([
                "--collector.disable-defaults",
                "--collector.textfile",
                &format!("--collector.textfile.directory={}", textfiles.display()),
                &format!("--web.listen-address=127.0.0.1:{exporter_port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node_exporter"),
    );
    let prom_port = free_port();
    let config = env.write(
        "prometheus.yml",
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: serve\n    static_configs:\n      - targets: ['{}']\n  - job_name: textfile\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n",
            server.metrics_addr.clone().unwrap()
        ),
    );
    daemons.0.push(
        Command::new(prometheus)
            .args([
                &format!("--config.file={}", config.display()),
                &format!("--storage.tsdb.path={}", env.path("tsdb").display()),
                &format!("--web.listen-address=127.0.0.1:{prom_port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );
    let at = format!("127.0.0.1:{prom_port}");
    assert_eq!(
        query(
            &at,
            "distributor_publications_total{pipeline=\"weather\",destination=\"latest\",outcome=\"applied\"}"
        ),
        1.0
    );
    assert_eq!(
        query(
            &at,
            "distributor_last_run_files_written{command=\"publish\",pipeline=\"nightly\",destination=\"archive\"}"
        ),
        3.0
    );
}
