//! Unpacks an uploaded tar (or gzip tar) into a private spool directory, entry by entry,
//! refusing anything a bundle cannot hold: links, devices, FIFOs, sparse files, unsafe or
//! duplicate paths (SPEC §3.2), and more entries or content than the limits allow.
//!
//! It writes only below the directory it is given, creating every directory itself and
//! every file with `create_new`, so no entry can reach through a link or overwrite an
//! earlier one. A directory is created only once a file goes below it: an empty directory
//! carries nothing a bundle uses, so a directory entry costs one map insert, never a
//! `mkdir` (nor its removal with the spool), and an archive of nothing but directories
//! reaches `--max-entries` at the speed it decompresses. Each entry looks up its parents
//! from the deepest one up and stops at the first it knows (whose own parents it knows
//! too): one lookup for the usual entry, whatever its depth. GNU long names and PAX records are read here, size-capped, rather than by
//! the tar crate, which would read them into memory whatever their size.

use super::error::ApiError;
use super::limits::{Limits, MAX_EXTENSION_BYTES, MAX_MANIFEST_BYTES};
use crate::source::MANIFEST_FILE;
use crate::source::check_safe_path;
use flate2::read::MultiGzDecoder;
use sha2::{Digest, Sha256};
use std::cell::Cell;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::rc::Rc;
use tar::EntryType;

/// What was unpacked: every regular file with its size and sha256.
#[derive(Debug, Default)]
pub(crate) struct Extracted {
    /// Path → (size, lowercase hex sha256).
    pub files: HashMap<String, (u64, crate::hash::ContentHash)>,
    /// Entries read, extension headers included.
    pub entries: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    /// A directory; `explicit` when an entry named it (not only a path below it);
    /// `created` once it exists in the spool (a file went below it). A created
    /// directory's parents are created, and a known directory's parents known.
    Dir {
        explicit: bool,
        created: bool,
    },
}

/// Unpacks `archive` (a tar, or a gzip tar recognised by its magic bytes) into `dest`,
/// which must exist and be empty.
pub(crate) fn extract(archive: &Path, dest: &Path, limits: &Limits) -> Result<Extracted, ApiError> {
    let mut file = File::open(archive)
        .map_err(|e| ApiError::internal(format!("cannot reopen the spooled upload: {e}")))?;
    let mut magic = [0u8; 2];
    let n = read_up_to(&mut file, &mut magic)
        .map_err(|e| ApiError::internal(format!("cannot read the spooled upload: {e}")))?;
    if n == 0 {
        return Err(ApiError::bad_bundle(
            "the request body is empty; send the bundle as a tar or gzip tar",
        ));
    }
    let file = File::open(archive)
        .map_err(|e| ApiError::internal(format!("cannot reopen the spooled upload: {e}")))?;
    let gzip = n == 2 && magic == [0x1f, 0x8b];
    let eof = Rc::new(Cell::new(false));
    let file = BufReader::new(EofTracker {
        inner: file,
        eof: Rc::clone(&eof),
    });
    let reader: Box<dyn Read> = if gzip {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Unpacker {
        dest,
        limits,
        kinds: HashMap::new(),
        out: Extracted::default(),
        extracted_bytes: 0,
        gzip,
        eof,
    }
    .run(reader)
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Notes when the body's end was reached, so a read error after it is called what it
/// is: a truncated archive (the tar crate reports a short header as a plain error).
struct EofTracker<R> {
    inner: R,
    eof: Rc<Cell<bool>>,
}

impl<R: Read> Read for EofTracker<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.eof.set(true);
        }
        Ok(n)
    }
}

struct Unpacker<'a> {
    dest: &'a Path,
    limits: &'a Limits,
    kinds: HashMap<String, Kind>,
    out: Extracted,
    extracted_bytes: u64,
    gzip: bool,
    eof: Rc<Cell<bool>>,
}

/// Names carried by extension headers for the entry that follows them.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    pax_path: Option<Vec<u8>>,
    pax_size: Option<u64>,
}

