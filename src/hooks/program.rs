//! Whether a hook's program may be run (docs/config.md, "Hooks"; docs/operations.md, "Who
//! may write where"): distributor often runs as root, and a hook runs as distributor's
//! user, so whoever can replace `run[0]`, or any directory or symlink on the way to it,
//! could run anything as that user. As OpenSSH's `StrictModes` checks a user's files, the
//! program and every directory above it, along the path the kernel resolves when it
//! executes the program (each symlink followed as `execve` follows it, the directories of
//! every link on the way included), must be owned by root or by distributor's effective uid
//! and not writable by group or others. A sticky world-writable directory (`/tmp`) is
//! refused too: its sticky bit keeps others from replacing what is there, not from putting
//! their own program at a name not yet taken.
//!
//! A name on the way that does not exist is no refusal: the directory it would be in is
//! checked, so nobody else can create it (the hook then fails to start, as it always has).
//!
//! Must never: follow a symlink without checking the directory it lies in, or accept a
//! path whose last step it did not look at.

use rustix::fs::{AtFlags, CWD, FileType, Stat, statat};
use rustix::io::Errno;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// The most symlinks followed on the way, as the kernel's own limit (`ELOOP`).
const MAX_LINKS: usize = 40;

/// What is accepted of a hook's program, spelled once for every message.
pub(crate) const ACCEPTED: &str = "the program and every directory above it owned by root or by distributor's user and not writable by group or others (as sshd's StrictModes); chmod go-w, chown, or move the program";

/// Why a hook's program may not be run: the path on the way that is refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Untrusted {
    /// The file, directory or symlink's directory refused.
    pub path: PathBuf,
    /// What is wrong with it (`is owned by uid 65534`, `is writable by others (mode
    /// 1777)`).
    pub why: String,
}

impl std::fmt::Display for Untrusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.path.display(), self.why)
    }
}

/// Checks `program` (an absolute path) and everything on the way to it as `execve` would
/// resolve it.
pub(crate) fn check(program: &Path) -> Result<(), Untrusted> {
    let euid = rustix::process::geteuid().as_raw();
    let root = PathBuf::from("/");
    let st = lstat(&root)?;
    trusted(&root, &st, euid, "directory")?;
    let mut todo: VecDeque<OsString> = VecDeque::new();
    push_front(&mut todo, program);
    let mut cur = root;
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == "." {
            continue;
        }
        if name == ".." {
            // Every directory in `cur` was checked on the way down.
            cur.pop();
            continue;
        }
        let next = cur.join(&name);
        let st = match statat(CWD, &next, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Nobody else can create it: `cur` is checked.
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(untrusted(&next, format!("cannot be looked at: {e}"))),
        };
        let last = todo.is_empty();
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(untrusted(
                        &next,
                        format!("is a chain of over {MAX_LINKS} symlinks"),
                    ));
                }
                let target = std::fs::read_link(&next)
                    .map_err(|e| untrusted(&next, format!("cannot be read: {e}")))?;
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                push_front(&mut todo, &target);
            }
            FileType::Directory if !last => {
                trusted(&next, &st, euid, "directory")?;
                cur = next;
            }
            FileType::RegularFile if last => return trusted(&next, &st, euid, "program"),
            kind => {
                let what = if last { "a program" } else { "a directory" };
                let is = crate::fs::type_name(kind);
                return Err(untrusted(&next, format!("is {is}, not {what}")));
            }
        }
    }
    // The path ended in `/` or `..`: a directory, never a program.
    Err(untrusted(&cur, "is a directory, not a program".into()))
}

/// `path`'s segments, put before what is left to resolve.
fn push_front(todo: &mut VecDeque<OsString>, path: &Path) {
    let segments: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::CurDir => Some(".".into()),
            Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    for s in segments.into_iter().rev() {
        todo.push_front(s);
    }
    // A trailing `/` names a directory: keep it from resolving as a file.
    if path.as_os_str().as_bytes().ends_with(b"/") && path.as_os_str().len() > 1 {
        todo.push_back(".".into());
    }
}

