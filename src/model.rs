//! Shared vocabulary of SPEC §1, §2 and §5: ids, owners, policy modes, decisions, conflict
//! kinds and the source reference recorded in state and reports.
//!
//! Every public string of the contract is spelled once here, as a serde name.

use chrono::{DateTime, FixedOffset};
use serde::{Deserialize, Serialize};
use std::fmt;

/// True when `s` is a valid pipeline or destination id: `^[a-z0-9][a-z0-9._-]{0,63}$`.
pub(crate) fn is_valid_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
        })
}

/// True when `s` is a valid source id: `^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$`.
pub(crate) fn is_valid_source_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'+' | b'-'))
}

/// Accepted form of ids, for error messages.
pub(crate) const ID_RULE: &str = "lowercase letters, digits, '.', '_' or '-', starting with a letter or digit, at most 64 characters";

/// Parses an RFC 3339 timestamp with an offset.
pub(crate) fn parse_time(s: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(s).ok()
}

/// An owner: a (pipeline id, destination id) pair, written `pipeline_id/destination_id`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    /// Pipeline id.
    pub pipeline_id: String,
    /// Destination id.
    pub destination_id: String,
}

impl Owner {
    /// Builds an owner from its two ids.
    pub fn new(pipeline_id: impl Into<String>, destination_id: impl Into<String>) -> Self {
        Owner {
            pipeline_id: pipeline_id.into(),
            destination_id: destination_id.into(),
        }
    }

    /// Parses `pipeline/destination`, both valid ids.
    pub fn parse(s: &str) -> Option<Owner> {
        let (p, d) = s.split_once('/')?;
        (is_valid_id(p) && is_valid_id(d)).then(|| Owner::new(p, d))
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.pipeline_id, self.destination_id)
    }
}

impl Serialize for Owner {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The identity of a source bundle as recorded in state and reports. The default, all
/// empty, is no source (an operation that published none: a `prune`, a settings change).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceRef {
    /// Manifest id.
    pub id: String,
    /// Creation time, RFC 3339, as written in the manifest.
    pub created_at: String,
    /// `sha256:<hex>` digest of the content (SPEC §3.3).
    pub digest: String,
}

impl SourceRef {
    /// The creation instant; `None` when the text is not RFC 3339.
    pub fn created(&self) -> Option<DateTime<FixedOffset>> {
        parse_time(&self.created_at)
    }
}

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vm])* #[serde(rename = $s)] $var),+
        }
        impl $name {
            /// Every accepted spelling, in declaration order.
            pub const ALL: &'static [&'static str] = &[$($s),+];
            /// The contract spelling of this value.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$var => $s),+ }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($s => Ok($name::$var),)+
                    _ => Err(format!("unknown value '{}', accepted: {}", s, Self::ALL.join(", "))),
                }
            }
        }
    };
}

string_enum!(
    /// Storage backend of a destination.
    Backend { /// Local filesystem.
        Local = "local", /// Object storage (SPEC §14).
        S3 = "s3", /// Azure Blob Storage (SPEC §21).
        Azure = "azure" }
);
impl Backend {
    /// Whether its destinations are key prefixes in an object store (s3, azure).
    pub fn is_object_store(self) -> bool {
        self != Backend::Local
    }
}

