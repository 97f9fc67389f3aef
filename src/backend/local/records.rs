//! What distributor believes in a local destination (SPEC §17): every record it keeps
//! there lives in one directory, `.distributor/` (in the bundle path; for a releases
//! destination in `releases.dir`), and is believed only when `fstat` on the very
//! descriptor it is read through shows that distributor wrote it: owned by distributor's
//! effective uid (root is not special), the exact record mode (directories 0700, files
//! 0600), and for files a single link. Published content never has those modes
//! (directories 0755, files 0644, 0444 in a release), so a renamed published file, a hard
//! link of a record, or anything another uid made never passes.
//!
//! The modes are set with `fchmod` on the handle after creating, whatever the umask.
//!
//! Must never: believe a record it did not check on the handle it reads, or loosen a
//! record's mode.

use crate::fs::{Dir, Identity, type_name};
use rustix::fd::AsFd;
use rustix::fs::{FileType, Mode, OFlags, Stat, fchmod, fstat, mkdirat, openat};
use rustix::io::Errno;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// The record directory's name, in the bundle path (or `releases.dir`).
pub const RECORD_DIR: &str = ".distributor";
/// Staging records, one directory per operation: `.distributor/staging/<op>/`.
pub const STAGING: &str = ".distributor/staging";
/// The destination log (SPEC §18): `.distributor/log/<seq>.json`.
pub const LOG: &str = ".distributor/log";
/// Log entries an operator moved out of the log (`distributor log --quarantine`).
pub const QUARANTINE: &str = ".distributor/quarantine";
/// State objects a roll-forward replaced (object stores; never deleted).
pub const REPLACED: &str = ".distributor/replaced";
/// The releases settings record in `releases.dir`.
pub const RELEASES_SETTINGS: &str = ".distributor/releases.json";

/// The mode of every record directory.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every record file, the state file included.
pub const FILE_MODE: u32 = 0o600;
/// The mode of published directories.
pub const CONTENT_DIR_MODE: u32 = 0o755;
/// The mode of published files (in place).
pub const CONTENT_FILE_MODE: u32 = 0o644;
/// The mode of published files in a release (read-only: writing through one release
/// cannot change another).
pub const RELEASE_FILE_MODE: u32 = 0o444;

/// The process's umask, read once from `/proc/self/status` (never changed to read it:
/// `umask(2)` cannot be read without setting it, process-wide); `None` when not known.
fn umask() -> Option<u32> {
    static UMASK: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(line.trim(), 8).ok()
    })
}

/// Whether a file created asking for `mode` in `dir`, or in a directory distributor made
/// below it, has exactly `mode` without an `fchmod`: the umask takes none of its bits, and
/// `dir` has no default ACL. Where a directory has one, the ACL decides the mode of what is
/// created in it instead of the umask (`group::---` and `other::---` would make a published
/// file 0600, a record's mode), and directories made in it inherit it.
pub fn created_exact(dir: impl AsFd, mode: u32) -> bool {
    umask().is_some_and(|m| mode & m == 0) && !has_default_acl(dir)
}

/// Whether the directory `dir` has a default ACL; true when that cannot be read (an
/// `fchmod` too many is the safe side).
fn has_default_acl(dir: impl AsFd) -> bool {
    match rustix::fs::fgetxattr_query(dir, "system.posix_acl_default") {
        Ok(size) => size > 0,
        // None, or none possible on this filesystem.
        Err(Errno::NODATA | Errno::NOTSUP) => false,
        Err(_) => true,
    }
}

/// Gives `fd` (an entry distributor just created asking for `mode`) exactly `mode`,
/// whatever the umask or a default ACL of its directory made of it.
pub fn set_mode(fd: impl AsFd, mode: u32) -> io::Result<()> {
    fchmod(fd, Mode::from_raw_mode(mode))?;
    Ok(())
}

/// Which kind of record an entry should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A record directory (0700).
    Dir,
    /// A record file (0600, one link).
    File,
}

/// A record distributor does not believe, and why: what it is, who owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    /// The record's path.
    pub path: PathBuf,
    /// Its owner.
    pub uid: u32,
    /// What is wrong, in words.
    pub why: String,
}

