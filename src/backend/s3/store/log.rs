//! The destination log of an s3 bundle path (SPEC §18): one immutable object per
//! operation that changed the destination, `<prefix>/.distributor/log/<seq>.json`, `seq`
//! 20 digits from 1, in the format of the local log ([`crate::backend::local::log`]).
//!
//! - **Writing** happens after the commit point and before the staging entry goes
//!   (`clean_up`, and `recover`'s `roll_forward`), so a missing entry is always the last
//!   one and `recover` writes it. The tail is found by one listing of `log/` from the
//!   entry the journal last saw there (`list_with_offset`, [`crate::backend::LogCursor`]);
//!   a cold start, or a remembered entry that is not there any more, lists the whole log
//!   and `quarantine/`. Then one PUT of `<tail + 1>.json` with `If-None-Match: *`. Refused
//!   (412): the object there is read; this operation's entry means it is written (a
//!   retried PUT); anything else means another writer held no valid lease, and the run
//!   stops with `concurrent_change` and writes no further entry through this store.
//! - A writer that may have written its entry before (`recover` finishing an operation
//!   whose own run stopped after the entry) first reads the newest entry (past
//!   quarantine records): this operation's means there is nothing to write. A bad entry
//!   there stops it: whether the operation is logged cannot be told.
//! - **Reading** lists `log/` and `quarantine/` and reads every entry, judged as the
//!   local log judges them (torn or unparsable, a `seq` other than its name, a number
//!   missing between two present entries), each bad one named by its key.
//! - **Quarantine** (`log --quarantine SEQ`, under the lease) copies the entry to
//!   `quarantine/<seq>.json` (create-once; `<seq>.<n>.json` when that is taken by other
//!   bytes), deletes it from `log/`, and appends an entry recording the move.
//!
//! Object stores have no owners (SPEC §17): no uid or mode is checked here; the bucket
//! policy in docs/operations.md keeps everyone else from writing `.distributor*` keys.
//!
//! Must never: overwrite an entry, delete one but by quarantine, or write an entry after a
//! refused create.

use super::operation::Finished;
use super::{S3Store, lock};
use crate::backend::local::log::{
    self, Bad, Entry, Log, MAX_ENTRY_BYTES, file_name, next_seq, out_of_range, seq_of,
};
use crate::backend::local::records::{LOG, QUARANTINE};
use crate::backend::s3::store_error;
use crate::error::{Error, Result};
use crate::failpoint;
use crate::record::StagedOperation;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::{Attribute, Attributes, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

/// An object in `log/` larger than this is not read: it is no entry.
const READ_LIMIT: u64 = MAX_ENTRY_BYTES as u64 * 4;

/// The bundle-relative key of entry `seq`.
fn entry_rel(seq: u64) -> String {
    format!("{LOG}/{}", file_name(seq))
}

/// The log's tail as a listing of the bundle's keys (bundle-relative) shows it, as
/// [`S3Store::log_tail`] counts it: the highest `<seq>.json` in `log/`, extended over the
/// numbers `quarantine/` holds (`<seq>.json`, `<seq>.<n>.json`) that follow on from it.
pub(super) fn listed_tail<'a>(rels: impl Iterator<Item = &'a String>) -> u64 {
    let (mut top, mut moved) = (0, Vec::new());
    for rel in rels {
        for dir in [LOG, QUARANTINE] {
            let Some(name) = rel.strip_prefix(dir).and_then(|r| r.strip_prefix('/')) else {
                continue;
            };
            match seq_in(dir, name) {
                Some(seq) if dir == LOG => top = top.max(seq),
                Some(seq) => moved.push(seq),
                None => {}
            }
        }
    }
    log::tail(top, &moved)
}

/// The seq of `name`, an object directly in `dir` (`log/` or `quarantine/`).
fn seq_in(dir: &str, name: &str) -> Option<u64> {
    let exact = name.len() == 25 || dir == QUARANTINE;
    (!name.contains('/') && exact)
        .then(|| seq_of(name))
        .flatten()
}

/// A listing of `log/` or `quarantine/`: each entry's seq and size, sorted, and the names
/// of entries numbered with a seq no writer makes.
type Listing = (Vec<(u64, u64)>, Vec<String>);

