//! Safe relative paths (SPEC §3.2), shared by manifests, state, templates and uploads.

use foldhash::HashSet;

/// Maximum length of a path, in bytes.
pub(crate) const MAX_PATH: usize = 4096;
/// Maximum length of a path segment, in bytes.
pub(crate) const MAX_SEGMENT: usize = 255;

/// A relative path that breaks a rule of SPEC §3.2; its text says which rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathError {
    /// The empty path.
    #[error("empty path")]
    Empty,
    /// Longer than [`MAX_PATH`] bytes.
    #[error("longer than {0} bytes")]
    TooLong(usize),
    /// Absolute.
    #[error("absolute path; accepted: a relative path")]
    Absolute,
    /// A backslash.
    #[error("contains a backslash; accepted: '/'-separated segments")]
    Backslash,
    /// NUL or another control character.
    #[error("contains NUL or a control character")]
    Control,
    /// `//` or a trailing `/`.
    #[error("contains an empty segment ('//' or a trailing '/')")]
    EmptySegment,
    /// A `.` or `..` segment.
    #[error("contains a '{0}' segment")]
    DotSegment(&'static str),
    /// A segment longer than [`MAX_SEGMENT`] bytes.
    #[error("a segment is longer than {0} bytes")]
    SegmentTooLong(usize),
    /// A top-level name distributor keeps for itself.
    #[error(
        "top-level name '{0}' is reserved (names starting with .distributor: .distributor.json, .distributor.lock, .distributor/)"
    )]
    Reserved(String),
    /// The same path twice in one set.
    #[error("path '{0}' appears more than once")]
    Duplicate(String),
    /// A path that is also a directory on the way to another path of the set.
    #[error("path '{dir}' is a directory prefix of '{below}'")]
    Prefix {
        /// The path that is a directory of the other.
        dir: String,
        /// A path below it.
        below: String,
    },
}

/// Checks one path against §3.2 (all rules but uniqueness and prefixes, which need the
/// whole set). The error says which rule it breaks.
pub(crate) fn check_safe_path(p: &str) -> Result<(), PathError> {
    if p.is_empty() {
        return Err(PathError::Empty);
    }
    if p.len() > MAX_PATH {
        return Err(PathError::TooLong(MAX_PATH));
    }
    if p.starts_with('/') {
        return Err(PathError::Absolute);
    }
    if p.contains('\\') {
        return Err(PathError::Backslash);
    }
    if p.chars().any(|c| c.is_control()) {
        return Err(PathError::Control);
    }
    for seg in p.split('/') {
        match seg {
            "" => return Err(PathError::EmptySegment),
            "." => return Err(PathError::DotSegment(".")),
            ".." => return Err(PathError::DotSegment("..")),
            s if s.len() > MAX_SEGMENT => {
                return Err(PathError::SegmentTooLong(MAX_SEGMENT));
            }
            _ => {}
        }
    }
    let top = p.split('/').next().unwrap_or(p);
    if top.starts_with(".distributor") {
        return Err(PathError::Reserved(top.to_string()));
    }
    Ok(())
}

/// Checks a set of paths for duplicates and directory prefixes (`a` and `a/b`).
/// Returns the offending pair's description.
///
/// Without a set of every path (at a million paths, 50 MB at once): the paths sorted
/// (manifests and state files list them sorted, outputs and links each, so this is a
/// merge), a duplicate is a path equal to the one before it; a prefix is a path that is
/// also a directory on the way to another, and directories are few.
pub(crate) fn check_path_set<'a>(
    paths: impl IntoIterator<Item = &'a str>,
) -> Result<(), PathError> {
    let mut all: Vec<&str> = paths.into_iter().collect();
    all.sort();
    if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
        return Err(PathError::Duplicate(w[0].to_string()));
    }
    let mut dirs: HashSet<&str> = HashSet::default();
    for p in &all {
        // Its parent first: once that is in, so are all of its ancestors.
        for (i, _) in p.rmatch_indices('/') {
            if !dirs.insert(&p[..i]) {
                break;
            }
        }
    }
    match all.iter().find(|p| dirs.contains(**p)) {
        None => Ok(()),
        Some(dir) => {
            let below = (all.iter())
                .find(|q| q.strip_prefix(*dir).is_some_and(|r| r.starts_with('/')))
                .expect("a directory is one on the way to a path");
            Err(PathError::Prefix {
                dir: dir.to_string(),
                below: below.to_string(),
            })
        }
    }
}

