//! What a new release takes over from the active one (docs/operations.md, "Release
//! identity"), and the removal of a release: both walk a release directory through
//! handles opened without following symlinks, each directory opened again checked to be
//! the one scanned.
//!
//! A carried file is hard-linked only when it is distributor's: a regular file owned by
//! distributor's effective uid, mode 0444, of the size the new release's state records,
//! in a directory of the active release owned by that uid that no other user may write.
//! The active release itself was checked by its device and inode first; in such a
//! directory only distributor's uid can have put an entry, and distributor only ever puts
//! there files it staged and verified against their sha256, or carried under these same
//! rules, so the recorded sha256 holds without reading the file. Anything else recorded is
//! copied, the copy verified against the recorded sha256 and size (or refused when it
//! differs); a recorded link is made again from its recorded target. What the state does
//! not record (someone who may write in the release put it there) is never dropped and
//! never linked: a file is copied as it is, a symlink made again with its text. An adoption takes the files of a plain directory, which
//! other users may write: each is linked, then checked in the new release (owner, size,
//! and its sha256, read whole), and copied and verified instead where it is not.
//!
//! Must never: hard-link into a release a file another uid owns, follow a symlink, or
//! remove anything but the entries of the directory whose handle was verified.

use super::READ_ONLY;
use crate::backend::local::records::{CONTENT_DIR_MODE, RECORD_DIR, euid, set_mode};
use crate::backend::local::{LEGACY_STAGING_DIR, LOCK_FILE};
use crate::error::{Error, IoContext, Result, StepError};
use crate::failpoint;
use crate::fs::{Dir, Identity, split};
use crate::hash::ContentHash;
use crate::source::relative_link_target;
use crate::state::{STATE_FILE, State};
use rustix::fs::{FileType, Mode};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::Path;

/// What the new release's state records, by path: what a carried entry must be.
pub(super) struct Records<'s> {
    outputs: foldhash::HashMap<&'s str, (u64, ContentHash)>,
    links: foldhash::HashMap<&'s str, &'s str>,
}