fn lstat(path: &Path) -> Result<Stat, Untrusted> {
    statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| untrusted(path, format!("cannot be looked at: {e}")))
}

fn untrusted(path: &Path, why: String) -> Untrusted {
    Untrusted {
        path: path.to_path_buf(),
        why,
    }
}

/// Owned by root or `euid`, and not writable by group or others.
fn trusted(path: &Path, st: &Stat, euid: u32, what: &str) -> Result<(), Untrusted> {
    let mode = st.st_mode & 0o7777;
    if st.st_uid != 0 && st.st_uid != euid {
        let who = if euid == 0 {
            "root".to_string()
        } else {
            format!("root or uid {euid}")
        };
        return Err(untrusted(
            path,
            format!("({what}) is owned by uid {}, not by {who}", st.st_uid),
        ));
    }
    let by = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (false, false) => return Ok(()),
        (true, false) => "group",
        (false, true) => "others",
        (true, true) => "group and others",
    };
    Err(untrusted(
        path,
        format!("({what}) is writable by {by} (mode {mode:04o})"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_program_and_every_directory_and_link_on_the_way_are_checked() {
        // A directory the test owns, under a directory that passes (not /tmp).
        let base = tempfile::Builder::new()
            .prefix("hook-check-")
            .tempdir_in(env!("CARGO_MANIFEST_DIR"))
            .unwrap();
        let d = base.path().canonicalize().unwrap();
        chmod(&d, 0o755);
        let prog = d.join("purge");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        chmod(&prog, 0o755);
        assert_eq!(check(&prog), Ok(()));
        assert_eq!(check(Path::new("/bin/true")), Ok(()));
        // Missing: its directory is checked, and nobody else can create it.
        assert_eq!(check(&d.join("missing")), Ok(()));
        chmod(&prog, 0o775);
        let e = check(&prog).unwrap_err();
        assert_eq!(e.path, prog);
        assert_eq!(e.why, "(program) is writable by group (mode 0775)");
        chmod(&prog, 0o755);
        // A symlink in a good directory to a program in a world-writable one.
        let open = d.join("open");
        std::fs::create_dir(&open).unwrap();
        chmod(&open, 0o1777);
        std::fs::write(open.join("real"), "#!/bin/sh\n").unwrap();
        symlink(open.join("real"), d.join("link")).unwrap();
        let e = check(&d.join("link")).unwrap_err();
        assert_eq!(e.path, open);
        assert_eq!(
            e.why,
            "(directory) is writable by group and others (mode 1777)"
        );
        // A relative link through `..` resolves where the kernel would.
        std::fs::create_dir(d.join("sub")).unwrap();
        chmod(&d.join("sub"), 0o755);
        symlink("sub/../purge", d.join("rel")).unwrap();
        assert_eq!(check(&d.join("rel")), Ok(()));
        symlink("sub/../open/real", d.join("rel-open")).unwrap();
        assert_eq!(check(&d.join("rel-open")).unwrap_err().path, open);
        // A link that lies in the open directory, to a good program: the link can be
        // replaced, so it is refused for the directory it is in.
        symlink(&prog, open.join("to-good")).unwrap();
        assert_eq!(check(&open.join("to-good")).unwrap_err().path, open);
        // Not a program.
        let e = check(&d).unwrap_err();
        assert!(e.why.contains("not a program"), "{e}");
        let e = check(&prog.join("x")).unwrap_err();
        assert!(e.why.contains("is a regular file, not a directory"), "{e}");
        // A loop of links ends.
        symlink(d.join("loop2"), d.join("loop1")).unwrap();
        symlink(d.join("loop1"), d.join("loop2")).unwrap();
        assert!(
            check(&d.join("loop1"))
                .unwrap_err()
                .why
                .contains("over 40 symlinks")
        );
    }
}