impl Untrusted {
    /// The operator's message: the path to remove and its owner ("run distributor as uid
    /// N, the owner of …" where another uid owns it).
    pub fn message(&self) -> String {
        let me = euid();
        let advice = if self.uid != me {
            format!(
                "; if that uid is the one that publishes here, run distributor as uid {}, the owner of {}; otherwise remove it",
                self.uid,
                self.path.display()
            )
        } else {
            format!(
                "; distributor never made it so: inspect {} and remove it",
                self.path.display()
            )
        };
        format!(
            "untrusted record {}: {} (distributor believes only records owned by its own uid {me} with mode 0700 for directories, 0600 for files, and one link){advice}",
            self.path.display(),
            self.why
        )
    }
}

impl std::fmt::Display for Untrusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

/// distributor's effective uid.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Checks what `fstat` showed of a record at `path` (on the descriptor it is read
/// through).
pub fn check(st: &Stat, kind: Kind, path: &Path) -> Result<(), Untrusted> {
    let ft = FileType::from_raw_mode(st.st_mode);
    let mode = st.st_mode & 0o7777;
    let (want_type, want_mode) = match kind {
        Kind::Dir => (FileType::Directory, DIR_MODE),
        Kind::File => (FileType::RegularFile, FILE_MODE),
    };
    let bad = |why: String| Untrusted {
        path: path.to_path_buf(),
        uid: st.st_uid,
        why,
    };
    if ft != want_type {
        return Err(bad(format!("it is {}", type_name(ft))));
    }
    if st.st_uid != euid() {
        return Err(bad(format!(
            "owned by uid {}, not distributor's uid {}",
            st.st_uid,
            euid()
        )));
    }
    if mode != want_mode {
        return Err(bad(format!("mode {mode:04o}, not {want_mode:04o}")));
    }
    #[allow(clippy::unnecessary_cast)]
    if kind == Kind::File && st.st_nlink as u64 != 1 {
        return Err(bad(format!("{} links, not 1", st.st_nlink)));
    }
    Ok(())
}

/// An error of reading a record: the record is not believed, or reading failed.
#[derive(Debug)]
pub enum RecordError {
    /// Not believed.
    Untrusted(Untrusted),
    /// Reading it failed (`NotFound` when nothing has the name).
    Io(io::Error),
}

impl From<io::Error> for RecordError {
    fn from(e: io::Error) -> Self {
        RecordError::Io(e)
    }
}

impl From<Untrusted> for RecordError {
    fn from(e: Untrusted) -> Self {
        RecordError::Untrusted(e)
    }
}

impl Dir {
    /// Opens the record directory `name` here and checks it on its own handle; a symlink
    /// or anything but a directory in its place is [`RecordError::Untrusted`].
    pub fn open_record_dir(&self, name: &str) -> Result<Dir, RecordError> {
        let d = self.open_dir(name).map_err(|e| self.not_a_dir(name, e))?;
        let st = fstat(d.fd()).map_err(io::Error::from)?;
        check(&st, Kind::Dir, d.path())?;
        Ok(d)
    }

    /// Opens the record file `name` here for reading (never through a symlink, never
    /// blocking) and checks it on the descriptor returned.
    pub fn open_record_file(&self, name: &str) -> Result<(File, Stat), RecordError> {
        let (f, st) = self.open_file(name).map_err(|e| {
            // A FIFO or directory in a record's place: not a record distributor made.
            if e.kind() == io::ErrorKind::InvalidInput {
                RecordError::Untrusted(Untrusted {
                    path: self.join(name),
                    uid: self.stat(name).map(|s| s.st_uid).unwrap_or(u32::MAX),
                    why: e.to_string(),
                })
            } else {
                RecordError::Io(e)
            }
        })?;
        check(&st, Kind::File, &self.join(name))?;
        Ok((f, st))
    }

    /// Creates the record directory `name` here (or opens it when it exists), sets its
    /// mode to exactly 0700 when this call created it, and checks it: an existing one
    /// someone else made is [`RecordError::Untrusted`].
    pub fn make_record_dir(&self, name: &str) -> Result<Dir, RecordError> {
        let created = match mkdirat(self.fd(), name, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(e) => return Err(RecordError::Io(e.into())),
        };
        let d = self.open_dir(name).map_err(|e| self.not_a_dir(name, e))?;
        if created {
            crate::fs::crashsim::entry(&self.join(name));
            set_mode(d.fd(), DIR_MODE)?;
        }
        let st = fstat(d.fd()).map_err(io::Error::from)?;
        check(&st, Kind::Dir, d.path())?;
        Ok(d)
    }