impl S3Store {
    /// The seqs named directly in `dir` (`log/` or `quarantine/`), sorted, with each
    /// object's size; with `after`, only the names after that seq's (one listing from
    /// there on, `start-after`).
    fn listed_seqs(&self, dir: &str, after: Option<u64>) -> Result<Vec<(u64, u64)>> {
        Ok(self.listing(dir, after)?.0)
    }

    /// [`S3Store::listed_seqs`], and the names in `dir` that are entries' names with a
    /// seq no writer makes (0, or at or above 10^19): bad entries, never numbered after.
    fn listing(&self, dir: &str, after: Option<u64>) -> Result<Listing> {
        let base = format!("{}/{dir}", self.prefix);
        let key = Key::from(base.clone());
        let client = self.client();
        let metas = match after {
            Some(seq) => {
                let offset = Key::from(format!("{base}/{}", file_name(seq)));
                self.send(
                    client
                        .list_with_offset(Some(&key), &offset)
                        .try_collect::<Vec<_>>(),
                )?
            }
            None => self.send(client.list(Some(&key)).try_collect::<Vec<_>>())?,
        }
        .map_err(|e| store_error("list", &self.shown(&format!("{dir}/")), e))?;
        let strip = format!("{base}/");
        let mut out: Vec<(u64, u64)> = metas
            .iter()
            .filter_map(|m| {
                let name = m.location.as_ref().strip_prefix(&strip)?;
                seq_in(dir, name).map(|seq| (seq, m.size))
            })
            .collect();
        out.sort();
        let unnumbered = (metas.iter())
            .filter_map(|m| m.location.as_ref().strip_prefix(&strip))
            .filter(|name| out_of_range(name))
            .map(|name| format!("{dir}/{name}"))
            .collect();
        Ok((out, unnumbered))
    }

    /// The newest seq of the log (0: empty). With a tail from the journal, one listing
    /// from that entry on, believed when it shows that entry; else the whole log and
    /// `quarantine/` (a quarantined number is not taken again).
    pub(super) fn log_tail(&self) -> Result<u64> {
        // Listed under the lease with the whole prefix, and kept since.
        if let Some(tail) = *lock(&self.log_listed) {
            return Ok(tail);
        }
        if let Some(known) = self.cursor.known().filter(|k| *k > 0) {
            let seen = self.listed_seqs(LOG, Some(known - 1))?;
            if seen.iter().any(|(s, _)| *s == known) {
                return Ok(seen.iter().map(|(s, _)| *s).max().unwrap_or(known));
            }
        }
        let logged = self.listed_seqs(LOG, None)?;
        let moved: Vec<u64> = self
            .listed_seqs(QUARANTINE, None)?
            .iter()
            .map(|(s, _)| *s)
            .collect();
        let top = logged.iter().map(|(s, _)| *s).max().unwrap_or(0);
        Ok(log::tail(top, &moved))
    }

    /// Entry `seq` read and judged: `None` when there is none, else the entry or why it
    /// is bad.
    fn read_entry(&self, seq: u64) -> Result<Option<std::result::Result<Entry, String>>> {
        Ok(match self.get_at_most(&entry_rel(seq), READ_LIMIT)? {
            None => None,
            Some(Err((size, _))) => Some(Err(format!("{size} bytes, longer than an entry"))),
            Some(Ok((bytes, _))) => Some(log::judge(&bytes, seq)),
        })
    }

    fn bad(&self, seq: u64, why: String) -> Bad {
        Bad {
            file: PathBuf::from(self.shown(&entry_rel(seq))),
            why,
        }
    }

