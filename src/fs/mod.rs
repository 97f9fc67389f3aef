//! Directory handles that cannot be redirected (SPEC §13): every create, open, rename,
//! link and delete in a destination is made relative to a [`Dir`] opened without following
//! symlinks, from the bundle path's handle down.
//!
//! A directory below a held handle is opened with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` where the kernel has it, else segment by segment with
//! `O_NOFOLLOW | O_DIRECTORY`: either way a symlink anywhere on the way is refused by the
//! open itself, and `..` cannot climb out. Once a handle is held, replacing the directory
//! it names (renaming it away and putting a symlink in its place) does not redirect it:
//! what is written through the handle lands in the directory that was opened.
//!
//! Files are opened with `O_NOFOLLOW | O_NONBLOCK` and their type checked after opening,
//! so a FIFO or device planted in a destination never blocks a run.
//!
//! Must never: resolve a path from the process's working directory or through a symlink
//! (the only path-based open is [`Dir::open_path`], for the configured destination path the
//! operator wrote), or remove anything but the entry it names.
//!
//! Only the local and releases backends use this layer, and `source/` to read a bundle.

pub(crate) mod crashsim;
pub(crate) mod tree;

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{
    AtFlags, CWD, Dir as RawDir, FileType, Mode, OFlags, RenameFlags, ResolveFlags, Stat, fstat,
    linkat, mkdirat, openat, openat2, readlinkat, renameat_with, statat, symlinkat, unlinkat,
};
use rustix::io::Errno;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

/// An open directory, and the path it was opened at (for messages only: nothing is ever
/// looked up by that path).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Identity of a directory entry: device and inode. Serialized as `{"dev": D, "ino": I}`
/// where a record keeps it (a releases log entry, a staging entry's `release.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
}

