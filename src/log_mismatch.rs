//! `verify`'s `log_mismatch` (SPEC §18): whether the state is at the operation the
//! destination log's last state-changing entry names. When it is not, the destination was
//! changed outside distributor (by hand, by another tool, by an earlier version still
//! publishing there), or the entry that explained the state was quarantined or removed.
//!
//! The judgement is pure: what the state says (its owner records, or for a releases
//! destination the release `path` shows) against the [`LoggedOperation`] its backend read.
//! Nothing to compare with (no log, no state-changing entry in it: a destination an
//! earlier version published, before the log existed) is never a mismatch; the first
//! logged operation after an upgrade starts the comparison.
//!
//! Must never: read or write storage, or judge a state that is not believed.

use crate::backend::LoggedOperation;
use crate::state::{OwnerRecord, State};

/// What the state says made it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StateSays<'a> {
    /// A releases destination: the release `path` shows (`None`: no release, `path` is
    /// missing or a directory). SPEC §18: "releases: the active release's".
    Release(Option<&'a str>),
    /// A state file's owner records (`None`: no state file).
    Owners(Option<&'a State>),
}

/// Why the state is not what the log's last state-changing entry made, if it is not.
pub(crate) fn judge(says: StateSays<'_>, logged: &LoggedOperation) -> Option<String> {
    let expected = &logged.operation_id;
    let why = match says {
        StateSays::Release(Some(r)) if r == expected => return None,
        StateSays::Release(shows) => format!(
            "path shows {}, but the last activation in the destination log, {}, made release {expected} active",
            shows.map_or("no release".to_string(), |r| format!("release {r}")),
            logged.entry
        ),
        StateSays::Owners(None) => format!(
            "there is no .distributor.json, but the last state-changing entry of the destination log, {}, names operation {expected}",
            logged.entry
        ),
        StateSays::Owners(Some(state)) => owners_mismatch(state, logged)?,
    };
    Some(format!(
        "{why}: the destination was changed outside distributor; see who changed it (`distributor log`, `distributor history`), then publish a new build (with releases: `distributor rollback --to OP_ID`) so that the state and the log agree again"
    ))
}

/// The state's newest owner record must name the logged operation (single owner: its only
/// record). Which record is newest is the log's order where the log names their
/// operations (the logged one is the last of those), and `published_at` only for a record
/// the log does not know: so clocks of hosts taking turns in a shared root never matter,
/// and a record written after the last entry, outside distributor, still counts.
fn owners_mismatch(state: &State, logged: &LoggedOperation) -> Option<String> {
    let expected = &logged.operation_id;
    let Some(mine) = state.owners.iter().find(|r| r.operation_id == *expected) else {
        let names: Vec<String> = (state.owners.iter())
            .map(|r| format!("{} ({})", r.operation_id, r.owner))
            .collect();
        return Some(format!(
            "the state names operation {}, but the last state-changing entry of the destination log, {}, names operation {expected}",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            },
            logged.entry
        ));
    };
    let newer = (state.owners.iter())
        .filter(|r| !logged.logged.contains(&r.operation_id))
        .find(|r| later(r, mine))?;
    Some(format!(
        "the state's owner record {} names operation {}, published {}, after operation {expected} that the last state-changing entry of the destination log, {}, names, and no entry of the log names it",
        newer.owner, newer.operation_id, newer.published_at, logged.entry
    ))
}

