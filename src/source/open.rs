//! Reading the producer's bundle: a source file opened without following a symlink and
//! without blocking (a FIFO, device or anything but a regular file swapped in after the
//! source was checked is an invalid source), and its size and sha256.

use super::SourceFile;
use crate::error::{Error, Result};
use sha2::Digest;
use std::path::Path;

/// Opens a source file for reading without blocking; a FIFO, device or anything but a
/// regular file (swapped in after the source was checked) is an invalid source.
pub(crate) fn open_source(path: &Path) -> Result<std::fs::File> {
    open_source_sized(path).map(|(f, _)| f)
}

/// [`open_source`], with the size `fstat` gave the file when it was opened.
// The field types of `stat` differ between targets.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn open_source_sized(path: &Path) -> Result<(std::fs::File, u64)> {
    match crate::fs::open_file_path(path) {
        Ok((f, st)) => Ok((f, st.st_size as u64)),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput || crate::fs::is_redirect(&e) => {
            Err(Error::invalid_source(format!(
                "{}: {e}; a bundle holds regular files only",
                path.display()
            )))
        }
        Err(e) => Err(Error::io("open", path, e)),
    }
}

/// Size and sha256 of a source file, read once. The file is opened without
/// blocking and must be a regular file (a FIFO or device swapped in is an invalid source).
pub(crate) fn hash_file(path: &Path) -> Result<(u64, crate::hash::ContentHash)> {
    hash_source(&SourceFile::at_path(path.to_path_buf()))
}

/// Size and sha256 of a source file, read once ([`SourceFile::open`] says how it is
/// opened and what it refuses).
///
pub(crate) fn hash_source(source: &SourceFile<'_>) -> Result<(u64, crate::hash::ContentHash)> {
    let (mut f, opened_size) = source.open()?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let size = crate::hash::read_to_end_of(&mut f, opened_size, &mut buf, |chunk| {
        h.update(chunk);
        Ok(())
    })
    .map_err(|e| match e {
        crate::hash::ReadOrSink::Read(e) | crate::hash::ReadOrSink::Sink(e) => {
            Error::io("read", source.path(), e)
        }
    })?;
    Ok((size, crate::hash::ContentHash::from(h)))
}
