//! Size limits on what distributor reads whole (the scale issue: hostile sizes fail
//! cleanly): a state file, a manifest, a config. Over its limit, each is refused before
//! it is parsed, with an error that names the file, its size, the limit and how to raise
//! it: a manifest is an invalid source (exit 1), a state file invalid state (the conflict
//! `invalid_state`), a config a config error (exit 2). Nothing is planned and no journal
//! is written for a source or config refused so.
//!
//! The limits are the process's, so `distributor serve` applies one value to every
//! pipeline: `DISTRIBUTOR_MAX_STATE_BYTES` and `DISTRIBUTOR_MAX_MANIFEST_BYTES` (a number
//! of bytes, or with `K`, `M` or `G`, powers of 1024). A config is at most
//! [`CONFIG_BYTES`].

use crate::error::{Error, Result};
use std::sync::OnceLock;

/// Default limit of a state file: 256 MiB, about 1.7 million recorded files.
pub(crate) const DEFAULT_STATE_BYTES: u64 = 256 << 20;

/// Default limit of a manifest: 256 MiB, about 1.7 million outputs.
pub(crate) const DEFAULT_MANIFEST_BYTES: u64 = 256 << 20;

/// A config file is at most 4 MiB (thousands of destinations; not configurable).
pub(crate) const CONFIG_BYTES: u64 = 4 << 20;

/// The environment variable that raises (or lowers) the state file limit.
pub(crate) const STATE_VAR: &str = "DISTRIBUTOR_MAX_STATE_BYTES";

/// The environment variable that raises (or lowers) the manifest limit.
pub(crate) const MANIFEST_VAR: &str = "DISTRIBUTOR_MAX_MANIFEST_BYTES";

/// `512M`, `1G`, `4096`: a number of bytes, or with `K`, `M` or `G` (powers of 1024).
pub(crate) fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'K' | 'k') => (&t[..i], 10),
        (i, 'M' | 'm') => (&t[..i], 20),
        (i, 'G' | 'g') => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift).filter(|v| *v > 0)
}

fn from_env(
    var: &'static str,
    default: u64,
    cell: &'static OnceLock<Result<u64, String>>,
) -> Result<u64> {
    cell.get_or_init(|| match std::env::var(var) {
        Err(_) => Ok(default),
        Ok(v) if v.is_empty() => Ok(default),
        Ok(v) => parse_size(&v).ok_or_else(|| {
            format!(
                "{var}={v}: accepted is a number of bytes > 0, or with K, M or G (powers of 1024), e.g. 512M"
            )
        }),
    })
    .clone()
    .map_err(Error::Usage)
}

/// The largest state file read (`DISTRIBUTOR_MAX_STATE_BYTES`, default 256 MiB).
pub(crate) fn state_bytes() -> Result<u64> {
    static CELL: OnceLock<Result<u64, String>> = OnceLock::new();
    from_env(STATE_VAR, DEFAULT_STATE_BYTES, &CELL)
}

/// The largest manifest read (`DISTRIBUTOR_MAX_MANIFEST_BYTES`, default 256 MiB).
pub(crate) fn manifest_bytes() -> Result<u64> {
    static CELL: OnceLock<Result<u64, String>> = OnceLock::new();
    from_env(MANIFEST_VAR, DEFAULT_MANIFEST_BYTES, &CELL)
}

/// Checks both variables once, at the start of a command: a bad value is a usage error
/// (exit 2) before anything is read, not an error on every destination.
pub(crate) fn check_env() -> Result<()> {
    state_bytes()?;
    manifest_bytes()?;
    Ok(())
}

/// Why `what` (a state file, a manifest) of `size` bytes is refused, over `limit`, and
/// how to raise it.
pub(crate) fn over(what: &str, size: u64, limit: u64, var: &str) -> String {
    format!(
        "{what} is {size} bytes ({}), over the limit of {limit} bytes ({}); a larger one is refused before it is read (set {var} to raise the limit)",
        crate::units::human_size(size),
        crate::units::human_size(limit)
    )
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("2K"), Some(2048));
        assert_eq!(parse_size("0"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("12 MB"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999G"), None);
    }
}