string_enum!(
    /// How the bundle path is derived from `path`.
    PathMappingMode { /// `path` is the bundle path.
        Fixed = "fixed", /// `path/<source id>`.
        SourceId = "source_id", /// `path/<rendered template>`.
        Template = "template" }
);
string_enum!(
    /// Whether one or several owners publish into the bundle path.
    StateMode { /// One owner.
        SingleOwner = "single_owner", /// Several owners, per-path ownership.
        SharedRoot = "shared_root" }
);
string_enum!(
    /// What happens to old managed outputs the new bundle omits.
    ReconciliationMode { /// Delete them.
        Replace = "replace", /// Keep them when the source id is the same.
        Merge = "merge" }
);
string_enum!(
    /// `transfer.destination_newer`.
    DestinationNewer { /// Leave the newer content, exit 0.
        Skip = "skip", /// Report a conflict.
        Conflict = "conflict" }
);
string_enum!(
    /// `transfer.same_created_digest_mismatch`.
    SameCreatedDigestMismatch { /// Report a conflict.
        Conflict = "conflict", /// Replace the content.
        Replace = "replace" }
);
string_enum!(
    /// `transfer.on_conflict`: what `--force` may do.
    OnConflict { /// `--force` replaces forceable conflicts.
        Replace = "replace", /// `--force` is refused.
        Refuse = "refuse" }
);
string_enum!(
    /// `takeover.mode` (SPEC §5.2).
    TakeoverMode { /// Same pipeline id may take over.
        SamePipeline = "same_pipeline", /// Same source id may take over.
        SameSource = "same_source", /// Any valid managed content may be taken over.
        AnyManaged = "any_managed", /// No takeover.
        Never = "never" }
);
string_enum!(
    /// Destination decision (SPEC §5.1).
    Decision {
        /// Nothing there yet.
        Create = "create",
        /// Nothing to do.
        Unchanged = "unchanged",
        /// Rewrite what drifted.
        Repair = "repair",
        /// Same owner and source id, newer source.
        ReplaceOlder = "replace_older",
        /// Same created time, other digest, transfer permits.
        ReplaceChanged = "replace_changed",
        /// Owner or source identity differs and the takeover mode permits.
        ReplaceTakeover = "replace_takeover",
        /// Forceable conflicts overridden by `--force`.
        ForceReplace = "force_replace",
        /// The destination holds newer content; left alone.
        SkipDestinationNewer = "skip_destination_newer",
        /// Nothing written.
        Conflict = "conflict",
        /// An earlier release activated again (`distributor rollback`, SPEC §15).
        Rollback = "rollback",
        /// A staged release activated (`distributor promote`, SPEC §19).
        Promote = "promote",
    }
);

impl Decision {
    /// True when the decision writes to the destination.
    pub fn writes(self) -> bool {
        matches!(
            self,
            Decision::Create
                | Decision::Repair
                | Decision::ReplaceOlder
                | Decision::ReplaceChanged
                | Decision::ReplaceTakeover
                | Decision::ForceReplace
        )
    }
}

/// What a journal row's and a staging record's `decision` holds: a destination decision
/// (SPEC §5.1), or one of the operations that are not publications and are journaled
/// under their own name (`adopt`, `prune`, `settings`). Reads and writes as that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordedDecision {
    /// A publication's, rollback's or promote's decision.
    Decision(Decision),
    /// `adopt`: `distributor releases adopt` made a first release of a plain directory.
    Adopt,
    /// `prune`: retention removed releases.
    Prune,
    /// `settings`: `distributor releases settings` changed a releases destination.
    Settings,
}

impl RecordedDecision {
    /// The names of the operations that are not decisions, in declaration order.
    pub const OPERATIONS: &'static [&'static str] = &["prune", "adopt", "settings"];

    /// Its name, as the journal and the staging record store it.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordedDecision::Decision(d) => d.as_str(),
            RecordedDecision::Adopt => "adopt",
            RecordedDecision::Prune => "prune",
            RecordedDecision::Settings => "settings",
        }
    }

    /// Every accepted name: the decisions, then [`RecordedDecision::OPERATIONS`].
    pub fn accepted() -> String {
        let all: Vec<&str> = (Decision::ALL.iter().chain(RecordedDecision::OPERATIONS))
            .copied()
            .collect();
        all.join(", ")
    }
}

impl From<Decision> for RecordedDecision {
    fn from(d: Decision) -> RecordedDecision {
        RecordedDecision::Decision(d)
    }
}

impl fmt::Display for RecordedDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RecordedDecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "adopt" => Ok(RecordedDecision::Adopt),
            "prune" => Ok(RecordedDecision::Prune),
            "settings" => Ok(RecordedDecision::Settings),
            _ => s.parse().map(RecordedDecision::Decision).map_err(|_| {
                format!(
                    "unknown value '{}', accepted: {}",
                    s.escape_debug(),
                    RecordedDecision::accepted()
                )
            }),
        }
    }
}

