//! Placement fingerprints (what a commit placed: path, size, mtime, inode, ctime, sha256),
//! stored as one JSON set per operation and read back newest first, only until every
//! wanted path has had its newest placement offered; and the per-file rows of journals
//! older than schema 5.

use super::jerr;
use crate::backend::types::Fingerprint;
use crate::error::{Error, JournalError, Result};
use rusqlite::{Connection, params};
use std::path::Path;

/// [`super::Journal::fingerprints`] on any connection to a journal of schema `version` (a
/// [`super::JournalView`] too: read only, it may be older than this build's).
pub(crate) fn read_fingerprints(
    conn: &Connection,
    journal: &Path,
    version: i64,
    bundle_path: &str,
    wanted: &mut crate::backend::types::Fingerprints<'_>,
) -> Result<()> {
    if wanted.open() == 0 {
        return Ok(());
    }
    let err = |e| jerr(journal, e);
    let query = if version >= 8 {
        LATEST_PLACEMENT_SETS
    } else {
        LATEST_PLACEMENT_SETS_V5
    };
    let mut stmt = conn.prepare(query).map_err(err)?;
    let mut sets = stmt.query([bundle_path]).map_err(err)?;
    while wanted.open() > 0 {
        let Some(r) = sets.next().map_err(err)? else {
            break;
        };
        let id: i64 = r.get(0).map_err(err)?;
        let action_set: Option<i64> = if version >= 8 {
            r.get(1).map_err(err)?
        } else {
            None
        };
        // The set is read through a blob handle as it is parsed: at a million files it is
        // 40 MB of text that a column value would hold whole.
        let set = conn
            .blob_open(
                rusqlite::MAIN_DB,
                "journal_placement_sets",
                "placements",
                id,
                true,
            )
            .map_err(err)?;
        if let Some(action_set) = action_set {
            let bases = (
                r.get::<_, Option<i64>>(2).map_err(err)?.unwrap_or(0),
                r.get::<_, Option<i64>>(3).map_err(err)?,
            );
            offer_commit_set(conn, journal, id, set, action_set, bases, wanted)?;
            continue;
        }
        let text = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(
            SET_READ_BUF,
            set,
        ));
        for_each_element(text, |SetEntry(path, size, mtime_ns, ino, sha256, ctime_ns)| {
            let placed = crate::backend::types::Placed {
                size: size as u64,
                mtime_ns,
                ino: ino as u64,
                ctime_ns,
            };
            wanted.offer(&path, &sha256, placed);
            Ok(wanted.open() > 0)
        })
        .map_err(|e| match e {
            Stopped::Parse(e) => JournalError::Corrupt {
                path: journal.to_path_buf(),
                message: format!(
                    "journal_placement_sets row {id} is not a JSON array of [path, size, mtime_ns, ino, sha256, ctime_ns]: {e}"
                ),
            }
            .into(),
            Stopped::By(e) => e,
        })?;
    }
    if wanted.open() == 0 {
        return Ok(());
    }
    offer_placement_rows(conn, journal, bundle_path, wanted)
}

/// Offers the per-file placement rows of a journal older than schema 5, newest first, as
/// long as a wanted path is still open. Every set is newer than every row: schema 5 writes
/// sets only.
fn offer_placement_rows(
    conn: &Connection,
    journal: &Path,
    bundle_path: &str,
    wanted: &mut crate::backend::types::Fingerprints<'_>,
) -> Result<()> {
    let err = |e| jerr(journal, e);
    let mut stmt = conn.prepare(LATEST_PLACEMENTS).map_err(err)?;
    let mut rows = stmt.query([bundle_path]).map_err(err)?;
    while wanted.open() > 0 {
        let Some(r) = rows.next().map_err(err)? else {
            break;
        };
        let text = |i| r.get_ref(i).and_then(|v| Ok(v.as_str()?)).map_err(err);
        let placed = crate::backend::types::Placed {
            size: r.get::<_, i64>(1).map_err(err)? as u64,
            mtime_ns: r.get(2).map_err(err)?,
            ino: r.get::<_, i64>(3).map_err(err)? as u64,
            // Recorded before ctime was: vouches for nothing.
            ctime_ns: None,
        };
        wanted.offer(text(0)?, text(4)?, placed);
    }
    Ok(())
}

