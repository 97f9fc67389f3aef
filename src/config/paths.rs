//! Path text in the config: what is refused, how a relative path resolves against the
//! config file's directory, and the note that says so in messages.

use crate::error::{Error, Result};
use std::path::{Component, Path, PathBuf};

/// A local destination path: checked text, resolved against the config file's directory,
/// never `/`. An `s3://` URL here is a forgotten `backend: s3`, not a directory named `s3:`.
pub(super) fn local_path(
    text: &str,
    resolve: impl Fn(&str) -> PathBuf,
) -> std::result::Result<PathBuf, String> {
    check_path_text(text)?;
    for (scheme, backend) in [("s3://", "s3"), ("az://", "azure")] {
        if text.starts_with(scheme) {
            return Err(format!(
                "'{text}' is an object-store URL but this destination is backend local; set backend: {backend} for it"
            ));
        }
    }
    let path = resolve(text);
    if path.parent().is_none() {
        return Err(format!(
            "'{text}' resolves to '/', accepted: a directory below the root"
        ));
    }
    Ok(path)
}

/// `<key> '<text>' is taken relative to the config file <file>`: what a message about a
/// path written relative says, so that an operator who expected the working directory
/// sees where it went. `file` as the operator named it, made absolute.
pub(super) fn relative_note(key: &str, text: &str, file: &Path) -> String {
    let file = match std::path::absolute(file) {
        Ok(abs) => normalize(&abs),
        Err(_) => file.to_path_buf(),
    };
    format!(
        "{key} '{text}' is taken relative to the config file {}",
        file.display()
    )
}

/// Refuses path text that would silently resolve somewhere unexpected: an empty path (the
/// config file's own directory) and `~` (a shell expansion distributor does not do; the
/// path would name a directory called `~` beside the config file).
pub(super) fn check_path_text(p: &str) -> std::result::Result<(), String> {
    if p.is_empty() {
        return Err("must not be empty".into());
    }
    if p.contains('$') {
        return Err(format!(
            "'{p}': variables are not expanded (a '$' is taken literally, which is almost never meant); accepted: an absolute path, or one relative to this file"
        ));
    }
    if p == "~" || p.starts_with("~/") {
        return Err(format!(
            "'{p}': '~' is not expanded; accepted: an absolute path, or one relative to this file"
        ));
    }
    Ok(())
}

pub(super) fn absolute_dir_of(file: &Path) -> Result<PathBuf> {
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io("read current directory for", dir, e))?
            .join(dir)
    };
    Ok(normalize(&abs))
}

/// Lexically normalises an absolute path: drops `.`, resolves `..` against the text.
pub(super) fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}