impl<'s> Records<'s> {
    /// The outputs and links `state` records.
    pub(super) fn of(state: &'s State) -> Records<'s> {
        Records {
            outputs: (state.outputs.iter())
                .map(|o| (o.path.as_str(), (o.size, o.sha256)))
                .collect(),
            links: (state.links.iter())
                .map(|l| (l.path.as_str(), l.target.as_str()))
                .collect(),
        }
    }
}

/// One directory of a release, as scanned.
struct Scanned {
    /// Release-relative path (`""` for the release itself).
    rel: String,
    /// Index of its parent in the scan (`None` for the release itself).
    parent: Option<usize>,
    /// Its identity, checked when it is opened again.
    identity: Identity,
    /// Owned by distributor's uid and writable by no one else (as its parents): only
    /// distributor can have put its entries there.
    trusted: bool,
    /// Whether the new release gets it: something below it is carried, or it was empty.
    made: bool,
    /// Its entries but directories.
    entries: Vec<(String, FileType)>,
}

/// Whether `st` is a directory only distributor's uid may change.
fn owned_closed(st: &rustix::fs::Stat) -> bool {
    st.st_uid == euid() && st.st_mode & 0o022 == 0
}

/// Reads the directory `rel` of a release (`dir`) and everything below it into `out`
/// (parents first): every entry not in `skip` (the paths the operation writes or deletes)
/// and not distributor's own. Returns whether the new release gets the directory: one
/// everything below which was skipped is not made (the deletions emptied it); one that was
/// empty stays.
fn scan(
    dir: &Dir,
    rel: &str,
    parent: Option<(usize, bool)>,
    skip: &foldhash::HashSet<&str>,
    out: &mut Vec<Scanned>,
) -> Result<bool> {
    let list = dir.entries().ctx("list", dir.path())?;
    let st = dir.fstat().ctx("stat", dir.path())?;
    let here = out.len();
    out.push(Scanned {
        rel: rel.to_string(),
        parent: parent.map(|p| p.0),
        identity: Identity::of(&st),
        trusted: parent.is_none_or(|p| p.1) && owned_closed(&st),
        made: list.is_empty(),
        entries: Vec::new(),
    });
    let trusted = out[here].trusted;
    let mut made = list.is_empty();
    let mut entries = Vec::new();
    for (name, kind) in list {
        let child = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let own = [STATE_FILE, LOCK_FILE, RECORD_DIR, LEGACY_STAGING_DIR];
        if (rel.is_empty() && own.contains(&name.as_str())) || skip.contains(child.as_str()) {
            continue;
        }
        if kind == FileType::Directory {
            let sub = dir.open_dir(&name).ctx("open", dir.join(&name))?;
            made |= scan(&sub, &child, Some((here, trusted)), skip, out)?;
        } else {
            entries.push((name, kind));
            made = true;
        }
    }
    out[here].made = made;
    out[here].entries = entries;
    Ok(made)
}

/// Gives a directory a release made exactly the published directories' mode, 0755
/// (SPEC §17), whatever the umask or a default ACL of `releases.dir` made of it.
pub(super) fn content_dir_mode(d: &Dir) -> Result<()> {
    set_mode(d.fd(), CONTENT_DIR_MODE).ctx("chmod", d.path())
}

/// Opens `rel` below `root`, never through a symlink.
pub(super) fn open_real(root: &Dir, rel: &str) -> Result<Dir> {
    root.open_dir(rel).map_err(|e| {
        if crate::fs::is_redirect(&e) {
            Error::Unsafe(format!(
                "{} is not a real directory",
                root.join(rel).display()
            ))
        } else {
            Error::io("open", root.join(rel), e)
        }
    })
}

/// [`open_real`], checked to be the directory `identity` names: one swapped in since it
/// was scanned or made is refused.
fn reopen(root: &Dir, rel: &str, identity: Identity) -> Result<Dir> {
    let d = open_real(root, rel)?;
    if d.identity().ctx("stat", root.join(rel))? != identity {
        return Err(Error::Unsafe(format!(
            "{} was replaced while the release was being built",
            root.join(rel).display()
        )));
    }
    Ok(d)
}

/// Carries the active release (`src`) into the new one (`dst`): every entry not in `skip`
/// (the paths the operation writes or deletes) that `records` records, as the module says
/// (hard-linked only where it is distributor's); directories made again (see [`scan`]
/// for which). The directories are scanned and made first, on one thread; then the
/// entries directory by directory on several, each directory opened again without
/// following symlinks and checked to be the one scanned or made. `adopting`: `src` is a
/// plain directory being adopted, whose files are checked in the new release and made
/// read-only there.
pub(super) fn carry(
    src: &Dir,
    dst: &Dir,
    skip: &foldhash::HashSet<&str>,
    records: &Records<'_>,
    adopting: bool,
) -> Result<()> {
    let mut dirs = Vec::new();
    scan(src, "", None, skip, &mut dirs)?;
    // The new release's directories, parents first; each one's identity once made.
    let mut made: Vec<Option<Identity>> = vec![None; dirs.len()];
    made[0] = Some(dst.identity().ctx("stat", dst.path())?);
    for i in 1..dirs.len() {
        let d = &dirs[i];
        let Some(parent) = d.parent.and_then(|p| made[p]) else {
            continue;
        };
        if !d.made {
            continue;
        }
        let (parent_rel, name) = split(&d.rel);
        let p = reopen(dst, parent_rel, parent)?;
        let created = p.mkdir(name).ctx("create directory", p.join(name))?;
        let sub = open_real(&p, name)?;
        if created {
            content_dir_mode(&sub)?;
        }
        made[i] = Some(sub.identity().ctx("stat", sub.path())?);
    }
    let work: Vec<(&Scanned, Identity)> = dirs
        .iter()
        .zip(&made)
        .filter(|(d, _)| !d.entries.is_empty())
        .filter_map(|(d, m)| m.map(|m| (d, m)))
        .collect();
    let files: usize = work.iter().map(|(d, _)| d.entries.len()).sum();
    let threads = crate::parallel::threads_for(files);
    crate::parallel::try_map_on(
        threads,
        &work,
        || (),
        |(d, made), _| {
            let from = reopen(src, &d.rel, d.identity)?;
            let to = reopen(dst, &d.rel, *made)?;
            for (name, kind) in &d.entries {
                let rel = if d.rel.is_empty() {
                    name.clone()
                } else {
                    format!("{}/{name}", d.rel)
                };
                let entry = Entry {
                    from: &from,
                    to: &to,
                    name,
                    from_path: &from.join(name),
                    to_path: &to.join(name),
                };
                if let Some(&(size, sha256)) = records.outputs.get(rel.as_str()) {
                    if adopting {
                        entry.adopt(size, sha256)?;
                    } else {
                        entry.carry_file(d.trusted, size, sha256)?;
                    }
                } else if let Some(target) = records.links.get(rel.as_str()) {
                    let text = relative_link_target(&rel, target);
                    to.symlink(&text, name).ctx("create link", to.join(name))?;
                } else {
                    entry.carry_unrecorded(*kind)?;
                }
            }
            Ok(())
        },
    )?;
    Ok(())
}

/// One recorded file carried from a release (or an adopted directory) into a new one.
struct Entry<'a> {
    from: &'a Dir,
    to: &'a Dir,
    name: &'a str,
    from_path: &'a Path,
    to_path: &'a Path,
}

