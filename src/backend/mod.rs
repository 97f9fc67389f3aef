//! The storage interface (SPEC §13): the steps the executor, `recover`, `status`, `verify`
//! and `publish` take in a destination, named as steps rather than as filesystem calls.
//! Nothing else touches destination storage; the planner never does.
//!
//! [`Backend`] is a kind of storage (the local filesystem today): it opens a bundle path
//! for reading, locks one for an operation, finds the bundle paths below a mapped
//! destination, and says how much parallelism suits it. [`BundleStore`] is one bundle
//! path, opened: reading state, probing, the staging record, staging, moving aside,
//! placing, linking, the commit point, undo, cleanup and pruning. The commit point returns
//! a [`Committed`] that only a backend can make, so the executor cannot record a commit
//! that storage did not perform.
//!
//! The design, its invariants and how object stores and release directories fit are in
//! `docs/internal/storage.md`.

pub mod azure;
pub mod local;
pub mod releases;
pub mod s3;
pub mod types;

/// Every kind of object store distributor speaks to, each a dialect of the object-store
/// backend (`s3/`): a new one is its folder and its line here.
pub(crate) const OBJECT_STORES: &[&dyn s3::Dialect] = &[&s3::Aws, &azure::Azure];

use crate::error::Result;
use crate::hash::ContentHash;
use crate::record::StagedOperation;
use crate::state::StateFile;
use std::path::{Path, PathBuf};
use std::time::Duration;
use types::Storage;
use types::{Placed, Proof, Staged, StagingEntry, StateBytes};

pub use types::Capabilities;

/// A kind of storage destinations can live on.
pub trait Backend: std::fmt::Debug + Sync {
    /// Its name in messages (`local`).
    fn name(&self) -> &'static str;

    /// How many files it is worth working on at once (staging, probing, removing).
    fn concurrency(&self) -> usize;

    /// What it can do, and how it proves what it holds.
    fn capabilities(&self) -> Capabilities;

    /// Why the bundle path `bundle` below the destination path `base` cannot be used,
    /// if it cannot (the planner's `unsafe_storage`).
    fn bundle_unsafe(&self, base: &Path, bundle: &Path) -> Option<String>;

    /// Opens a bundle path for reading; `None` when it does not exist.
    fn open(&self, base: &Path, bundle: &Path) -> Result<Option<Box<dyn BundleStore>>>;

    /// Takes the destination lock on a bundle path, waiting up to `timeout`, and returns it
    /// opened for an operation. With `create`, a missing bundle path is created; without,
    /// it is `None`.
    fn lock(
        &self,
        base: &Path,
        bundle: &Path,
        how: LockRequest<'_>,
    ) -> Result<Option<Box<dyn BundleStore>>>;

    /// The bundle paths below a mapped destination path that hold state or staging.
    fn bundle_paths(&self, base: &Path) -> Result<Vec<PathBuf>>;
}

/// How a destination lock is asked for (SPEC §16): how long to wait for it, whether a
/// missing bundle path is created (without, it is `None`), and who takes it: the lock
/// record (an s3 lease's body) names that actor while the lock is held, so a `serve`
/// process holding locks for several tokens at once names each one's.
#[derive(Debug, Clone, Copy)]
pub struct LockRequest<'a> {
    /// How long to wait for a held lock.
    pub timeout: Duration,
    /// Create a missing bundle path (and its missing parents).
    pub create: bool,
    /// Who takes it (`cli:<user>`, `token:<name>`).
    pub actor: &'a str,
    /// The journal in use, which records written by an earlier version are believed
    /// through (SPEC §17 "Upgrading"); `None`: they are not believed.
    pub history: Option<&'a dyn History>,
}

/// What the journal in use says of an operation, for records in a destination that an
/// earlier version wrote and that only the journal can vouch for (a releases directory's
/// old activation log: docs/operations.md, "Release identity").
pub trait History {
    /// Whether the journal committed operation `op` at bundle path `bundle`: `None` when
    /// it did not; else the order of its commit among the journal's (ascending) and the
    /// release it activated (a rollback's or promote's target, else its own).
    fn committed_release(&self, bundle: &str, op: &str) -> Result<Option<(i64, String)>>;
}

