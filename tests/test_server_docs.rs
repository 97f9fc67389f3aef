//! docs/integrations/http-upload.md runs: its config is the served config, and its `sh`
//! blocks (curl examples included) run in order against a real server, with the
//! documented address replaced by the one the test server got.

use crate::common::Env;
use crate::common::server::Server;
use std::path::{Path, PathBuf};
use std::process::Command;

const PAGE: &str = "docs/integrations/http-upload.md";
const DOC_ADDRESS: &str = "127.0.0.1:8080";

/// The fenced blocks of a page with the given info string.
fn fenced(text: &str, info: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let t = line.trim_start();
        match current.as_mut() {
            None => {
                if t.strip_prefix("```").map(str::trim) == Some(info) {
                    current = Some(String::new());
                }
            }
            Some(body) => {
                if t == "```" {
                    out.push(current.take().unwrap_or_default());
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_distributor"))
        .parent()
        .expect("binary dir")
        .to_path_buf()
}

#[test]
fn http_upload_page_examples_run_against_a_real_server() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE))
        .expect("read the page");
    let configs = fenced(&text, "yaml");
    assert_eq!(configs.len(), 1, "{PAGE} shows one config");
    let env = Env::new();
    let config = env.config("weather.yaml", &configs[0]);
    env.bundle(
        "out",
        "placeholder",
        "2026-12-02T00:00:00Z",
        &[("forecast.json", "{}"), ("maps/temp.png", "png")],
        &[("current.png", "maps/temp.png")],
    );
    std::fs::remove_file(env.path("out/distributor-manifest.json")).unwrap();
    let server = Server::start(&env, &[&config], &[]);

    let blocks = fenced(&text, "sh");
    assert!(blocks.len() >= 6, "{PAGE} has {} sh blocks", blocks.len());
    assert!(text.contains(DOC_ADDRESS));
    let mut script = String::from("set -euo pipefail\n");
    for (i, b) in blocks.iter().enumerate() {
        script.push_str(&format!("echo '=== block {i}'\n"));
        script.push_str(&b.replace(DOC_ADDRESS, &server.addr));
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env_clear()
        .env("HOME", env.path("home"))
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir().display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .current_dir(&env.root)
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "the examples failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let sections: Vec<&str> = stdout.split("=== block ").skip(1).collect();
    let section = |needle: &str| -> &str {
        sections
            .iter()
            .find(|s| s.contains(needle))
            .unwrap_or_else(|| panic!("no block output contains {needle:?}:\n{stdout}"))
    };
    // The dry run planned, the publication applied, the gzip upload found it unchanged.
    assert!(section("\"planned\"").contains("\"create\""));
    assert!(stdout.contains("\"status\":\"applied\""), "{stdout}");
    assert!(section("\"unchanged\"").contains("\"latest\""));
    // The status-code example shows a refused force.
    let refused = section("forbidden_parameter");
    assert!(refused.contains("400"), "{refused}");
    // The destinations view and health answered.
    assert!(section("\"owners\"").contains("weather/latest"));
    assert!(section("\"status\":\"ok\"").contains("version"));
    // The token hash example prints the hash the config holds.
    let hash = distributor::hash::sha256_hex(b"example-token-0f6c1e");
    assert!(
        configs[0].contains(&hash),
        "config holds the example token's hash"
    );
    assert!(stdout.contains(&format!("{hash}\n")), "{stdout}");

    assert_eq!(env.read("published/latest/forecast.json"), "{}");
    assert_eq!(
        std::fs::read_link(env.path("published/latest/current.png")).unwrap(),
        PathBuf::from("maps/temp.png")
    );
    // The harness points DISTRIBUTOR_JOURNAL at the env's journal, which wins over
    // journal.path as it does for the CLI.
    let ops = crate::common::server::journal_operations(&env);
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].1, "token:forecast-job");
    assert!(server.spool_leftovers().is_empty());
}
