//! The destination log (SPEC §18): every operation that changes what a local destination
//! holds adds one immutable entry, `.distributor/log/<seq>.json` (in the bundle path; for
//! a releases destination in `releases.dir`), so the destination itself says who changed
//! it, from which host, in order, even when every journal is lost.
//!
//! An entry is created exclusively: its JSON is written to a fresh record file (0600) in
//! `log/`, fsynced, hard-linked to `<seq>.json` (`linkat` never replaces), the directory
//! fsynced, and the temporary name unlinked. When the name exists, the writer reads it:
//! the temporary file's own inode with two links is this operation's entry (a link that
//! succeeded and was reported as failing); anything else means another writer held no
//! valid lock, and the run stops with `concurrent_change`.
//!
//! Reading lists `log/` and believes an entry only when it is a trusted record (§17),
//! parses, names its own `seq`, and no number is missing before it (a missing oldest part
//! is allowed, and a number an operator quarantined is not missing). Anything else is a
//! *bad entry*, named by its file: while one exists, retention removes nothing.
//!
//! Must never: replace or rewrite an entry, write one through a symlink, or believe one
//! it did not check on the descriptor it read.

use super::records::{self, RecordError};
use crate::backend::types::Hold;
use crate::error::{Error, IoContext, Result};
use crate::failpoint;
use crate::fs::{Dir, Identity};
use crate::model::SourceRef;
use crate::record::StagedOperation;
use rustix::fs::FileType;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// `log_format_version` of every entry this build writes.
pub const LOG_FORMAT_VERSION: u32 = 1;
/// An entry is at most this long (no file lists: SPEC §18).
pub const MAX_ENTRY_BYTES: usize = 4096;
/// No writer numbers an entry at or above 10^19 (docs/operations.md, "The destination
/// log"): `seq` is 20 digits, and the next one can never wrap. A file named so is a bad
/// entry, never counted in the numbering.
pub const SEQ_LIMIT: u64 = 10_000_000_000_000_000_000;
/// Why an entry named with a seq no writer makes is bad.
pub(crate) const OUT_OF_RANGE: &str =
    "its seq is 0 or at or above 10^19, which no writer numbers an entry with";
/// At most this many removed releases are named by a prune's entry (their count is
/// always there).
pub const MAX_REMOVED_NAMED: usize = 50;
/// The commands whose entries change a destination's state (SPEC §18).
const STATE_CHANGING: &[&str] = &["publish", "rollback", "adopt", "promote", "recover"];
/// The prefix of a writer's temporary file in `log/`.
const TMP_PREFIX: &str = ".tmp-";

/// Counts of what an operation changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Files and links written.
    pub written: u64,
    /// Files and links deleted.
    pub deleted: u64,
    /// Outputs left as they were.
    pub unchanged: u64,
    /// Bytes written.
    pub bytes_written: u64,
}

/// Who finished an operation that `recover` completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveredBy {
    /// The actor running `recover`.
    pub actor: String,
    /// Its host.
    pub host: String,
    /// When, RFC 3339 UTC.
    pub at: String,
}

/// One log entry (`log_format_version: 1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Always [`LOG_FORMAT_VERSION`].
    pub log_format_version: u32,
    /// Its number: the file is `<seq>.json`, 20 digits.
    pub seq: u64,
    /// The operation.
    pub operation_id: String,
    /// `publish`, `rollback`, `adopt`, `prune`, `quarantine`, ...
    pub command: String,
    /// The operation's decision.
    pub decision: String,
    /// Pipeline id.
    pub pipeline_id: String,
    /// Destination id.
    pub destination_id: String,
    /// Who ran it.
    pub actor: String,
    /// Why (`--reason`), when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// On which host.
    pub host: String,
    /// The journal that recorded it (not written yet by this build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_id: Option<String>,
    /// The source published (or activated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceRef>,
    /// A takeover's previous owner (`pipeline/destination`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_owner: Option<String>,
    /// The source that was there before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_source: Option<SourceRef>,
    /// sha256 of the state before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_state_sha256: Option<String>,
    /// sha256 of the state after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_state_sha256: Option<String>,
    /// Object stores: the ETag of the state object after, as the store returned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_state_etag: Option<String>,
    /// Object stores: a state object that `recover`, rolling the operation forward,
    /// found holding neither its pre- nor its post-state and overwrote (SPEC §17): its
    /// sha256, its ETag and where its copy is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_state: Option<crate::backend::ReplacedState>,
    /// What changed.
    #[serde(default)]
    pub counts: Counts,
    /// When the operation started.
    pub started_at: String,
    /// When it passed its commit point (for an entry `recover` or the migration wrote:
    /// when the entry was written, or the activation time the old log kept).
    pub committed_at: String,
    /// Releases: the release made active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_activated: Option<String>,
    /// Releases: the release active before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_deactivated: Option<String>,
    /// A rollback: the operation whose activation it undid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undoes: Option<String>,
    /// A stage (`publish --stage`, SPEC §19): the release built and held for promote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_staged: Option<String>,
    /// A stage: the release active when it was built (none: no release was active); a
    /// promote activates the staged release only while this one is still active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_against: Option<String>,
    /// Releases: the device and inode of the release directory this entry activated or
    /// staged, as distributor made or verified it (docs/operations.md, "Release
    /// identity"): a name that holds another directory later is `release_moved`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_identity: Option<crate::fs::Identity>,
    /// A rollback's holds: the digests publishing which is the conflict `rolled_back`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<Hold>,
    /// A prune: the releases removed (at most [`MAX_REMOVED_NAMED`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_releases: Vec<String>,
    /// A prune: how many releases were removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_count: Option<u64>,
    /// `log --quarantine`: the seq moved out of the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined_seq: Option<u64>,
    /// `log --quarantine`: where it went, relative to the record directory's parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined_to: Option<String>,
    /// `log --restart`: the last seq the journal that ran it had seen in this log (0:
    /// none). The numbers missing before this entry are the gap it records, not a bad
    /// entry (docs/operations.md, "The log's continuity").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_after: Option<u64>,
    /// Set when the entry was made from a line of `.distributor-activations.log`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrated_from: Option<String>,
    /// Set when `recover` wrote the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_by: Option<RecoveredBy>,
    /// The sha256 of the previous entry's exact bytes (docs/operations.md, "The hash
    /// chain"): null for seq 1, where the previous number is missing (quarantined, or
    /// before a restart), and absent in entries written before it was kept.
    #[serde(default)]
    pub prev_entry_sha256: Option<String>,
    /// Its path list (`<seq>.paths.jsonl`: docs/operations.md, "Path lists"): file name,
    /// sha256 and line count; absent when the operation changed no path, and in entries
    /// written before path lists were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<crate::record::paths::PathsRef>,
    /// The sha256 of this entry's bytes as they were read; never stored.
    #[serde(skip)]
    pub stored_sha256: Option<String>,
}

