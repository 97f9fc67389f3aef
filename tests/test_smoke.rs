//! End-to-end basics: create, unchanged, replace_older, and the state file.

use crate::common::Env;

#[test]
fn create_then_unchanged_then_replace_older() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest/latest", "");
    let b1 = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "one"), ("d/b.txt", "two")],
        &[("l", "a.txt")],
    );
    env.write("dest/latest/unrelated.txt", "hand-made");
    let r = env.publish(&cfg, &b1, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "create");
    assert_eq!(env.read("dest/latest/a.txt"), "one");
    assert_eq!(
        std::fs::read_link(env.path("dest/latest/l"))
            .unwrap()
            .to_str(),
        Some("a.txt")
    );
    let r = env.publish(&cfg, &b1, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged");
    let b2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("a.txt", "one v2")],
        &[],
    );
    let r = env.publish(&cfg, &b2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    assert_eq!(env.read("dest/latest/a.txt"), "one v2");
    assert!(!env.exists("dest/latest/d/b.txt"));
    assert!(!env.exists("dest/latest/d"), "emptied directory removed");
    assert!(!env.exists("dest/latest/l"));
    assert_eq!(env.read("dest/latest/unrelated.txt"), "hand-made");
    assert!(!env.staging_left("dest/latest"));
}
