//! Injected I/O errors (a failing write, fsync, rename or removal, once and persistently)
//! during a publication: each gives a typed error in the report, never a panic, and leaves
//! a destination that is either already rolled back or recoverable to exactly before or
//! after (SPEC §6, §8).

use crate::common::faults::{Mode, Scenario, Side, assert_aborted, outcome};

struct Case {
    spec: &'static str,
    /// Exit code of the failing publish.
    code: i32,
    /// Whether `recover` has work left after the failed publish.
    recover: bool,
    side: Side,
}

const CASES: &[Case] = &[
    // Staging write fails: nothing placed yet, rolled back in process.
    Case {
        spec: "io_stage_write:2=error-once",
        code: 1,
        recover: false,
        side: Side::Before,
    },
    Case {
        spec: "io_stage_write:2=error",
        code: 1,
        recover: false,
        side: Side::Before,
    },
    // A rename fails while moving aside (3rd) or placing (9th); once: the in-process
    // rollback restores everything.
    Case {
        spec: "io_rename:3=error-once",
        code: 1,
        recover: false,
        side: Side::Before,
    },
    Case {
        spec: "io_rename:9=error-once",
        code: 1,
        recover: false,
        side: Side::Before,
    },
    // Persistently: the rollback cannot rename back either; recovery is required (exit 4).
    Case {
        spec: "io_rename:3=error",
        code: 4,
        recover: true,
        side: Side::Before,
    },
    Case {
        spec: "io_rename:9=error",
        code: 4,
        recover: true,
        side: Side::Before,
    },
    // The syncfs before the commit point fails; persistently, the rollback's too.
    Case {
        spec: "io_syncfs=error-once",
        code: 1,
        recover: false,
        side: Side::Before,
    },
    Case {
        spec: "io_syncfs=error",
        code: 4,
        recover: true,
        side: Side::Before,
    },
    // The state file cannot be made durable or renamed: the commit point is not reached.
    Case {
        spec: "io_state_fsync=error-once",
        code: 1,
        recover: false,
        side: Side::Before,
    },
    Case {
        spec: "io_state_fsync=error",
        code: 1,
        recover: false,
        side: Side::Before,
    },
    Case {
        spec: "io_state_rename=error-once",
        code: 1,
        recover: false,
        side: Side::Before,
    },
    Case {
        spec: "io_state_rename=error",
        code: 1,
        recover: false,
        side: Side::Before,
    },
    // Cleanup fails after the commit point: the publication stands, recover finishes it.
    Case {
        spec: "io_remove_staging=error-once",
        code: 1,
        recover: true,
        side: Side::After,
    },
    Case {
        spec: "io_remove_staging=error",
        code: 1,
        recover: true,
        side: Side::After,
    },
];

fn run_case(mode: Mode, c: &Case) {
    let ctx = format!("{mode:?} {}", c.spec);
    let name = c.spec.split([':', '=']).next().unwrap();
    let sc = Scenario::new(mode);
    let r = sc.publish_env(&[("DISTRIBUTOR_FAILPOINT", c.spec)]);
    r.expect_code(c.code);
    assert!(!r.stderr.contains("panicked"), "{ctx}: {}", r.stderr);
    let d = r.dest(0);
    let msg = d["message"].as_str().unwrap_or_default();
    if matches!(c.side, Side::After) {
        // Past the commit point the report says what is live and what is left (SPEC §17):
        // applied, the operation named, its files counted, and `recover` for the rest.
        assert_eq!(d["status"], "applied", "{ctx}: {}", r.stdout);
        assert!(d["operation_id"].is_string(), "{ctx}: {}", r.stdout);
        assert!(
            r.json()["summary"]["files_written"].as_u64().unwrap_or(0) > 0,
            "{ctx}: the written files are not counted: {}",
            r.stdout
        );
        assert!(
            msg.contains("passed its commit point") && msg.contains("distributor recover"),
            "{ctx}: {msg}"
        );
    } else {
        assert_eq!(d["status"], "failed", "{ctx}: {}", r.stdout);
    }
    assert!(
        msg.contains(&format!("injected I/O error at failpoint {name}")),
        "{ctx}: the report does not carry the I/O error: {msg}"
    );
    if c.recover {
        assert!(msg.contains("distributor recover"), "{ctx}: {msg}");
        sc.assert_refused_until_recovered(&ctx);
        let rec = sc.recover_env(&[]);
        rec.expect_code(0);
        let want = match c.side {
            Side::Before => "rolled_back",
            Side::After => "rolled_forward",
        };
        assert_eq!(outcome(&rec), want, "{ctx}: {}", rec.stdout);
    } else {
        // Rolled back in process: recorded as failed, nothing left to recover.
        let h = sc.env.run(&["history", "--json", "--status", "failed"]);
        assert_eq!(
            h.json()["operations"].as_array().map(Vec::len),
            Some(1),
            "{ctx}: {}",
            h.stdout
        );
    }
    sc.assert_recovered(c.side, &ctx);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn injected_io_errors_single_owner() {
    for c in CASES {
        run_case(Mode::SingleOwner, c);
    }
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn injected_io_errors_shared_root() {
    for c in CASES {
        run_case(Mode::SharedRoot, c);
    }
}

/// A crash in the middle of the in-process rollback that follows an I/O error: `recover`
/// finishes the rollback.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn crash_during_in_process_rollback_is_recovered() {
    for mode in [Mode::SingleOwner, Mode::SharedRoot] {
        for spec in [
            "io_rename:9=error-once,undo_remove_placed",
            "io_rename:10=error-once,undo_restore:2",
            "io_state_rename=error,undo_before_remove_staging",
        ] {
            let sc = Scenario::new(mode);
            assert_aborted(&sc.publish_env(&[("DISTRIBUTOR_FAILPOINT", spec)]), spec);
            let rec = sc.recover_env(&[]);
            rec.expect_code(0);
            assert_eq!(outcome(&rec), "rolled_back", "{mode:?} {spec}");
            sc.assert_recovered(Side::Before, &format!("{mode:?} {spec}"));
        }
    }
}