impl Entry {
    /// An entry with only who, what and when (seq 0: the writer numbers it).
    pub fn new(operation_id: &str, command: &str, decision: &str) -> Entry {
        let now = crate::clock::now();
        Entry {
            log_format_version: LOG_FORMAT_VERSION,
            seq: 0,
            operation_id: operation_id.to_string(),
            command: command.to_string(),
            decision: decision.to_string(),
            pipeline_id: String::new(),
            destination_id: String::new(),
            actor: default_actor(),
            reason: None,
            host: host(),
            journal_id: None,
            source: None,
            previous_owner: None,
            previous_source: None,
            pre_state_sha256: None,
            post_state_sha256: None,
            post_state_etag: None,
            replaced_state: None,
            counts: Counts::default(),
            started_at: now.clone(),
            committed_at: now,
            release_activated: None,
            release_deactivated: None,
            undoes: None,
            release_staged: None,
            staged_against: None,
            release_identity: None,
            held: Vec::new(),
            removed_releases: Vec::new(),
            removed_count: None,
            quarantined_seq: None,
            quarantined_to: None,
            restarted_after: None,
            migrated_from: None,
            recovered_by: None,
            prev_entry_sha256: None,
            paths: None,
            stored_sha256: None,
        }
    }

    /// The entry of the committed operation `op` (its staging record: who, what, from
    /// which source, the counts of its actions). When this process is `recover`, the
    /// operation's own actor and host stay, and `recovered_by` says who finished it.
    pub fn of_operation(op: &StagedOperation) -> Entry {
        use crate::record::ActionKind::*;
        let o = &op.origin;
        let mut e = Entry::new(&op.operation_id, &o.command, o.decision.as_str());
        e.pipeline_id = o.pipeline_id.clone();
        e.destination_id = op.destination_id.clone();
        if let Some(recovering) = recovered_by() {
            e.recovered_by = Some(recovering);
        }
        e.actor = o.actor.clone();
        e.reason = o.reason.clone();
        if let Some(h) = &o.host {
            e.host = h.clone();
        }
        e.journal_id = o.journal_id.clone();
        e.source = Some(o.source.clone());
        e.previous_owner = o.previous_owner.clone();
        e.previous_source = o.previous_source.clone();
        e.pre_state_sha256 = op.pre_state_sha256.clone();
        e.post_state_sha256 = Some(op.post_state_sha256.clone());
        e.started_at = o.started_at.clone();
        e.counts.unchanged = o.outputs_unchanged.unwrap_or(0);
        for a in &op.actions {
            match a.kind {
                FileCreate | FileOverwrite | LinkCreate | LinkOverwrite => {
                    e.counts.written += 1;
                    e.counts.bytes_written += a.size.unwrap_or(0);
                }
                FileDelete | LinkDelete => e.counts.deleted += 1,
            }
        }
        e
    }

    /// Whether it records a change of the destination's state (SPEC §18): publish,
    /// rollback, adopt, promote and recover entries do; prune and quarantine entries, and
    /// any command this build does not know, do not.
    pub fn changes_state(&self) -> bool {
        STATE_CHANGING.contains(&self.command.as_str())
    }

    /// The entry in words, for messages: its number, command, who, where and when.
    pub fn describe(&self) -> String {
        format!(
            "entry {} ({} by {} on {}, committed {})",
            self.seq, self.command, self.actor, self.host, self.committed_at
        )
    }

    /// The owner that made it, `pipeline/destination` (`None` when not recorded).
    pub fn owner(&self) -> Option<String> {
        (!self.pipeline_id.is_empty())
            .then(|| format!("{}/{}", self.pipeline_id, self.destination_id))
    }
}

/// The file name of entry `seq`.
pub fn file_name(seq: u64) -> String {
    format!("{seq:020}.json")
}

/// The seq a file name in `log/` (or `quarantine/`) stands for: 1 to 10^19 - 1.
pub(crate) fn seq_of(name: &str) -> Option<u64> {
    let digits = name.get(..20)?;
    let rest = &name[20..];
    (digits.bytes().all(|b| b.is_ascii_digit()) && (rest == ".json" || rest.starts_with('.')))
        .then(|| digits.parse().ok())
        .flatten()
        .filter(|s| (1..SEQ_LIMIT).contains(s))
}

/// Whether `name` in `log/` is named as an entry (20 digits, `.json`) with a seq no writer
/// makes (0, or at or above 10^19): a bad entry, which the numbering never counts.
pub(crate) fn out_of_range(name: &str) -> bool {
    name.len() == 25
        && name.ends_with(".json")
        && name.bytes().take(20).all(|b| b.is_ascii_digit())
        && seq_of(name).is_none()
}

/// The log's tail: `top`, the highest seq `log/` names, extended over the numbers
/// `quarantine/` holds (`moved`) that follow on from it.
pub(crate) fn tail(top: u64, moved: &[u64]) -> u64 {
    let moved: std::collections::BTreeSet<u64> = moved.iter().copied().collect();
    let mut tail = top;
    while moved.contains(&(tail + 1)) {
        tail += 1;
    }
    tail
}

/// The seq the next entry takes: after `top`, the highest seq `log/` names, and after
/// every number `quarantine/` holds (`moved`) that follows on from it, so a number moved
/// out is never taken again, while one far above the log (a planted entry, quarantined)
/// does not push the numbering up to it. Refused at 10^19, naming the entry (`shown`).
pub(crate) fn next_seq(top: u64, moved: &[u64], shown: impl Fn(u64) -> String) -> Result<u64> {
    let tail = tail(top, moved);
    if tail + 1 >= SEQ_LIMIT {
        return Err(Error::Failed(format!(
            "{} leaves no seq below 10^19 for the next entry; an entry numbered so high was not made by distributor: inspect it, then `distributor log --quarantine {tail}` moves it out of the log",
            shown(tail)
        )));
    }
    Ok(tail + 1)
}

/// This host's name, as log entries and lock records give it.
pub fn host() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

fn default_actor() -> String {
    format!("uid {}", rustix::process::getuid().as_raw())
}

/// Set by `recover`: the entries this process writes for operations it finishes carry
/// `recovered_by`.
static RECOVERING: std::sync::OnceLock<RecoveredBy> = std::sync::OnceLock::new();

/// Marks this process as `recover`, run by `actor`.
pub fn set_recovering(actor: &str) {
    let _ = RECOVERING.set(RecoveredBy {
        actor: actor.to_string(),
        host: host(),
        at: crate::clock::now(),
    });
}

fn recovered_by() -> Option<RecoveredBy> {
    RECOVERING.get().cloned().map(|mut r| {
        r.at = crate::clock::now();
        r
    })
}

/// A bad entry (SPEC §18): its file and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bad {
    /// The entry's file (or the log directory, when that is not trusted).
    pub file: PathBuf,
    /// Why, in words.
    pub why: String,
}

