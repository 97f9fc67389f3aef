//! Path globs for `verify.ignore` and `distributor manifest --exclude` (SPEC §16): each
//! glob matches a whole bundle-relative path; `*` and `?` do not cross `/`, `**` does
//! (`*.tmp` is a top-level file, `**/*.tmp` one anywhere, `.git/**` everything below
//! `.git`). A glob ending in `/` means, as in gitignore, a directory: it matches every
//! path below a directory it matches (`.git/` is `.git/config` and `.git/objects/ab`,
//! never a file named `.git`). Built on `globset`.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// What a glob may be, for messages.
pub(crate) const ACCEPTED: &str = "accepted: a glob matching whole bundle-relative paths, where * and ? stay within one path segment and ** crosses them, and a trailing / means everything below a directory (\"robots.txt\", \"*.tmp\", \"**/.DS_Store\", \".git/\", \".git/**\")";

/// A set of path globs.
#[derive(Debug, Clone, Default)]
pub struct PathGlobs {
    patterns: Vec<String>,
    set: GlobSet,
    /// The globs written with a trailing `/`, without it: they match directories, and a
    /// path matches when one of its ancestors does.
    dirs: GlobSet,
}

/// A glob [`PathGlobs::new`] refuses: each names the glob and what is accepted
/// ([`ACCEPTED`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// The empty glob.
    #[error("an empty glob; {ACCEPTED}")]
    Empty,
    /// A glob starting with `/`.
    #[error("glob '{0}' starts with '/': paths are bundle-relative; {ACCEPTED}")]
    Absolute(String),
    /// A glob of only `/`.
    #[error("glob '{0}' names no directory; {ACCEPTED}")]
    NoDirectory(String),
    /// A glob the glob syntax refuses: `why` is globset's reason.
    #[error("invalid glob '{glob}': {why}; {ACCEPTED}")]
    Invalid {
        /// The glob.
        glob: String,
        /// Why.
        why: String,
    },
    /// The globs together could not be compiled.
    #[error("invalid globs: {0}; {ACCEPTED}")]
    Set(String),
}

impl PathGlobs {
    /// Compiles `patterns`; an error names the first bad one and what is accepted.
    pub fn new(patterns: &[String]) -> Result<PathGlobs, GlobError> {
        let mut b = GlobSetBuilder::new();
        let mut dirs = GlobSetBuilder::new();
        for p in patterns {
            if p.is_empty() {
                return Err(GlobError::Empty);
            }
            if p.starts_with('/') {
                return Err(GlobError::Absolute(p.clone()));
            }
            let dir = p.trim_end_matches('/');
            if dir.is_empty() {
                return Err(GlobError::NoDirectory(p.clone()));
            }
            let g = GlobBuilder::new(dir)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| GlobError::Invalid {
                    glob: p.clone(),
                    why: e.kind().to_string(),
                })?;
            if dir.len() < p.len() {
                dirs.add(g);
            } else {
                b.add(g);
            }
        }
        let built = |b: GlobSetBuilder| b.build().map_err(|e| GlobError::Set(e.kind().to_string()));
        Ok(PathGlobs {
            patterns: patterns.to_vec(),
            set: built(b)?,
            dirs: built(dirs)?,
        })
    }

    /// Whether some glob matches the whole relative path `rel`.
    /// What every path these globs match starts with: the longest common start of their
    /// literal starts (before the first `*`, `?`, `[`, `{` or `\\`); empty when one starts
    /// with a wildcard.
    pub fn common_prefix(&self) -> String {
        let starts: Vec<&str> = (self.patterns.iter())
            .map(|p| {
                let end = p.find(['*', '?', '[', '{', '\\']).unwrap_or(p.len());
                &p[..end]
            })
            .collect();
        let Some(first) = starts.first() else {
            return String::new();
        };
        let mut len = first.len();
        for s in &starts[1..] {
            len = len.min(
                first
                    .bytes()
                    .zip(s.bytes())
                    .take_while(|(a, b)| a == b)
                    .count(),
            );
        }
        while !first.is_char_boundary(len) {
            len -= 1;
        }
        first[..len].to_string()
    }

    pub fn is_match(&self, rel: &str) -> bool {
        !self.patterns.is_empty()
            && (self.set.is_match(rel)
                || (!self.dirs.is_empty()
                    && rel
                        .match_indices('/')
                        .any(|(i, _)| self.dirs.is_match(&rel[..i]))))
    }

    /// The globs as written.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn globs(p: &[&str]) -> PathGlobs {
        PathGlobs::new(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn a_star_stays_in_its_segment_and_two_cross_them() {
        let g = globs(&["robots.txt", "*.tmp", "**/.DS_Store", ".git/**"]);
        for yes in [
            "robots.txt",
            "a.tmp",
            ".DS_Store",
            "x/y/.DS_Store",
            ".git/config",
            ".git/objects/ab/cd",
        ] {
            assert!(g.is_match(yes), "{yes}");
        }
        for no in [
            "sub/robots.txt",
            "sub/a.tmp",
            "a.tmpx",
            ".gitignore",
            "git/config",
        ] {
            assert!(!g.is_match(no), "{no}");
        }
        assert!(!PathGlobs::default().is_match("anything"));
    }

    #[test]
    fn a_trailing_slash_means_everything_below_a_directory() {
        let g = globs(&[".git/", "**/node_modules/"]);
        for yes in [
            ".git/HEAD",
            ".git/objects/ab",
            "node_modules/x",
            "a/b/node_modules/c/d",
        ] {
            assert!(g.is_match(yes), "{yes}");
        }
        for no in [
            ".git",
            "node_modules",
            "a/.git",
            ".gitignore",
            "x/.git/HEAD",
        ] {
            assert!(!g.is_match(no), "{no}");
        }
    }

    #[test]
    fn bad_globs_are_named() {
        for bad in ["", "/abs", "a[", "{a", "/", "a[/"] {
            let e = PathGlobs::new(&[bad.to_string()]).unwrap_err().to_string();
            assert!(e.contains("accepted: a glob"), "{bad}: {e}");
        }
    }
}
