//! sha256 helpers: hex rendering and streaming file hashes.

use crate::error::{IoContext, Result};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

/// The digits of lowercase hex.
const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
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

/// A sha256 digest held as its 32 bytes (64 in hex, plus a string's own header and
/// allocation, would be three times that for every file of a million-file bundle). It
/// reads and writes as 64 lowercase hex characters, the form of every manifest, state
/// file, report and journal row.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    /// The digest that 64 lowercase hex characters spell; `None` for anything else.
    pub fn parse(hex: &str) -> Option<ContentHash> {
        sha256_bytes(hex).map(ContentHash)
    }

    /// The sha256 of `bytes`.
    pub fn of(bytes: &[u8]) -> ContentHash {
        ContentHash(Sha256::digest(bytes).into())
    }

    /// Its 64 lowercase hex characters.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }

    /// Its 64 lowercase hex characters, written into `buf` (no allocation).
    pub fn hex_in<'b>(&self, buf: &'b mut [u8; 64]) -> &'b str {
        for (pair, b) in buf.chunks_exact_mut(2).zip(self.0) {
            pair[0] = DIGITS[(b >> 4) as usize];
            pair[1] = DIGITS[(b & 15) as usize];
        }
        std::str::from_utf8(buf).expect("hex digits are ASCII")
    }
}

impl From<Sha256> for ContentHash {
    /// The digest of what `hasher` was fed.
    fn from(hasher: Sha256) -> ContentHash {
        ContentHash(hasher.finalize().into())
    }
}

impl std::fmt::Display for ContentHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.hex_in(&mut [0; 64]))
    }
}

impl std::fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl PartialEq<str> for ContentHash {
    fn eq(&self, hex: &str) -> bool {
        self.hex_in(&mut [0; 64]) == hex
    }
}

impl PartialEq<&str> for ContentHash {
    fn eq(&self, hex: &&str) -> bool {
        *self == **hex
    }
}

impl serde::Serialize for ContentHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.hex_in(&mut [0; 64]))
    }
}

impl<'de> serde::Deserialize<'de> for ContentHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Hex;
        impl serde::de::Visitor<'_> for Hex {
            type Value = ContentHash;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a sha256: 64 lowercase hex characters")
            }
            fn visit_str<E: serde::de::Error>(
                self,
                v: &str,
            ) -> std::result::Result<ContentHash, E> {
                ContentHash::parse(v).ok_or_else(|| {
                    E::custom(format_args!(
                        "sha256 '{}': accepted is 64 lowercase hex characters",
                        v.escape_debug()
                    ))
                })
            }
        }
        d.deserialize_str(Hex)
    }
}

/// A sha256 that bytes are written into (`io::Write`), for text hashed as it is produced
/// rather than collected first.
#[derive(Default)]
pub(crate) struct HashWriter(Sha256);

impl HashWriter {
    /// Lowercase hex sha256 of everything written.
    pub(crate) fn finish_hex(self) -> String {
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
pub(crate) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The 32 bytes that a 64-digit lowercase hex sha256 spells; `None` for anything else.
pub(crate) fn sha256_bytes(hex: &str) -> Option<[u8; 32]> {
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

/// Why [`read_to_end_of`] stopped before the end.
#[derive(Debug)]
pub(crate) enum ReadOrSink {
    /// Reading failed.
    Read(std::io::Error),
    /// The sink failed.
    Sink(std::io::Error),
}

/// Reads the regular file `f`, which `fstat` found `opened_size` bytes long when it was
/// opened, to its end, handing every chunk read to `sink`; returns the bytes read.
///
/// The end is known without the read that returns 0, which costs a system call per file
/// and tells nothing new: a read of a regular file returns less than it was asked for
/// only at the end of the file, so a short read that brings the bytes read to at least
/// `opened_size` is the end. A file that grew after it was opened fills the buffer or
/// passes `opened_size`, and is read on to its new end; one that shrank returns short of
/// `opened_size` and is read on until a read returns 0. Either way the bytes read are what
/// the file held at the last read, as with reading until a read returns 0, and the
/// caller's check of size and sha256 against the manifest catches the change (SPEC §3.1).
pub(crate) fn read_to_end_of(
    f: &mut impl Read,
    opened_size: u64,
    buf: &mut [u8],
    mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::result::Result<u64, ReadOrSink> {
    let mut size = 0u64;
    loop {
        let n = match f.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadOrSink::Read(e)),
        };
        sink(&buf[..n]).map_err(ReadOrSink::Sink)?;
        size += n as u64;
        if n < buf.len() && size >= opened_size {
            break;
        }
    }
    Ok(size)
}

/// Size and sha256 of what `f` reads, to its end (`path` names it in errors).
pub(crate) fn hash_reader(mut f: impl Read, path: &Path) -> Result<(u64, ContentHash)> {
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
    Ok((size, ContentHash::from(h)))
}

#[cfg(test)]
mod read_tests {
    use super::*;

    /// A file as `read(2)` shows it: `chunks` are what successive reads return (each cut
    /// to the buffer's length), then 0 for ever; counts the reads.
    struct Reads {
        chunks: Vec<Vec<u8>>,
        calls: usize,
    }

    impl Read for Reads {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.calls += 1;
            if self.chunks.is_empty() {
                return Ok(0);
            }
            let c = &mut self.chunks[0];
            let n = c.len().min(buf.len());
            buf[..n].copy_from_slice(&c[..n]);
            c.drain(..n);
            if c.is_empty() {
                self.chunks.remove(0);
            }
            Ok(n)
        }
    }

    fn run(chunks: &[usize], opened_size: u64, buf: usize) -> (u64, usize) {
        let mut f = Reads {
            chunks: chunks.iter().map(|&n| vec![7u8; n]).collect(),
            calls: 0,
        };
        let mut seen = 0u64;
        let size = read_to_end_of(&mut f, opened_size, &mut vec![0u8; buf], |c| {
            seen += c.len() as u64;
            Ok(())
        })
        .unwrap();
        assert_eq!(size, seen, "every byte read goes to the sink");
        (size, f.calls)
    }

    #[test]
    fn a_file_read_whole_by_its_short_read_takes_no_empty_read() {
        // 10 bytes, a buffer of 16: one read.
        assert_eq!(run(&[10], 10, 16), (10, 1));
        // 40 bytes: 16, 16, 8.
        assert_eq!(run(&[40], 40, 16), (40, 3));
        // A multiple of the buffer cannot tell its end from a full read: one read more.
        assert_eq!(run(&[32], 32, 16), (32, 3));
        // An empty file: the one read that says so.
        assert_eq!(run(&[], 0, 16), (0, 1));
    }

    #[test]
    fn a_file_that_grew_or_shrank_is_read_to_its_new_end() {
        // Grew after it was opened (fstat said 10): the read fills the buffer, and the
        // rest is read too.
        assert_eq!(run(&[20], 10, 16).0, 20);
        // Grew by less than the buffer's room: the short read passes the size; all of it
        // is read.
        assert_eq!(run(&[12], 10, 16).0, 12);
        // Shrank: a short read before the size, then the read that returns 0.
        assert_eq!(run(&[6], 10, 16), (6, 2));
        // A short read in the middle (a file system that returns less than asked) is not
        // taken for the end before the size is reached.
        assert_eq!(run(&[4, 6], 10, 16), (10, 2));
    }
}
