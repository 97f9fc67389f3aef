//! The `releases:` block of a destination (SPEC §15): where release directories live, how
//! many inactive ones are kept, and for how long. Validated here with key paths; nothing
//! touches the filesystem.

use super::bounded::Bounded;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Most inactive releases `keep` may ask for.
pub(super) const KEEP_MAX: u32 = 1000;
/// `keep` when the config does not say.
pub(super) const KEEP_DEFAULT: u32 = 3;

/// A destination's validated `releases:` settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseSettings {
    /// `releases.dir`: absolute, lexically normalised; default
    /// `<parent of path>/.<name of path>.releases`.
    pub dir: PathBuf,
    /// `releases.keep`: inactive releases kept besides the previously active one.
    pub keep: u32,
    /// `releases.max_age` as written (`30d`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
    /// `releases.stage_max_age` as written, when set (default [`STAGE_MAX_AGE_DEFAULT`]):
    /// how long a staged, never-promoted release is kept (SPEC §19).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_max_age: Option<String>,
}

/// `releases.stage_max_age` when the config does not say.
pub const STAGE_MAX_AGE_DEFAULT: &str = "7d";

impl ReleaseSettings {
    /// `max_age` in seconds.
    pub fn max_age_seconds(&self) -> Option<u64> {
        self.max_age.as_deref().and_then(|t| parse_age(t).ok())
    }

    /// `stage_max_age` in seconds (the default when not set).
    pub fn stage_max_age_seconds(&self) -> u64 {
        let default = || parse_age(STAGE_MAX_AGE_DEFAULT).unwrap_or(7 * 86_400);
        (self.stage_max_age.as_deref())
            .map_or_else(default, |t| parse_age(t).unwrap_or_else(|_| default()))
    }
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with keys dir, keep, max_age, stage_max_age"
)]
pub(super) struct RawReleases {
    #[serde(default)]
    dir: Option<String>,
    #[serde(default)]
    keep: Option<Bounded<0, { KEEP_MAX as u64 }>>,
    #[serde(default)]
    max_age: Option<String>,
    #[serde(default)]
    stage_max_age: Option<String>,
}

/// Validates the block of destination `key` (`destinations[0]`) whose resolved `path` is
/// given; `resolve` resolves a path text against the config file's directory. Errors are
/// `(key path, message)`.
pub(super) fn settings(
    key: &str,
    path: &Path,
    raw: RawReleases,
    resolve: impl Fn(&str) -> PathBuf,
    check_text: impl Fn(&str) -> Result<(), String>,
) -> Result<ReleaseSettings, (String, String)> {
    let dir = match &raw.dir {
        Some(text) => {
            check_text(text).map_err(|m| (format!("{key}.releases.dir"), m))?;
            resolve(text)
        }
        None => default_dir(path),
    };
    if dir == path || dir.starts_with(path) {
        return Err((
            format!("{key}.releases.dir"),
            format!(
                "{} is inside the destination path {}; releases.dir must be beside it (default: {})",
                dir.display(),
                path.display(),
                default_dir(path).display()
            ),
        ));
    }
    if path.starts_with(&dir) {
        return Err((
            format!("{key}.releases.dir"),
            format!(
                "the destination path {} is inside releases.dir {}; releases.dir holds only release directories (default: {})",
                path.display(),
                dir.display(),
                default_dir(path).display()
            ),
        ));
    }
    if dir.parent().is_none() {
        return Err((
            format!("{key}.releases.dir"),
            "resolves to '/', accepted: a directory below the root".into(),
        ));
    }
    // In range: Bounded refused anything else where it was written.
    let keep = raw.keep.map_or(KEEP_DEFAULT, |k| k.0 as u32);
    if let Some(text) = &raw.max_age {
        parse_age(text).map_err(|m| (format!("{key}.releases.max_age"), m))?;
    }
    if let Some(text) = &raw.stage_max_age {
        parse_age(text).map_err(|m| (format!("{key}.releases.stage_max_age"), m))?;
    }
    Ok(ReleaseSettings {
        dir,
        keep,
        max_age: raw.max_age,
        stage_max_age: raw.stage_max_age,
    })
}

/// `<parent of path>/.<name of path>.releases`.
pub fn default_dir(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.parent()
        .unwrap_or(Path::new("/"))
        .join(format!(".{name}.releases"))
}

/// `<int>[smhdw]` in seconds.
pub fn parse_age(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "'{text}' is not an age; accepted: a whole number followed by s, m, h, d or w (30d, 12h)"
        )
    };
    let unit = text.chars().last().ok_or_else(bad)?;
    let scale: u64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => return Err(bad()),
    };
    let digits = &text[..text.len() - 1];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(scale).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_with_their_unit() {
        assert_eq!(parse_age("30d"), Ok(30 * 86_400));
        assert_eq!(parse_age("12h"), Ok(12 * 3600));
        assert_eq!(parse_age("0s"), Ok(0));
        assert_eq!(parse_age("2w"), Ok(14 * 86_400));
        for bad in [
            "",
            "d",
            "30",
            "3.5d",
            "-1d",
            "30D",
            "1y",
            " 1d",
            "99999999999999999999s",
        ] {
            let e = parse_age(bad).unwrap_err();
            assert!(e.contains("accepted: a whole number"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_default_dir_is_a_hidden_sibling() {
        assert_eq!(
            default_dir(Path::new("/srv/www/latest")),
            PathBuf::from("/srv/www/.latest.releases")
        );
    }
}
