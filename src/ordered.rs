//! Finding paths in a list kept in the order they will mostly be asked for.
//!
//! A publication walks the same paths several times in the same order (the manifest's):
//! the placement fingerprints read from the journal, the probe's results, the planner's
//! lookups. Looking each one up right after the one found last finds it without hashing;
//! a path asked out of order is found by binary search.

use std::cell::{Cell, OnceCell};

/// Finds positions in a list of distinct paths (the list itself is the caller's, read
/// through a `key` function): right after the position found last, else by binary search
/// over the positions sorted by path, sorted once on the first search.
#[derive(Debug, Clone, Default)]
pub(crate) struct InOrder {
    /// Right after the position found last.
    next: Cell<usize>,
    /// Positions sorted by path: built on the first search.
    by_path: OnceCell<Vec<usize>>,
}

impl InOrder {
    /// The position of `path` among the `len` paths `key(0)..key(len)`.
    pub(crate) fn find<'k>(
        &self,
        len: usize,
        key: impl Fn(usize) -> &'k str,
        path: &str,
    ) -> Option<usize> {
        self.next(len, &key, path)
            .or_else(|| self.search(len, &key, path))
    }

    /// `path`'s position if it is the one right after the position found last.
    pub(crate) fn next<'k>(
        &self,
        len: usize,
        key: impl Fn(usize) -> &'k str,
        path: &str,
    ) -> Option<usize> {
        let i = self.next.get();
        (i < len && key(i) == path).then(|| self.found(i))
    }

    /// `path`'s position, by binary search.
    pub(crate) fn search<'k>(
        &self,
        len: usize,
        key: impl Fn(usize) -> &'k str,
        path: &str,
    ) -> Option<usize> {
        let by_path = self.by_path.get_or_init(|| {
            let mut v: Vec<usize> = (0..len).collect();
            v.sort_unstable_by_key(|&i| key(i));
            v
        });
        let k = by_path.binary_search_by(|&i| key(i).cmp(path)).ok()?;
        Some(self.found(by_path[k]))
    }

    fn found(&self, i: usize) -> usize {
        self.next.set(i + 1);
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_path_in_any_order() {
        let paths = ["d/b", "a", "d/c"];
        let key = |i: usize| paths[i];
        let o = InOrder::default();
        for (p, want) in [
            ("d/b", Some(0)),
            ("a", Some(1)),
            ("nowhere", None),
            ("d/c", Some(2)),
            ("a", Some(1)),
            ("a", Some(1)),
            ("d/b", Some(0)),
            ("a", Some(1)),
            ("d/a", None),
        ] {
            assert_eq!(o.find(paths.len(), key, p), want, "{p}");
        }
        assert_eq!(InOrder::default().find(0, key, "a"), None);
    }
}
