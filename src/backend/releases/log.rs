//! What `releases.dir` records besides the releases themselves (SPEC §15, §18): the
//! settings it was made with (`.distributor/releases.json`, compared with every config
//! that publishes there: `releases_mismatch`), the activations as the destination log
//! (`.distributor/log/`, [`crate::backend::local::log`]) holds them, the old activation
//! log (`.distributor-activations.log`, one JSON line per activation, oldest first) that
//! the log replaces, and the retention rule that reads them. Retention here is pure: it
//! decides from the activations, the release directories present and the ones
//! unfinished operations use.

use crate::backend::local::log::Entry;
use crate::config::ReleaseSettings;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The settings record's old name in `releases.dir`: once the settings moved to
/// `.distributor/releases.json`, it holds [`MOVED_TO`], which Part II binaries refuse.
pub const SETTINGS_FILE: &str = ".distributor-releases.json";
/// The old activation log's name in `releases.dir` (read, migrated, never written).
pub const LOG_FILE: &str = ".distributor-activations.log";
/// What the old settings record holds once the records moved.
pub const MOVED_TO: &str = "{\"moved_to\": \".distributor/\"}\n";

/// The old settings record after the move.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MovedTo {
    /// `.distributor/`.
    pub moved_to: String,
}

/// The settings a releases directory was made with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedSettings {
    /// The `path` symlink the releases are activated at.
    pub path: PathBuf,
    /// `releases.keep`.
    pub keep: u32,
    /// `releases.max_age` as written.
    #[serde(default)]
    pub max_age: Option<String>,
    /// `releases.stage_max_age` as written, absent when it is the default (so a record
    /// written before the setting existed matches a config that does not set it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_max_age: Option<String>,
}

impl RecordedSettings {
    /// What a config's settings for `path` record.
    pub fn of(path: &std::path::Path, s: &ReleaseSettings) -> RecordedSettings {
        let default = crate::config::parse_age(crate::config::STAGE_MAX_AGE_DEFAULT).ok();
        RecordedSettings {
            path: path.to_path_buf(),
            keep: s.keep,
            max_age: s.max_age.clone(),
            stage_max_age: (s.stage_max_age.clone())
                .filter(|t| crate::config::parse_age(t).ok() != default),
        }
    }

    /// Why a config's settings differ from these, if they do.
    pub fn mismatch(&self, config: &RecordedSettings, dir: &std::path::Path) -> Option<String> {
        let show = |s: &RecordedSettings| {
            format!(
                "path {}, keep {}, max_age {}, stage_max_age {}",
                s.path.display(),
                s.keep,
                s.max_age.as_deref().unwrap_or("(none)"),
                s.stage_max_age
                    .as_deref()
                    .unwrap_or(crate::config::STAGE_MAX_AGE_DEFAULT)
            )
        };
        (self != config).then(|| {
            format!(
                "{} records releases settings ({}) that differ from this config's ({}); every config publishing there must give the same releases settings; to record this config's instead, run `distributor releases settings --config <this config>`",
                dir.join(crate::backend::local::records::RELEASES_SETTINGS).display(),
                show(self),
                show(config)
            )
        })
    }
}

/// One activation: a release became what `path` names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activation {
    /// The release directory's name (the operation that built it).
    pub release: String,
    /// The operation that activated it (a rollback activates an older release).
    pub operation_id: String,
    /// When, RFC 3339 UTC.
    pub activated_at: String,
    /// The owner that published it (`pipeline/destination`); for a rollback, the owner
    /// that rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// A rollback's hold: the source digest it rolled back from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<crate::backend::types::Hold>,
    /// A rollback: the operation whose activation it undid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undoes: Option<String>,
    /// A promote (SPEC §19): the activation of a staged release, a publication of its
    /// source by its owner (its operation is not the release's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub promote: bool,
}

impl Activation {
    /// Whether a rollback made it, not a publication (a promote is a publication).
    pub fn is_rollback(&self) -> bool {
        !self.promote && (self.undoes.is_some() || self.operation_id != self.release)
    }
}