/// Whether `a` was published after `b` (RFC 3339 times; text order when one does not
/// parse).
fn later(a: &OwnerRecord, b: &OwnerRecord) -> bool {
    let t = |r: &OwnerRecord| chrono::DateTime::parse_from_rfc3339(&r.published_at).ok();
    match (t(a), t(b)) {
        (Some(x), Some(y)) => x > y,
        _ => a.published_at > b.published_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Owner, ReconciliationMode, SourceRef, StateMode};

    fn record(owner: &str, op: &str, at: &str) -> OwnerRecord {
        let (p, d) = owner.split_once('/').unwrap();
        OwnerRecord {
            owner: Owner::new(p, d),
            source: SourceRef {
                id: "s".into(),
                created_at: "2026-12-02T00:00:00Z".into(),
                digest: "d".into(),
            },
            reconciliation: ReconciliationMode::Replace,
            published_at: at.into(),
            operation_id: op.into(),
        }
    }

    fn state(owners: Vec<OwnerRecord>) -> State {
        State {
            version: 1,
            mode: if owners.len() > 1 {
                StateMode::SharedRoot
            } else {
                StateMode::SingleOwner
            },
            owners,
            outputs: Vec::new(),
            links: Vec::new(),
        }
    }

    fn logged(last: &str, all: &[&str]) -> LoggedOperation {
        LoggedOperation {
            operation_id: last.into(),
            entry: "entry 9 (publish by cli:t on h, committed t)".into(),
            logged: all.iter().map(|s| s.to_string()).collect(),
        }
    }

    const T1: &str = "2026-12-02T01:00:00.000Z";
    const T2: &str = "2026-12-02T02:00:00.000Z";
    const T3: &str = "2026-12-02T03:00:00Z";

    #[test]
    fn a_single_owner_state_must_name_the_logged_operation() {
        let s = state(vec![record("w/l", "b", T2)]);
        assert_eq!(
            judge(StateSays::Owners(Some(&s)), &logged("b", &["a", "b"])),
            None
        );
        let why = judge(StateSays::Owners(Some(&s)), &logged("a", &["a"])).unwrap();
        assert!(why.contains("names operation b (w/l)"), "{why}");
        assert!(why.contains("names operation a"), "{why}");
        assert!(why.contains("changed outside distributor"), "{why}");
        let why = judge(StateSays::Owners(None), &logged("a", &["a"])).unwrap();
        assert!(why.contains("no .distributor.json"), "{why}");
    }

    /// Shared root: the log orders the operations it names, whatever their
    /// `published_at` says (hosts whose clocks differ); a record it does not name counts by
    /// `published_at` (an earlier version's publication before the log existed is older;
    /// one written by hand after the last entry is newer).
    #[test]
    fn a_shared_root_state_must_have_the_logged_operation_as_its_newest_record() {
        // o published last, from a host whose clock is an hour behind.
        let s = state(vec![record("w/l", "w1", T2), record("o/o", "o1", T1)]);
        assert_eq!(
            judge(StateSays::Owners(Some(&s)), &logged("o1", &["w1", "o1"])),
            None
        );
        // w's record from before the log existed, o's logged since.
        assert_eq!(
            judge(StateSays::Owners(Some(&s)), &logged("w1", &["w1"])),
            None
        );
        let s = state(vec![record("w/l", "w0", T1), record("o/o", "o1", T2)]);
        assert_eq!(
            judge(StateSays::Owners(Some(&s)), &logged("o1", &["o1"])),
            None
        );
        // A record no entry names, published after the logged one: o1's entry was
        // quarantined, or the record was written by hand.
        let s = state(vec![record("w/l", "w1", T1), record("o/o", "x", T3)]);
        let why = judge(StateSays::Owners(Some(&s)), &logged("w1", &["w1"])).unwrap();
        assert!(why.contains("owner record o/o names operation x"), "{why}");
        // The logged operation is in no record at all.
        let s = state(vec![record("w/l", "w1", T1), record("o/o", "o1", T2)]);
        assert!(
            judge(
                StateSays::Owners(Some(&s)),
                &logged("o2", &["w1", "o1", "o2"])
            )
            .is_some()
        );
    }

    #[test]
    fn a_releases_destination_must_show_the_last_activated_release() {
        let l = logged("r2", &["r1", "r2"]);
        assert_eq!(judge(StateSays::Release(Some("r2")), &l), None);
        let why = judge(StateSays::Release(Some("r1")), &l).unwrap();
        assert!(why.contains("path shows release r1"), "{why}");
        assert!(why.contains("made release r2 active"), "{why}");
        let why = judge(StateSays::Release(None), &l).unwrap();
        assert!(why.contains("path shows no release"), "{why}");
    }
}
