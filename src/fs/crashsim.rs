//! Simulated power loss, for the crash tests: the local backend's primitives report every
//! change they make to a destination and every barrier that makes changes durable; a
//! `powercut` failpoint (`failpoint.rs`) then undoes, newest first, every change not
//! yet durable, as a power cut would lose it, and stops the process. Built only with the
//! `failpoints` feature; without it every function here is empty.
//!
//! The model, after ALICE (Pillai et al., OSDI 2014) and SQLite's crash tests, for a
//! journaling filesystem:
//!
//! - a file's data is durable after an fsync of the file or a syncfs: before, a power cut
//!   leaves the file empty (delayed allocation: the classic zero-length file);
//! - a directory entry (a file or directory created, a symlink, a rename into or out of a
//!   directory) is durable after an fsync of that directory (for a rename, of either
//!   directory: the filesystem journals a rename as one transaction) or a syncfs: before, a
//!   power cut undoes it (the entry vanishes, the rename goes back);
//! - an exchange (`RENAME_EXCHANGE`, `releases adopt`'s commit point) is one journaled
//!   transaction like a rename: durable after an fsync of either directory or a syncfs;
//!   before, a power cut swaps the two entries back;
//! - removals are taken as durable at once. Distributor removes only after its commit
//!   point (cleanup) or while rolling back, where a removal coming back is a step to redo
//!   that recovery redoes; the model does not exercise it.
//!
//! The journal is SQLite's own business (`synchronous = FULL`): what it committed stays
//! (the step events and the log tail hint, committed without an fsync, are read by
//! nothing `recover` decides from).

use std::path::Path;

#[cfg(feature = "failpoints")]
mod imp {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    #[derive(Debug)]
    enum Change {
        /// A new entry (file, symlink or directory) at the path.
        Entry(PathBuf),
        /// Data written to the file at the path.
        Data(PathBuf),
        /// A rename.
        Renamed { from: PathBuf, to: PathBuf },
        /// An exchange of the entries at two paths.
        Exchanged { a: PathBuf, b: PathBuf },
        /// A rename is about to replace the file at the path, which held these bytes.
        Replacing { path: PathBuf, bytes: Vec<u8> },
        /// A rename is about to replace the symlink at the path, which held this target.
        ReplacingLink { path: PathBuf, target: PathBuf },
    }

    static PENDING: Mutex<Vec<Change>> = Mutex::new(Vec::new());

    fn pending() -> std::sync::MutexGuard<'static, Vec<Change>> {
        PENDING.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn parent(p: &Path) -> &Path {
        p.parent().unwrap_or(p)
    }

    pub(super) fn entry(path: &Path) {
        pending().push(Change::Entry(path.to_path_buf()));
    }

    pub(super) fn data(path: &Path) {
        pending().push(Change::Data(path.to_path_buf()));
    }

