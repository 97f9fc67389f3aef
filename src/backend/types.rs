//! The types the storage interface speaks in, shared by every backend and by the journal
//! and executor above them: what a read of the state file found, an entry of a bundle
//! path's staging, and placement fingerprints (what distributor recorded when it placed a
//! file, read back from the journal to prove content without rehashing); the probe's
//! listing of a bundle path for the planner ([`Storage`]), what an overwrite or delete
//! moves aside ([`Replaced`]) and a rollback's hold ([`Hold`]).

use crate::hash::ContentHash;
use serde::Serialize;
use std::borrow::Cow;

/// What stands at the state file's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateBytes {
    /// Nothing.
    Absent,
    /// Something that cannot be state (not a regular file, or over the size limit): why.
    Unusable(String),
    /// A regular file's bytes.
    Bytes(Vec<u8>),
}

impl StateBytes {
    /// The bytes, when a regular file holds them.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            StateBytes::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// Parsed (SPEC §4).
    pub fn parse(&self) -> crate::state::StateFile {
        use crate::state::StateFile;
        match self {
            StateBytes::Absent => StateFile::Absent,
            StateBytes::Unusable(why) => StateFile::Invalid(why.clone()),
            StateBytes::Bytes(b) => StateFile::parse(b),
        }
    }
}

/// An entry of `.distributor/staging/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StagingEntry {
    /// `<op>/`: an operation's staging, its record complete.
    Operation(String),
    /// `.tmp-<op>/`: a record never completed; the operation changed nothing.
    Unfinished(String),
    /// Anything else (a file, a symlink, a name distributor never uses): the name and what
    /// it is. Never touched.
    Foreign(String, String),
    /// A record distributor does not believe (SPEC §17: another uid's, a published file's
    /// mode, a hard link): its path, and the operator's message. Never touched.
    Untrusted(String, String),
    /// `.distributor-staging/<op>/`, written by a version before SPEC §17: believed only
    /// for an operation the journal in use records (the local backend's `Bundle::adopt_legacy_staging`).
    Legacy(String),
}

/// The newest placement fingerprint of each of some paths, read back from the journal to
/// prove their content without rehashing: filled by `Journal::fingerprints`, newest
/// placement first, and asked with [`Fingerprints::vouching`]. Paths and hashes are
/// borrowed from the manifest being published, so reading thousands of entries allocates
/// nothing per entry. Slots sit in the order the paths were given (the manifest's), the
/// order placement sets hold them in and the probe asks for them in: a path is found
/// right after the one found last, without a map ([`crate::ordered::InOrder`]).
#[derive(Debug, Default)]
pub struct Fingerprints<'a> {
    /// The paths and the hash each is wanted for: a manifest's outputs, not copied (at a
    /// million files a list of them would be 24 MB); those not wanted have the slot
    /// [`Slot::Unwanted`].
    outputs: &'a [crate::source::OutputEntry],
    /// One per output.
    slots: Vec<Slot>,
    /// Finds a path among the outputs.
    order: crate::ordered::InOrder,
    open: usize,
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    /// Not asked for.
    Unwanted,
    /// No placement offered yet.
    Wanted,
    /// The newest placement, which recorded the wanted hash.
    Found(Placed),
    /// The newest placement recorded another hash: it vouches for nothing wanted (an
    /// older one never does: the file it describes was replaced since).
    Other,
}

/// A file staged ([`super::Steps::stage`]): its size and sha256 as copied, and the
/// fingerprint it has as staged where placing it may leave the file itself as it is.
#[derive(Debug, Clone, Copy)]
pub struct Staged {
    /// Size copied.
    pub size: u64,
    /// sha256 of the bytes copied.
    pub sha256: ContentHash,
    /// The file's fingerprint after its last write (`fstat` on the handle it was written
    /// through): a local file staged in a new tree, which the tree's one rename places
    /// without changing anything of the file. Handed back to [`super::Steps::place`],
    /// which returns it when the file was placed that way. `None` where placing changes
    /// the file (a rename of the file itself sets its ctime) or no fingerprint is kept.
    pub as_staged: Option<Placed>,
}