/// Offers the fingerprints of a commit's placement set (schema 8, row `id`): its elements
/// `[seq, mtime_ns - mtime_base, ino, ctime_ns - ctime_base]` in ascending `seq`, each
/// joined with the action `seq` of `action_set` for its path, size and sha256. The actions
/// are read in one pass beside the elements.
fn offer_commit_set(
    conn: &Connection,
    journal: &Path,
    id: i64,
    set: rusqlite::blob::Blob<'_>,
    action_set: i64,
    (mtime_base, ctime_base): (i64, Option<i64>),
    wanted: &mut crate::backend::types::Fingerprints<'_>,
) -> Result<()> {
    let err = |e| jerr(journal, e);
    let corrupt = |what: String| {
        Error::from(JournalError::Corrupt {
            path: journal.to_path_buf(),
            message: format!("journal_placement_sets row {id}: {what}"),
        })
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, path, size, sha256 FROM journal_action_rows
             WHERE action_set = ?1 AND seq >= ?2 ORDER BY seq",
        )
        .map_err(err)?;
    let mut head = [0u8; 64];
    let head = set.read_at(&mut head, 0).map(|n| &head[..n]).map_err(err)?;
    let first = first_seq(std::str::from_utf8(head).unwrap_or_default());
    let mut rows = stmt.query([action_set, first]).map_err(err)?;
    let text =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(SET_READ_BUF, set));
    let mut hex = [0u8; 64];
    // Each element offered as it is parsed: at a million files, the set as a list would
    // be 40 MB more at the republication's peak.
    for_each_element(text, |(seq, mtime, ino, ctime): (i64, i64, i64, Option<i64>)| {
        let row = loop {
            let Some(r) = rows.next().map_err(err)? else {
                return Err(corrupt(format!(
                    "names action {seq}, which action set {action_set} does not hold (or not in ascending order)"
                )));
            };
            if r.get::<_, i64>(0).map_err(err)? == seq {
                break r;
            }
        };
        let path = row.get_ref(1).and_then(|v| Ok(v.as_str()?)).map_err(err)?;
        let size: Option<i64> = row.get(2).map_err(err)?;
        let sha = match row.get_ref(3).map_err(err)? {
            rusqlite::types::ValueRef::Blob(b) if b.len() == 32 => hex_into(b, &mut hex),
            _ => {
                return Err(corrupt(format!(
                    "action {seq} placed no file with a sha256"
                )));
            }
        };
        let placed = crate::backend::types::Placed {
            size: size.unwrap_or(0) as u64,
            mtime_ns: mtime_base.wrapping_add(mtime),
            ino: ino as u64,
            ctime_ns: ctime.zip(ctime_base).map(|(c, b)| b.wrapping_add(c)),
        };
        wanted.offer(path, sha, placed);
        Ok(wanted.open() > 0)
    })
    .map_err(|e| match e {
        Stopped::Parse(e) => corrupt(format!(
            "is not a JSON array of [seq, mtime_ns - mtime_base, ino, ctime_ns - ctime_base]: {e}"
        )),
        Stopped::By(e) => e,
    })
}

/// The buffer a placement set is parsed through.
const SET_READ_BUF: usize = 256 * 1024;

/// The `seq` of a commit set's first element (`[[seq,...`), to start reading its actions
/// there; 0 (from the first action) when the text does not start that way (or its head
/// is cut inside a character).
fn first_seq(text: &str) -> i64 {
    let head = text.trim_start().strip_prefix('[').map(str::trim_start);
    let head = head.and_then(|h| h.strip_prefix('[')).map(str::trim_start);
    head.and_then(|h| {
        let end = h.find(|c: char| !c.is_ascii_digit()).unwrap_or(h.len());
        h[..end].parse().ok()
    })
    .unwrap_or(0)
}

/// Why [`for_each_element`] stopped before the end of its array.
enum Stopped {
    /// The text is not a JSON array of such elements.
    Parse(serde_json::Error),
    /// The callback failed.
    By(Error),
}

/// Calls `f` with each element of the JSON array `text` reads as it is parsed, without
/// collecting them, until `f` returns `Ok(false)` (done: the rest is not read) or fails.
fn for_each_element<'de, T: serde::Deserialize<'de>, R: serde_json::de::Read<'de>>(
    mut text: serde_json::Deserializer<R>,
    f: impl FnMut(T) -> Result<bool>,
) -> std::result::Result<(), Stopped> {
    struct Each<F, T>(F, Option<Error>, std::marker::PhantomData<T>);
    impl<'de, T: serde::Deserialize<'de>, F: FnMut(T) -> Result<bool>> serde::de::Visitor<'de>
        for &mut Each<F, T>
    {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<(), A::Error> {
            while let Some(x) = seq.next_element::<T>()? {
                match (self.0)(x) {
                    Ok(true) => {}
                    Ok(false) => return Err(serde::de::Error::custom(DONE)),
                    Err(e) => {
                        self.1 = Some(e);
                        return Err(serde::de::Error::custom(DONE));
                    }
                }
            }
            Ok(())
        }
    }
    const DONE: &str = "distributor: stopped";
    let mut each = Each(f, None, std::marker::PhantomData);
    let read = serde::Deserializer::deserialize_seq(&mut text, &mut each).and_then(|()| text.end());
    match (read, each.1) {
        (_, Some(e)) => Err(Stopped::By(e)),
        (Err(e), None) if e.to_string().starts_with(DONE) => Ok(()),
        (Err(e), None) => Err(Stopped::Parse(e)),
        (Ok(()), None) => Ok(()),
    }
}

/// Lowercase hex of 32 bytes into `buf`, without allocating.
fn hex_into<'b>(bytes: &[u8], buf: &'b mut [u8; 64]) -> &'b str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().enumerate() {
        buf[2 * i] = DIGITS[(b >> 4) as usize];
        buf[2 * i + 1] = DIGITS[(b & 15) as usize];
    }
    std::str::from_utf8(buf).expect("hex digits")
}