    /// Whether the newest entry at or before `tail`, past quarantine records and numbers
    /// moved to quarantine, is operation `op`'s. A bad entry there is an error: whether
    /// `op` is logged cannot be told.
    fn logged_last(&self, op: &str, tail: u64) -> Result<bool> {
        // Only the numbers the log holds are read: a gap, however wide, costs nothing.
        let listed = self.listed_seqs(LOG, None)?;
        for seq in (listed.iter().map(|(s, _)| *s))
            .filter(|s| *s <= tail)
            .rev()
        {
            match self.read_entry(seq)? {
                None => {}
                Some(Ok(e)) if e.operation_id == op => return Ok(true),
                Some(Ok(e)) if e.quarantined_seq.is_some() => {}
                Some(Ok(_)) => return Ok(false),
                Some(Err(why)) => {
                    return Err(Error::Failed(format!(
                        "{}; so whether operation {op} is logged cannot be told, and its entry is not written: inspect it, then `distributor log --quarantine {seq}` moves it out of the log",
                        self.bad(seq, why)
                    )));
                }
            }
        }
        Ok(false)
    }

    /// Adds the entry of the committed operation `op` to the log (SPEC §18), unless it is
    /// there already: written after the commit point (`finished`: the state object as it
    /// stands now), before the staging entry goes; `fresh` when the operation was
    /// committed by this process just now.
    pub(super) fn log_operation(
        &self,
        op: &StagedOperation,
        finished: &Finished,
        fresh: bool,
    ) -> Result<()> {
        let id = &op.operation_id;
        self.refuse_after_refusal(id)?;
        let mut entry = Entry::of_operation(op);
        // The state object written, which holds each output's ETag besides the planned
        // post-state.
        entry.post_state_sha256 = Some(finished.state_sha256.clone());
        entry.post_state_etag = finished.state_etag.clone();
        entry.replaced_state = finished.replaced.clone();
        self.writable()?;
        let tail = self.log_tail()?;
        // Committed by this process just now (`fresh`), its entry cannot exist yet;
        // otherwise (`recover`) an earlier run may have written it before it stopped.
        if !fresh && self.logged_last(id, tail)? {
            self.cursor.set_reached(tail);
            return Ok(());
        }
        failpoint::hit("s3_before_log_entry");
        let next = next_seq(tail, &[], |seq| self.shown(&entry_rel(seq)))?;
        // The path list first: an entry never names one that is not there.
        if let Some(bytes) = crate::record::paths::of_operation(op) {
            entry.paths = Some(self.create_paths(id, next, bytes)?);
        }
        self.create_entry(entry, next).map(|_| ())
    }

    /// Creates entry `seq`'s path list `<prefix>/.distributor/log/<seq>.paths.jsonl` with
    /// `If-None-Match: *` (docs/operations.md, "Path lists"). Refused: a list already
    /// there with these very bytes is this operation's (a retried run); any other is
    /// `concurrent_change`.
    fn create_paths(
        &self,
        op: &str,
        seq: u64,
        bytes: Vec<u8>,
    ) -> Result<crate::record::paths::PathsRef> {
        let name = crate::record::paths::file_name(seq);
        let rel = format!("{LOG}/{name}");
        let sha256 = crate::hash::sha256_hex(&bytes);
        let lines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
        match self.put(&rel, bytes.clone(), PutMode::Create) {
            Ok(_) => {}
            Err(e) if e.is_concurrent_change() => {
                if self.get(&rel)?.is_none_or(|(b, _)| b != bytes) {
                    self.log_refused.store(true, Ordering::SeqCst);
                    return Err(Error::ConcurrentChange(format!(
                        "{} was written by another writer while this one held the lease; operation {op} is not logged and nothing further is written",
                        self.shown(&rel)
                    )));
                }
            }
            Err(e) => return Err(e),
        }
        Ok(crate::record::paths::PathsRef {
            file: name,
            sha256,
            lines,
        })
    }

    /// The path list `entry` names, believed only when its bytes have the sha256 the
    /// entry names; `None` when the entry names none.
    pub(super) fn read_entry_paths(
        &self,
        entry: &Entry,
    ) -> Result<Option<std::result::Result<Vec<crate::record::paths::PathLine>, String>>> {
        let Some(want) = &entry.paths else {
            return Ok(None);
        };
        let rel = format!("{LOG}/{}", want.file);
        Ok(Some(match self.get(&rel)? {
            None => Err(format!("{}: missing", self.shown(&rel))),
            Some((bytes, _)) => crate::record::paths::parse(&bytes, want),
        }))
    }

