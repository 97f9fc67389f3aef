//! sha256 helpers: hex rendering and streaming file hashes.

use crate::error::{IoContext, Result};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Lowercase hex sha256 of a byte slice.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// A sha256 that bytes are written into (`io::Write`), for text hashed as it is produced
/// rather than collected first.
#[derive(Default)]
pub struct HashWriter(Sha256);

impl HashWriter {
    /// Lowercase hex sha256 of everything written.
    pub fn finish_hex(self) -> String {
        hex(&self.0.finalize())
    }
}

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// True when `s` is 64 lowercase hex characters.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The 32 bytes that a 64-digit lowercase hex sha256 spells; `None` for anything else.
pub fn sha256_bytes(hex: &str) -> Option<[u8; 32]> {
    if !is_sha256_hex(hex) {
        return None;
    }
    let digit = |b: u8| if b <= b'9' { b - b'0' } else { b - b'a' + 10 };
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        *o = (digit(pair[0]) << 4) | digit(pair[1]);
    }
    Some(out)
}

/// Size and lowercase hex sha256 of a source file, read once. The file is opened without
/// blocking and must be a regular file (a FIFO or device swapped in is an invalid source).
pub fn hash_file(path: &Path) -> Result<(u64, String)> {
    hash_reader(crate::backend::local::open_source(path)?, path)
}

/// Size and lowercase hex sha256 of what `f` reads, to its end (`path` names it in errors).
pub fn hash_reader(mut f: impl Read, path: &Path) -> Result<(u64, String)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).ctx("read", path)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        h.update(&buf[..n]);
    }
    Ok((size, hex(&h.finalize())))
}