impl std::fmt::Debug for dyn History + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the journal in use")
    }
}

/// One bundle path, opened: its read side ([`StoreRead`]), its staging records
/// ([`RecordStore`]), which also make each operation's [`Steps`]
/// ([`RecordStore::operation`]); a store that keeps its destination log behind the
/// interface also answers [`BundleStore::log`]. Every writing step needs the lock
/// ([`Backend::lock`]); a bundle path opened for reading refuses them.
pub trait BundleStore: StoreRead + RecordStore {
    /// The destination log (SPEC §18) where this store keeps it behind the storage
    /// interface (an object store's `<prefix>/.distributor/log/`): `Some` exactly where
    /// [`Capabilities::log_behind_interface`] says so. `None` where the log is read from
    /// the filesystem instead ([`local::log::read`]).
    fn log(&self) -> Option<&dyn LogStore> {
        None
    }

    /// Where journals keep this store's log tail: [`LogStore::log_cursor`] where the log
    /// is behind the interface; a local store's own (`local:<directory holding
    /// .distributor/>`). `None`: the store keeps no log.
    fn log_cursor(&self) -> Option<&LogCursor> {
        self.log().map(|l| l.log_cursor())
    }

    /// [`LogStore::log_tail_now`], or the local log's; `None` where the store keeps no log.
    fn log_tail_now(&self) -> Result<Option<u64>> {
        self.log().map(|l| l.log_tail_now()).transpose()
    }
}

/// The read side of one bundle path: what `status`, `verify`, planning and `recover`
/// look at, none of which needs the lock. A store opened for reading offers all of it.
pub trait StoreRead: std::fmt::Debug + Sync {
    /// The bundle path.
    fn path(&self) -> &Path;

    /// [`Backend::concurrency`]).
    fn concurrency(&self) -> usize;

    /// [`Backend::capabilities`]).
    fn capabilities(&self) -> Capabilities;

    /// backend has is wanted ([`releases::ReleaseStore::of`]).
    fn as_any(&self) -> &dyn std::any::Any;

    /// What stands at `.distributor.json`.
    fn read_state(&self) -> Result<StateBytes>;

    /// many it likely records: the manifest's count).
    fn read_state_parsed(&self, outputs: usize) -> Result<(StateFile, Option<ContentHash>)> {
        let _ = outputs;
        let read = self.read_state()?;
        Ok((read.parse(), read.bytes().map(ContentHash::of)))
    }

    /// whether it changed since [`StoreRead::read_state_parsed`].
    fn state_sha256(&self) -> Result<Option<ContentHash>> {
        Ok(self.read_state()?.bytes().map(ContentHash::of))
    }

    /// (local bundle paths); `None` otherwise.
    fn state_file_id(&self) -> Result<Option<StateFileId>> {
        Ok(None)
    }

    /// the state file (SPEC §8); an object store reads the operation's decision record.
    fn verdict(&self, op: &StagedOperation) -> Result<Verdict> {
        Ok(match state_sha256(self)? {
            Ok(Some(sha)) if sha == op.post_state_sha256 => Verdict::Forward,
            Ok(sha) if sha == op.pre_state_sha256 => Verdict::Back,
            _ => Verdict::Diverged,
        })
    }

    /// hashed for a proof).
    fn probe<'a>(
        &self,
        paths: &[(&'a str, Option<Proof<'a>>)],
        dirs_wanted: &foldhash::HashSet<&str>,
        progress: crate::progress::Ticker<'_>,
    ) -> Result<Storage<'a>>;

    /// already hashed it (the local backend) or nothing is there.
    fn content_sha256(&self, _rel: &str) -> Result<Option<crate::hash::ContentHash>> {
        Ok(None)
    }

    /// Every non-directory below the bundle path, sorted (`verify`).
    fn list_files(&self) -> Result<Vec<String>>;

    /// Whether the directory `rel` exists.
    fn dir_exists(&self, rel: &str) -> Result<bool>;

    /// Whether any distributor process ever locked this bundle path (its lock exists).
    fn locked_before(&self) -> Result<bool>;

    /// who, as its lock record says. Writes nothing and waits for nothing.
    fn lock_holder(&self) -> Result<Option<String>>;

    /// What `.distributor/staging/` holds (and an earlier version's `.distributor-staging/`).
    fn staging_entries(&self) -> Result<Vec<StagingEntry>>;

    /// Whether the staging entry of `op` holds anything but directories.
    fn staging_holds_files(&self, op: &str) -> Result<bool>;

    /// no log yet (the default).
    fn last_logged_operation(&self) -> Result<Option<LoggedOperation>> {
        Ok(None)
    }
}