/// Size, mtime, inode and ctime recorded when a file was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// Size.
    pub size: u64,
    /// mtime in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Inode number.
    pub ino: u64,
    /// ctime in nanoseconds since the epoch, taken after distributor's last rename, link
    /// or unlink of the file; `None` in placements recorded before ctime was (they vouch
    /// for nothing: a file changed in place can keep its size and mtime, never its ctime).
    pub ctime_ns: Option<i64>,
}

impl<'a> Fingerprints<'a> {
    /// Wants the newest placement of each of `outputs`, to prove it holds its sha256.
    pub fn wanting_all(outputs: &'a [crate::source::OutputEntry]) -> Self {
        Self::wanting_outputs(outputs, std::iter::repeat_n(true, outputs.len()))
    }

    /// Wants the newest placement of each of `outputs` that `wanted` says (by index), to
    /// prove it holds its sha256.
    pub fn wanting_outputs(
        outputs: &'a [crate::source::OutputEntry],
        wanted: impl IntoIterator<Item = bool>,
    ) -> Self {
        let slots: Vec<Slot> = (wanted.into_iter())
            .map(|w| if w { Slot::Wanted } else { Slot::Unwanted })
            .collect();
        assert_eq!(slots.len(), outputs.len(), "one answer per output");
        let open = slots.iter().filter(|s| matches!(s, Slot::Wanted)).count();
        if open == 0 {
            // Nothing wanted (a first publication): no slot each (48 bytes a file).
            return Fingerprints::default();
        }
        Fingerprints {
            open,
            slots,
            outputs,
            order: Default::default(),
        }
    }

    /// How many wanted paths no placement was offered for yet.
    pub fn open(&self) -> usize {
        self.open
    }

    /// The slot of `path`.
    fn index(&self, path: &str) -> Option<usize> {
        (self.order).find(self.outputs.len(), |i| &self.outputs[i].path, path)
    }

    /// Offers a placement of `path` that recorded `sha256`; placements must come newest
    /// first: the first one offered for a wanted path decides.
    pub fn offer(&mut self, path: &str, sha256: &str, placed: Placed) {
        let Some(i) = self.index(path) else {
            return;
        };
        if let Slot::Wanted = self.slots[i] {
            self.slots[i] = if self.outputs[i].sha256 == *sha256 {
                Slot::Found(placed)
            } else {
                Slot::Other
            };
            self.open -= 1;
        }
    }

    /// The newest placement of `path`, when it recorded `sha256`.
    pub fn vouching(&self, path: &str, sha256: &ContentHash) -> Option<&Placed> {
        let i = self.index(path)?;
        match &self.slots[i] {
            Slot::Found(placed) if self.outputs[i].sha256 == *sha256 => Some(placed),
            _ => None,
        }
    }
}

/// What distributor recorded when it placed a file: proves content without rehashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// Size.
    pub size: u64,
    /// mtime in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Inode number.
    pub ino: u64,
    /// ctime in nanoseconds since the epoch, after the placing rename.
    pub ctime_ns: Option<i64>,
    /// Content hash it had when placed.
    pub sha256: ContentHash,
}

/// What the probe is to prove of a file: the hash it should hold and, when the journal has
/// one that recorded that hash, the fingerprint of its newest placement.
#[derive(Debug, Clone, Copy)]
pub struct Proof<'a> {
    /// The content hash to prove.
    pub sha256: &'a ContentHash,
    /// Proves it without hashing while the file still matches it (borrowed from the
    /// [`Fingerprints`]: a pointer per path, not a copy).
    pub placed: Option<&'a Placed>,
    /// Whether to hash the file when `placed` does not prove it. A republication's probe
    /// does not: such a file sends it to the general probe, which hashes it once.
    pub or_hash: bool,
}

/// Outputs of size 1 at the given paths and hashes, for tests (leaked: they live as long as
/// the fingerprints asked of them).
#[cfg(test)]
pub(crate) fn leaked_outputs<'p>(
    wanted: impl IntoIterator<Item = (&'p str, &'p ContentHash)>,
) -> &'static [crate::source::OutputEntry] {
    let outputs: Vec<crate::source::OutputEntry> = (wanted.into_iter())
        .map(|(path, sha256)| crate::source::OutputEntry {
            path: path.into(),
            size: 1,
            sha256: *sha256,
        })
        .collect();
    outputs.leak()
}