/// The relative symlink text that makes `link` (bundle-relative) point at `target`
/// (bundle-relative), e.g. `a/b/l` → `a/c/t` gives `../c/t`.
pub fn relative_link_target(link: &str, target: &str) -> String {
    let link_dirs: Vec<&str> = link.split('/').collect();
    let link_dirs = &link_dirs[..link_dirs.len() - 1];
    let target_parts: Vec<&str> = target.split('/').collect();
    let mut common = 0;
    while common < link_dirs.len()
        && common < target_parts.len() - 1
        && link_dirs[common] == target_parts[common]
    {
        common += 1;
    }
    let mut out: Vec<&str> = std::iter::repeat_n("..", link_dirs.len() - common).collect();
    out.extend_from_slice(&target_parts[common..]);
    out.join("/")
}

/// Every directory on the way to some root-relative paths (their proper prefixes at a
/// `/`), each once, sorted so that a parent comes before its children.
pub(crate) fn ancestors<'p>(paths: impl IntoIterator<Item = &'p str>) -> Vec<&'p str> {
    let mut set: foldhash::HashSet<&str> = foldhash::HashSet::default();
    // Paths mostly come grouped by directory: a path in the same directory as the one
    // before adds nothing new.
    let mut last_dir = None;
    for p in paths {
        let dir = p.rsplit_once('/').map(|(d, _)| d);
        if dir.is_none() || dir == last_dir {
            continue;
        }
        last_dir = dir;
        set.extend(p.match_indices('/').map(|(i, _)| &p[..i]));
    }
    let mut dirs: Vec<&str> = set.into_iter().collect();
    dirs.sort_unstable();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_each_unsafe_form() {
        for bad in [
            "",
            "/abs",
            "a//b",
            "a/",
            "a\\b",
            "./a",
            "a/../b",
            "..",
            ".distributor.json",
            ".distributor-staging/x",
            ".distributorx",
            "a\0b",
            "a\nb",
        ] {
            assert!(check_safe_path(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_safe_path(&"a".repeat(256)).is_err());
        assert!(check_safe_path(&"a/".repeat(2100)).is_err());
        for good in ["a", "a/b.c", "x/.distributor.json", ".hidden", "a b/c"] {
            assert!(check_safe_path(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn rejects_duplicates_and_prefixes() {
        assert!(check_path_set(["a", "b", "a"]).is_err());
        assert!(check_path_set(["a", "a/b"]).is_err());
        assert!(check_path_set(["a/b/c", "a/b"]).is_err());
        assert!(check_path_set(["a", "ab/c", "a.b"]).is_ok());
        assert_eq!(
            check_path_set(["x/y", "a/b/c", "a/b", "a/b/d"]).map_err(|e| e.to_string()),
            Err("path 'a/b' is a directory prefix of 'a/b/c'".into())
        );
        assert_eq!(
            check_path_set(["a/b/c", "a", "a-b/c"]).map_err(|e| e.to_string()),
            Err("path 'a' is a directory prefix of 'a/b/c'".into())
        );
        assert_eq!(
            check_path_set(["b", "a/x", "b"]).map_err(|e| e.to_string()),
            Err("path 'b' appears more than once".into())
        );
        assert!(check_path_set(["a-b", "a/b", "a.c/d", "a0"]).is_ok());
    }

    #[test]
    fn relative_links() {
        assert_eq!(
            relative_link_target("current.png", "maps/temp.png"),
            "maps/temp.png"
        );
        assert_eq!(relative_link_target("w/current.png", "w/f.json"), "f.json");
        assert_eq!(relative_link_target("a/b/l", "a/c/t"), "../c/t");
        assert_eq!(relative_link_target("a/l", "t"), "../t");
    }
}
