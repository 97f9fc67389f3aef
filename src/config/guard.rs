//! The `guard:` block of a destination (SPEC §19, deletion guards): how many recorded
//! paths one publication may delete, and whether an empty bundle may delete recorded
//! content. Validated here with key paths; the planner applies it.

use serde::Deserialize;

/// `guard.max_delete`: a count, or a percent of this owner's recorded outputs and links
/// in the state planned against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxDelete {
    /// At most this many deletions.
    Count(u64),
    /// At most this percent (0-100) of the owner's recorded paths, rounded up, at least 1.
    Percent(u32),
}

impl MaxDelete {
    /// The limit (inclusive) for an owner with `recorded` outputs and links.
    pub fn limit(self, recorded: u64) -> u64 {
        match self {
            MaxDelete::Count(n) => n,
            MaxDelete::Percent(p) => (recorded * u64::from(p)).div_ceil(100).max(1),
        }
    }
}

impl std::fmt::Display for MaxDelete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxDelete::Count(n) => write!(f, "{n}"),
            MaxDelete::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A destination's validated `guard:` settings; the default guards nothing but empty
/// bundles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Guard {
    /// `guard.max_delete`; `None`: no limit.
    pub max_delete: Option<MaxDelete>,
    /// `guard.allow_empty`: an empty bundle may delete recorded content.
    pub allow_empty: bool,
}

impl Guard {
    /// The limit `deletes` deletions of an owner with `recorded` outputs and links exceed
    /// (inclusive) unless `--allow-delete N` covers them; `None` when they pass.
    pub fn exceeded(&self, deletes: u64, recorded: u64, allow_delete: Option<u64>) -> Option<u64> {
        let limit = self.max_delete?.limit(recorded);
        (deletes > limit && allow_delete.is_none_or(|n| deletes > n)).then_some(limit)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with keys max_delete, allow_empty"
)]
pub(super) struct RawGuard {
    #[serde(default)]
    max_delete: Option<serde_yaml::Value>,
    #[serde(default)]
    allow_empty: bool,
}

const ACCEPTED: &str = "accepted: a count of deletions (0 or more, like 500) or a percent from 0% to 100% (like \"20%\")";

/// Validates the block of destination `key` (`destinations[0]`). Errors are `(key path,
/// message)`.
pub(super) fn settings(key: &str, raw: RawGuard) -> Result<Guard, (String, String)> {
    let at = || format!("{key}.guard.max_delete");
    let max_delete = match raw.max_delete {
        None | Some(serde_yaml::Value::Null) => None,
        Some(serde_yaml::Value::Number(n)) => match n.as_u64() {
            Some(c) => Some(MaxDelete::Count(c)),
            None => return Err((at(), format!("{n} is not a count; {ACCEPTED}"))),
        },
        Some(serde_yaml::Value::String(s)) => Some(parse_text(&s).map_err(|m| (at(), m))?),
        Some(other) => {
            let shown = serde_yaml::to_string(&other).unwrap_or_default();
            return Err((
                at(),
                format!("{} is not a count or a percent; {ACCEPTED}", shown.trim()),
            ));
        }
    };
    Ok(Guard {
        max_delete,
        allow_empty: raw.allow_empty,
    })
}

/// `"20%"` or `"500"`.
fn parse_text(s: &str) -> Result<MaxDelete, String> {
    let t = s.trim();
    if let Some(p) = t.strip_suffix('%') {
        return match p.trim().parse::<u32>() {
            Ok(p) if p <= 100 => Ok(MaxDelete::Percent(p)),
            Ok(_) => Err(format!("'{s}' is more than 100%; {ACCEPTED}")),
            Err(_) => Err(format!("'{s}' is not a percent; {ACCEPTED}")),
        };
    }
    t.parse::<u64>()
        .map(MaxDelete::Count)
        .map_err(|_| format!("'{s}' is not a count or a percent; {ACCEPTED}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Guard, (String, String)> {
        settings("destinations[0]", serde_yaml::from_str(yaml).unwrap())
    }

    #[test]
    fn counts_and_percents() {
        assert_eq!(
            parse("max_delete: 500").unwrap().max_delete,
            Some(MaxDelete::Count(500))
        );
        assert_eq!(
            parse("max_delete: \"20%\"").unwrap().max_delete,
            Some(MaxDelete::Percent(20))
        );
        assert_eq!(
            parse("max_delete: '7'").unwrap().max_delete,
            Some(MaxDelete::Count(7))
        );
        assert_eq!(
            parse("allow_empty: true").unwrap(),
            Guard {
                max_delete: None,
                allow_empty: true
            }
        );
    }

    #[test]
    fn bad_values_name_the_key_and_what_is_accepted() {
        for (yaml, says) in [
            ("max_delete: \"150%\"", "more than 100%"),
            ("max_delete: -1", "not a count"),
            ("max_delete: abc", "not a count or a percent"),
            ("max_delete: 2.5", "not a count"),
            ("max_delete: \"x%\"", "not a percent"),
            ("max_delete: [1]", "not a count or a percent"),
        ] {
            let (key, m) = parse(yaml).unwrap_err();
            assert_eq!(key, "destinations[0].guard.max_delete", "{yaml}");
            assert!(m.contains(says) && m.contains("accepted:"), "{yaml}: {m}");
        }
    }

    #[test]
    fn a_percent_rounds_up_to_at_least_one() {
        assert_eq!(MaxDelete::Percent(20).limit(10), 2);
        assert_eq!(MaxDelete::Percent(20).limit(11), 3);
        assert_eq!(MaxDelete::Percent(0).limit(1000), 1);
        assert_eq!(MaxDelete::Percent(1).limit(0), 1);
        assert_eq!(MaxDelete::Percent(100).limit(7), 7);
        assert_eq!(MaxDelete::Count(0).limit(7), 0);
    }
}