/// The staging records of one bundle path (SPEC §17): written whole before an operation
/// changes anything, read back by `recover`, removed once the operation is done or found
/// to have changed nothing.
pub trait RecordStore: StoreRead {
    /// Says in an operation's record what only the store knows of where it runs (an
    /// object store's location); what the operation itself does its [`Steps::describe`]
    /// says. Nothing where the bundle path alone says (the default).
    fn describe(&self, staged: &mut StagedOperation) {
        let _ = staged;
    }

    /// there is none (nothing made yet, or an object store).
    fn record_dir(&self, create: bool) -> Result<Option<crate::record::RecordDir>> {
        let _ = create;
        Ok(None)
    }

    /// A new operation in this store: the object its steps ([`Steps`]) go through, made by
    /// the backend, which keeps there what it knows of that one operation while it runs
    /// (what it uploaded and wrote into staging, the release it builds); the store keeps
    /// only what is the destination's. Writes nothing; dropped with the operation.
    fn operation(&self) -> Box<dyn Steps + Sync + '_>;

    /// entry has none.
    fn read_record(&self, op: &str) -> Result<Option<StagedOperation>>;

    /// Removes the staging entry of `op`.
    fn remove_staging(&self, op: &str) -> Result<()>;

    /// Removes an unfinished staging record of `op` (it never changed anything).
    fn remove_unfinished(&self, op: &str) -> Result<()>;

    /// backends have one.
    fn adopt_legacy_staging(&self, op: &str) -> Result<()> {
        Err(crate::error::Error::Failed(format!(
            "{}: no staging of an earlier version to adopt for {op}",
            self.path().display()
        )))
    }
}

/// The steps of one operation, each naming the operation's record and an action index,
/// in the order the executor takes them ([`Steps::begin`] first), then the commit point,
/// and the rollback or cleanup that follows. Implemented by the object a store's
/// [`RecordStore::operation`] makes, which lives as long as the operation.
pub trait Steps {
    /// Says in the operation's record what this operation does where the store alone
    /// cannot (a releases operation: what it activates, stages, undoes or adopts), after
    /// [`RecordStore::describe`] and before [`Steps::begin`] writes the record. Nothing
    /// where the store says it all (the default).
    fn describe(&self, staged: &mut StagedOperation) {
        let _ = staged;
    }

    /// Writes the staging record, whole and atomically, before anything else changes.
    fn begin(&self, op: &StagedOperation, pre: Option<&[u8]>, post: &[u8]) -> Result<()>;

    /// Stages the file of action `i` from `source`, hashing while copying: size and
    /// sha256, and the fingerprint as staged where placing may keep it ([`Staged`]).
    fn stage(
        &self,
        op: &StagedOperation,
        i: usize,
        source: &crate::source::SourceFile<'_>,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<Staged>;

    /// Makes what was staged durable before anything is placed.
    fn make_staged_durable(&self) -> Result<()>;

    /// Moves aside what action `i` replaces or deletes.
    fn move_aside(&self, op: &StagedOperation, i: usize) -> Result<()>;

    /// Removes the emptied directories standing where a file goes.
    fn remove_emptied_dir(&self, rel: &str) -> Result<()>;

    /// Places the file staged for action `i`: its placement fingerprint where the
    /// backend proves content by one (an object store proves it by the state's ETag).
    /// `as_staged` is what [`Steps::stage`] said of the file ([`Staged::as_staged`]),
    /// returned as the placement fingerprint only where placing left the file as it was.
    fn place(
        &self,
        op: &StagedOperation,
        i: usize,
        as_staged: Option<Placed>,
    ) -> Result<Option<Placed>>;

    /// Creates the link of action `i`.
    fn link(&self, op: &StagedOperation, i: usize) -> Result<()>;

    /// The commit point: the post-state written where the store keeps its state (read
    /// back from the staging record, or held in memory through the operation).
    fn commit_state(&self, op: &StagedOperation) -> Result<Committed>;

    /// Rolls the operation back from what staging holds.
    fn undo(&self, op: &StagedOperation) -> Result<()>;

    /// Removes staging and prunes what deletions emptied (after the commit point).
    fn clean_up(&self, op: &StagedOperation) -> Result<()>;

    /// `recover`'s roll-forward: [`Steps::clean_up`], and the state object it replaced
    /// when it overwrote one that was neither the state before nor after (an object
    /// store, SPEC §17); `None` when nothing was replaced.
    fn roll_forward(&self, op: &StagedOperation) -> Result<Option<ReplacedState>> {
        self.clean_up(op).map(|()| None)
    }
}

/// A store whose steps keep nothing per operation takes them itself: its
/// [`RecordStore::operation`] is `Box::new(self)`.
impl<T: Steps + ?Sized> Steps for &T {
    fn describe(&self, staged: &mut StagedOperation) {
        (**self).describe(staged)
    }