/// The holds standing after the log (SPEC §15): each rollback's digest, until its owner
/// publishes again.
pub fn holds(log: &[Activation]) -> Vec<crate::backend::types::Hold> {
    let mut out: Vec<crate::backend::types::Hold> = Vec::new();
    for a in log {
        if a.is_rollback() {
            out.extend(a.held.iter().cloned());
        } else if let Some(owner) = &a.owner {
            out.retain(|h| &h.owner != owner);
        }
    }
    out
}

/// What a rollback undoes by default (SPEC §15), as `(target, undone operation)`: the
/// owner's latest activation is undone, and the target is the release active just before
/// it;
/// when that activation was itself a rollback, the owner's activation before the one it
/// undid is undone instead, so a second rollback steps further back rather than toggling.
/// `owner` limits the activations considered to one owner's (a shared root: another
/// owner's publications do not change this owner's records); `None` considers all (a
/// single owner). `None` when there is nothing further back.
pub fn rollback_target(log: &[Activation], owner: Option<&str>) -> Option<(String, String)> {
    let mine: Vec<usize> = (0..log.len())
        .filter(|&j| owner.is_none_or(|o| log[j].owner.as_deref() == Some(o)))
        .collect();
    let mut k = mine.len().checked_sub(1)?;
    while log[mine[k]].is_rollback() {
        let from = log[mine[k]].undoes.as_ref()?;
        let u = mine[..k]
            .iter()
            .rposition(|&j| &log[j].operation_id == from)?;
        k = u.checked_sub(1)?;
    }
    let at = mine[k];
    let target = log[..at].last()?.release.clone();
    Some((target, log[at].operation_id.clone()))
}

/// The operation of the owner's latest activation (`None`: all owners'), which a
/// rollback to a named release undoes.
pub fn latest(log: &[Activation], owner: Option<&str>) -> Option<String> {
    (log.iter())
        .rev()
        .find(|a| owner.is_none_or(|o| a.owner.as_deref() == Some(o)))
        .map(|a| a.operation_id.clone())
}

impl Activation {
    /// The activation a log entry records, if it records one.
    pub fn of_entry(e: &Entry) -> Option<Activation> {
        Some(Activation {
            release: e.release_activated.clone()?,
            operation_id: e.operation_id.clone(),
            activated_at: e.committed_at.clone(),
            owner: e.owner(),
            held: e.held.clone(),
            undoes: e.undoes.clone(),
            promote: e.command == "promote",
        })
    }

    /// The log entry line `line` of the old activation log becomes (numbered by the
    /// migration).
    pub fn to_entry(&self) -> Entry {
        let command = if self.is_rollback() {
            "rollback"
        } else {
            "publish"
        };
        let mut e = Entry::new(&self.operation_id, command, "activate");
        if let Some((p, d)) = self.owner.as_deref().and_then(|o| o.split_once('/')) {
            e.pipeline_id = p.to_string();
            e.destination_id = d.to_string();
        }
        e.started_at = self.activated_at.clone();
        e.committed_at = self.activated_at.clone();
        e.release_activated = Some(self.release.clone());
        e.undoes = self.undoes.clone();
        e.held = self.held.clone();
        e.migrated_from = Some(LOG_FILE.to_string());
        e
    }
}

/// The activations of the log's entries, oldest first.
pub fn activations(entries: &[Entry]) -> Vec<Activation> {
    entries.iter().filter_map(Activation::of_entry).collect()
}

/// Parses the old activation log, one activation per line. A last line with no newline
/// after it that does not parse is an append torn by a crash: its operation still had
/// its staging entry, and `recover` logs it again, so it is left out. A line that does
/// not parse but ends with a whole activation is such a torn fragment with the append
/// `recover` made after it: the whole activation counts. Any other line that does not
/// parse is an error naming its number: which activation it held is unknown.
pub fn parse_log(bytes: &[u8]) -> Result<Vec<Activation>, String> {
    let mut out = Vec::new();
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let last = lines.len() - 1;
    for (i, l) in lines.iter().enumerate() {
        if l.is_empty() {
            continue;
        }
        if let Ok(a) = serde_json::from_slice::<Activation>(l) {
            out.push(a);
            continue;
        }
        let salvaged = (1..l.len())
            .rev()
            .filter(|&k| l[k] == b'{' && l[k - 1] != b'[' && l[k - 1] != b':')
            .find_map(|k| serde_json::from_slice::<Activation>(&l[k..]).ok());
        match salvaged {
            Some(a) => out.push(a),
            None if i == last => {}
            None => return Err(format!("line {} does not parse", i + 1)),
        }
    }
    Ok(out)
}

