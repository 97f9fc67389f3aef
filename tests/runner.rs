//! The one integration test binary: every test module is listed here.

mod common;

mod test_audit;
mod test_azure;
mod test_bad_input;
mod test_chaos;
mod test_concurrency;
mod test_config;
mod test_crash;
mod test_docs;
mod test_dry_run;
mod test_faults;
mod test_forged_staging;
mod test_frictions;
mod test_guard;
mod test_hints;
mod test_history;
mod test_hooks;
mod test_hostile;
mod test_hostile_releases;
mod test_journal;
mod test_journals;
mod test_layering;
mod test_limits;
mod test_log;
mod test_log_mismatch;
mod test_metrics;
mod test_operator;
mod test_pending;
mod test_performance;
mod test_progress;
mod test_reconciliation;
mod test_recover;
mod test_release_identity;
mod test_releases;
mod test_report_text;
mod test_s3;
mod test_s3_credentials;
mod test_s3_harness;
mod test_s3_hosts;
mod test_s3_log;
mod test_s3_refusals;
mod test_s3_requests;
mod test_saved_plan;
mod test_server;
mod test_server_docs;
mod test_server_load;
mod test_server_slow;
mod test_server_uploads;
mod test_smoke;
mod test_stage;
mod test_takeover_matrix;
mod test_transfer;
mod test_trust;
mod test_trust_inputs;
mod test_unmanaged;
mod test_verify;

#[test]
fn every_test_file_is_listed() {
    let listed = include_str!("runner.rs");
    for e in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(m) = name
            .strip_prefix("test_")
            .and_then(|n| n.strip_suffix(".rs"))
        {
            assert!(
                listed.contains(&format!("mod test_{m};")),
                "tests/{name} is not listed in tests/runner.rs"
            );
        }
    }
}