    fn begin(&self, op: &StagedOperation, pre: Option<&[u8]>, post: &[u8]) -> Result<()> {
        (**self).begin(op, pre, post)
    }

    fn stage(
        &self,
        op: &StagedOperation,
        i: usize,
        source: &crate::source::SourceFile<'_>,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<Staged> {
        (**self).stage(op, i, source, buf, on_bytes)
    }

    fn make_staged_durable(&self) -> Result<()> {
        (**self).make_staged_durable()
    }

    fn move_aside(&self, op: &StagedOperation, i: usize) -> Result<()> {
        (**self).move_aside(op, i)
    }

    fn remove_emptied_dir(&self, rel: &str) -> Result<()> {
        (**self).remove_emptied_dir(rel)
    }

    fn place(
        &self,
        op: &StagedOperation,
        i: usize,
        as_staged: Option<Placed>,
    ) -> Result<Option<Placed>> {
        (**self).place(op, i, as_staged)
    }

    fn link(&self, op: &StagedOperation, i: usize) -> Result<()> {
        (**self).link(op, i)
    }

    fn commit_state(&self, op: &StagedOperation) -> Result<Committed> {
        (**self).commit_state(op)
    }

    fn undo(&self, op: &StagedOperation) -> Result<()> {
        (**self).undo(op)
    }

    fn clean_up(&self, op: &StagedOperation) -> Result<()> {
        (**self).clean_up(op)
    }

    fn roll_forward(&self, op: &StagedOperation) -> Result<Option<ReplacedState>> {
        (**self).roll_forward(op)
    }
}

/// A destination log kept behind the storage interface (SPEC §18), reached through
/// [`BundleStore::log`].
pub trait LogStore {
    /// The log read and judged: its entries, oldest first, and its bad ones, each naming
    /// its key.
    fn read_log(&self) -> Result<local::log::Log>;

    /// The log's tail as journals remember it for this store (SPEC §18 "Finding the
    /// tail"): a writer lists the log from the entry last seen rather than from the
    /// start. The journal keeps it (`Journal::with_log_tail`).
    fn log_cursor(&self) -> &LogCursor;

    /// `distributor log --quarantine SEQ`: moves entry `seq` to `.distributor/quarantine/`
    /// and appends `by`, which records the move; returns `by`'s seq. Needs the lock.
    fn quarantine_log(&self, seq: u64, by: local::log::Entry) -> Result<u64>;

    /// The seq of the log's last entry as the store holds it now (0: none), counting the
    /// numbers moved to quarantine that follow on from it.
    fn log_tail_now(&self) -> Result<u64>;

    /// The path list `entry` names (docs/operations.md, "Path lists"), believed only when
    /// its bytes have the sha256 the entry names (else why not); `None` when it names none.
    #[allow(clippy::type_complexity)]
    fn read_paths(
        &self,
        entry: &local::log::Entry,
    ) -> Result<Option<std::result::Result<Vec<crate::record::paths::PathLine>, String>>>;