impl Identity {
    // The field types of `stat` differ between targets.
    #[allow(clippy::unnecessary_cast)]
    /// The identity `st` describes.
    pub fn of(st: &Stat) -> Identity {
        Identity {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        }
    }
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Whether `openat2` works here: 0 not tried yet, 1 yes, 2 no (an old kernel, or a sandbox
/// that refuses it): then every open walks segment by segment.
static OPENAT2: AtomicU8 = AtomicU8::new(0);

/// True for the errors that say "not a real directory on the way": a symlink
/// (`ELOOP`, or `EXDEV` from `RESOLVE_BENEATH`), or something else than a directory.
pub(crate) fn is_redirect(e: &io::Error) -> bool {
    matches!(
        Errno::from_io_error(e),
        Some(Errno::LOOP | Errno::NOTDIR | Errno::XDEV)
    )
}

impl Dir {
    /// Opens the directory at `path`, a path the operator configured (a symlink in its
    /// last segment is refused; the directories above it are the operator's own).
    pub fn open_path(path: &Path) -> io::Result<Dir> {
        let fd = openat(CWD, path, DIR_FLAGS, Mode::empty())?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The path this handle was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `rel` below this directory, for messages.
    pub fn join(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.path.clone()
        } else {
            self.path.join(rel)
        }
    }

    /// The raw handle.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A second handle of the same directory.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
            path: self.path.clone(),
        })
    }

    /// Device and inode of the directory itself.
    pub fn identity(&self) -> io::Result<Identity> {
        Ok(Identity::of(&fstat(&self.fd)?))
    }

    /// `fstat` of the directory itself: its identity, owner and mode as the handle sees
    /// them.
    pub fn fstat(&self) -> io::Result<Stat> {
        Ok(fstat(&self.fd)?)
    }

    /// Opens the directory `rel` (one or more `/`-separated segments) below this one; a
    /// symlink or a non-directory anywhere on the way is an error ([`is_redirect`]).
    pub fn open_dir(&self, rel: &str) -> io::Result<Dir> {
        if rel.is_empty() {
            return self.try_clone();
        }
        let fd = match OPENAT2.load(Ordering::Relaxed) {
            2 => self.walk(rel)?,
            known => {
                let resolve =
                    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
                match openat2(&self.fd, rel, DIR_FLAGS, Mode::empty(), resolve) {
                    Ok(fd) => {
                        if known == 0 {
                            OPENAT2.store(1, Ordering::Relaxed);
                        }
                        fd
                    }
                    Err(Errno::NOSYS | Errno::PERM) if known == 0 => {
                        OPENAT2.store(2, Ordering::Relaxed);
                        self.walk(rel)?
                    }
                    Err(Errno::AGAIN) => self.walk(rel)?,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        Ok(Dir {
            fd,
            path: self.join(rel),
        })
    }

    /// Creates the file `rel` (one or more `/`-separated segments; it must not exist) with
    /// `mode`, for writing, through the directories below this one, never a symlink on the
    /// way or at the end: one `openat2` that resolves beneath this directory, or without it
    /// the parent opened as [`Dir::open_dir`] does, then the file created in it. Holds no
    /// handle of the directories on the way (a new tree has as many as the bundle).
    pub fn create_file_below(&self, rel: &str, mode: u32) -> io::Result<File> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rel.rsplit_once('/') {
            Some((parent, name)) if OPENAT2.load(Ordering::Relaxed) == 2 => {
                openat(&self.walk(parent)?, name, flags, Mode::from_raw_mode(mode))?
            }
            Some((parent, name)) => {
                let resolve =
                    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
                match openat2(&self.fd, rel, flags, Mode::from_raw_mode(mode), resolve) {
                    Ok(fd) => fd,
                    Err(Errno::NOSYS | Errno::PERM | Errno::AGAIN) => {
                        openat(&self.walk(parent)?, name, flags, Mode::from_raw_mode(mode))?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            None => openat(&self.fd, rel, flags, Mode::from_raw_mode(mode))?,
        };
        crashsim::entry(&self.join(rel));
        crashsim::data(&self.join(rel));
        Ok(File::from(fd))
    }

    /// [`Dir::open_dir`] without `openat2`: one `O_NOFOLLOW` open per segment.
    fn walk(&self, rel: &str) -> io::Result<OwnedFd> {
        let mut cur: Option<OwnedFd> = None;
        for seg in rel.split('/') {
            if seg.is_empty() || seg == "." || seg == ".." {
                return Err(Errno::XDEV.into());
            }
            let parent = cur.as_ref().map_or(self.fd.as_fd(), |f| f.as_fd());
            cur = Some(openat(parent, seg, DIR_FLAGS, Mode::empty())?);
        }
        cur.ok_or_else(|| Errno::NOENT.into())
    }

    /// Creates directory `name` here; `Ok(false)` when something already has the name.
    pub fn mkdir(&self, name: &str) -> io::Result<bool> {
        match mkdirat(&self.fd, name, Mode::from_raw_mode(0o755)) {
            Ok(()) => {
                crashsim::entry(&self.join(name));
                Ok(true)
            }
            Err(Errno::EXIST) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// `lstat` of the entry `name` (never followed).
    pub fn stat(&self, name: &str) -> io::Result<Stat> {
        Ok(statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)?)
    }

    /// `lstat` of `name`, `None` when nothing has that name.
    pub fn stat_opt(&self, name: &str) -> io::Result<Option<Stat>> {
        match statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the regular file `name` for reading: never through a symlink, never blocking
    /// on a FIFO or device; anything but a regular file is refused (`EINVAL`, with the
    /// type in the message). Returns the file and its `fstat`.
    pub fn open_file(&self, name: &str) -> io::Result<(File, Stat)> {
        open_file_at(self.fd.as_fd(), name)
    }

    /// Creates the new file `name` (it must not exist; never through a symlink).
    pub fn create_file(&self, name: &str) -> io::Result<File> {
        let fd = openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )?;
        crashsim::entry(&self.join(name));
        crashsim::data(&self.join(name));
        Ok(File::from(fd))
    }

    /// fsync of a file made in this directory, `name` naming it.
    pub fn sync_file(&self, file: &File, name: &str) -> io::Result<()> {
        file.sync_all()?;
        crashsim::file_synced(&self.join(name));
        Ok(())
    }

    /// Opens or creates `name` for writing without truncating, never through a symlink or
    /// into a FIFO; refuses anything but a regular file.
    pub fn open_or_create(&self, name: &str) -> io::Result<File> {
        let fd = openat(
            &self.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )?;
        let st = fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(File::from(fd))
    }

    /// Moves `name` to `to/to_name`, which must not exist (`RENAME_NOREPLACE`; where the
    /// filesystem lacks it, a hard link then an unlink of `name`, which refuses an existing
    /// target the same way). A directory moves with `RENAME_NOREPLACE` only.
    pub fn rename_new(&self, name: &str, to: &Dir, to_name: &str) -> io::Result<()> {
        match renameat_with(&self.fd, name, &to.fd, to_name, RenameFlags::NOREPLACE) {
            Ok(()) => {}
            Err(Errno::INVAL | Errno::NOSYS) => {
                if self.stat(name)?.st_mode & 0o170000 == 0o040000 {
                    // A directory cannot be hard-linked. Distributor renames only its own
                    // staging record's directory, to a new unique name: a plain rename,
                    // which never replaces anything but an empty directory, refused here.
                    if to.stat_opt(to_name)?.is_some() {
                        return Err(Errno::EXIST.into());
                    }
                    renameat_with(&self.fd, name, &to.fd, to_name, RenameFlags::empty())?;
                } else {
                    linkat(&self.fd, name, &to.fd, to_name, AtFlags::empty())?;
                    unlinkat(&self.fd, name, AtFlags::empty())?;
                }
            }
            Err(e) => return Err(e.into()),
        }
        crashsim::renamed(&self.join(name), &to.join(to_name));
        Ok(())
    }

    /// Moves the directory `name` to `to/to_name` where nothing is (`RENAME_NOREPLACE`).
    /// Where the filesystem cannot rename so, fails (`EINVAL`) rather than check and
    /// rename, which could replace an empty directory made in between.
    pub fn rename_dir_new(&self, name: &str, to: &Dir, to_name: &str) -> io::Result<()> {
        match renameat_with(&self.fd, name, &to.fd, to_name, RenameFlags::NOREPLACE) {
            Ok(()) => {
                crashsim::renamed(&self.join(name), &to.join(to_name));
                Ok(())
            }
            Err(Errno::NOSYS) => Err(Errno::INVAL.into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Moves `name` to `to/to_name`, replacing what is there: only for the state file,
    /// whose replacement is the commit point.
    pub fn rename_over(&self, name: &str, to: &Dir, to_name: &str) -> io::Result<()> {
        crashsim::replacing(&to.join(to_name));
        renameat_with(&self.fd, name, &to.fd, to_name, RenameFlags::empty())?;
        crashsim::renamed(&self.join(name), &to.join(to_name));
        Ok(())
    }

    /// Exchanges the entries `name` here and `to/to_name`, both of which must exist
    /// (`RENAME_EXCHANGE`): one atomic step, neither is ever missing.
    pub fn exchange(&self, name: &str, to: &Dir, to_name: &str) -> io::Result<()> {
        renameat_with(&self.fd, name, &to.fd, to_name, RenameFlags::EXCHANGE)?;
        crashsim::exchanged(&self.join(name), &to.join(to_name));
        Ok(())
    }

    /// Hard-links the entry `name` (never followed: a symlink is linked itself) as
    /// `to/to_name`, which must not exist.
    pub fn hard_link(&self, name: &str, to: &Dir, to_name: &str) -> io::Result<()> {
        linkat(&self.fd, name, &to.fd, to_name, AtFlags::empty())?;
        crashsim::entry(&to.join(to_name));
        Ok(())
    }

    /// Removes the file or symlink `name`.
    pub fn unlink(&self, name: &str) -> io::Result<()> {
        Ok(unlinkat(&self.fd, name, AtFlags::empty())?)
    }

    /// Removes the empty directory `name`.
    pub fn rmdir(&self, name: &str) -> io::Result<()> {
        Ok(unlinkat(&self.fd, name, AtFlags::REMOVEDIR)?)
    }

    /// Creates the symlink `name` with link text `target`.
    pub fn symlink(&self, target: &str, name: &str) -> io::Result<()> {
        symlinkat(target, &self.fd, name)?;
        crashsim::entry(&self.join(name));
        Ok(())
    }

    /// The link text of symlink `name`, lossily as text.
    pub fn read_link(&self, name: &str) -> io::Result<String> {
        let t = readlinkat(&self.fd, name, Vec::new())?;
        Ok(String::from_utf8_lossy(t.as_bytes()).into_owned())
    }

    /// fsync of the directory: its entries are durable.
    pub fn sync(&self) -> io::Result<()> {
        rustix::fs::fsync(&self.fd)?;
        crashsim::dir_synced(&self.path);
        Ok(())
    }

    /// One `syncfs` of the filesystem holding this directory.
    pub fn sync_filesystem(&self) -> io::Result<()> {
        rustix::fs::syncfs(&self.fd)?;
        crashsim::fs_synced();
        Ok(())
    }

    /// The entries of this directory (`.` and `..` left out), with their types as the
    /// directory reports them (looked up without following when it does not say).
    pub fn entries(&self) -> io::Result<Vec<(String, FileType)>> {
        let mut out = Vec::new();
        let mut rd = RawDir::read_from(&self.fd)?;
        while let Some(e) = rd.read() {
            let e = e?;
            let name = e.file_name().to_string_lossy();
            if name == "." || name == ".." {
                continue;
            }
            let name = name.into_owned();
            let kind = match e.file_type() {
                FileType::Unknown => FileType::from_raw_mode(self.stat(&name)?.st_mode),
                k => k,
            };
            out.push((name, kind));
        }
        Ok(out)
    }

    /// Removes the entry `name` and, when it is a directory, everything below it, never
    /// following a symlink (a symlink is removed, not what it points to).
    pub fn remove_tree(&self, name: &str) -> io::Result<()> {
        match self.stat_opt(name)? {
            None => Ok(()),
            Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                let sub = self.open_dir(name)?;
                for (child, kind) in sub.entries()? {
                    if kind == FileType::Directory {
                        sub.remove_tree(&child)?;
                    } else {
                        sub.unlink(&child)?;
                    }
                }
                self.rmdir(name)
            }
            Some(_) => self.unlink(name),
        }
    }
}

/// [`Dir::open_file`] in the directory `dir` (a handle opened with `O_PATH` serves too).
pub(crate) fn open_file_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<(File, Stat)> {
    open_typed(dir, Path::new(name))
}

/// [`Dir::open_file`] by path: for a source bundle's files, whose directories are the
/// producer's (the last segment is never followed).
pub(crate) fn open_file_path(path: &Path) -> io::Result<(File, Stat)> {
    open_typed(CWD, path)
}

fn open_typed(dir: BorrowedFd<'_>, name: &Path) -> io::Result<(File, Stat)> {
    let fd = openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = fstat(&fd)?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", type_name(kind)),
        ));
    }
    // `O_NONBLOCK` stays set: on a regular file it changes nothing for `read(2)`, so
    // clearing it again (one `fcntl` per file, which every staged source file paid) buys
    // nothing. The kernel derives a read's flags from the open file in `iocb_flags()`
    // (include/linux/fs.h), which maps `O_APPEND`, `O_DIRECT`, `O_DSYNC` and `O_SYNC`
    // and never `O_NONBLOCK`; a buffered read waits for the page cache unless
    // `IOCB_NOWAIT` is set, and only `preadv2(RWF_NOWAIT)` and io_uring set that. open(2):
    // "this flag has no effect for regular files and block devices". (The one exception,
    // `EAGAIN` from a mandatory lock, went with mandatory locking in Linux 5.15.) A file
    // system that passes the flag on to its server (FUSE) could answer `EAGAIN`; that
    // reaches the reader as an error, which fails the run before its commit point, never
    // as a short copy or a hang.
    Ok((File::from(fd), st))
}

/// A word for a file type, for messages.
pub(crate) fn type_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of unknown type",
    }
}

/// The directory part and the name of a bundle-relative path (`""` for top-level names).
pub(crate) fn split(rel: &str) -> (&str, &str) {
    rel.rsplit_once('/').unwrap_or(("", rel))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_symlink_anywhere_on_the_way_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("in/a/b")).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        symlink(root.join("outside"), root.join("in/a/link")).unwrap();
        symlink("../..", root.join("in/a/up")).unwrap();
        let d = Dir::open_path(&root.join("in")).unwrap();
        assert!(d.open_dir("a/b").is_ok());
        for bad in [
            "a/link",
            "a/link/x",
            "a/up",
            "../outside",
            "a/../../outside",
        ] {
            let e = d.open_dir(bad).unwrap_err();
            assert!(
                is_redirect(&e) || e.kind() == io::ErrorKind::NotFound,
                "{bad}: {e}"
            );
        }
        // The walk refuses them the same way.
        for bad in ["a/link", "a/up", "../outside"] {
            assert!(d.walk(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_held_handle_is_not_redirected_by_a_swap() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("b/sub")).unwrap();
        std::fs::create_dir_all(root.join("victim")).unwrap();
        let b = Dir::open_path(&root.join("b")).unwrap();
        let sub = b.open_dir("sub").unwrap();
        std::fs::rename(root.join("b/sub"), root.join("b/sub.moved")).unwrap();
        symlink(root.join("victim"), root.join("b/sub")).unwrap();
        sub.create_file("x").unwrap();
        assert!(root.join("b/sub.moved/x").exists());
        assert_eq!(std::fs::read_dir(root.join("victim")).unwrap().count(), 0);
        assert!(is_redirect(&b.open_dir("sub").unwrap_err()));
    }

    #[test]
    fn rename_new_never_replaces() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open_path(t.path()).unwrap();
        std::fs::write(t.path().join("a"), "a").unwrap();
        std::fs::write(t.path().join("b"), "b").unwrap();
        let e = d.rename_new("a", &d, "b").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(t.path().join("b")).unwrap(), "b");
        d.rename_new("a", &d, "c").unwrap();
        assert_eq!(std::fs::read_to_string(t.path().join("c")).unwrap(), "a");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let t = tempfile::tempdir().unwrap();
        rustix::fs::mknodat(
            CWD,
            t.path().join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let d = Dir::open_path(t.path()).unwrap();
        let e = d.open_file("fifo").unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
    }

    #[test]
    fn remove_tree_removes_a_symlink_not_its_target() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("d/x/y")).unwrap();
        std::fs::create_dir_all(root.join("keep")).unwrap();
        std::fs::write(root.join("keep/f"), "f").unwrap();
        symlink(root.join("keep"), root.join("d/x/l")).unwrap();
        let d = Dir::open_path(root).unwrap();
        d.remove_tree("d").unwrap();
        assert!(!root.join("d").exists());
        assert!(root.join("keep/f").exists());
    }
}