/// What storage holds at one bundle-relative path, as the backend saw it. A proven hash
/// is borrowed (`'a`) when a placement fingerprint proved the file holds the hash it was
/// asked about, and owned when the file was hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry<'a> {
    /// Nothing there.
    Missing,
    /// A regular file. `sha256` is its content hash when the backend proved it (by
    /// hashing, or by distributor's own placement fingerprint); `None` when not examined.
    File {
        /// Size in bytes.
        size: u64,
        /// Proven content hash.
        sha256: Option<Cow<'a, ContentHash>>,
    },
    /// A symlink and its text.
    Symlink {
        /// Link text.
        target: String,
    },
    /// A directory and the paths under it (bundle-relative), recursively; listed only
    /// where a planned file or link goes.
    Dir {
        /// Files, symlinks and special files below it.
        contents: Vec<String>,
        /// Directories below it.
        dirs: Vec<String>,
    },
    /// A socket, FIFO or device.
    Special,
}

/// The backend's view of a bundle path: every planned path, every recorded path and all
/// their ancestors.
///
/// Paths are borrowed from the manifest and the state they were probed for. The probed
/// paths themselves are kept in the order they were probed (the manifest's outputs, its
/// links, the other recorded paths), which is the order the planner asks for them in: a
/// lookup tries the entry after the one last found first; a path found neither there nor
/// among the directories is searched for in the probed paths sorted by path (sorted once,
/// on the first such lookup).
#[derive(Debug, Clone, Default)]
pub struct Storage<'a> {
    /// Set when the bundle path itself (or a mapped directory on the way to it) is a
    /// symlink, a special file or a file: the reason.
    pub bundle_unsafe: Option<String>,
    /// Set when the config's `releases` settings differ from those its `releases.dir`
    /// records (SPEC §15): why.
    pub releases_mismatch: Option<String>,
    /// A record in the destination distributor does not believe (SPEC §17): the
    /// operator's message naming it and its owner.
    pub untrusted_record: Option<String>,
    /// Set when a releases destination's `path` is not the symlink the last logged
    /// activation made (SPEC §17): why.
    pub path_changed: Option<String>,
    /// Set when the journal in use saw the destination log reach an entry the log no
    /// longer has (docs/operations.md, "The log's continuity"): why.
    pub log_missing: Option<String>,
    /// Set when a releases destination's active release is not the directory the log
    /// activated (docs/operations.md, "Release identity"): why.
    pub release_moved: Option<String>,
    /// Source digests rolled back from and not published past since, per owner (a
    /// releases destination's activation log, SPEC §15).
    pub rolled_back: Vec<Hold>,
    /// Entries by bundle-relative path (the directories on the way to the probed paths,
    /// or anything listed by hand). A path listed nowhere is treated as missing.
    pub entries: foldhash::HashMap<&'a str, Entry<'a>>,
    /// The probed paths' entries, in probe order (distinct from `entries`' paths).
    probed: Vec<(&'a str, Entry<'a>)>,
    /// Finds a path in `probed`.
    order: crate::ordered::InOrder,
}

impl<'a> Storage<'a> {
    /// A listing of `entries` (by path) and of the `probed` paths' entries in probe
    /// order; no path may be in both.
    pub fn new(
        bundle_unsafe: Option<String>,
        entries: foldhash::HashMap<&'a str, Entry<'a>>,
        probed: Vec<(&'a str, Entry<'a>)>,
    ) -> Storage<'a> {
        Storage {
            bundle_unsafe,
            releases_mismatch: None,
            untrusted_record: None,
            path_changed: None,
            log_missing: None,
            release_moved: None,
            rolled_back: Vec::new(),
            entries,
            probed,
            order: Default::default(),
        }
    }

    /// The entry at `path` (missing when not listed).
    pub fn get(&self, path: &str) -> &Entry<'a> {
        let (len, key) = (self.probed.len(), |i: usize| self.probed[i].0);
        if let Some(i) = self.order.next(len, key, path) {
            return &self.probed[i].1;
        }
        if let Some(e) = self.entries.get(path) {
            return e;
        }
        match self.order.search(len, key, path) {
            Some(i) => &self.probed[i].1,
            None => &Entry::Missing,
        }
    }
}