    /// After a refused entry nothing more is written to the log through this store.
    fn refuse_after_refusal(&self, op: &str) -> Result<()> {
        if self.log_refused.load(Ordering::SeqCst) {
            return Err(Error::ConcurrentChange(format!(
                "{}: a log entry of this run found its number taken by another writer; operation {op} is not logged and nothing further is written",
                self.bundle.display()
            )));
        }
        Ok(())
    }

    /// Creates entry `seq` from `entry` with `If-None-Match: *` (SPEC §18). Refused: the
    /// entry there is read; this operation's is this entry, written; anything else is
    /// `concurrent_change`, and nothing further is written.
    fn create_entry(&self, mut entry: Entry, seq: u64) -> Result<u64> {
        self.writable()?;
        entry.seq = seq;
        // Chained to the entry before it (docs/operations.md, "The hash chain"): by the
        // sha256 the journal kept when it wrote that entry, else by reading it.
        entry.prev_entry_sha256 = match seq {
            1 => None,
            _ => match self.cursor.known_sha(seq - 1) {
                Some(sha) => Some(sha),
                None => match self.get_at_most(&entry_rel(seq - 1), READ_LIMIT)? {
                    Some(Ok((bytes, _))) => Some(crate::hash::sha256_hex(&bytes)),
                    _ => None,
                },
            },
        };
        let bytes = log::render(&entry)?;
        let sha = crate::hash::sha256_hex(&bytes);
        let rel = entry_rel(seq);
        let key = self.key(&rel)?;
        let mut attributes = Attributes::new();
        attributes.insert(Attribute::ContentType, "application/json".into());
        let put = self.send(self.client().put_opts(
            &key,
            PutPayload::from(bytes),
            PutOptions {
                mode: PutMode::Create,
                attributes,
                ..Default::default()
            },
        ))?;
        match put {
            Ok(_) => {}
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {
                let theirs = self.read_entry(seq)?;
                let own = matches!(&theirs, Some(Ok(e)) if e.operation_id == entry.operation_id);
                if !own {
                    self.log_refused.store(true, Ordering::SeqCst);
                    return Err(Error::ConcurrentChange(format!(
                        "{} was written by another writer while this one held the lease (it holds no valid lease, or another did not); operation {} is not logged and nothing further is written",
                        self.shown(&rel),
                        entry.operation_id
                    )));
                }
            }
            Err(e) => return Err(store_error("write", &self.shown(&rel), e)),
        }
        self.cursor.set_reached_entry(seq, sha);
        if let Some(tail) = lock(&self.log_listed).as_mut() {
            *tail = (*tail).max(seq);
        }
        Ok(seq)
    }

    /// The whole log, read and judged: every entry of `log/` (read several at once),
    /// the numbers `quarantine/` holds.
    pub(super) fn read_destination_log(&self) -> Result<Log> {
        let moved: Vec<u64> = (self.listed_seqs(QUARANTINE, None)?.into_iter())
            .map(|(s, _)| s)
            .collect();
        let (listed, unnumbered) = self.listing(LOG, None)?;
        let mut log = Log {
            last_seq: (listed.iter().map(|(s, _)| *s))
                .chain(moved.iter().copied())
                .max()
                .unwrap_or(0),
            ..Log::default()
        };
        let read: Vec<(u64, Option<std::result::Result<Entry, String>>)> = self
            .send(
                futures_util::stream::iter(listed.iter().map(|&(seq, size)| async move {
                    if size > READ_LIMIT {
                        return Ok((
                            seq,
                            Some(Err(format!("{size} bytes, longer than an entry"))),
                        ));
                    }
                    let key = self.key(&entry_rel(seq)).map_err(|e| e.to_string())?;
                    let got = match self.client().get(&key).await {
                        Ok(g) => g.bytes().await,
                        Err(e) => Err(e),
                    };
                    match got {
                        Ok(bytes) => Ok((seq, Some(log::judge(&bytes, seq)))),
                        // Gone since the listing: quarantined meanwhile.
                        Err(object_store::Error::NotFound { .. }) => Ok((seq, None)),
                        Err(e) => {
                            Err(store_error("read", &self.shown(&entry_rel(seq)), e).to_string())
                        }
                    }
                }))
                .buffered(self.backend.concurrency)
                .try_collect::<Vec<_>>(),
            )?
            .map_err(Error::Failed)?;
        let mut good = Vec::new();
        let mut present = Vec::new();
        for (seq, got) in read {
            match got {
                None => continue,
                Some(Ok(e)) => good.push((seq, e)),
                Some(Err(why)) => log.bad.push(self.bad(seq, why)),
            }
            present.push(seq);
        }
        log.bad.extend(unnumbered.iter().map(|rel| Bad {
            file: PathBuf::from(self.shown(rel)),
            why: log::OUT_OF_RANGE.into(),
        }));
        log::sequence(&mut log, &present, good, moved, |seq| {
            PathBuf::from(self.shown(&entry_rel(seq)))
        });
        Ok(log)
    }