    /// `distributor log --restart`: appends `by` after the log's tail and after `after`
    /// (the tail the journal in use knew), so the entries a journal saw are never
    /// numbered again; returns its seq. Needs the lock.
    fn restart_log(&self, after: u64, by: local::log::Entry) -> Result<u64>;
}

pub use local::log::LockedLog;

/// Why the destination log of the locked `store` is shorter than the journal in use saw
/// it (docs/operations.md, "The log's continuity"), if it is: the journal's tail, handed
/// to the store's cursor before planning ([`LogCursor::set_known`]), is past the log's
/// last entry now. The conflict `log_missing` (not forceable): the log was removed or cut
/// short, and a publication would go on numbering it as if nothing had happened.
pub fn log_missing(store: &dyn BundleStore) -> Result<Option<String>> {
    let Some(cursor) = store.log_cursor() else {
        return Ok(None);
    };
    let Some(known) = cursor.known().filter(|k| *k > 0) else {
        return Ok(None);
    };
    let Some(now) = store.log_tail_now()? else {
        return Ok(None);
    };
    if now >= known {
        return Ok(None);
    }
    let ends = match now {
        0 => "holds no entry".to_string(),
        n => format!("ends at entry {n}"),
    };
    Ok(Some(format!(
        "{}: the journal in use saw this destination's log reach entry {known}, but the log there now {ends}: it was removed or cut short, by hand or by someone who can write there; distributor writes nothing there until `distributor log --restart` records the gap (or `distributor log --quarantine SEQ` moves a bad entry out)",
        cursor.location()
    )))
}

/// The backend's state of one operation, apart from its record: what the lifecycle
/// (`execute::lifecycle`) keeps from the operation's first step to its cleanup, so the
/// steps after the commit point know what the steps before it did (an object store's
/// uploads and the staging keys it wrote, a release being built). Made by the store's
/// [`RecordStore::operation`]; dropped with the operation.
pub struct OperationState<'s>(Box<dyn Steps + Sync + 's>);

impl<'s> OperationState<'s> {
    /// A new operation's state in `store`.
    pub fn new(store: &'s dyn BundleStore) -> OperationState<'s> {
        OperationState(store.operation())
    }

    /// The state of an operation whose steps `steps` are, made by a store for an
    /// operation its caller described (`ReleaseStore::operation_for`).
    pub fn of(steps: Box<dyn Steps + Sync + 's>) -> OperationState<'s> {
        OperationState(steps)
    }

    /// Says in `staged` what this operation does ([`Steps::describe`]).
    pub fn describe(&self, staged: &mut StagedOperation) {
        self.0.describe(staged)
    }
}

/// One operation in one locked store: what the executor, `rollback` and `recover` take
/// its steps through, naming an action by its index in the record and never passing the
/// record again. [`Operation::of`] makes it (with a new [`OperationState`], or
/// [`Operation::with`] the one the lifecycle keeps); [`Operation::begin`] writes its
/// staging record, the first step; an operation whose record already stands (found in
/// staging by `recover`) is taken up where it is. The steps are the backend's [`Steps`],
/// each given this operation's record.
pub struct Operation<'s> {
    store: &'s dyn BundleStore,
    record: &'s StagedOperation,
    steps: StepsOf<'s>,
}

/// The steps an [`Operation`] goes through: its own, or those of a state kept elsewhere.
enum StepsOf<'s> {
    Own(OperationState<'s>),
    Kept(&'s (dyn Steps + Sync + 's)),
}