impl Unpacker<'_> {
    fn run(mut self, reader: Box<dyn Read>) -> Result<Extracted, ApiError> {
        let mut archive = tar::Archive::new(reader);
        let entries = archive.entries().map_err(|e| self.read_error(e))?;
        let mut pending = Pending::default();
        for entry in entries.raw(true) {
            let mut entry = entry.map_err(|e| self.read_error(e))?;
            self.out.entries += 1;
            if self.out.entries > self.limits.max_entries {
                return Err(ApiError::too_large(format!(
                    "the archive has more than {} entries (--max-entries)",
                    self.limits.max_entries
                )));
            }
            let ty = entry.header().entry_type();
            let size = entry
                .header()
                .entry_size()
                .map_err(|e| self.read_error(e))?;
            match ty {
                EntryType::GNULongName => {
                    let mut name = self.read_extension(&mut entry, size, "long name")?;
                    if name.last() == Some(&0) {
                        name.pop();
                    }
                    pending.long_name = Some(name);
                    continue;
                }
                EntryType::XHeader => {
                    let data = self.read_extension(&mut entry, size, "PAX header")?;
                    apply_pax(&data, &mut pending)?;
                    continue;
                }
                EntryType::XGlobalHeader => {
                    // Global defaults (mtime, uname, ...) carry nothing a bundle uses.
                    self.read_extension(&mut entry, size, "PAX global header")?;
                    continue;
                }
                _ => {}
            }
            let raw_name = pending
                .pax_path
                .take()
                .or_else(|| pending.long_name.take())
                .unwrap_or_else(|| entry.path_bytes().into_owned());
            if let Some(pax) = pending.pax_size.take()
                && pax != size
            {
                return Err(ApiError::bad_bundle(format!(
                    "entry '{}': a PAX size of {pax} bytes overrides the header's {size}; files that large are not accepted",
                    String::from_utf8_lossy(&raw_name).escape_debug()
                )));
            }
            pending = Pending::default();
            let name = entry_name(&raw_name, ty)?;
            match ty {
                EntryType::Directory => {
                    if size != 0 {
                        return Err(ApiError::bad_bundle(format!(
                            "directory entry '{}' declares {size} bytes of content",
                            name.as_deref().unwrap_or(".")
                        )));
                    }
                    if let Some(name) = name {
                        self.make_dir(&name)?;
                    }
                }
                EntryType::Regular => {
                    let name = name.ok_or_else(|| {
                        ApiError::bad_bundle("a regular file entry has an empty name")
                    })?;
                    self.write_file(&name, size, &mut entry)?;
                }
                other => {
                    return Err(ApiError::bad_bundle(format!(
                        "entry '{}' is {}; only regular files and directories are accepted",
                        String::from_utf8_lossy(&raw_name).escape_debug(),
                        describe(other)
                    )));
                }
            }
        }
        if pending.long_name.is_some() || pending.pax_path.is_some() {
            return Err(ApiError::bad_bundle(
                "the archive ends after an extension header, before the entry it names (truncated?)",
            ));
        }
        self.check_end(&mut archive.into_inner())?;
        Ok(self.out)
    }

    /// After the last entry (the tar reader has taken the first zero block, or met the
    /// body's end): the rest must be zeros, at least the second of the two zero blocks that
    /// end a tar and at most a generous record padding, and reading it to its end checks a
    /// gzip body's length and checksum. Anything else is a truncated or corrupt upload, or
    /// one with something appended.
    fn check_end(&self, rest: &mut dyn Read) -> Result<(), ApiError> {
        const MAX_PADDING: u64 = 1 << 20;
        let mut buf = vec![0u8; 64 * 1024];
        let mut zeros: u64 = 0;
        loop {
            let n = rest.read(&mut buf).map_err(|e| self.read_error(e))?;
            if n == 0 {
                break;
            }
            if buf[..n].iter().any(|&b| b != 0) {
                return Err(ApiError::bad_bundle(
                    "data follows the end of the tar archive; send the archive alone",
                ));
            }
            zeros += n as u64;
            if zeros > MAX_PADDING {
                return Err(ApiError::bad_bundle(format!(
                    "more than {MAX_PADDING} bytes of padding follow the end of the tar archive"
                )));
            }
        }
        if zeros < 512 {
            return Err(ApiError::bad_bundle(
                "the tar archive has no end-of-archive marker (two zero blocks): it is truncated",
            ));
        }
        Ok(())
    }

    fn read_error(&self, e: io::Error) -> ApiError {
        let what = if self.gzip { "gzip tar" } else { "tar" };
        if e.kind() == io::ErrorKind::UnexpectedEof || self.eof.get() {
            ApiError::bad_bundle(format!("the {what} archive is truncated: {e}"))
        } else {
            ApiError::bad_bundle(format!(
                "the body is not a valid {what} archive: {e}; send a tar (application/x-tar) or a gzip tar (application/gzip)"
            ))
        }
    }

    fn read_extension(
        &self,
        entry: &mut impl Read,
        size: u64,
        what: &str,
    ) -> Result<Vec<u8>, ApiError> {
        if size > MAX_EXTENSION_BYTES {
            return Err(ApiError::bad_bundle(format!(
                "a {what} record of {size} bytes is larger than the {MAX_EXTENSION_BYTES} accepted"
            )));
        }
        let mut data = Vec::with_capacity(size as usize);
        entry
            .read_to_end(&mut data)
            .map_err(|e| self.read_error(e))?;
        if data.len() as u64 != size {
            return Err(truncated(what, size, data.len() as u64));
        }
        Ok(data)
    }

    /// Records the parents of `path` as directories (refusing a parent that is a file),
    /// and with `create` makes them exist in the spool. Looks from the deepest parent up
    /// and stops at the first that needs nothing: known (and created, with `create`).
    fn make_parents(&mut self, path: &str, create: bool) -> Result<(), ApiError> {
        // The ends of the parents that need something, deepest first.
        let mut wanting = Vec::new();
        let mut end = path.len();
        while let Some(i) = path[..end].rfind('/') {
            let parent = &path[..i];
            match self.kinds.get(parent) {
                Some(Kind::File) => {
                    return Err(ApiError::bad_bundle(format!(
                        "'{parent}' is a file in the archive, but '{path}' needs it as a directory"
                    )));
                }
                Some(Kind::Dir { created, .. }) if *created || !create => break,
                _ => wanting.push(i),
            }
            end = i;
        }
        for &i in wanting.iter().rev() {
            let parent = &path[..i];
            if create {
                self.create_dir(parent)?;
            }
            let kind = self.kinds.entry(parent.to_string()).or_insert(Kind::Dir {
                explicit: false,
                created: false,
            });
            if let Kind::Dir { created, .. } = kind {
                *created |= create;
            }
        }
        Ok(())
    }

    /// A directory entry: recorded, not created (see the module's documentation).
    fn make_dir(&mut self, path: &str) -> Result<(), ApiError> {
        self.make_parents(path, false)?;
        match self.kinds.get_mut(path) {
            Some(Kind::Dir {
                explicit: explicit @ false,
                ..
            }) => *explicit = true,
            Some(_) => return Err(duplicate(path)),
            None => {
                self.kinds.insert(
                    path.to_string(),
                    Kind::Dir {
                        explicit: true,
                        created: false,
                    },
                );
            }
        }
        Ok(())
    }

    fn create_dir(&self, rel: &str) -> Result<(), ApiError> {
        let p = self.dest.join(rel);
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .map_err(|e| ApiError::internal(format!("spool: cannot create a directory: {e}")))
    }

    fn write_file(&mut self, path: &str, size: u64, data: &mut impl Read) -> Result<(), ApiError> {
        if self.kinds.contains_key(path) {
            return Err(duplicate(path));
        }
        self.make_parents(path, true)?;
        if path == MANIFEST_FILE && size > MAX_MANIFEST_BYTES {
            return Err(ApiError::too_large(format!(
                "{MANIFEST_FILE} is {size} bytes; the largest manifest accepted is {MAX_MANIFEST_BYTES} bytes"
            )));
        }
        if self.extracted_bytes.saturating_add(size) > self.limits.max_extracted_bytes {
            return Err(ApiError::too_large(format!(
                "the archive's files add up to more than {} bytes (--max-extracted-bytes)",
                self.limits.max_extracted_bytes
            )));
        }
        self.extracted_bytes += size;
        self.kinds.insert(path.to_string(), Kind::File);
        let target = self.dest.join(path);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&target)
            .map_err(|e| ApiError::internal(format!("spool: cannot create a file: {e}")))?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut copied: u64 = 0;
        loop {
            let n = data.read(&mut buf).map_err(|e| self.read_error(e))?;
            if n == 0 {
                break;
            }
            copied += n as u64;
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| ApiError::internal(format!("spool: cannot write: {e}")))?;
        }
        if copied != size {
            return Err(truncated(&format!("entry '{path}'"), size, copied));
        }
        self.out.files.insert(
            path.to_string(),
            (size, crate::hash::ContentHash::from(hasher)),
        );
        Ok(())
    }
}