impl Entry<'_> {
    /// A file of the active release: hard-linked when it is distributor's (`trusted`: its
    /// directory is only distributor's to change), else copied and verified.
    fn carry_file(&self, trusted: bool, size: u64, sha256: ContentHash) -> Result<()> {
        let st = self.from.stat(self.name).ctx("stat", self.from_path)?;
        let ours = trusted
            && FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
            && st.st_uid == euid()
            && st.st_mode & 0o7777 == READ_ONLY
            && st.st_size as u64 == size;
        if !ours {
            return self.copy(size, sha256);
        }
        match self.link()? {
            true => Ok(()),
            false => self.copy(size, sha256),
        }
    }

    /// An entry the state does not record (someone who may write in the release put it
    /// there): never adopted, never dropped, and never hard-linked: a file is copied
    /// read-only as it is (there is no record to verify it against; it stays unmanaged),
    /// a symlink made again with its text; anything else cannot be carried.
    fn carry_unrecorded(&self, kind: FileType) -> Result<()> {
        match kind {
            FileType::Symlink => {
                let text = self
                    .from
                    .read_link(self.name)
                    .ctx("read link", self.from_path)?;
                self.to
                    .symlink(&text, self.name)
                    .ctx("create link", self.to_path)
            }
            FileType::RegularFile => self.copy_as_is().map(drop),
            other => Err(StepError::CannotCarry {
                from: self.from_path.to_path_buf(),
                kind: crate::fs::type_name(other),
                error: std::io::Error::other("an entry of that kind is never carried"),
            }
            .into()),
        }
    }

    /// A file of a plain directory being adopted: hard-linked, then checked where it now
    /// is (distributor's uid, a regular file of the recorded size and sha256, read whole)
    /// and made read-only; copied and verified instead where it is not.
    fn adopt(&self, size: u64, sha256: ContentHash) -> Result<()> {
        if self.link()? {
            let (f, st) = self.to.open_file(self.name).ctx("open", self.to_path)?;
            let ok = st.st_uid == euid()
                && st.st_size as u64 == size
                && crate::hash::hash_reader(f, self.to_path)? == (size, sha256);
            if ok {
                let (f, _) = self.to.open_file(self.name).ctx("open", self.to_path)?;
                return rustix::fs::fchmod(&f, Mode::from_raw_mode(READ_ONLY))
                    .map_err(|e| Error::io("make read-only", self.to_path, e.into()));
            }
            self.to.unlink(self.name).ctx("remove", self.to_path)?;
        }
        self.copy(size, sha256)
    }

    /// Hard-links the entry; `false` where the filesystem refuses (`EXDEV`, `EPERM`,
    /// `EMLINK`: copied instead).
    fn link(&self) -> Result<bool> {
        let linked = match failpoint::io("io_link") {
            Err(_) => Err(std::io::Error::from(rustix::io::Errno::XDEV)),
            Ok(()) => self.from.hard_link(self.name, self.to, self.name),
        };
        match linked {
            Ok(()) => Ok(true),
            Err(e) => match rustix::io::Errno::from_io_error(&e) {
                Some(
                    rustix::io::Errno::XDEV | rustix::io::Errno::PERM | rustix::io::Errno::MLINK,
                ) => Ok(false),
                _ => Err(Error::io("link", self.to_path, e)),
            },
        }
    }

    /// Copies the file read-only into the new release: carried only when it is the
    /// recorded content (`size`, `sha256`) and the copy reads back as it; otherwise the
    /// copy goes and the carry is refused.
    fn copy(&self, size: u64, sha256: ContentHash) -> Result<()> {
        let copied = self.copy_as_is()?;
        if copied != (size, sha256) {
            self.to.unlink(self.name).ctx("remove", self.to_path)?;
            return Err(StepError::NotAsRecorded {
                from: self.from_path.to_path_buf(),
                why: format!(
                    "{} bytes of sha256 {}, recorded {size} bytes of sha256 {sha256}",
                    copied.0, copied.1
                ),
            }
            .into());
        }
        Ok(())
    }

    /// Copies the file read-only into the new release as it is, hashing as it copies,
    /// and checks that the copy reads back as it; returns its size and sha256.
    fn copy_as_is(&self) -> Result<(u64, ContentHash)> {
        let (mut input, _) = self.from.open_file(self.name).map_err(|e| {
            Error::from(StepError::NotAsRecorded {
                from: self.from_path.to_path_buf(),
                why: e.to_string(),
            })
        })?;
        let mut out = self.to.create_file(self.name).ctx("create", self.to_path)?;
        let mut h = Sha256::new();
        let mut n_total = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = input.read(&mut buf).ctx("read", self.from_path)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            n_total += n as u64;
            out.write_all(&buf[..n]).ctx("write", self.to_path)?;
        }
        rustix::fs::fchmod(&out, Mode::from_raw_mode(READ_ONLY))
            .map_err(|e| Error::io("make read-only", self.to_path, e.into()))?;
        drop(out);
        let copied = ContentHash::from(h);
        let (copy, _) = self.to.open_file(self.name).ctx("open", self.to_path)?;
        if crate::hash::hash_reader(copy, self.to_path)? != (n_total, copied) {
            return Err(StepError::CopyDiffers {
                to: self.to_path.to_path_buf(),
                from: self.from_path.to_path_buf(),
            }
            .into());
        }
        Ok((n_total, copied))
    }
}