/// A rollback's hold (SPEC §15): the owner's source digest that was rolled back from;
/// publishing it again is the forceable conflict `rolled_back` until the owner publishes
/// something else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Hold {
    /// The owner whose publication was rolled back (`pipeline/destination`).
    pub owner: String,
    /// Its source digest.
    pub digest: String,
}

pub use crate::model::Replaced;

/// The device and inode of a directory: how a release is known (docs/operations.md,
/// "Release identity").
pub use crate::fs::Identity;

impl Replaced {
    /// What `entry` is, when it is a file or a link.
    pub fn of(entry: &Entry) -> Option<Replaced> {
        match entry {
            Entry::File { .. } => Some(Replaced::File),
            Entry::Symlink { .. } => Some(Replaced::Link),
            _ => None,
        }
    }
}

/// What a kind of storage can do, and how it proves what it holds: what the planner, the
/// executor and the operations ask of a store ([`crate::backend::BundleStore::capabilities`])
/// or of a destination's config ([`crate::backend::capabilities`]), instead of asking
/// which backend it is. Each backend states its own; nothing above `backend/` names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// The `state_version` its state holds (SPEC §4, §14): 1, or 2 where every output
    /// records the ETag that proves its content.
    pub state_version: u32,
    /// Whether the probe proves a file's content by metadata alone (an object store's
    /// ETag) rather than by a placement fingerprint or by hashing: `verify --deep` then
    /// reads and hashes every file ([`crate::backend::BundleStore::content_sha256`]).
    pub proves_by_etag: bool,
    /// Whether its commit point is a decision record rather than the state file (SPEC
    /// §17): an operation whose record says `commit` stands even where the state object
    /// names it without holding its post-state bytes, and `recover` explains its outcome
    /// by that record.
    pub commits_by_decision: bool,
    /// Whether its commit point takes the identity of the state file it wrote
    /// ([`crate::backend::StateFileId`]), so that a republication may take that state as
    /// read while the file keeps it.
    pub keeps_state_file_id: bool,
    /// Whether it keeps the destination log (SPEC §18) behind the storage interface
    /// ([`crate::backend::BundleStore::log`]) rather than in files read directly.
    pub log_behind_interface: bool,
    /// Whether it builds release directories (SPEC §15): its store is a
    /// [`crate::backend::releases::ReleaseStore`] (retention, rollback, promote, adopt).
    pub releases: bool,
    /// Whether it holds symlinks.
    pub links: bool,
    /// The longest key it accepts, in bytes, bucket or container excluded; `None` where
    /// only the filesystem limits names.
    pub max_key_len: Option<usize>,
    /// Whether it drops a trailing `.` from a key's segment (Azure Blob Storage), so an
    /// output named that way would land at another key.
    pub drops_trailing_dots: bool,
}

impl Capabilities {
    /// A local bundle path, published in place.
    pub const LOCAL: Capabilities = Capabilities {
        state_version: 1,
        proves_by_etag: false,
        commits_by_decision: false,
        keeps_state_file_id: true,
        log_behind_interface: false,
        releases: false,
        links: true,
        max_key_len: None,
        drops_trailing_dots: false,
    };

    /// A local destination with release directories.
    pub const RELEASES: Capabilities = Capabilities {
        keeps_state_file_id: false,
        releases: true,
        ..Capabilities::LOCAL
    };

    /// A key prefix in an object store (SPEC §14), before its dialect's own limits.
    pub const OBJECT_STORE: Capabilities = Capabilities {
        state_version: 2,
        proves_by_etag: true,
        commits_by_decision: true,
        keeps_state_file_id: false,
        log_behind_interface: true,
        releases: false,
        links: false,
        max_key_len: Some(1024),
        drops_trailing_dots: false,
    };
}