    /// What stands at `name` when a directory was wanted and the no-follow open refused it.
    fn not_a_dir(&self, name: &str, e: io::Error) -> RecordError {
        if !crate::fs::is_redirect(&e) {
            return RecordError::Io(e);
        }
        match self.stat(name) {
            Ok(st) => RecordError::Untrusted(Untrusted {
                path: self.join(name),
                uid: st.st_uid,
                why: format!(
                    "it is {}, not a directory distributor made",
                    type_name(FileType::from_raw_mode(st.st_mode))
                ),
            }),
            Err(_) => RecordError::Io(e),
        }
    }

    /// Creates the new record file `name` (it must not exist; never through a symlink),
    /// mode exactly 0600.
    pub fn create_record_file(&self, name: &str) -> io::Result<File> {
        let f = self.create_file_mode(name, FILE_MODE)?;
        set_mode(&f, FILE_MODE)?;
        Ok(f)
    }

    /// Creates the new file `name` with `mode` requested (the umask applies; callers that
    /// need an exact mode `fchmod` it).
    pub fn create_file_mode(&self, name: &str, mode: u32) -> io::Result<File> {
        let fd = openat(
            self.fd(),
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )?;
        crate::fs::crashsim::entry(&self.join(name));
        crate::fs::crashsim::data(&self.join(name));
        Ok(File::from(fd))
    }
}

/// The device and inode of the record directory `.distributor/` in `dir`, when there is
/// one (kept by the staging record and the journal: `recover` acts on a staging record
/// only while the record directory is the one it was written in).
pub fn record_dir_identity(dir: &Dir) -> io::Result<Option<Identity>> {
    Ok(dir.stat_opt(RECORD_DIR)?.map(|st| Identity::of(&st)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn records_are_made_with_exact_modes_whatever_the_umask() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open_path(t.path()).unwrap();
        let old = rustix::process::umask(Mode::from_raw_mode(0o077));
        let r = d.make_record_dir("r");
        rustix::process::umask(Mode::from_raw_mode(0o000));
        let f = r.as_ref().unwrap().create_record_file("f");
        rustix::process::umask(old);
        let r = r.unwrap();
        drop(f.unwrap());
        let md = std::fs::metadata(t.path().join("r")).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, DIR_MODE);
        let md = std::fs::metadata(t.path().join("r/f")).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, FILE_MODE);
        assert!(r.open_record_file("f").is_ok());
        assert!(d.open_record_dir("r").is_ok());
    }

    #[test]
    fn a_published_mode_a_hard_link_or_a_fifo_is_not_a_record() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open_path(t.path()).unwrap();
        std::fs::write(t.path().join("content"), "x").unwrap();
        std::fs::set_permissions(t.path().join("content"), PermissionsExt::from_mode(0o644))
            .unwrap();
        let e = d.open_record_file("content").unwrap_err();
        assert!(matches!(e, RecordError::Untrusted(ref u) if u.why.contains("mode 0644")));
        drop(d.create_record_file("rec").unwrap());
        std::fs::hard_link(t.path().join("rec"), t.path().join("rec2")).unwrap();
        let e = d.open_record_file("rec").unwrap_err();
        assert!(matches!(e, RecordError::Untrusted(ref u) if u.why.contains("2 links")));
        std::fs::create_dir(t.path().join("plain")).unwrap();
        std::fs::set_permissions(t.path().join("plain"), PermissionsExt::from_mode(0o755)).unwrap();
        assert!(matches!(
            d.open_record_dir("plain").unwrap_err(),
            RecordError::Untrusted(_)
        ));
        let e = d.make_record_dir("plain").unwrap_err();
        assert!(matches!(e, RecordError::Untrusted(_)));
        rustix::fs::mknodat(
            d.fd(),
            "fifo",
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(
            d.open_record_file("fifo").unwrap_err(),
            RecordError::Untrusted(_)
        ));
        assert_eq!(
            std::fs::metadata(t.path().join("rec")).unwrap().nlink(),
            2,
            "nothing was changed"
        );
    }
}
