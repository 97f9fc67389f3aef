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
    /// Set when the entry was made from a line of `.distributor-activations.log`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrated_from: Option<String>,
    /// Set when `recover` wrote the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_by: Option<RecoveredBy>,
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
            migrated_from: None,
            recovered_by: None,
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

/// The seq a file name in `log/` (or `quarantine/`) stands for.
pub(crate) fn seq_of(name: &str) -> Option<u64> {
    let digits = name.get(..20)?;
    let rest = &name[20..];
    (digits.bytes().all(|b| b.is_ascii_digit()) && (rest == ".json" || rest.starts_with('.')))
        .then(|| digits.parse().ok())
        .flatten()
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
    for (name, kind) in listing {
        if let Some(seq) = seq_of(&name).filter(|_| name.len() == 25) {
            names.push((seq, name));
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
    let mut gapped = std::collections::BTreeSet::new();
    for w in present.windows(2) {
        let (p, q) = (w[0], w[1]);
        let missing = q - p - 1;
        let covered = quarantined.range(p + 1..q).count() as u64;
        if missing > covered {
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
    let e: Entry =
        serde_json::from_slice(bytes).map_err(|e| format!("torn or not an entry ({e})"))?;
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
    let next = highest_name(base)?
        .map_or(0, |(seq, _)| seq)
        .max(quarantined_files(base).into_iter().max().unwrap_or(0))
        + 1;
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

/// The bytes of `entry` as stored: pretty JSON, at most [`MAX_ENTRY_BYTES`].
pub(crate) fn render(entry: &Entry) -> Result<Vec<u8>> {
    let bytes = serde_json::to_vec_pretty(entry)?;
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
pub fn append_at(base: &Dir, mut entry: Entry, seq: u64) -> Result<u64> {
    let dir = make_log_dir(base)?;
    entry.seq = seq;
    let bytes = render(&entry)?;
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
    Ok(seq)
}

/// Moves entry `seq` into `.distributor/quarantine/` and appends an entry recording the
/// move (`quarantine` made by `by`). Needs the lock.
pub fn quarantine(base: &Dir, seq: u64, mut by: Entry) -> Result<u64> {
    let log = read(base)?;
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
    let next = log.last_seq.max(seq) + 1;
    dir.rename_new(&name, &q, &to)
        .ctx("quarantine", dir.join(&name))?;
    q.sync().ctx("fsync", q.path())?;
    dir.sync().ctx("fsync", dir.path())?;
    by.quarantined_seq = Some(seq);
    by.quarantined_to = Some(format!("{}/{to}", records::QUARANTINE));
    append_at(base, by, next)
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
