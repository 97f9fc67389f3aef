//! Every path planned: the manifest's outputs and links, the replaced owner's recorded
//! paths it omits, and what storage holds in their way (unmanaged content, directories,
//! special files, a symlink or file on the way, the state file's own name).

use super::{Moved, Planner, Recorded, Retained};
use crate::model::{ConflictKind, FileOp};
use crate::plan::{Entry, FileAction, LinkAction, Replaced};
use crate::source::relative_link_target;
use crate::state::{RecordedLink, RecordedOutput};
use foldhash::HashSet;

impl<'s> Planner<'_, 's> {
    /// Plans every path: the manifest's outputs and links, then the replaced owner's
    /// recorded paths it omits (deleted, or retained by a merge); returns what a merge
    /// retains.
    pub(super) fn plan_paths(&mut self, moved: &Moved<'_, 's>, retain: bool) -> Retained<'s> {
        let manifest = &self.input.source.manifest;
        // The replaced owner's recorded paths the manifest does not list again: deleted,
        // or retained by a merge.
        let omitted = |path: &str| {
            (moved.records.get(path))
                .is_some_and(|r| !r.claimed && Some(r.what.owner()) == moved.old_owner)
        };
        let omitted_outputs: Vec<&'s RecordedOutput> = (self.state.outputs.iter())
            .filter(|o| omitted(&o.path))
            .collect();
        let omitted_links: Vec<&'s RecordedLink> = (self.state.links.iter())
            .filter(|l| omitted(&l.path))
            .collect();
        self.plan
            .files
            .reserve(manifest.outputs.len() + omitted_outputs.len());
        self.plan.links.reserve(manifest.links.len());
        self.plan_manifest(moved);
        let retained = self.plan_omitted(&omitted_outputs, &omitted_links, retain, moved);
        // Manifests and state files are mostly sorted by path already: then the plan is.
        if !self.plan.files.is_sorted_by(|a, b| a.path <= b.path) {
            self.plan.files.sort_by(|a, b| a.path.cmp(&b.path));
        }
        if !self.plan.links.is_sorted_by(|a, b| a.path <= b.path) {
            self.plan.links.sort_by(|a, b| a.path.cmp(&b.path));
        }

        retained
    }

    /// Plans the manifest's outputs and links against what storage holds.
    fn plan_manifest(&mut self, moved: &Moved<'_, 's>) {
        let manifest = &self.input.source.manifest;
        let recorded = moved.records;
        let storage = self.input.storage;
        for o in &manifest.outputs {
            let entry = storage.get(&o.path);
            let rec = recorded.get(o.path.as_str()).map(|r| &r.what);
            let same = matches!(rec, Some(Recorded::Output(r)) if r.sha256 == o.sha256 && r.size == o.size)
                && matches!(entry, Entry::File { size, sha256: Some(h) } if *size == o.size && **h == o.sha256);
            let op = self.planned_op(&o.path, entry, rec.is_some(), same, moved);
            self.check_ancestors(&o.path, moved);
            self.plan.files.push(FileAction {
                path: o.path.clone(),
                op,
                size: o.size,
                sha256: o.sha256,
                replaces: Replaced::of(entry),
            });
        }
        for l in &manifest.links {
            let entry = storage.get(&l.path);
            let text = relative_link_target(&l.path, &l.target);
            let rec = recorded.get(l.path.as_str()).map(|r| &r.what);
            let same = matches!(rec, Some(Recorded::Link(r)) if r.target == l.target)
                && matches!(entry, Entry::Symlink { target } if *target == text);
            let op = self.planned_op(&l.path, entry, rec.is_some(), same, moved);
            self.check_ancestors(&l.path, moved);
            self.plan.links.push(LinkAction {
                path: l.path.clone(),
                target: l.target.clone(),
                op,
                replaces: Replaced::of(entry),
            });
        }
    }

    /// Plans the replaced owner's recorded paths the manifest omits: deleted, or retained
    /// by a merge. Returns what the merge retains: with the manifest's, the new state's
    /// records, built only when the decision writes.
    fn plan_omitted(
        &mut self,
        omitted_outputs: &[&'s RecordedOutput],
        omitted_links: &[&'s RecordedLink],
        retain: bool,
        moved: &Moved<'_, 's>,
    ) -> Retained<'s> {
        let storage = self.input.storage;
        let mut retained = Retained::default();
        for &o in omitted_outputs {
            let op = self.omitted_op(&o.path, retain, moved);
            self.plan.files.push(FileAction {
                path: o.path.clone(),
                op,
                size: o.size,
                sha256: o.sha256,
                replaces: Replaced::of(storage.get(&o.path)),
            });
            if retain {
                retained.outputs.push(o);
            }
        }
        for &l in omitted_links {
            let op = self.omitted_op(&l.path, retain, moved);
            self.plan.links.push(LinkAction {
                path: l.path.clone(),
                target: l.target.clone(),
                op,
                replaces: Replaced::of(storage.get(&l.path)),
            });
            if retain {
                retained.links.push(l);
            }
        }
        retained
    }

    /// The commit point renames the new state over `.distributor.json`: a directory or
    /// special file there would make it fail after everything else was placed. A symlink
    /// there is somebody's too: replacing it would lose it, and recovery could not tell
    /// the state before from the state after.
    pub(super) fn check_state_file(&mut self) {
        if matches!(
            self.input.storage.get(crate::state::STATE_FILE),
            Entry::Dir { .. } | Entry::Special | Entry::Symlink { .. }
        ) {
            let path = crate::state::STATE_FILE;
            self.conflict(
                ConflictKind::UnsafeStorage,
                Some(path),
                None,
                format!("'{path}' is a symlink, directory or special file; distributor writes its state there and never replaces one"),
            );
        }
    }

    /// The operation on a planned path: `same` says storage already holds exactly the
    /// recorded content the new bundle wants there.
    fn planned_op(
        &mut self,
        path: &str,
        entry: &Entry,
        recorded: bool,
        same: bool,
        moved: &Moved<'_, '_>,
    ) -> FileOp {
        if !recorded {
            return self.unrecorded(path, entry, moved);
        }
        match entry {
            _ if same => FileOp::Unchanged,
            Entry::Missing => FileOp::Create,
            Entry::Dir { contents, dirs } => self.dir_in_the_way(path, contents, dirs, moved),
            Entry::Special => {
                self.special(path);
                FileOp::Overwrite
            }
            Entry::File { .. } | Entry::Symlink { .. } => FileOp::Overwrite,
        }
    }

    /// A planned path that no valid state records.
    fn unrecorded(&mut self, path: &str, entry: &Entry, moved: &Moved<'_, '_>) -> FileOp {
        match entry {
            Entry::Missing => FileOp::Create,
            Entry::File { .. } | Entry::Symlink { .. } => {
                let what = if matches!(entry, Entry::File { .. }) {
                    "a file"
                } else {
                    "a symlink"
                };
                self.conflict(
                    ConflictKind::UnmanagedContent,
                    Some(path),
                    None,
                    format!("'{path}' exists in storage as {what} that no valid state records; distributor does not adopt unmanaged content"),
                );
                FileOp::Overwrite
            }
            Entry::Dir { contents, dirs } => self.dir_in_the_way(path, contents, dirs, moved),
            Entry::Special => {
                self.special(path);
                FileOp::Overwrite
            }
        }
    }

    /// A directory where a file or link goes: fine only when it holds recorded content
    /// that this plan moves aside and nothing else (every file under it is moved aside and
    /// every directory under it leads to such a file), so it is the directory tree of that
    /// content, emptied and removed by the move. An empty directory, or one holding anything
    /// else, is unrecorded: somebody made it, and distributor does not remove it.
    fn dir_in_the_way(
        &mut self,
        path: &str,
        contents: &[String],
        dirs: &[String],
        moved: &Moved<'_, '_>,
    ) -> FileOp {
        let all_moved = contents.iter().all(|c| moved.contains(c.as_str()));
        let leading: HashSet<&str> = contents
            .iter()
            .flat_map(|c| c.match_indices('/').map(move |(i, _)| &c[..i]))
            .collect();
        if !contents.is_empty() && all_moved && dirs.iter().all(|d| leading.contains(d.as_str())) {
            return FileOp::Create;
        }
        let what = if contents.is_empty() && dirs.is_empty() {
            "an empty directory stands"
        } else if contents.is_empty() {
            "a directory holding only directories stands"
        } else {
            "a directory stands"
        };
        self.conflict(
            ConflictKind::UnmanagedDirectory,
            Some(path),
            None,
            format!("{what} at '{path}' where a file goes, holding nothing this publication manages; distributor does not remove directories it did not make"),
        );
        FileOp::Overwrite
    }

    /// A recorded path of the replaced owner that the manifest omits: retained by a merge,
    /// else deleted (when what stands there may be).
    fn omitted_op(&mut self, path: &str, retain: bool, moved: &Moved<'_, '_>) -> FileOp {
        let op = if retain {
            FileOp::Retain
        } else {
            self.check_deletable(path);
            FileOp::Delete
        };
        self.check_ancestors(path, moved);
        op
    }

    /// A recorded path this plan deletes must hold a file or link: a directory or special
    /// file there is somebody else's, and deletion touches only what state records.
    fn check_deletable(&mut self, path: &str) {
        match self.input.storage.get(path) {
            Entry::Dir { .. } => self.conflict(
                ConflictKind::UnmanagedDirectory,
                Some(path),
                None,
                format!("'{path}' is recorded as distributor's, but a directory stands there now; deletion touches only what state records, so distributor will not remove it or what it holds"),
            ),
            Entry::Special => self.special(path),
            Entry::Missing | Entry::File { .. } | Entry::Symlink { .. } => {}
        }
    }

    fn special(&mut self, path: &str) {
        self.conflict(
            ConflictKind::UnsafeStorage,
            Some(path),
            None,
            format!(
                "'{path}' is a socket, FIFO or device; distributor never replaces special files"
            ),
        );
    }

    /// Every ancestor of a touched path must be a directory, or a path this plan moves
    /// aside; a symlink or special file on the way is unsafe. (`moved` carries the records,
    /// which name the owner of a file in the way.)
    fn check_ancestors(&mut self, path: &str, moved: &Moved<'_, '_>) {
        for (i, b) in path.bytes().enumerate() {
            if b != b'/' {
                continue;
            }
            let anc = &path[..i];
            match self.input.storage.get(anc) {
                Entry::Missing | Entry::Dir { .. } => {}
                _ if moved.contains(anc) => {}
                Entry::Symlink { .. } | Entry::Special => {
                    self.conflict(
                        ConflictKind::UnsafeStorage,
                        Some(anc),
                        None,
                        format!("'{anc}' on the way to '{path}' is a symlink or special file; distributor never writes through it"),
                    );
                    return;
                }
                Entry::File { .. } => {
                    let whose = (moved.records)
                        .get(anc)
                        .map(|r| format!(" (recorded for {})", r.what.owner()))
                        .unwrap_or_default();
                    self.conflict(
                        ConflictKind::UnsafeStorage,
                        Some(anc),
                        None,
                        format!("'{anc}' on the way to '{path}' is a file{whose}, not a directory"),
                    );
                    return;
                }
            }
        }
    }
}