impl Serialize for RecordedDecision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RecordedDecision {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

string_enum!(
    /// Conflict kinds (SPEC §5.3).
    ConflictKind {
        /// A planned path exists in storage, unrecorded.
        UnmanagedContent = "unmanaged_content",
        /// An unrecorded directory stands where a planned file goes.
        UnmanagedDirectory = "unmanaged_directory",
        /// `.distributor.json` is not valid state.
        InvalidState = "invalid_state",
        /// State mode differs from the configured one.
        StateModeMismatch = "state_mode_mismatch",
        /// Another pipeline owns the destination.
        PipelineDiffers = "pipeline_differs",
        /// Another destination owns the destination.
        DestinationDiffers = "destination_differs",
        /// Another source id is published there.
        SourceIdDiffers = "source_id_differs",
        /// A shared-root path is owned by another owner.
        OwnerConflict = "owner_conflict",
        /// Same source and time, other digest.
        SameCreatedDigestMismatch = "same_created_digest_mismatch",
        /// The destination holds a newer source.
        DestinationNewer = "destination_newer",
        /// A symlink or special file on the way.
        UnsafeStorage = "unsafe_storage",
        /// A path whose object key would exceed 1024 bytes (s3).
        KeyTooLong = "key_too_long",
        /// A path whose object key the store cannot hold as written (azure: a segment
        /// ending in `.`, which Azure drops).
        KeyUnsupported = "key_unsupported",
        /// A link, which an object store cannot hold (s3).
        UnsupportedLink = "unsupported_link",
        /// The config's `releases` settings differ from those `releases.dir` records.
        ReleasesMismatch = "releases_mismatch",
        /// The source digest was rolled back from (SPEC §15): publishing it again would
        /// silently undo the rollback.
        RolledBack = "rolled_back",
        /// A record in the destination distributor did not write (SPEC §17).
        UntrustedRecord = "untrusted_record",
        /// A releases destination's `path` is not the symlink the last logged activation
        /// made (SPEC §17): missing, a directory, or another target.
        PathChanged = "path_changed",
        /// A release's name in `releases.dir` no longer holds the release distributor
        /// made or verified there (its device and inode, its owner or its state differ):
        /// nothing is activated, carried or removed there (docs/operations.md, "Release
        /// identity").
        ReleaseMoved = "release_moved",
        /// A publication would delete more of the owner's recorded outputs and links
        /// than `guard.max_delete` allows (SPEC §19); only `--allow-delete N` lifts it.
        MassDelete = "mass_delete",
        /// A bundle with no outputs would delete recorded content (SPEC §19), and
        /// `guard.allow_empty` is not set.
        EmptySource = "empty_source",
        /// `publish --plan`: the plan made again under the lock is not the saved one
        /// (SPEC §19).
        StalePlan = "stale_plan",
        /// `distributor promote`: the active release is no longer the one the staged
        /// release was built against (SPEC §19); stage again.
        StaleStage = "stale_stage",
        /// The journal in use saw the destination log reach an entry the log no longer
        /// has (docs/operations.md, "The log's continuity"): it was removed or cut short.
        LogMissing = "log_missing",
    }
);

impl ConflictKind {
    /// Whether `--force` may override this kind (SPEC §5.3).
    pub fn forceable(self) -> bool {
        !matches!(
            self,
            ConflictKind::UnmanagedDirectory
                | ConflictKind::StateModeMismatch
                | ConflictKind::UnsafeStorage
                | ConflictKind::KeyTooLong
                | ConflictKind::KeyUnsupported
                | ConflictKind::UnsupportedLink
                | ConflictKind::ReleasesMismatch
                | ConflictKind::UntrustedRecord
                | ConflictKind::PathChanged
                | ConflictKind::ReleaseMoved
                | ConflictKind::MassDelete
                | ConflictKind::StalePlan
                | ConflictKind::StaleStage
                | ConflictKind::LogMissing
        )
    }
}

string_enum!(
    /// What happens to one file or link.
    FileOp { /// New path.
        Create = "create", /// Replace what is there.
        Overwrite = "overwrite", /// Remove a managed path.
        Delete = "delete", /// Identical, not rewritten.
        Unchanged = "unchanged", /// Kept and still recorded (merge).
        Retain = "retain" }
);

impl FileOp {
    /// Sign used in text reports.
    pub fn sign(self) -> char {
        match self {
            FileOp::Create => '+',
            FileOp::Overwrite => '~',
            FileOp::Delete => '-',
            FileOp::Unchanged => '=',
            FileOp::Retain => '*',
        }
    }
}

/// Serializes the items of a slice through `F` as a sequence, without collecting them
/// first (a million-file state or placement set is written straight from its records).
pub(crate) struct Seq<'a, T, F>(pub &'a [T], pub F);

impl<T, R: Serialize, F: Fn(&T) -> R> Serialize for Seq<'_, T, F> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(&self.1))
    }
}

/// What an overwrite or delete moves aside, as planning saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Replaced {
    /// A regular file.
    File,
    /// A symlink.
    Link,
}

impl Replaced {
    /// As serialized: `file`, `link`.
    pub fn as_str(self) -> &'static str {
        match self {
            Replaced::File => "file",
            Replaced::Link => "link",
        }
    }
}
