//! Inputs bounded before anything is written (docs/operations.md, "Who may write where";
//! docs/troubleshooting.md): text a person or a program hands distributor on the command
//! line, in the environment or in a request (an actor), and files an option names (a saved
//! plan). Each is checked here, before a lock is taken or a journal opened, so that nothing
//! a run later has to write (a journal row, a 4 KiB log entry) can fail for its size once
//! the run has passed its commit point.
//!
//! Must never: read a file an option names through a symlink, block on it (a FIFO), or read
//! more of it than its limit allows.

use crate::error::{FileProblem, InputError};
use rustix::fs::{CWD, FileType, Mode, OFlags, fstat, openat};
use rustix::io::Errno;
use std::io::Read;
use std::path::Path;

/// The most bytes of UTF-8 a bounded text (an actor) may have: 1 KiB.
pub(crate) const TEXT_BYTES: usize = 1024;

/// The largest saved plan read (`publish --plan`): 64 MiB.
pub(crate) const PLAN_FILE_BYTES: u64 = 64 << 20;

/// `value`, when it is at most [`TEXT_BYTES`] of UTF-8 and holds no control character
/// (Unicode category Cc: U+0000-U+001F, U+007F-U+009F); else the usage error that names
/// `what` (the flag or variable it came from) and what is accepted.
pub(crate) fn bounded_text<'a>(what: &str, value: &'a str) -> Result<&'a str, InputError> {
    if value.len() > TEXT_BYTES {
        return Err(InputError::TooLong {
            what: what.to_string(),
            bytes: value.len(),
        });
    }
    if let Some((at, c)) = value.char_indices().find(|(_, c)| c.is_control()) {
        return Err(InputError::Control {
            what: what.to_string(),
            code: u32::from(c),
            at,
        });
    }
    Ok(value)
}

/// The value of environment variable `name`: `None` when unset or empty, an error when it
/// is not UTF-8 (never silently passed over).
pub(crate) fn env_text(name: &str) -> Result<Option<String>, InputError> {
    match std::env::var(name) {
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(InputError::NotUtf8 {
            what: name.to_string(),
        }),
    }
}

/// The whole of the file `file` that option `flag` names, when it is a regular file of at
/// most `limit` bytes: opened without following a symlink in its last segment and without
/// blocking (a FIFO or a device is refused by `fstat` before anything is read), its size
/// checked by `fstat` and the read bounded too (a file can grow). Anything else is the
/// usage error naming `flag`, the file and `accepted`.
pub(crate) fn read_bounded_file(
    flag: &'static str,
    file: &Path,
    limit: u64,
    accepted: &'static str,
) -> Result<Vec<u8>, InputError> {
    let refuse = |problem| InputError::File {
        flag,
        file: file.to_path_buf(),
        problem,
        accepted,
    };
    let fd = openat(
        CWD,
        file,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::LOOP => refuse(FileProblem::Symlink),
        e => refuse(FileProblem::Unreadable(e.into())),
    })?;
    let st = fstat(&fd).map_err(|e| refuse(FileProblem::Unreadable(e.into())))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        return Err(refuse(FileProblem::NotRegular(crate::fs::type_name(kind))));
    }
    let size = u64::try_from(st.st_size).unwrap_or(0);
    if size > limit {
        return Err(refuse(FileProblem::TooLarge { size, limit }));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    std::fs::File::from(fd)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(FileProblem::Unreadable(e)))?;
    if bytes.len() as u64 > limit {
        return Err(refuse(FileProblem::TooLarge {
            size: bytes.len() as u64,
            limit,
        }));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_text_takes_1_kib_without_control_characters() {
        let most = "é".repeat(TEXT_BYTES / 2);
        assert_eq!(bounded_text("--actor", &most).unwrap(), most);
        let over = format!("{most}x");
        let e = bounded_text("--actor", &over).unwrap_err().to_string();
        assert!(
            e.starts_with("--actor: is 1025 bytes long; accepted: at most 1024 bytes"),
            "{e}"
        );
        let e = bounded_text("DISTRIBUTOR_ACTOR", "ops\u{1b}[2J")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("DISTRIBUTOR_ACTOR: holds the control character U+001B at byte 3"),
            "{e}"
        );
        for c in ['\n', '\r', '\t', '\0', '\u{7f}', '\u{85}', '\u{9b}'] {
            assert!(bounded_text("x", &format!("a{c}b")).is_err(), "{c:?}");
        }
        assert!(bounded_text("x", "github:octocat run 42 — ü ✓").is_ok());
    }

    #[test]
    fn a_bounded_file_is_regular_and_within_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let read = |p: &Path, limit| read_bounded_file("--plan", p, limit, "a plan file");
        let f = dir.path().join("f");
        std::fs::write(&f, b"0123456789").unwrap();
        assert_eq!(read(&f, 10).unwrap(), b"0123456789");
        let e = read(&f, 9).unwrap_err().to_string();
        assert!(
            e.contains("over the limit of 9 B (9 bytes); accepted: a plan file"),
            "{e}"
        );
        let l = dir.path().join("l");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        assert!(
            read(&l, 10)
                .unwrap_err()
                .to_string()
                .contains("is a symlink")
        );
        let e = read(dir.path(), 10).unwrap_err().to_string();
        assert!(e.contains("is a directory, not a regular file"), "{e}");
        let e = read(Path::new("/dev/zero"), 10).unwrap_err().to_string();
        assert!(
            e.contains("is a character device, not a regular file"),
            "{e}"
        );
        let e = read(&dir.path().join("missing"), 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be read"), "{e}");
    }
}