/// Removes the release `name` of `parent` (retention, an undo), opened as `root` and
/// checked to be that release by the caller: its files directory by directory on several
/// threads (each directory opened again from `root` and checked to be the one listed),
/// what is left below `root` through its handle, then `name` itself, which `rmdir` removes
/// only while it is an empty directory. A release of 10,000 files is 10,000 `unlinkat`;
/// on one thread they were most of what retention added to a publication.
pub(super) fn remove_release(parent: &Dir, name: &str, root: &Dir) -> Result<()> {
    let mut dirs = Vec::new();
    scan(root, "", None, &Default::default(), &mut dirs)?;
    let files: usize = dirs.iter().map(|d| d.entries.len()).sum();
    let work: Vec<&Scanned> = dirs.iter().filter(|d| !d.entries.is_empty()).collect();
    crate::parallel::try_map_on(
        crate::parallel::threads_for(files),
        &work,
        || (),
        |d, _| {
            let dir = reopen(root, &d.rel, d.identity)?;
            for (entry, _) in &d.entries {
                dir.unlink(entry).ctx("remove", dir.join(entry))?;
            }
            Ok(())
        },
    )?;
    // What is left: the emptied directories and distributor's own files at the top.
    for (entry, _) in root.entries().ctx("list", root.path())? {
        root.remove_tree(&entry)
            .ctx("remove release", root.join(&entry))?;
    }
    parent.rmdir(name).ctx("remove release", parent.join(name))
}