impl<'s> Operation<'s> {
    /// The operation of `record` in `store`, with a new state: begun with
    /// [`Operation::begin`], or taken up where its staging record stands.
    pub fn of(store: &'s dyn BundleStore, record: &'s StagedOperation) -> Operation<'s> {
        Operation {
            store,
            record,
            steps: StepsOf::Own(OperationState::new(store)),
        }
    }

    /// The operation of `record` in `store` whose state `state` keeps (made for this
    /// store).
    pub fn with(
        store: &'s dyn BundleStore,
        record: &'s StagedOperation,
        state: &'s OperationState<'_>,
    ) -> Operation<'s> {
        Operation {
            store,
            record,
            steps: StepsOf::Kept(&*state.0),
        }
    }

    fn steps(&self) -> &(dyn Steps + Sync + '_) {
        match &self.steps {
            StepsOf::Own(s) => &*s.0,
            StepsOf::Kept(s) => *s,
        }
    }

    /// Its record.
    pub fn record(&self) -> &'s StagedOperation {
        self.record
    }

    /// The store it runs in.
    pub fn store(&self) -> &'s dyn BundleStore {
        self.store
    }

    /// Writes its staging record ([`Steps::begin`]: whole and atomically, before anything
    /// else changes), with the states before (`pre`) and after (`post`).
    pub fn begin(&self, pre: Option<&[u8]>, post: &[u8]) -> Result<()> {
        self.steps().begin(self.record, pre, post)
    }

    /// Stages the file of action `i` from `source` ([`Steps::stage`]): its size and
    /// sha256 as copied, and its fingerprint as staged where placing may keep it.
    pub fn stage(
        &self,
        i: usize,
        source: &crate::source::SourceFile<'_>,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<Staged> {
        self.steps().stage(self.record, i, source, buf, on_bytes)
    }

    /// Makes what was staged durable ([`Steps::make_staged_durable`]).
    pub fn make_staged_durable(&self) -> Result<()> {
        self.steps().make_staged_durable()
    }

    /// Moves aside what action `i` replaces or deletes ([`Steps::move_aside`]).
    pub fn move_aside(&self, i: usize) -> Result<()> {
        self.steps().move_aside(self.record, i)
    }

    /// Removes the emptied directories standing where the file at `rel` goes
    /// ([`Steps::remove_emptied_dir`]).
    pub fn remove_emptied_dir(&self, rel: &str) -> Result<()> {
        self.steps().remove_emptied_dir(rel)
    }

    /// Places the file staged for action `i` ([`Steps::place`]), staged as `as_staged`.
    pub fn place(&self, i: usize, as_staged: Option<Placed>) -> Result<Option<Placed>> {
        self.steps().place(self.record, i, as_staged)
    }

    /// Creates the link of action `i` ([`Steps::link`]).
    pub fn link(&self, i: usize) -> Result<()> {
        self.steps().link(self.record, i)
    }

    /// The commit point ([`Steps::commit_state`]).
    pub fn commit(&self) -> Result<Committed> {
        self.steps().commit_state(self.record)
    }

    /// Where it stands, from storage alone ([`StoreRead::verdict`]).
    pub fn verdict(&self) -> Result<Verdict> {
        self.store.verdict(self.record)
    }

    /// Rolls it back from what staging holds ([`Steps::undo`]).
    pub fn undo(&self) -> Result<()> {
        self.steps().undo(self.record)
    }

    /// After the commit point: its log entry where the store keeps one, then its staging
    /// removed ([`Steps::clean_up`]).
    pub fn clean_up(&self) -> Result<()> {
        self.steps().clean_up(self.record)
    }

    /// `recover`'s roll-forward ([`Steps::roll_forward`]).
    pub fn roll_forward(&self) -> Result<Option<ReplacedState>> {
        self.steps().roll_forward(self.record)
    }
}

/// The last state-changing entry of a destination log (SPEC §18: a publish, rollback,
/// adopt, promote or recover entry; prune and quarantine entries change no state), as
/// [`BundleStore::last_logged_operation`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedOperation {
    /// The operation the state names when distributor made it: the entry's
    /// `operation_id`; for a releases destination, the release its activation made active
    /// (`release_activated`: a single owner's rollback activates an older release).
    pub operation_id: String,
    /// That entry, in words, for the report (its number, command, actor, host, time).
    pub entry: String,
    /// The operations every state-changing entry names, this one included: the
    /// operations whose order the log knows.
    pub logged: std::collections::BTreeSet<String>,
}

/// Proof that a backend passed an operation's commit point.
#[must_use = "the commit point was passed: record it in the journal"]
#[derive(Debug)]
pub struct Committed {
    state_sha256: Option<String>,
    state_file: Option<StateFileId>,
}

impl Committed {
    /// Only backends make one, right after their commit point.
    pub(crate) fn passed() -> Committed {
        Committed {
            state_sha256: None,
            state_file: None,
        }
    }

    /// After a commit point that wrote a state other than the planned post-state bytes
    /// (an object store's state records the ETags the uploads returned): its sha256.
    pub(crate) fn passed_with_state(sha256: String) -> Committed {
        Committed {
            state_sha256: Some(sha256),
            state_file: None,
        }
    }

