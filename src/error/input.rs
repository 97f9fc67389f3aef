//! Inputs refused before anything is read from or written to a destination
//! ([`InputError`]): text a person or a program hands distributor (an actor), and files an
//! option names (a saved plan). Each is a usage error (exit 2) that names the flag, the
//! variable or the file and says what is accepted.

use std::path::PathBuf;

/// What is accepted of a bounded text (an actor): spelled once, for every message.
pub(crate) const ACCEPTED_TEXT: &str =
    "at most 1024 bytes (1 KiB) of UTF-8 text without control characters";

/// An input refused as it is: [`Error::Input`](super::Error::Input), exit 2, kind `usage`.
/// Nothing was locked, journaled or written when it is returned.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Text longer than its limit.
    #[error("{what}: is {bytes} bytes long; accepted: {ACCEPTED_TEXT}")]
    TooLong {
        /// The flag or variable (or the variables) the text came from.
        what: String,
        /// Its length in bytes of UTF-8.
        bytes: usize,
    },
    /// Text holding a control character (Unicode category Cc).
    #[error(
        "{what}: holds the control character U+{code:04X} at byte {at}; accepted: {ACCEPTED_TEXT}"
    )]
    Control {
        /// The flag or variable the text came from.
        what: String,
        /// The character's code point.
        code: u32,
        /// Its byte offset in the text.
        at: usize,
    },
    /// An environment variable whose value is not UTF-8.
    #[error("{what}: is not UTF-8; accepted: {ACCEPTED_TEXT}")]
    NotUtf8 {
        /// The variable.
        what: String,
    },
    /// A file an option names, refused as it is.
    #[error("{flag} {}: {problem}; accepted: {accepted}", file.display())]
    File {
        /// The option (`--plan`).
        flag: &'static str,
        /// The file as the option names it.
        file: PathBuf,
        /// What is wrong with it.
        problem: FileProblem,
        /// What the option accepts.
        accepted: &'static str,
    },
}

/// Why a file an option names is refused ([`InputError::File`]).
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    /// Its last segment is a symlink, which is never followed.
    #[error("is a symlink, which is not followed (name the file it points to)")]
    Symlink,
    /// Not a regular file (a FIFO, a device, a directory, a socket).
    #[error("is {0}, not a regular file")]
    NotRegular(&'static str),
    /// Larger than the limit, by `fstat` or by what could be read.
    #[error(
        "is {} ({size} bytes) or more, over the limit of {} ({limit} bytes)",
        crate::units::human_size(*size),
        crate::units::human_size(*limit)
    )]
    TooLarge {
        /// Its size (or what was read of it before the limit).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// It could not be opened or read.
    #[error("cannot be read: {0}")]
    Unreadable(std::io::Error),
}