/// Appends the placement set of a commit (schema 8): each element names the action that
/// placed the file, whose row holds its path, size and sha256; times are stored as offsets
/// from the set's smallest, which takes about half the digits.
pub(super) fn insert_commit_set(
    tx: &rusqlite::Transaction<'_>,
    path: &Path,
    operation_id: &str,
    bundle_path: &str,
    placements: &[(usize, crate::backend::types::Placed)],
) -> Result<()> {
    if placements.is_empty() {
        return Ok(());
    }
    let action_set: i64 = tx
        .query_row(
            "SELECT id FROM journal_action_sets WHERE operation_id = ?1",
            [operation_id],
            |r| r.get(0),
        )
        .map_err(|e| jerr(path, e))?;
    let mtime_base = placements
        .iter()
        .map(|(_, f)| f.mtime_ns)
        .min()
        .unwrap_or(0);
    let ctime_base = placements.iter().filter_map(|(_, f)| f.ctime_ns).min();
    debug_assert!(placements.windows(2).all(|w| w[0].0 < w[1].0));
    // Written straight from the placements into one buffer sized for them (a row is
    // typically under 64 bytes): no list of rows, no doubling, at a million files.
    let set = crate::model::Seq(
        placements,
        |(seq, f): &(usize, crate::backend::types::Placed)| {
            (
                *seq,
                f.mtime_ns.wrapping_sub(mtime_base),
                f.ino as i64,
                f.ctime_ns.zip(ctime_base).map(|(c, b)| c.wrapping_sub(b)),
            )
        },
    );
    let mut json = Vec::with_capacity(placements.len() * 64 + 2);
    serde_json::to_writer(&mut json, &set).map_err(|e| JournalError::Corrupt {
        path: path.to_path_buf(),
        message: format!("cannot record the placements of {operation_id}: {e}"),
    })?;
    let json = String::from_utf8(json).expect("JSON is UTF-8");
    tx.execute(
        "INSERT INTO journal_placement_sets (operation_id, bundle_path, placements, action_set, mtime_base, ctime_base)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![operation_id, bundle_path, json, action_set, mtime_base, ctime_base],
    )
    .map_err(|e| jerr(path, e))?;
    Ok(())
}

/// Appends one row of `journal_placement_sets` holding `placements` (none for an empty
/// list), in the transaction `tx`.
pub(super) fn insert_placement_set(
    tx: &rusqlite::Transaction<'_>,
    path: &Path,
    operation_id: &str,
    bundle_path: &str,
    placements: &[(String, Fingerprint)],
) -> Result<()> {
    if placements.is_empty() {
        return Ok(());
    }
    let set: Vec<SetEntry<'_>> = placements
        .iter()
        .map(|(p, fp)| {
            SetEntry(
                p.into(),
                fp.size as i64,
                fp.mtime_ns,
                fp.ino as i64,
                fp.sha256.hex().into(),
                fp.ctime_ns,
            )
        })
        .collect();
    let json = serde_json::to_string(&set).map_err(|e| JournalError::Corrupt {
        path: path.to_path_buf(),
        message: format!("cannot record the placements of {operation_id}: {e}"),
    })?;
    tx.execute(
        "INSERT INTO journal_placement_sets (operation_id, bundle_path, placements) VALUES (?1, ?2, ?3)",
        params![operation_id, bundle_path, json],
    )
    .map_err(|e| jerr(path, e))?;
    Ok(())
}

/// One file of a placement set: path, size, mtime_ns, inode, sha256, ctime_ns. Paths and
/// hashes are borrowed from the stored text unless JSON escapes had to be undone. Size and
/// inode are stored as SQLite integers (signed 64 bits), as `journal_placements` stored
/// them, so the `placements` view shows them alike. Sets written before ctime was recorded
/// have five elements: their ctime reads as `None`, and they vouch for nothing.
#[derive(serde::Serialize, serde::Deserialize)]
struct SetEntry<'a>(
    #[serde(borrow)] std::borrow::Cow<'a, str>,
    i64,
    i64,
    i64,
    #[serde(borrow)] std::borrow::Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")] Option<i64>,
);

/// A bundle path's placement sets, newest first (through `journal_placement_sets_latest`).
pub(super) const LATEST_PLACEMENT_SETS: &str = "SELECT id, action_set, mtime_base, ctime_base
     FROM journal_placement_sets WHERE bundle_path = ?1 ORDER BY id DESC";

/// The same in a journal of schemas 5-7, whose sets all have the schema 5 form.
const LATEST_PLACEMENT_SETS_V5: &str = "SELECT id FROM journal_placement_sets
     WHERE bundle_path = ?1 ORDER BY id DESC";

/// A bundle path's per-file placements (schemas 1-4), newest first (through
/// `journal_placements_latest`).
pub(super) const LATEST_PLACEMENTS: &str =
    "SELECT path, size, mtime_ns, ino, sha256 FROM journal_placements
     WHERE bundle_path = ?1 ORDER BY id DESC";