    pub(super) fn renamed(from: &Path, to: &Path) {
        let mut p = pending();
        // Pending data and entries below the old name follow the file to its new one.
        for c in p.iter_mut() {
            if let Change::Data(path) | Change::Entry(path) = c
                && let Ok(rest) = path.strip_prefix(from)
            {
                *path = to.join(rest);
            }
        }
        p.push(Change::Renamed {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
    }

    pub(super) fn exchanged(a: &Path, b: &Path) {
        let mut p = pending();
        // Pending data and entries below either name follow their entry to the other.
        for c in p.iter_mut() {
            if let Change::Data(path) | Change::Entry(path) = c {
                if let Ok(rest) = path.strip_prefix(a) {
                    *path = b.join(rest);
                } else if let Ok(rest) = path.strip_prefix(b) {
                    *path = a.join(rest);
                }
            }
        }
        p.push(Change::Exchanged {
            a: a.to_path_buf(),
            b: b.to_path_buf(),
        });
    }

    pub(super) fn replacing(path: &Path) {
        match std::fs::symlink_metadata(path) {
            Ok(md) if md.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(path) {
                    pending().push(Change::ReplacingLink {
                        path: path.to_path_buf(),
                        target,
                    });
                }
            }
            Ok(md) if md.is_file() => {
                if let Ok(bytes) = std::fs::read(path) {
                    pending().push(Change::Replacing {
                        path: path.to_path_buf(),
                        bytes,
                    });
                }
            }
            _ => {}
        }
    }

    pub(super) fn file_synced(path: &Path) {
        pending().retain(|c| !matches!(c, Change::Data(p) if p == path));
    }

    pub(super) fn dir_synced(dir: &Path) {
        pending().retain(|c| match c {
            Change::Entry(p) => parent(p) != dir,
            Change::Renamed { from, to } => parent(from) != dir && parent(to) != dir,
            Change::Exchanged { a, b } => parent(a) != dir && parent(b) != dir,
            Change::Replacing { path, .. } | Change::ReplacingLink { path, .. } => {
                parent(path) != dir
            }
            Change::Data(_) => true,
        });
    }

    pub(super) fn fs_synced() {
        pending().clear();
    }

    pub(super) fn power_cut() {
        let changes = std::mem::take(&mut *pending());
        for c in changes.into_iter().rev() {
            let _ = match c {
                Change::Data(p) => std::fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .and_then(|f| f.set_len(0)),
                Change::Entry(p) => match std::fs::symlink_metadata(&p) {
                    Ok(md) if md.is_dir() => std::fs::remove_dir_all(&p),
                    Ok(_) => std::fs::remove_file(&p),
                    Err(e) => Err(e),
                },
                Change::Renamed { from, to } => std::fs::rename(&to, &from),
                Change::Exchanged { a, b } => rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &a,
                    rustix::fs::CWD,
                    &b,
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .map_err(std::io::Error::from),
                Change::Replacing { path, bytes } => std::fs::write(&path, bytes),
                Change::ReplacingLink { path, target } => {
                    let _ = std::fs::remove_file(&path);
                    std::os::unix::fs::symlink(&target, &path)
                }
            };
        }
    }
}

/// A new entry (file, symlink, directory) was made at `path`.
pub(crate) fn entry(_path: &Path) {
    #[cfg(feature = "failpoints")]
    imp::entry(_path);
}

/// Data was written to the file at `path`.
pub(crate) fn data(_path: &Path) {
    #[cfg(feature = "failpoints")]
    imp::data(_path);
}

/// `from` was renamed to `to`.
pub(crate) fn renamed(_from: &Path, _to: &Path) {
    #[cfg(feature = "failpoints")]
    imp::renamed(_from, _to);
}

/// The entries at `a` and `b` were exchanged (`RENAME_EXCHANGE`).
pub(crate) fn exchanged(_a: &Path, _b: &Path) {
    #[cfg(feature = "failpoints")]
    imp::exchanged(_a, _b);
}

/// A rename is about to replace the file at `path`: what it holds comes back if the
/// rename is lost.
pub(crate) fn replacing(_path: &Path) {
    #[cfg(feature = "failpoints")]
    imp::replacing(_path);
}

/// The file at `path` was fsynced.
pub(crate) fn file_synced(_path: &Path) {
    #[cfg(feature = "failpoints")]
    imp::file_synced(_path);
}

/// The directory `dir` was fsynced.
pub(crate) fn dir_synced(_dir: &Path) {
    #[cfg(feature = "failpoints")]
    imp::dir_synced(_dir);
}

/// The whole filesystem was synced.
pub(crate) fn fs_synced() {
    #[cfg(feature = "failpoints")]
    imp::fs_synced();
}

/// Undoes every change not yet durable, newest first (the power goes out). Only a
/// `powercut` failpoint calls it, so it exists only with the `failpoints` feature.
#[cfg(feature = "failpoints")]
pub(crate) fn power_cut() {
    imp::power_cut();
}