/// Why a release is kept or removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// The release directory's name.
    pub release: String,
    /// Kept (false: removed, or to be removed in a dry run).
    pub keep: bool,
    /// Why, in words.
    pub reason: String,
    /// When it was last activated, if ever.
    pub activated_at: Option<String>,
    /// A release `publish --stage` built (SPEC §19): when it was staged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staged_at: Option<String>,
}

/// Decides the staged releases never activated (SPEC §19), which [`decide`] keeps as
/// never activated: each one `staged` names (release, staged at, RFC 3339) is removed when
/// it was staged longer than `stage_max_age` seconds ago, else kept; one an unfinished
/// operation uses is kept whatever its age. A staged release counts as no activation.
pub fn judge_staged(
    verdicts: &mut [Verdict],
    staged: &BTreeMap<String, String>,
    in_use: &BTreeSet<String>,
    stage_max_age: u64,
    now: i64,
) {
    for v in verdicts.iter_mut() {
        let Some(at) = staged.get(&v.release) else {
            continue;
        };
        v.staged_at = Some(at.clone());
        if v.activated_at.is_some() || in_use.contains(&v.release) {
            continue;
        }
        let age = chrono::DateTime::parse_from_rfc3339(at)
            .map(|d| now - d.timestamp())
            .unwrap_or(0);
        (v.keep, v.reason) = if age > stage_max_age as i64 {
            (
                false,
                format!(
                    "staged {age}s ago and never promoted, longer than stage_max_age ({stage_max_age}s)"
                ),
            )
        } else {
            (
                true,
                format!("staged, not promoted yet (for {age}s; stage_max_age {stage_max_age}s)"),
            )
        };
    }
}

