//! Where a `--metrics-file` is written (docs/operations.md, "Metrics file" and "Who may
//! write where"): its directory is opened once, and every name in it is then used through
//! that handle, never followed through a symlink. A textfile collector's directory may
//! belong to another user, who can plant symlinks, FIFOs and files at any name there:
//!
//! - the lock `PATH.lock` is created `O_EXCL|O_NOFOLLOW` (mode 0600); when something has
//!   the name, it is opened `O_NOFOLLOW|O_NONBLOCK` read-only and used only when `fstat`
//!   shows a regular file of distributor's effective uid with one link. Anything else
//!   there (a symlink, a FIFO, another user's file, which that user could hold locked
//!   forever) is removed, with a warning, and the lock made anew; the lock counts only
//!   once the name still names the file locked;
//! - the previous file is read without following a symlink or blocking, when it is a
//!   regular file of at most [`PREVIOUS_BYTES`]; anything else there is not read (a
//!   warning: no success time is carried over) and is replaced;
//! - the new file is created at a name no one can predict (`PATH.<pid>.<random>.tmp`)
//!   with `O_CREAT|O_EXCL|O_NOFOLLOW`, written, fsynced, and renamed over `PATH` in the
//!   held directory (a rename replaces a symlink there, never what it points to).
//!
//! Must never: create, truncate or write a file through a name another user could have
//! planted, or block on one.

use crate::fs::Dir;
use crate::fs::Identity;
use rustix::fd::OwnedFd;
use rustix::fs::{
    AtFlags, FileType, FlockOperation, Mode, OFlags, fstat, openat, renameat, statat,
};
use rustix::io::Errno;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The largest previous file read, to carry its `last_success` series over: 16 MiB
/// (a file of tens of thousands of destinations).
pub(crate) const PREVIOUS_BYTES: u64 = 16 << 20;

/// Why a `--metrics-file` was not written (a warning: the run's outcome stands).
#[derive(Debug, thiserror::Error)]
pub(crate) enum MetricsFileError {
    /// The path names no file in a directory.
    #[error(
        "{}: names no file; accepted: a file path, e.g. /var/lib/node_exporter/textfile/distributor.prom",
        path.display()
    )]
    NoFileName {
        /// The path given.
        path: PathBuf,
    },
    /// An entry of the directory that is not what distributor may use.
    #[error("{}: {what}; accepted: {accepted}", path.display())]
    Refused {
        /// The entry.
        path: PathBuf,
        /// What it is.
        what: String,
        /// What is accepted there, and what to do.
        accepted: &'static str,
    },
    /// A system call failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// To what.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The gauges could not be rendered.
    #[error("{}: cannot render the gauges", path.display())]
    Render {
        /// The metrics file.
        path: PathBuf,
    },
}

/// How often the lock is made again when what has its name keeps changing.
const LOCK_ATTEMPTS: usize = 8;

/// Why an existing lock is not distributor's (`None` when it is): distributor's is a
/// regular file of its effective uid with one link.
fn not_distributors(st: &rustix::fs::Stat) -> Option<String> {
    let euid = rustix::process::geteuid().as_raw();
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        Some(format!("is {}", crate::fs::type_name(kind)))
    } else if st.st_uid != euid {
        Some(format!(
            "is owned by uid {} (distributor runs as uid {euid})",
            st.st_uid
        ))
    } else if st.st_nlink != 1 {
        Some(format!("has {} links", st.st_nlink))
    } else {
        None
    }
}

/// What the lock's owner must be and why, for its refusal.
const LOCK_ACCEPTED: &str = "a regular file with one link owned by distributor's effective uid, or nothing (distributor creates it); remove it";

/// The metrics file's directory, held open, and its name there.
pub(crate) struct Place {
    dir: Dir,
    name: String,
    path: PathBuf,
}