    /// After a commit point that renamed the planned post-state into place as the file
    /// `file` identifies (a local bundle path).
    pub(crate) fn passed_writing(file: StateFileId) -> Committed {
        Committed {
            state_sha256: None,
            state_file: Some(file),
        }
    }

    /// The sha256 of the state written, when it is not the planned post-state.
    pub fn state_sha256(&self) -> Option<&str> {
        self.state_sha256.as_deref()
    }

    /// The identity of the state file written, when the backend took it.
    pub fn state_file(&self) -> Option<&StateFileId> {
        self.state_file.as_ref()
    }

    /// The same proof without the state file's identity: the journal records none (the
    /// post-state is not one a republication can take as read).
    pub fn without_state_file(self) -> Committed {
        Committed {
            state_file: None,
            ..self
        }
    }
}

/// What identifies a local state file without reading it: device, inode, size, mtime and
/// ctime. Renaming another file over it changes the inode; rewriting it, or a chmod,
/// chown or link, changes the ctime, which no caller can set back. While a file keeps
/// the identity taken right after it was renamed into place, it holds the bytes written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateFileId {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// mtime, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// ctime, nanoseconds since the epoch.
    pub ctime_ns: i64,
}

/// A state object that a roll-forward overwrote with the operation's post-state (SPEC
/// §17): what it held, and where its copy is kept (distributor never deletes it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplacedState {
    /// sha256 of the bytes it held.
    pub sha256: String,
    /// Its ETag as read (the overwrite was conditional on it).
    pub etag: Option<String>,
    /// The copy of those bytes (`s3://<bucket>/<prefix>/.distributor/replaced/<op>.json`).
    pub copied_to: String,
}

/// Where a store's destination log ends, as far as journals know (SPEC §18 "Finding the
/// tail"): the key a journal remembers it under, the last seq the journal in use saw there
/// (handed in before a step that may write an entry), and the last entry the store wrote
/// or found to be the tail (kept by the journal afterwards). Only a hint: a writer that
/// does not find the entry it was told of lists the whole log.
#[derive(Debug)]
pub struct LogCursor {
    location: String,
    known: std::sync::Mutex<Option<u64>>,
    reached: std::sync::Mutex<Option<u64>>,
    reached_sha: std::sync::Mutex<Option<String>>,
    known_entry: std::sync::Mutex<Option<(u64, String)>>,
}

impl LogCursor {
    /// A cursor for the log at `location` (the key journals keep its tail under).
    pub fn new(location: String) -> LogCursor {
        LogCursor {
            location,
            known: Default::default(),
            reached: Default::default(),
            reached_sha: Default::default(),
            known_entry: Default::default(),
        }
    }