    /// `log --restart` (docs/operations.md, "The log's continuity"): under the lease, `by`
    /// is created after the log's tail and after `after`, the tail the journal in use knew.
    pub(super) fn restart_entry(&self, after: u64, by: Entry) -> Result<u64> {
        self.writable()?;
        self.refuse_after_refusal(&by.operation_id)?;
        let tail = self.log_tail()?.max(after);
        let next = next_seq(tail, &[], |s| self.shown(&entry_rel(s)))?;
        self.create_entry(by, next)
    }

    /// `log --quarantine SEQ` (SPEC §18, §22): under the lease, entry `seq` is copied to
    /// `quarantine/<seq>.json` (create-once; another copy already there holding other
    /// bytes: `<seq>.<n>.json`), deleted from `log/`, and `by` appended as the next seq
    /// (after every number `log/` and `quarantine/` hold), recording the move.
    pub(super) fn quarantine_entry(&self, seq: u64, mut by: Entry) -> Result<u64> {
        self.writable()?;
        self.refuse_after_refusal(&by.operation_id)?;
        let rel = entry_rel(seq);
        let Some((bytes, _)) = self.get(&rel)? else {
            return Err(Error::Usage(format!(
                "{} holds no entry {seq}",
                self.shown(&format!("{LOG}/"))
            )));
        };
        let mut n = 0;
        let to = loop {
            let to = match n {
                0 => format!("{QUARANTINE}/{}", file_name(seq)),
                n => format!("{QUARANTINE}/{seq:020}.{n}.json"),
            };
            match self.put(&to, bytes.to_vec(), PutMode::Create) {
                Ok(_) => break to,
                // A copy an interrupted quarantine made of these very bytes is this one.
                Err(e)
                    if e.is_concurrent_change()
                        && self.get(&to)?.is_some_and(|(b, _)| b == bytes) =>
                {
                    break to;
                }
                Err(e) if e.is_concurrent_change() => n += 1,
                Err(e) => return Err(e),
            }
        };
        // Its path list goes with it (`<to stem>.paths.jsonl`), copied before the entry
        // is deleted.
        let list = format!("{LOG}/{}", crate::record::paths::file_name(seq));
        if let Some((list_bytes, _)) = self.get(&list)? {
            let stem = to.strip_suffix(".json").unwrap_or(&to);
            let list_to = format!("{stem}.paths.jsonl");
            match self.put(&list_to, list_bytes.to_vec(), PutMode::Create) {
                Ok(_) => {}
                Err(e) if e.is_concurrent_change() => {}
                Err(e) => return Err(e),
            }
        }
        self.writable()?;
        self.delete(&rel)?;
        if self.get(&list)?.is_some() {
            self.delete(&list)?;
        }
        let logged = self.listed_seqs(LOG, None)?;
        let moved: Vec<u64> = self
            .listed_seqs(QUARANTINE, None)?
            .iter()
            .map(|(s, _)| *s)
            .collect();
        // Numbered after what stays in the log (and the numbers moved out that follow on
        // from it): a planted entry far above the log, quarantined, does not push the
        // numbering up.
        let top = logged.iter().map(|(s, _)| *s).max().unwrap_or(0);
        let next = next_seq(top, &moved, |s| self.shown(&entry_rel(s)))?;
        by.quarantined_seq = (seq < log::SEQ_LIMIT).then_some(seq);
        by.quarantined_to = Some(to);
        self.create_entry(by, next)
    }
}