/// The safe relative path of an entry, None for the archive root (`.` or `./`).
fn entry_name(raw: &[u8], ty: EntryType) -> Result<Option<String>, ApiError> {
    let text = std::str::from_utf8(raw).map_err(|_| {
        ApiError::bad_bundle(format!(
            "entry name '{}' is not UTF-8",
            String::from_utf8_lossy(raw).escape_debug()
        ))
    })?;
    // `tar -C bundle -cf - .` names entries `./a`; a directory entry may end in `/`.
    let mut name = text.strip_prefix("./").unwrap_or(text);
    if ty == EntryType::Directory {
        name = name.strip_suffix('/').unwrap_or(name);
        if name.is_empty() || name == "." {
            return Ok(None);
        }
    }
    check_safe_path(name).map_err(|why| {
        ApiError::bad_bundle(format!(
            "entry '{}' has an unsafe path: {why}",
            text.escape_debug()
        ))
    })?;
    Ok(Some(name.to_string()))
}

fn apply_pax(data: &[u8], pending: &mut Pending) -> Result<(), ApiError> {
    for ext in tar::PaxExtensions::new(data) {
        let ext = ext.map_err(|e| ApiError::bad_bundle(format!("malformed PAX header: {e}")))?;
        let key = ext
            .key()
            .map_err(|_| ApiError::bad_bundle("a PAX header key is not UTF-8"))?;
        match key {
            "path" => pending.pax_path = Some(ext.value_bytes().to_vec()),
            "size" => {
                let v = ext
                    .value()
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| ApiError::bad_bundle("a PAX size is not a number"))?;
                pending.pax_size = Some(v);
            }
            k if k.starts_with("GNU.sparse.") => {
                return Err(ApiError::bad_bundle(
                    "sparse files are not accepted; only regular files and directories",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

fn describe(ty: EntryType) -> &'static str {
    match ty {
        EntryType::Symlink => "a symbolic link",
        EntryType::Link => "a hard link",
        EntryType::Char => "a character device",
        EntryType::Block => "a block device",
        EntryType::Fifo => "a FIFO",
        EntryType::GNUSparse => "a sparse file",
        EntryType::GNULongLink => "a long link name (links are not accepted)",
        EntryType::Continuous => "a contiguous file",
        _ => "of an unsupported type",
    }
}

fn duplicate(path: &str) -> ApiError {
    ApiError::bad_bundle(format!(
        "entry '{path}' appears more than once in the archive"
    ))
}

fn truncated(what: &str, declared: u64, got: u64) -> ApiError {
    ApiError::bad_bundle(format!(
        "the archive is truncated: {what} declares {declared} bytes, the archive ends after {got}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_normalised_then_checked() {
        let name = |raw: &str, ty| entry_name(raw.as_bytes(), ty);
        assert_eq!(
            name("./a/b.txt", EntryType::Regular).unwrap().as_deref(),
            Some("a/b.txt")
        );
        assert_eq!(
            name("d/", EntryType::Directory).unwrap().as_deref(),
            Some("d")
        );
        assert_eq!(name("./", EntryType::Directory).unwrap(), None);
        assert_eq!(name(".", EntryType::Directory).unwrap(), None);
        for bad in [
            "../x",
            "/etc/passwd",
            "a//b",
            ".distributor.json",
            "d/",
            "./",
        ] {
            assert!(name(bad, EntryType::Regular).is_err(), "{bad}");
        }
        assert!(entry_name(b"\xff", EntryType::Regular).is_err());
    }

    #[test]
    fn pax_records_set_path_and_refuse_sparse_files() {
        let mut p = Pending::default();
        apply_pax(b"16 path=abc/def\n20 mtime=1700000000\n", &mut p).unwrap();
        assert_eq!(p.pax_path.as_deref(), Some(&b"abc/def"[..]));
        let e = apply_pax(b"22 GNU.sparse.major=1\n", &mut Pending::default()).unwrap_err();
        assert!(e.message.contains("sparse"), "{}", e.message);
    }
}