    /// The key journals keep this log's tail under.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The last seq the journal in use saw in this log.
    pub fn known(&self) -> Option<u64> {
        *self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the store the last seq the journal in use saw in this log.
    pub fn set_known(&self, seq: Option<u64>) {
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = seq;
    }

    /// The tail the store left: the entry it wrote, or found its operation's entry at.
    pub fn reached(&self) -> Option<u64> {
        *self.reached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the tail the store left.
    pub fn set_reached(&self, seq: u64) {
        *self.reached.lock().unwrap_or_else(|e| e.into_inner()) = Some(seq);
    }

    /// Records the entry the store wrote: its seq and the sha256 of its bytes, which the
    /// journal keeps (docs/operations.md, "The hash chain").
    pub fn set_reached_entry(&self, seq: u64, sha256: String) {
        self.set_reached(seq);
        *self.reached_sha.lock().unwrap_or_else(|e| e.into_inner()) = Some(sha256);
    }

    /// Tells the store the last entry the journal in use wrote in this log: its seq and
    /// the sha256 of its bytes, which the next entry may chain to without reading it.
    pub fn set_known_entry(&self, entry: Option<(u64, String)>) {
        *self.known_entry.lock().unwrap_or_else(|e| e.into_inner()) = entry;
    }

    /// The sha256 the journal in use kept for entry `seq`, if that is the last entry it
    /// wrote in this log.
    pub fn known_sha(&self, seq: u64) -> Option<String> {
        match &*self.known_entry.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((s, sha)) if *s == seq => Some(sha.clone()),
            _ => None,
        }
    }

    /// The sha256 of the entry the store wrote, if it wrote one.
    pub fn reached_sha(&self) -> Option<String> {
        self.reached_sha
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Where an operation stands, as storage shows it ([`BundleStore::verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Past the commit point: finish it.
    Forward,
    /// Before the commit point: undo it.
    Back,
    /// Neither: something else changed the state; nothing is touched.
    Diverged,
}

/// Which backend a destination's config selects, with the block that configures it.
#[derive(Debug, Clone, Copy)]
pub enum Kind<'d> {
    /// An object store (`backend: s3` or `azure`, its block).
    ObjectStore(&'d crate::config::S3Settings),
    /// A local destination with a `releases:` block (SPEC §15).
    Releases(&'d crate::config::ReleaseSettings),
    /// A local bundle path, published in place.
    Local,
}

/// The backend `dest`'s config selects: the one place a config block picks a backend
/// ([`for_destination`], [`capabilities`], and the operations that say something of one
/// kind, ask here).
pub fn kind_of(dest: &crate::config::Destination) -> Kind<'_> {
    match (&dest.s3, &dest.releases) {
        (Some(s), _) => Kind::ObjectStore(s),
        (None, Some(r)) => Kind::Releases(r),
        (None, None) => Kind::Local,
    }
}

/// The backend of a destination: the local filesystem, or the destination's bucket.
pub fn for_destination(dest: &crate::config::Destination) -> Result<Box<dyn Backend>> {
    match kind_of(dest) {
        Kind::ObjectStore(s) => Ok(Box::new(s3::S3Backend::from_settings(s)?)),
        Kind::Releases(r) => Ok(Box::new(releases::ReleasesBackend::new(r))),
        Kind::Local => Ok(Box::new(local::LocalBackend)),
    }
}

/// What the backend of `dest` can do ([`Backend::capabilities`]), from its config alone:
/// what the planner reads, with no store opened.
pub fn capabilities(dest: &crate::config::Destination) -> Capabilities {
    match kind_of(dest) {
        Kind::ObjectStore(s) => s3::capabilities(s),
        Kind::Releases(_) => releases::CAPABILITIES,
        Kind::Local => local::CAPABILITIES,
    }
}

/// The backend of an operation found in a journal or in staging: its record names the
/// store when it is not the local filesystem.
pub fn for_record(
    bundle: &Path,
    location: Option<&s3::S3Location>,
    releases: Option<&releases::ReleasesRecord>,
) -> Result<Box<dyn Backend>> {
    match (location, s3::ObjectKey::parse(bundle)) {
        (Some(l), Some(key)) => Ok(Box::new(s3::S3Backend::for_key(&key, l)?)),
        (Some(_), None) => Err(crate::error::Error::Failed(format!(
            "{} is not an s3 bundle path (s3://<bucket>/<prefix>)",
            bundle.display()
        ))),
        (None, _) if releases.is_some() => Ok(Box::new(releases::ReleasesBackend::new(
            &releases.expect("checked").settings,
        ))),
        (None, _) if s3::ObjectKey::is_spelled(bundle) => {
            Err(crate::error::Error::Failed(format!(
                "{}: the record does not say which endpoint and region hold it; run `distributor recover --config` with the destination's config",
                bundle.display()
            )))
        }
        (None, _) => Ok(Box::new(local::LocalBackend)),
    }
}

/// The sha256 of the state file `store` holds now; `Err` text when something other than a
/// regular file stands there.
pub fn state_hash(
    store: &(impl StoreRead + ?Sized),
) -> Result<std::result::Result<Option<crate::hash::ContentHash>, String>> {
    Ok(match store.read_state()? {
        StateBytes::Absent => Ok(None),
        StateBytes::Unusable(why) => Err(why),
        StateBytes::Bytes(b) => Ok(Some(crate::hash::ContentHash::of(&b))),
    })
}

/// [`state_hash`] as 64 lowercase hex characters.
pub fn state_sha256(
    store: &(impl StoreRead + ?Sized),
) -> Result<std::result::Result<Option<String>, String>> {
    Ok(state_hash(store)?.map(|h| h.map(|h| h.hex())))
}