impl Place {
    /// Opens the directory of `path` (a symlink in its last segment is refused, as for a
    /// destination's path; the directories above it are the operator's).
    pub(crate) fn open(path: &Path) -> Result<Place, MetricsFileError> {
        let no_name = || MetricsFileError::NoFileName {
            path: path.to_path_buf(),
        };
        let name = path.file_name().ok_or_else(no_name)?;
        let name = name.to_str().ok_or_else(no_name)?.to_string();
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = Dir::open_path(parent).map_err(|source| {
            if crate::fs::is_redirect(&source) {
                MetricsFileError::Refused {
                    path: parent.to_path_buf(),
                    what: "is a symlink, or not a directory".into(),
                    accepted: "a directory, named by its real path (a symlink in its last segment is not followed)",
                }
            } else {
                MetricsFileError::Io {
                    action: "open directory",
                    path: parent.to_path_buf(),
                    source,
                }
            }
        })?;
        Ok(Place {
            dir,
            name,
            path: path.to_path_buf(),
        })
    }

    /// The metrics file's path, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, action: &'static str, name: &str, source: Errno) -> MetricsFileError {
        MetricsFileError::Io {
            action,
            path: self.dir.join(name),
            source: source.into(),
        }
    }

    /// Takes the exclusive lock on `PATH.lock` (waiting for another distributor that holds
    /// it); the lock is held while the returned file is open. An entry at that name that
    /// is not distributor's is removed and the lock made anew; the lock is held only once
    /// the name still names the file locked.
    pub(crate) fn lock(&self) -> Result<File, MetricsFileError> {
        let name = format!("{}.lock", self.name);
        for _ in 0..LOCK_ATTEMPTS {
            let Some(fd) = self.open_lock(&name)? else {
                continue;
            };
            rustix::fs::flock(&fd, FlockOperation::LockExclusive)
                .map_err(|e| self.io("lock", &name, e))?;
            let held = fstat(&fd).map_err(|e| self.io("stat", &name, e))?;
            match statat(self.dir.fd(), &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(now) if Identity::of(&now) == Identity::of(&held) => return Ok(File::from(fd)),
                // Removed or replaced while this process waited for it: take the new one.
                Ok(_) | Err(Errno::NOENT) => {}
                Err(e) => return Err(self.io("stat", &name, e)),
            }
        }
        Err(self.refused(
            &name,
            format!("was replaced {LOCK_ATTEMPTS} times while distributor took it"),
            LOCK_ACCEPTED,
        ))
    }

    /// The lock file, created (`O_EXCL`, mode 0600) or opened when it is distributor's;
    /// `None` when what had the name was removed (not distributor's) or went away: try
    /// again.
    fn open_lock(&self, name: &str) -> Result<Option<OwnedFd>, MetricsFileError> {
        match openat(
            self.dir.fd(),
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => return Ok(Some(fd)),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(self.io("create", name, e)),
        }
        let what = match openat(
            self.dir.fd(),
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => {
                let st = fstat(&fd).map_err(|e| self.io("stat", name, e))?;
                match not_distributors(&st) {
                    None => return Ok(Some(fd)),
                    Some(what) => what,
                }
            }
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => "is a symlink".to_string(),
            Err(e) => return Err(self.io("open", name, e)),
        };
        match self.dir.unlink(name) {
            Ok(()) => {
                eprintln!(
                    "warning: --metrics-file: {} {what}, not a lock distributor made; removed it and made its own",
                    self.dir.join(name).display()
                );
                Ok(None)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(_) => Err(self.refused(name, what, LOCK_ACCEPTED)),
        }
    }

    fn refused(&self, name: &str, what: String, accepted: &'static str) -> MetricsFileError {
        MetricsFileError::Refused {
            path: self.dir.join(name),
            what,
            accepted,
        }
    }

    /// The previous file's text, to carry its `last_success` series over; `None` when
    /// there is none, or when what has the name is not a regular file of at most
    /// [`PREVIOUS_BYTES`] (it is not read, and the new file replaces it).
    pub(crate) fn previous(&self) -> Result<Option<String>, MetricsFileError> {
        let name = self.name.as_str();
        let not_read = |what: String| {
            eprintln!(
                "warning: --metrics-file: {} {what}; not read (no success time carried over), and replaced",
                self.path.display()
            );
            Ok(None)
        };
        let fd = match openat(
            self.dir.fd(),
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return not_read("is a symlink".into()),
            Err(e) => return Err(self.io("open", name, e)),
        };
        let st = fstat(&fd).map_err(|e| self.io("stat", name, e))?;
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::RegularFile {
            return not_read(format!("is {}", crate::fs::type_name(kind)));
        }
        let mut bytes = Vec::new();
        File::from(fd)
            .take(PREVIOUS_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| MetricsFileError::Io {
                action: "read",
                path: self.path.clone(),
                source: e,
            })?;
        if bytes.len() as u64 > PREVIOUS_BYTES {
            return not_read(format!("is over {PREVIOUS_BYTES} bytes"));
        }
        Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Writes `text` to a new file of a name no one can predict, fsyncs it, and renames it
    /// over the metrics file; the new file is removed again when any step fails.
    pub(crate) fn replace(&self, text: &str) -> Result<(), MetricsFileError> {
        let tmp = format!(
            "{}.{}.{}.tmp",
            self.name,
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        // Mode 0666 less the umask, as before: the collector, another user, reads it.
        let mut file = openat(
            self.dir.fd(),
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )
        .map(File::from)
        .map_err(|e| self.io("create", &tmp, e))?;
        let written = file
            .write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|source| MetricsFileError::Io {
                action: "write",
                path: self.dir.join(&tmp),
                source,
            })
            .and_then(|()| {
                crate::failpoint::hit("metrics_file_written");
                // A plain rename within the held directory: it replaces whatever has the
                // name (a symlink itself, never its target).
                renameat(self.dir.fd(), &tmp, self.dir.fd(), &self.name)
                    .map_err(|e| self.io("rename into place", &self.name, e))
            });
        if written.is_err() {
            let _ = self.dir.unlink(&tmp);
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_at_the_names_it_uses_is_followed_or_blocked_on() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let path = d.join("x.prom");
        // A FIFO at PATH is not read (it would block) and is replaced.
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let place = Place::open(&path).unwrap();
        assert!(place.previous().unwrap().is_none());
        // A second link to the lock makes it not distributor's: it is made anew.
        std::fs::write(d.join("elsewhere"), "keep").unwrap();
        std::fs::hard_link(d.join("elsewhere"), d.join("x.prom.lock")).unwrap();
        let lock = place.lock().unwrap();
        let st = fstat(&lock).unwrap();
        assert_eq!((st.st_nlink, st.st_mode & 0o777), (1, 0o600));
        assert_eq!(
            std::fs::read_to_string(d.join("elsewhere")).unwrap(),
            "keep"
        );
        place.replace("a 1\n").unwrap();
        drop(lock);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 1\n");
        assert_eq!(place.previous().unwrap().as_deref(), Some("a 1\n"));
        // Its own lock, as it left it, is used again as it is.
        let ino = std::fs::metadata(d.join("x.prom.lock")).unwrap();
        drop(place.lock().unwrap());
        let again = std::fs::metadata(d.join("x.prom.lock")).unwrap();
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&ino),
            std::os::unix::fs::MetadataExt::ino(&again)
        );
        // A directory at the lock's name cannot be removed: refused, named.
        std::fs::remove_file(d.join("x.prom.lock")).unwrap();
        std::fs::create_dir(d.join("x.prom.lock")).unwrap();
        let e = place.lock().err().unwrap().to_string();
        assert!(e.ends_with("x.prom.lock: is a directory; accepted: a regular file with one link owned by distributor's effective uid, or nothing (distributor creates it); remove it"), "{e}");
        // The directory named through a symlink is refused.
        std::os::unix::fs::symlink(d, d.join("link")).unwrap();
        let e = Place::open(&d.join("link/x.prom"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("link: is a symlink, or not a directory"), "{e}");
    }
}
