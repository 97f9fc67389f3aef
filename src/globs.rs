//! Path globs for `verify.ignore` and `distributor manifest --exclude` (SPEC §16): each
//! glob matches a whole bundle-relative path; `*` and `?` do not cross `/`, `**` does
//! (`*.tmp` is a top-level file, `**/*.tmp` one anywhere, `.git/**` everything below
//! `.git`). Built on `globset`.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// What a glob may be, for messages.
pub const ACCEPTED: &str = "accepted: a glob matching whole bundle-relative paths, where * and ? stay within one path segment and ** crosses them (\"robots.txt\", \"*.tmp\", \"**/.DS_Store\", \".git/**\")";

/// A set of path globs.
#[derive(Debug, Clone, Default)]
pub struct PathGlobs {
    patterns: Vec<String>,
    set: GlobSet,
}

impl PathGlobs {
    /// Compiles `patterns`; an error names the first bad one and what is accepted.
    pub fn new(patterns: &[String]) -> Result<PathGlobs, String> {
        let mut b = GlobSetBuilder::new();
        for p in patterns {
            if p.is_empty() {
                return Err(format!("an empty glob; {ACCEPTED}"));
            }
            if p.starts_with('/') {
                return Err(format!(
                    "glob '{p}' starts with '/': paths are bundle-relative; {ACCEPTED}"
                ));
            }
            let g = GlobBuilder::new(p)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| format!("invalid glob '{p}': {}; {ACCEPTED}", e.kind()))?;
            b.add(g);
        }
        let set = b
            .build()
            .map_err(|e| format!("invalid globs: {}; {ACCEPTED}", e.kind()))?;
        Ok(PathGlobs {
            patterns: patterns.to_vec(),
            set,
        })
    }

    /// Whether some glob matches the whole relative path `rel`.
    pub fn is_match(&self, rel: &str) -> bool {
        !self.patterns.is_empty() && self.set.is_match(rel)
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
    fn bad_globs_are_named() {
        for bad in ["", "/abs", "a[", "{a"] {
            let e = PathGlobs::new(&[bad.to_string()]).unwrap_err();
            assert!(e.contains("accepted: a glob"), "{bad}: {e}");
        }
    }
}