impl Bad {
    /// Whether it is an entry (`<seq>.json`), which `log --quarantine` can move out of the
    /// log, not the log or record directory itself.
    fn is_entry(&self) -> bool {
        self.file.extension().is_some_and(|e| e == "json")
    }
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.is_entry() {
            "bad log entry"
        } else {
            "unreadable log"
        };
        write!(f, "{what} {}: {}", self.file.display(), self.why)
    }
}

/// The log as read: its good entries, oldest first, and its bad ones.
#[derive(Debug, Clone, Default)]
pub struct Log {
    /// Believed entries, by seq.
    pub entries: Vec<Entry>,
    /// Bad entries, by file name.
    pub bad: Vec<Bad>,
    /// The highest seq any file in `log/` or `quarantine/` is named by (0: none).
    pub last_seq: u64,
}

impl Log {
    /// Whether an entry of operation `op` exists.
    pub fn names_operation(&self, op: &str) -> bool {
        self.entries.iter().any(|e| e.operation_id == op)
    }

    /// Its last state-changing entry (SPEC §18), for `verify`'s `log_mismatch`; `None`
    /// when there is none, or when a bad entry is there (it may be that very entry: the
    /// bad entry is reported instead).
    pub fn last_state_change(&self) -> Option<crate::backend::LoggedOperation> {
        if !self.bad.is_empty() {
            return None;
        }
        let changes = || self.entries.iter().filter(|e| e.changes_state());
        let last = changes().next_back()?;
        Some(crate::backend::LoggedOperation {
            operation_id: last.operation_id.clone(),
            entry: last.describe(),
            logged: changes().map(|e| e.operation_id.clone()).collect(),
        })
    }

    /// Where the hash chain breaks (docs/operations.md, "The hash chain"), if it does: the
    /// first entry whose `prev_entry_sha256` is not the sha256 of the entry before it as
    /// read, so the entry before it was changed after it was written (`log_chain_broken`).
    /// Only entries that carry the field are judged; a missing number is a bad entry of
    /// its own.
    pub fn chain_broken(&self) -> Option<String> {
        self.entries.windows(2).find_map(|w| {
            let (a, b) = (&w[0], &w[1]);
            let said = b.prev_entry_sha256.as_deref()?;
            let is = a.stored_sha256.as_deref()?;
            (b.seq == a.seq + 1 && said != is).then(|| {
                format!(
                    "entry {} says the entry before it had sha256 {said}, but entry {} is {is}: entry {} was changed after it was written",
                    b.seq, a.seq, a.seq
                )
            })
        })
    }

    /// The bad entries in one sentence, `None` when there are none.
    pub fn bad_message(&self) -> Option<String> {
        if self.bad.is_empty() {
            return None;
        }
        let list: Vec<String> = self.bad.iter().map(|b| b.to_string()).collect();
        if !self.bad.iter().any(Bad::is_entry) {
            // The directory itself: its message says what to do.
            return Some(list.join("; "));
        }
        Some(format!(
            "{}; inspect it, then `distributor log --quarantine SEQ` moves it out of the log",
            list.join("; ")
        ))
    }
}

/// Maps a record error to distributor's error.
fn record_err(e: RecordError, action: &'static str, path: PathBuf) -> Error {
    match e {
        RecordError::Untrusted(u) => Error::Untrusted(u.message()),
        RecordError::Io(e) => Error::io(action, path, e),
    }
}