/// Decides, for every release directory present, whether retention keeps it (SPEC §15):
/// the active release and the one active before it always; one an unfinished operation
/// uses always; any other when fewer than `keep` other such releases were active after
/// it and it has been inactive for at most `max_age` (seconds; `now` in seconds since the
/// epoch). A release the log never saw activated is kept (it is not known to be done
/// with).
pub fn decide(
    log: &[Activation],
    present: &BTreeSet<String>,
    active: Option<&str>,
    in_use: &BTreeSet<String>,
    keep: u32,
    max_age: Option<u64>,
    now: i64,
) -> Vec<Verdict> {
    // Each release's last activation, and when the one after it came (it was deactivated).
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, a) in log.iter().enumerate() {
        last.insert(a.release.as_str(), i);
    }
    let previous = active.and_then(|act| {
        let i = *last.get(act)?;
        log[..i]
            .iter()
            .rev()
            .find(|a| a.release != act)
            .map(|a| a.release.as_str())
    });
    // Releases retention may remove, newest activation first.
    let mut others: Vec<(&str, usize)> = last
        .iter()
        .filter(|(r, _)| Some(**r) != active && Some(**r) != previous)
        .map(|(r, i)| (*r, *i))
        .collect();
    others.sort_by_key(|o| std::cmp::Reverse(o.1));
    let rank: BTreeMap<&str, usize> = others
        .iter()
        .enumerate()
        .map(|(n, (r, _))| (*r, n))
        .collect();
    let seconds = |t: &str| {
        chrono::DateTime::parse_from_rfc3339(t)
            .map(|d| d.timestamp())
            .ok()
    };
    present
        .iter()
        .map(|r| {
            let at = last.get(r.as_str()).map(|&i| log[i].activated_at.clone());
            let (keep_it, reason) = if Some(r.as_str()) == active {
                (true, "active".to_string())
            } else if Some(r.as_str()) == previous {
                (true, "previously active (always kept)".to_string())
            } else if in_use.contains(r) {
                (true, "used by an unfinished operation".to_string())
            } else if let Some(&n) = rank.get(r.as_str()) {
                let i = last[r.as_str()];
                let inactive_since = log.get(i + 1).and_then(|a| seconds(&a.activated_at));
                let age = inactive_since.map(|s| now - s);
                if n >= keep as usize {
                    (
                        false,
                        format!("{n} other inactive releases were active after it (keep: {keep})"),
                    )
                } else if let (Some(max), Some(age)) = (max_age, age)
                    && age > max as i64
                {
                    (
                        false,
                        format!("inactive for {age}s, longer than max_age ({max}s)"),
                    )
                } else {
                    (
                        true,
                        format!("within keep ({} of {keep} inactive releases)", n + 1),
                    )
                }
            } else {
                (
                    true,
                    "never activated: not known to be done with".to_string(),
                )
            };
            Verdict {
                release: r.clone(),
                keep: keep_it,
                reason,
                activated_at: at,
                staged_at: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(names: &[(&str, &str)]) -> Vec<Activation> {
        names
            .iter()
            .map(|(r, at)| Activation {
                release: r.to_string(),
                operation_id: r.to_string(),
                activated_at: at.to_string(),
                owner: None,
                held: Vec::new(),
                undoes: None,
                promote: false,
            })
            .collect()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn kept(v: &[Verdict]) -> Vec<&str> {
        v.iter()
            .filter(|v| v.keep)
            .map(|v| v.release.as_str())
            .collect()
    }

    const T: [&str; 6] = [
        "2026-12-01T00:00:00Z",
        "2026-12-01T01:00:00Z",
        "2026-12-01T02:00:00Z",
        "2026-12-01T03:00:00Z",
        "2026-12-01T04:00:00Z",
        "2026-12-01T05:00:00Z",
    ];

    #[test]
    fn keep_counts_activations_not_ages() {
        let l = log(&[
            ("a", T[0]),
            ("b", T[1]),
            ("c", T[2]),
            ("d", T[3]),
            ("e", T[4]),
        ]);
        let present = set(&["a", "b", "c", "d", "e"]);
        let now = 1_800_000_000;
        let v = decide(&l, &present, Some("e"), &BTreeSet::new(), 2, None, now);
        assert_eq!(kept(&v), ["b", "c", "d", "e"]);
        let v = decide(&l, &present, Some("e"), &BTreeSet::new(), 0, None, now);
        assert_eq!(
            kept(&v),
            ["d", "e"],
            "keep 0 still keeps the active and previous"
        );
    }

    #[test]
    fn max_age_never_removes_the_active_or_previous_release() {
        let l = log(&[("a", T[0]), ("b", T[1]), ("c", T[2])]);
        let present = set(&["a", "b", "c"]);
        let far = 4_000_000_000;
        let v = decide(&l, &present, Some("c"), &BTreeSet::new(), 3, Some(60), far);
        assert_eq!(kept(&v), ["b", "c"]);
        assert!(v[0].reason.contains("max_age"), "{:?}", v[0]);
    }

    fn rollback(release: &str, op: &str, undoes: &str) -> Activation {
        Activation {
            release: release.into(),
            operation_id: op.into(),
            activated_at: T[5].into(),
            owner: Some("w/l".into()),
            held: vec![crate::backend::types::Hold {
                owner: "w/l".into(),
                digest: format!("digest-{undoes}"),
            }],
            undoes: Some(undoes.into()),
            promote: false,
        }
    }

    fn target(log: &[Activation], owner: Option<&str>) -> Option<String> {
        rollback_target(log, owner).map(|(t, _)| t)
    }

    #[test]
    fn a_second_rollback_steps_further_back() {
        let mut l = log(&[("a", T[0]), ("b", T[1]), ("c", T[2])]);
        assert_eq!(rollback_target(&l, None), Some(("b".into(), "c".into())));
        l.push(rollback("b", "r1", "c"));
        assert_eq!(target(&l, None).as_deref(), Some("a"), "not back to c");
        l.push(rollback("a", "r2", "b"));
        assert_eq!(target(&l, None), None, "nothing before a");
        // A publication after a rollback: back to the release it replaced.
        let mut l = log(&[("a", T[0]), ("b", T[1]), ("c", T[2])]);
        l.push(rollback("b", "r1", "c"));
        l.extend(log(&[("d", T[4])]));
        assert_eq!(target(&l, None).as_deref(), Some("b"));
        assert_eq!(latest(&l, None).as_deref(), Some("d"));
    }

    /// In a shared root, one owner's rollback undoes that owner's latest publication,
    /// whatever other owners published since; the target is the release before it, and a
    /// rollback's own release (built for it) is never a target.
    #[test]
    fn a_shared_root_rollback_undoes_the_owners_own_publications() {
        let mut l = log(&[("w1", T[0]), ("o1", T[1]), ("w2", T[2]), ("o2", T[3])]);
        for (a, o) in l.iter_mut().zip(["w/l", "o/o", "w/l", "o/o"]) {
            a.owner = Some(o.into());
        }
        assert_eq!(
            rollback_target(&l, Some("w/l")),
            Some(("o1".into(), "w2".into()))
        );
        // w's rollback builds release rw1 holding w1's records; o publishes o3.
        let mut rb = rollback("rw1", "rw1", "w2");
        rb.undoes = Some("w2".into());
        l.push(rb);
        let mut o3 = log(&[("o3", T[4])]);
        o3[0].owner = Some("o/o".into());
        l.extend(o3);
        // Further back: before w1, nothing.
        assert_eq!(rollback_target(&l, Some("w/l")), None);
        assert_eq!(target(&l, Some("o/o")).as_deref(), Some("rw1"));
    }

    #[test]
    fn a_hold_stands_until_its_owner_publishes() {
        let mut l = log(&[("a", T[0]), ("b", T[1])]);
        l.push(rollback("a", "r1", "b"));
        assert_eq!(holds(&l).len(), 1);
        let mut other = log(&[("c", T[3])]);
        other[0].owner = Some("other/o".into());
        l.extend(other);
        assert_eq!(holds(&l).len(), 1, "another owner's publication keeps it");
        let mut mine = log(&[("d", T[4])]);
        mine[0].owner = Some("w/l".into());
        l.extend(mine);
        assert!(holds(&l).is_empty());
    }

    #[test]
    fn after_a_rollback_the_previous_release_is_the_one_rolled_back_from() {
        // a, b, c activated, then a rollback to b: b is active, c the previous one.
        let l = log(&[("a", T[0]), ("b", T[1]), ("c", T[2]), ("b", T[3])]);
        let present = set(&["a", "b", "c"]);
        let v = decide(&l, &present, Some("b"), &BTreeSet::new(), 0, None, 0);
        assert_eq!(kept(&v), ["b", "c"]);
    }

    #[test]
    fn releases_in_use_or_never_activated_are_kept() {
        let l = log(&[("a", T[0]), ("b", T[1]), ("c", T[2])]);
        let present = set(&["a", "b", "c", "x"]);
        let v = decide(&l, &present, Some("c"), &set(&["a"]), 0, None, 0);
        assert_eq!(kept(&v), ["a", "b", "c", "x"]);
    }

    #[test]
    fn a_torn_last_line_is_left_out() {
        let bytes = b"{\"release\":\"a\",\"operation_id\":\"a\",\"activated_at\":\"t\"}\n{\"release\":\"b\",\"oper";
        assert_eq!(parse_log(bytes).unwrap().len(), 1);
    }

    /// The audit's attack: a disk-full append tore a line, `recover` appended the whole
    /// activation after the fragment, and the merged line no longer parsed, so the active
    /// release's activation was lost. The whole activation at its end counts.
    #[test]
    fn a_torn_fragment_followed_by_the_recovered_append_keeps_the_activation() {
        let a = r#"{"release":"a","operation_id":"a","activated_at":"t"}"#;
        let b = r#"{"release":"b","operation_id":"b","activated_at":"u","held":[{"owner":"p/d","digest":"x"}]}"#;
        let bytes = format!("{a}\n{{\"release\":\"b\",\"oper{b}\n");
        let l = parse_log(bytes.as_bytes()).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].release, "b");
        assert_eq!(l[1].held.len(), 1);
        // A torn line in the middle with nothing whole after it: which activation it
        // was is unknown.
        let bytes = format!("{a}\n{{\"release\":\"b\",\"oper\n{a}\n");
        let e = parse_log(bytes.as_bytes()).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
    }
}