/// The log directory below `base` (which holds `.distributor/`), checked; `None` when
/// there is none yet.
fn open_log_dir(base: &Dir) -> std::result::Result<Option<Dir>, Bad> {
    let bad = |path: PathBuf, why: String| Bad { file: path, why };
    let rec = match base.open_record_dir(records::RECORD_DIR) {
        Ok(d) => d,
        Err(RecordError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(RecordError::Io(e)) => return Err(bad(base.join(records::RECORD_DIR), e.to_string())),
        Err(RecordError::Untrusted(u)) => return Err(bad(u.path.clone(), u.message())),
    };
    match rec.open_record_dir("log") {
        Ok(d) => Ok(Some(d)),
        Err(RecordError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(RecordError::Io(e)) => Err(bad(base.join(records::LOG), e.to_string())),
        Err(RecordError::Untrusted(u)) => Err(bad(u.path.clone(), u.message())),
    }
}

/// The seqs the files in `quarantine/` stand for.
fn quarantined_files(base: &Dir) -> Vec<u64> {
    let Ok(rec) = base.open_record_dir(records::RECORD_DIR) else {
        return Vec::new();
    };
    let Ok(q) = rec.open_record_dir("quarantine") else {
        return Vec::new();
    };
    (q.entries().unwrap_or_default().iter())
        .filter_map(|(n, _)| seq_of(n))
        .collect()
}

/// Reads the log below the bundle path `base`, opened here without following a symlink:
/// the outer error is the opening's (callers judge an absent or unsafe `base` their own
/// way), the inner the log's.
pub fn read_below(base: &Path) -> std::io::Result<Result<Log>> {
    Ok(read(&Dir::open_path(base)?))
}

/// Reads the log below `base` (SPEC §18), judging every entry.
pub fn read(base: &Dir) -> Result<Log> {
    let moved = quarantined_files(base);
    let mut log = Log {
        last_seq: moved.iter().copied().max().unwrap_or(0),
        ..Log::default()
    };
    let dir = match open_log_dir(base) {
        Ok(Some(d)) => d,
        Ok(None) => return Ok(log),
        Err(b) => {
            log.bad.push(b);
            return Ok(log);
        }
    };
    let listing = dir.entries().ctx("list", dir.path())?;
    let mut names: Vec<(u64, String)> = Vec::new();
    let mut temps: Vec<Identity> = Vec::new();
    let mut out_of_range_names = Vec::new();
    for (name, kind) in listing {
        if let Some(seq) = seq_of(&name).filter(|_| name.len() == 25) {
            names.push((seq, name));
        } else if out_of_range(&name) {
            out_of_range_names.push(name);
        } else if name.starts_with(TMP_PREFIX)
            && kind == FileType::RegularFile
            && let Ok(st) = dir.stat(&name)
        {
            temps.push(Identity::of(&st));
        }
    }
    names.sort();
    log.last_seq = log.last_seq.max(names.last().map_or(0, |n| n.0));
    let mut good: Vec<(u64, Entry)> = Vec::new();
    let mut present: Vec<u64> = Vec::new();
    for (seq, name) in &names {
        present.push(*seq);
        match read_entry(&dir, name, *seq, &temps) {
            Ok(e) => good.push((*seq, e)),
            Err(why) => log.bad.push(Bad {
                file: dir.join(name),
                why,
            }),
        }
    }
    log.bad
        .extend(out_of_range_names.into_iter().map(|name| Bad {
            file: dir.join(&name),
            why: OUT_OF_RANGE.into(),
        }));
    sequence(&mut log, &present, good, moved, |seq| {
        dir.join(&file_name(seq))
    });
    Ok(log)
}

/// Puts what a reading of `log/` found in order (SPEC §18): `present` is every seq named
/// there (sorted), `good` the entries believed so far, `moved` the seqs `quarantine/`
/// holds. An entry is out of sequence when a number is missing between it and the
/// present entry before it that no quarantine entry names and `quarantine/` does not
/// hold; it goes to `log.bad`, named by `file`. The bad entries end sorted by file.
pub(crate) fn sequence(
    log: &mut Log,
    present: &[u64],
    good: Vec<(u64, Entry)>,
    moved: Vec<u64>,
    file: impl Fn(u64) -> PathBuf,
) {
    let quarantined: std::collections::BTreeSet<u64> = (good.iter())
        .filter_map(|(_, e)| e.quarantined_seq)
        .chain(moved)
        .collect();
    // A restart entry records the numbers missing before it (`log --restart`).
    let restarts: std::collections::BTreeSet<u64> = (good.iter())
        .filter(|(_, e)| e.restarted_after.is_some())
        .map(|(seq, _)| *seq)
        .collect();
    let mut gapped = std::collections::BTreeSet::new();
    for w in present.windows(2) {
        let (p, q) = (w[0], w[1]);
        let missing = q - p - 1;
        let covered = quarantined.range(p + 1..q).count() as u64;
        if missing > covered && !restarts.contains(&q) {
            gapped.insert(q);
        }
    }
    for (seq, e) in good {
        if gapped.contains(&seq) {
            log.bad.push(Bad {
                file: file(seq),
                why: "out of sequence: a number is missing before it".into(),
            });
        } else {
            log.entries.push(e);
        }
    }
    log.bad.sort_by(|a, b| a.file.cmp(&b.file));
}

/// Reads and judges one entry; the error says why it is bad.
fn read_entry(
    dir: &Dir,
    name: &str,
    seq: u64,
    temps: &[Identity],
) -> std::result::Result<Entry, String> {
    // Opened without following, never blocking; anything but a regular file is bad.
    let (f, st) = dir.open_file(name).map_err(|e| e.to_string())?;
    // A writer that stopped between the link and the unlink of its temporary name leaves
    // the entry with two links: believed when the other is that temporary file in `log/`
    // (the same inode), a record like it. Any other link is not.
    let mut judged = st;
    #[allow(clippy::unnecessary_cast)]
    if st.st_nlink as u64 == 2 && temps.contains(&Identity::of(&st)) {
        judged.st_nlink = 1;
    }
    records::check(&judged, records::Kind::File, &dir.join(name)).map_err(|u| u.message())?;
    let mut bytes = Vec::new();
    f.take(MAX_ENTRY_BYTES as u64 * 4)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    #[allow(clippy::unnecessary_cast)]
    if bytes.len() as u64 != st.st_size as u64 {
        return Err(format!("{} bytes, longer than an entry", st.st_size));
    }
    judge(&bytes, seq)
}

/// Judges the bytes of the entry named `<seq>.json`: an entry of this format that names
/// its own seq, or why it is bad.
pub(crate) fn judge(bytes: &[u8], seq: u64) -> std::result::Result<Entry, String> {
    let mut e: Entry =
        serde_json::from_slice(bytes).map_err(|e| format!("torn or not an entry ({e})"))?;
    e.stored_sha256 = Some(crate::hash::sha256_hex(bytes));
    if e.log_format_version != LOG_FORMAT_VERSION {
        return Err(format!(
            "log_format_version {}, not {LOG_FORMAT_VERSION}",
            e.log_format_version
        ));
    }
    if e.seq != seq {
        return Err(format!("out of sequence: it says seq {}", e.seq));
    }
    Ok(e)
}

/// The log directory below `base`, created when missing (records, exact modes).
fn make_log_dir(base: &Dir) -> Result<Dir> {
    let rec = (base.make_record_dir(records::RECORD_DIR))
        .map_err(|e| record_err(e, "create", base.join(records::RECORD_DIR)))?;
    rec.make_record_dir("log")
        .map_err(|e| record_err(e, "create", base.join(records::LOG)))
}

/// Appends `entry` to the log below `base` as the next seq; returns the seq. Needs the
/// destination lock. The next seq is found from the names in `log/` and `quarantine/`
/// alone: no entry is read.
pub fn append(base: &Dir, entry: Entry) -> Result<u64> {
    let top = highest_name(base)?.map_or(0, |(seq, _)| seq);
    let next = next_seq(top, &quarantined_files(base), |seq| {
        base.join(records::LOG)
            .join(file_name(seq))
            .display()
            .to_string()
    })?;
    append_at(base, entry, next)
}

/// The temporary name the entry of operation `op` is written under.
fn tmp_name(op: &str) -> String {
    format!("{TMP_PREFIX}{}", op.replace('/', "_"))
}

/// Removes what a writer of operation `op`'s entry that stopped between the link and the
/// unlink left (its temporary name, a second link of the entry). Needs the lock.
pub fn tidy(base: &Dir, op: &str) -> Result<()> {
    let Ok(Some(dir)) = open_log_dir(base) else {
        return Ok(());
    };
    let tmp = tmp_name(op);
    match dir.stat_opt(&tmp).ctx("stat", dir.join(&tmp))? {
        Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
            dir.unlink(&tmp).ctx("remove", dir.join(&tmp))?;
            dir.sync().ctx("fsync", dir.path())
        }
        _ => Ok(()),
    }
}

/// The highest `<seq>.json` in `log/`, if any.
fn highest_name(base: &Dir) -> Result<Option<(u64, Dir)>> {
    let Ok(Some(dir)) = open_log_dir(base) else {
        return Ok(None);
    };
    let listing = dir.entries().ctx("list", dir.path())?;
    let top = (listing.iter())
        .filter(|(n, _)| n.len() == 25)
        .filter_map(|(n, _)| seq_of(n))
        .max();
    Ok(top.map(|seq| (seq, dir)))
}

/// The seq of the last entry of the log below `base` (0: none), counting the numbers
/// moved to quarantine that follow on from it: what the next writer numbers after.
pub fn tail_now(base: &Dir) -> Result<u64> {
    let top = highest_name(base)?.map_or(0, |(seq, _)| seq);
    Ok(tail(top, &quarantined_files(base)))
}

/// `distributor log --restart`: appends `entry` after the log's tail and after `after`
/// (the tail the journal in use knew), so no number a journal saw is taken again. Needs
/// the lock.
pub fn append_after(base: &Dir, entry: Entry, after: u64) -> Result<u64> {
    let next = next_seq(tail_now(base)?.max(after), &[], |seq| {
        base.join(records::LOG)
            .join(file_name(seq))
            .display()
            .to_string()
    })?;
    append_at(base, entry, next)
}

/// Whether the newest entry of the log below `base` is operation `op`'s (a missing entry
/// is always the last one: SPEC §18). Reads that one entry only.
pub fn last_is(base: &Dir, op: &str) -> Result<bool> {
    let Some((seq, dir)) = highest_name(base)? else {
        return Ok(false);
    };
    let temps: Vec<Identity> = (dir.stat(&tmp_name(op)).ok().iter())
        .map(Identity::of)
        .collect();
    Ok(read_entry(&dir, &file_name(seq), seq, &temps).is_ok_and(|e| e.operation_id == op))
}

/// Refuses, before the commit point, an operation whose log entry could not be written
/// within [`MAX_ENTRY_BYTES`] (docs/operations.md, "The destination log"): its entry as
/// [`Entry::of_operation`] makes it, with every field filled after the commit point at
/// its longest (the highest seq, an object store's state ETag and replaced state, a
/// releases activation's names and hold). Only `recovered_by` is left out: `recover`
/// shortens its own actor there to fit ([`render`]). Otherwise a publication would pass
/// its commit point and then never get its entry, and every later one would wait for a
/// `recover` that can never finish.
pub fn check_fits(op: &StagedOperation) -> Result<()> {
    let mut e = Entry::of_operation(op);
    e.recovered_by = None;
    e.seq = SEQ_LIMIT - 1;
    let hex = "0".repeat(64);
    let release = uuid::Uuid::nil().to_string();
    e.post_state_sha256 = Some(hex.clone());
    e.prev_entry_sha256 = Some(hex.clone());
    e.paths = Some(crate::record::paths::PathsRef {
        file: crate::record::paths::file_name(SEQ_LIMIT - 1),
        sha256: hex.clone(),
        lines: u64::MAX,
    });
    if op.store.is_some() {
        e.post_state_etag = Some(format!("\"{hex}-10000\""));
        e.replaced_state = Some(crate::backend::ReplacedState {
            sha256: hex.clone(),
            etag: e.post_state_etag.clone(),
            copied_to: format!(
                "{}/.distributor/replaced/{}.json",
                op.bundle_path.display(),
                op.operation_id
            ),
        });
    }
    if op.releases.is_some() {
        e.release_activated = Some(release.clone());
        e.release_deactivated = Some(release.clone());
        e.release_staged = Some(release.clone());
        e.staged_against = Some(release.clone());
        e.undoes = Some(release);
        e.held = vec![Hold {
            owner: format!("{}/{}", e.pipeline_id, e.destination_id),
            digest: format!("sha256:{hex}"),
        }];
    }
    let len = serde_json::to_vec_pretty(&e)?.len();
    if len > MAX_ENTRY_BYTES {
        return Err(Error::Usage(format!(
            "the destination log entry of this {} would be {len} bytes, more than the {MAX_ENTRY_BYTES} an entry may hold; nothing was written: shorten what it records (--actor, the source id, the pipeline and destination ids)",
            op.origin.command
        )));
    }
    Ok(())
}

/// The bytes of `entry` as stored: pretty JSON, at most [`MAX_ENTRY_BYTES`]. An entry
/// `recover` writes keeps the operation's own facts whole and shortens only the actor in
/// its `recovered_by` to fit.
pub(crate) fn render(entry: &Entry) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(entry)?;
    if bytes.len() > MAX_ENTRY_BYTES
        && let Some(by) = &entry.recovered_by
    {
        let over = bytes.len() - MAX_ENTRY_BYTES;
        let mut short = entry.clone();
        let keep = serde_json::to_string(&by.actor)?
            .len()
            .saturating_sub(over + 8);
        let mut actor: String = by.actor.chars().take(keep / 6).collect();
        actor.push_str("...");
        if let Some(r) = short.recovered_by.as_mut() {
            r.actor = actor;
        }
        bytes = serde_json::to_vec_pretty(&short)?;
    }
    if bytes.len() > MAX_ENTRY_BYTES {
        return Err(Error::Failed(format!(
            "log entry of operation {} is {} bytes, more than {MAX_ENTRY_BYTES}",
            entry.operation_id,
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Creates entry `seq` from `entry` (SPEC §18): a fsynced temporary record file, linked
/// to `<seq>.json`, the directory fsynced, the temporary name removed. An existing
/// `<seq>.json` that is not this writer's own file is `concurrent_change`.
pub fn append_at(base: &Dir, entry: Entry, seq: u64) -> Result<u64> {
    append_chained(base, entry, seq, None).map(|(seq, _)| seq)
}

/// [`append`], telling `cursor` the seq and sha256 of the entry written, which the
/// journal keeps ([`crate::backend::LogCursor::set_reached`]).
pub fn append_for(
    base: &Dir,
    entry: Entry,
    paths: Option<Vec<u8>>,
    cursor: &crate::backend::LogCursor,
) -> Result<u64> {
    let top = highest_name(base)?.map_or(0, |(seq, _)| seq);
    let next = next_seq(top, &quarantined_files(base), |seq| {
        base.join(records::LOG)
            .join(file_name(seq))
            .display()
            .to_string()
    })?;
    let (seq, sha) = append_chained(base, entry, next, paths)?;
    cursor.set_reached_entry(seq, sha);
    Ok(seq)
}

/// The sha256 of entry `seq`'s exact bytes in `dir`, when it is there and a record
/// distributor wrote; `None` otherwise (seq 0, a number quarantined or missing).
fn entry_sha(dir: &Dir, seq: u64) -> Option<String> {
    if seq == 0 {
        return None;
    }
    read_entry(dir, &file_name(seq), seq, &[])
        .ok()?
        .stored_sha256
}

/// Creates entry `seq`, chained to the entry before it ([`Entry::prev_entry_sha256`]);
/// returns its seq and the sha256 of its bytes.
fn append_chained(
    base: &Dir,
    mut entry: Entry,
    seq: u64,
    paths: Option<Vec<u8>>,
) -> Result<(u64, String)> {
    let dir = make_log_dir(base)?;
    entry.seq = seq;
    entry.prev_entry_sha256 = entry_sha(&dir, seq - 1);
    // The path list first: an entry never names one that is not there.
    if let Some(bytes) = paths {
        entry.paths = Some(create_paths(&dir, &entry.operation_id, seq, &bytes)?);
    }
    let bytes = render(&entry)?;
    let sha = crate::hash::sha256_hex(&bytes);
    // One name per operation: a writer that stopped (a crash) left it, and the next
    // writer of the entry (`recover`, under the lock) replaces it.
    let tmp = tmp_name(&entry.operation_id);
    let name = file_name(seq);
    let path = dir.join(&name);
    let _ = dir.unlink(&tmp);
    let written = (|| -> std::io::Result<Identity> {
        let mut f = dir.create_record_file(&tmp)?;
        failpoint::io("io_log_write")?;
        f.write_all(&bytes)?;
        dir.sync_file(&f, &tmp)?;
        Ok(Identity::of(&rustix::fs::fstat(&f)?))
    })();
    let mine = match written {
        Ok(id) => id,
        Err(e) => {
            let _ = dir.unlink(&tmp);
            return Err(Error::io("write log entry", path, e));
        }
    };
    failpoint::hit("before_log_link");
    match dir.hard_link(&tmp, &dir, &name) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let theirs = dir.stat(&name).ctx("stat", &path)?;
            #[allow(clippy::unnecessary_cast)]
            let own = Identity::of(&theirs) == mine && theirs.st_nlink as u64 == 2;
            if !own {
                let _ = dir.unlink(&tmp);
                return Err(Error::ConcurrentChange(format!(
                    "{} was written by another writer while this one held the lock (it holds no valid lock, or another did not); operation {} is not logged and nothing further is written",
                    path.display(),
                    entry.operation_id
                )));
            }
        }
        Err(e) => {
            let _ = dir.unlink(&tmp);
            return Err(Error::io("link log entry", path, e));
        }
    }
    dir.sync().ctx("fsync", dir.path())?;
    dir.unlink(&tmp).ctx("remove", dir.join(&tmp))?;
    Ok((seq, sha))
}

/// Creates entry `seq`'s path list (docs/operations.md, "Path lists") in the log
/// directory `dir` for operation `op`, once: a fsynced temporary record file linked to
/// `<seq>.paths.jsonl`, the directory fsynced. A list already there with these very bytes
/// is this operation's, written by a run that stopped before its entry; any other is
/// `concurrent_change`.
fn create_paths(
    dir: &Dir,
    op: &str,
    seq: u64,
    bytes: &[u8],
) -> Result<crate::record::paths::PathsRef> {
    let name = crate::record::paths::file_name(seq);
    let path = dir.join(&name);
    let tmp = format!("{TMP_PREFIX}paths-{}", op.replace('/', "_"));
    let _ = dir.unlink(&tmp);
    let written = (|| -> std::io::Result<()> {
        let mut f = dir.create_record_file(&tmp)?;
        f.write_all(bytes)?;
        dir.sync_file(&f, &tmp)
    })();
    if let Err(e) = written {
        let _ = dir.unlink(&tmp);
        return Err(Error::io("write log path list", path, e));
    }
    match dir.hard_link(&tmp, dir, &name) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let same = read_record_bytes(dir, &name, bytes.len() as u64 + 1)
                .is_ok_and(|theirs| theirs == bytes);
            if !same {
                let _ = dir.unlink(&tmp);
                return Err(Error::ConcurrentChange(format!(
                    "{} was written by another writer while this one held the lock; operation {op} is not logged and nothing further is written",
                    path.display()
                )));
            }
        }
        Err(e) => {
            let _ = dir.unlink(&tmp);
            return Err(Error::io("link log path list", path, e));
        }
    }
    dir.sync().ctx("fsync", dir.path())?;
    dir.unlink(&tmp).ctx("remove", dir.join(&tmp))?;
    Ok(crate::record::paths::PathsRef {
        file: name,
        sha256: crate::hash::sha256_hex(bytes),
        lines: bytes.iter().filter(|b| **b == b'\n').count() as u64,
    })
}

/// The bytes of the record file `name` in `dir`, at most `limit` of them: opened without
/// following, believed only as a record distributor wrote (its uid, 0600, one link).
fn read_record_bytes(dir: &Dir, name: &str, limit: u64) -> std::result::Result<Vec<u8>, String> {
    let (f, st) = dir.open_file(name).map_err(|e| e.to_string())?;
    records::check(&st, records::Kind::File, &dir.join(name)).map_err(|u| u.message())?;
    let mut bytes = Vec::new();
    f.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// The largest path list read (256 MiB: a million paths).
const PATHS_READ_LIMIT: u64 = 256 << 20;

/// The path list `entry` names, read from the log below `base` and believed only when
/// its bytes have the sha256 the entry names (docs/operations.md, "Path lists"); `None`
/// when the entry names none.
pub fn read_paths(
    base: &Dir,
    entry: &Entry,
) -> Result<Option<std::result::Result<Vec<crate::record::paths::PathLine>, String>>> {
    let Some(want) = &entry.paths else {
        return Ok(None);
    };
    let dir = match open_log_dir(base) {
        Ok(Some(d)) => d,
        Ok(None) => return Ok(Some(Err(format!("{}: no log directory", want.file)))),
        Err(b) => return Ok(Some(Err(b.to_string()))),
    };
    Ok(Some(
        read_record_bytes(&dir, &want.file, PATHS_READ_LIMIT)
            .map_err(|e| format!("{}: {e}", dir.join(&want.file).display()))
            .and_then(|bytes| crate::record::paths::parse(&bytes, want)),
    ))
}

/// [`read_paths`] of the log below the bundle path `base`, opened here without following a
/// symlink; `None` also when `base` does not exist.
#[allow(clippy::type_complexity)]
pub fn read_paths_below(
    base: &Path,
    entry: &Entry,
) -> Result<Option<std::result::Result<Vec<crate::record::paths::PathLine>, String>>> {
    match Dir::open_path(base) {
        Ok(d) => read_paths(&d, entry),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("open", base, e)),
    }
}

/// Moves entry `seq` into `.distributor/quarantine/` and appends an entry recording the
/// move (`quarantine` made by `by`). Needs the lock.
pub fn quarantine(base: &Dir, seq: u64, mut by: Entry) -> Result<u64> {
    let dir = make_log_dir(base)?;
    let name = file_name(seq);
    if dir.stat_opt(&name).ctx("stat", dir.join(&name))?.is_none() {
        return Err(Error::Usage(format!(
            "{} holds no entry {seq}",
            dir.path().display()
        )));
    }
    let rec = (base.make_record_dir(records::RECORD_DIR))
        .map_err(|e| record_err(e, "create", base.join(records::RECORD_DIR)))?;
    let q = rec
        .make_record_dir("quarantine")
        .map_err(|e| record_err(e, "create", base.join(records::QUARANTINE)))?;
    // A seq quarantined before (and written again since) keeps both files.
    let mut to = name.clone();
    let mut n = 1;
    while q.stat_opt(&to).ctx("stat", q.join(&to))?.is_some() {
        to = format!("{seq:020}.{n}.json");
        n += 1;
    }
    dir.rename_new(&name, &q, &to)
        .ctx("quarantine", dir.join(&name))?;
    // Its path list goes with it (`<to stem>.paths.jsonl`).
    let list = crate::record::paths::file_name(seq);
    if dir.stat_opt(&list).ctx("stat", dir.join(&list))?.is_some() {
        let stem = to.strip_suffix(".json").unwrap_or(&to);
        let list_to = format!("{stem}.paths.jsonl");
        dir.rename_new(&list, &q, &list_to)
            .ctx("quarantine", dir.join(&list))?;
    }
    q.sync().ctx("fsync", q.path())?;
    dir.sync().ctx("fsync", dir.path())?;
    // Numbered after what stays in the log (and the numbers moved out that follow on from
    // it): a planted entry far above the log, quarantined, does not push the numbering up.
    let top = highest_name(base)?.map_or(0, |(s, _)| s);
    let next = next_seq(top, &quarantined_files(base), |s| {
        dir.join(&file_name(s)).display().to_string()
    })?;
    by.quarantined_seq = (seq < SEQ_LIMIT).then_some(seq);
    by.quarantined_to = Some(format!("{}/{to}", records::QUARANTINE));
    append_at(base, by, next)
}

/// A destination's log, locked for `--quarantine` or `--restart`: a directory's (local,
/// releases) or a store's behind the storage interface (an object store, under its lease).
pub enum LockedLog<'a> {
    /// The directory holding `.distributor/`, and where journals keep its tail.
    Dir(&'a crate::fs::Dir, &'a crate::backend::LogCursor),
    /// An object store's log.
    Store(&'a dyn crate::backend::LogStore),
}

impl LockedLog<'_> {
    /// Where journals keep this log's tail.
    pub fn location(&self) -> &str {
        match self {
            LockedLog::Dir(_, cursor) => cursor.location(),
            LockedLog::Store(s) => s.log_cursor().location(),
        }
    }

    /// `log --quarantine SEQ`: moves entry `seq` out of the log and appends `by`, which
    /// records the move; returns `by`'s seq.
    pub fn quarantine(&self, seq: u64, by: Entry) -> Result<u64> {
        match self {
            LockedLog::Dir(base, _) => quarantine(base, seq, by),
            LockedLog::Store(s) => s.quarantine_log(seq, by),
        }
    }

    /// `log --restart`: appends `by` after the log's tail and after `after`, the tail the
    /// journal in use knew; returns its seq.
    pub fn restart(&self, after: u64, by: Entry) -> Result<u64> {
        match self {
            LockedLog::Dir(base, _) => append_after(base, by, after),
            LockedLog::Store(s) => s.restart_log(after, by),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn entry(op: &str) -> Entry {
        Entry::new(op, "publish", "create")
    }

    /// `counts.unchanged` is what the staging record's origin counted; a record written
    /// before it was kept counts 0.
    #[test]
    fn counts_unchanged_come_from_the_record_and_older_records_count_0() {
        let record = |unchanged: Option<u64>| -> StagedOperation {
            let mut origin = serde_json::json!({
                "started_at": "2026-12-02T00:00:00.000Z", "command": "publish",
                "actor": "cli:t", "pipeline_id": "p", "state_mode": "single_owner",
                "decision": "replace_older", "takeover_mode": "same_pipeline",
                "previous_owner": null, "previous_source": null,
                "source": {"id": "s", "created_at": "2026-12-02T00:00:00Z", "digest": "d"},
                "takeovers": []
            });
            if let Some(n) = unchanged {
                origin["outputs_unchanged"] = n.into();
            }
            serde_json::from_value(serde_json::json!({
                "operation_id": "op", "destination_id": "d", "bundle_path": "/b",
                "pre_state_sha256": null, "post_state_sha256": "0", "origin": origin,
                "actions": [{"kind": "file_overwrite", "path": "a", "size": 3}],
                "new_dirs": []
            }))
            .unwrap()
        };
        let e = Entry::of_operation(&record(Some(7)));
        let want = Counts {
            written: 1,
            deleted: 0,
            unchanged: 7,
            bytes_written: 3,
        };
        assert_eq!(e.counts, want);
        let e = Entry::of_operation(&record(None));
        assert_eq!(e.counts.unchanged, 0);
        assert_eq!(e.counts.written, 1);
    }

    /// A staging record of operation `op` whose actor is `actor`.
    fn record_by(actor: &str) -> StagedOperation {
        serde_json::from_value(serde_json::json!({
            "operation_id": "7c2e1f4a-0000-4000-8000-000000000001", "destination_id": "d",
            "bundle_path": "/b", "pre_state_sha256": null, "post_state_sha256": "0",
            "origin": {
                "started_at": "2026-12-02T00:00:00.000Z", "command": "publish",
                "actor": actor, "pipeline_id": "p", "state_mode": "single_owner",
                "decision": "replace_older", "takeover_mode": "same_pipeline",
                "previous_owner": null, "previous_source": null,
                "source": {"id": "s", "created_at": "2026-12-02T00:00:00Z", "digest": "d"},
                "takeovers": []
            },
            "actions": [], "new_dirs": []
        }))
        .unwrap()
    }

    /// An operation whose entry could not be written within 4 KiB is refused before its
    /// commit point (`Transaction::begin` asks, before the journal's row); one that fits,
    /// with room for every field filled after the commit point, is not.
    #[test]
    fn an_entry_that_cannot_fit_in_4_kib_is_refused_before_the_commit_point() {
        check_fits(&record_by("cli:tester")).unwrap();
        // A 1 KiB actor of characters JSON escapes (2 KiB in the entry) still fits.
        check_fits(&record_by(&format!("cli:{}", "\\".repeat(1020)))).unwrap();
        let err = check_fits(&record_by(&"\\".repeat(2000))).unwrap_err();
        assert!(matches!(err, Error::Usage(_)), "{err:?}");
        assert!(
            err.to_string()
                .contains("more than the 4096 an entry may hold"),
            "{err}"
        );
    }

    /// `recover` finishing an operation whose entry fits keeps its facts whole and
    /// shortens only its own actor in `recovered_by` to fit.
    #[test]
    fn recovered_by_is_shortened_to_fit_and_the_operation_stays_whole() {
        let op = record_by(&format!("cli:{}", "\\".repeat(1000)));
        check_fits(&op).unwrap();
        let mut e = Entry::of_operation(&op);
        e.recovered_by = Some(RecoveredBy {
            actor: format!("cli:{}", "\\".repeat(1020)),
            host: "h".into(),
            at: "2026-12-02T00:00:00Z".into(),
        });
        assert!(serde_json::to_vec_pretty(&e).unwrap().len() > MAX_ENTRY_BYTES);
        let bytes = render(&e).unwrap();
        assert!(bytes.len() <= MAX_ENTRY_BYTES);
        let back: Entry = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.actor, e.actor, "the operation's own actor is whole");
        let by = back.recovered_by.unwrap();
        assert!(
            by.actor.starts_with("cli:\\") && by.actor.ends_with("..."),
            "{}",
            by.actor
        );
    }

    /// A name with a seq no writer makes (0, at or above 10^19) is a bad entry, never
    /// numbered after; a number quarantined far above the log does not push the
    /// numbering up, one that follows on from the log is never taken again.
    #[test]
    fn seqs_at_or_above_ten_to_the_nineteenth_are_bad_and_never_numbered_after() {
        assert_eq!(seq_of("09999999999999999999.json"), Some(SEQ_LIMIT - 1));
        assert_eq!(seq_of("10000000000000000000.json"), None);
        assert_eq!(seq_of("18446744073709551615.json"), None);
        assert_eq!(seq_of("00000000000000000000.json"), None);
        assert!(out_of_range("18446744073709551615.json"));
        assert!(out_of_range("99999999999999999999.json"));
        assert!(out_of_range("00000000000000000000.json"));
        assert!(!out_of_range("00000000000000000001.json"));
        assert!(!out_of_range(".tmp-x"));
        assert_eq!(tail(5, &[6, 7, 999]), 7);
        assert_eq!(next_seq(5, &[999], |s| s.to_string()).unwrap(), 6);
        let err = next_seq(SEQ_LIMIT - 1, &[], |s| format!("entry {s}")).unwrap_err();
        assert!(err.to_string().contains("no seq below 10^19"), "{err}");

        let t = tempfile::tempdir().unwrap();
        let d = Dir::open_path(t.path()).unwrap();
        assert_eq!(append(&d, entry("a")).unwrap(), 1);
        let log_dir = t.path().join(records::LOG);
        for name in ["18446744073709551615.json", "99999999999999999999.json"] {
            let f = log_dir.join(name);
            std::fs::write(&f, b"{}").unwrap();
            std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
        }
        assert_eq!(
            append(&d, entry("b")).unwrap(),
            2,
            "numbered after the real tail"
        );
        let log = read(&d).unwrap();
        assert_eq!(log.entries.len(), 2);
        let bad: Vec<String> = (log.bad.iter())
            .map(|b| format!("{} {}", b.file.display(), b.why))
            .collect();
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(
            bad.iter().all(|b| b.contains("at or above 10^19")),
            "{bad:?}"
        );
        assert!(last_is(&d, "b").unwrap());
        // Quarantined, it goes; its record takes the next seq after the real tail.
        assert_eq!(quarantine(&d, u64::MAX, entry("q")).unwrap(), 3);
        let log = read(&d).unwrap();
        assert_eq!(log.bad.len(), 1, "{:?}", log.bad);
        assert_eq!(log.entries[2].quarantined_seq, None);
        assert_eq!(append(&d, entry("c")).unwrap(), 4);
    }

    #[test]
    fn entries_are_numbered_from_one_and_read_back_in_order() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open_path(t.path()).unwrap();
        assert_eq!(append(&d, entry("a")).unwrap(), 1);
        assert_eq!(append(&d, entry("b")).unwrap(), 2);
        let log = read(&d).unwrap();
        assert!(log.bad.is_empty(), "{:?}", log.bad);
        let ops: Vec<&str> = log
            .entries
            .iter()
            .map(|e| e.operation_id.as_str())
            .collect();
        assert_eq!(ops, ["a", "b"]);
        let p = t.path().join(".distributor/log/00000000000000000002.json");
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, 0o600);
        let names: Vec<_> = std::fs::read_dir(t.path().join(".distributor/log"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temporary file is left: {names:?}");
    }

    #[test]
    fn a_taken_seq_is_a_concurrent_change_unless_it_is_the_writers_own_file() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open_path(t.path()).unwrap();
        append(&d, entry("a")).unwrap();
        let e = append_at(&d, entry("b"), 1).unwrap_err();
        assert_eq!(e.kind(), "concurrent_change", "{e}");
        let log = read(&d).unwrap();
        assert_eq!(log.entries.len(), 1);
        assert_eq!(log.entries[0].operation_id, "a");
    }

    #[test]
    fn torn_forged_untrusted_and_gapped_entries_are_bad() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open_path(t.path()).unwrap();
        for op in ["a", "b", "c", "d"] {
            append(&d, entry(op)).unwrap();
        }
        let log_dir = t.path().join(".distributor/log");
        // Torn.
        std::fs::write(log_dir.join(file_name(2)), "{\"log_format_version\":1,").unwrap();
        // Forged: says another seq.
        let mut forged = entry("x");
        forged.seq = 9;
        std::fs::write(
            log_dir.join(file_name(3)),
            serde_json::to_vec(&forged).unwrap(),
        )
        .unwrap();
        // A gap before 6.
        let mut six = entry("f");
        six.seq = 6;
        let p = log_dir.join(file_name(6));
        std::fs::write(&p, serde_json::to_vec(&six).unwrap()).unwrap();
        std::fs::set_permissions(&p, PermissionsExt::from_mode(0o600)).unwrap();
        // Untrusted: published mode.
        std::fs::set_permissions(log_dir.join(file_name(4)), PermissionsExt::from_mode(0o644))
            .unwrap();
        let log = read(&d).unwrap();
        let bad: Vec<String> = (log.bad.iter())
            .map(|b| b.file.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            bad,
            [file_name(2), file_name(3), file_name(4), file_name(6)],
            "{:?}",
            log.bad
        );
        assert_eq!(log.entries.len(), 1);
        assert_eq!(log.last_seq, 6);
    }

    #[test]
    fn a_quarantined_seq_is_not_a_gap_and_the_record_takes_the_next_seq() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open_path(t.path()).unwrap();
        for op in ["a", "b", "c"] {
            append(&d, entry(op)).unwrap();
        }
        std::fs::write(t.path().join(".distributor/log").join(file_name(3)), "torn").unwrap();
        assert_eq!(read(&d).unwrap().bad.len(), 1);
        let q = quarantine(&d, 3, Entry::new("q", "quarantine", "quarantine")).unwrap();
        assert_eq!(q, 4);
        let log = read(&d).unwrap();
        assert!(log.bad.is_empty(), "{:?}", log.bad);
        assert_eq!(log.entries.last().unwrap().quarantined_seq, Some(3));
        assert!(
            t.path()
                .join(".distributor/quarantine")
                .join(file_name(3))
                .exists()
        );
        // Quarantining the last entry: the record does not take its number again.
        let q = quarantine(&d, 4, Entry::new("q2", "quarantine", "quarantine")).unwrap();
        assert_eq!(q, 5);
        assert!(read(&d).unwrap().bad.is_empty());
    }

    #[test]
    fn an_entry_left_linked_to_its_temporary_name_is_believed() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open_path(t.path()).unwrap();
        append(&d, entry("a")).unwrap();
        let log_dir = t.path().join(".distributor/log");
        std::fs::hard_link(log_dir.join(file_name(1)), log_dir.join(".tmp-a")).unwrap();
        let log = read(&d).unwrap();
        assert!(log.bad.is_empty(), "{:?}", log.bad);
        assert!(last_is(&d, "a").unwrap());
        tidy(&d, "a").unwrap();
        assert!(!log_dir.join(".tmp-a").exists());
        assert!(read(&d).unwrap().bad.is_empty());
        // A hard link anywhere else is not.
        std::fs::hard_link(log_dir.join(file_name(1)), t.path().join("elsewhere")).unwrap();
        assert_eq!(read(&d).unwrap().bad.len(), 1);
    }
}
