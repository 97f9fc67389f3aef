//! Destination state `.distributor.json` (SPEC §4): both on-disk forms, validity, and a
//! unified in-memory model.
//!
//! In memory a single-owner state is a [`State`] with exactly one owner record that owns
//! every path, so the planner reasons about both modes with one model. Rendering is stable:
//! pretty-printed, keys in contract order, outputs and links sorted by path.

use crate::hash::{ContentHash, is_sha256_hex};
use crate::model::Seq;
use crate::model::{
    Owner, ReconciliationMode, SourceRef, StateMode, is_valid_id, is_valid_source_id, parse_time,
};
use crate::source::{check_path_set, check_safe_path};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// File name of the state at the root of a bundle path.
pub(crate) const STATE_FILE: &str = ".distributor.json";

/// One owner's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRecord {
    /// The owner.
    pub owner: Owner,
    /// Source it last published.
    pub source: SourceRef,
    /// Reconciliation mode of that publication.
    pub reconciliation: ReconciliationMode,
    /// When it was published.
    pub published_at: String,
    /// The operation that published it.
    pub operation_id: String,
}

/// A recorded output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedOutput {
    /// Bundle-relative path.
    pub path: String,
    /// Size.
    pub size: u64,
    /// sha256.
    pub sha256: ContentHash,
    /// The object's ETag as the store returned it (state version 2, s3 destinations);
    /// `None` in version 1 and for outputs not uploaded yet.
    pub etag: Option<String>,
    /// Owner. Shared by every path of that owner (one allocation per owner, not per path).
    pub owner: Arc<Owner>,
}

/// A recorded link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedLink {
    /// Bundle-relative path.
    pub path: String,
    /// Bundle-relative target.
    pub target: String,
    /// Owner. Shared by every path of that owner (one allocation per owner, not per path).
    pub owner: Arc<Owner>,
}

/// Valid destination state of either mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// `state_version`: 1 (local destinations), or 2 (s3 destinations: outputs carry
    /// their ETags).
    pub version: u32,
    /// On-disk form.
    pub mode: StateMode,
    /// Owner records (exactly one for single owner).
    pub owners: Vec<OwnerRecord>,
    /// Outputs, sorted by path.
    pub outputs: Vec<RecordedOutput>,
    /// Links, sorted by path.
    pub links: Vec<RecordedLink>,
}

/// What was found at `.distributor.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateFile {
    /// No state file.
    Absent,
    /// A file that is not valid state, with the reason.
    Invalid(String),
    /// Valid state.
    Valid(State),
    /// A state file distributor did not write (SPEC §17: not owned by its uid, not mode
    /// 0600, or more than one link): why, and what it holds. Believed only where the
    /// journal in use committed exactly these bytes (an earlier version's state file:
    /// [`StateFile::believed`]).
    Untrusted(String, Box<StateFile>),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SingleOwnerDoc {
    state_version: u32,
    state_mode: StateMode,
    pipeline_id: String,
    destination_id: String,
    source: SourceRef,
    reconciliation: ReconciliationMode,
    published_at: String,
    operation_id: String,
    #[serde(deserialize_with = "sized_outputs")]
    outputs: Vec<OutputDoc>,
    links: Vec<LinkDoc>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SharedRootDoc {
    state_version: u32,
    state_mode: StateMode,
    owners: Vec<OwnerDoc>,
    #[serde(deserialize_with = "sized_outputs")]
    outputs: Vec<OutputDoc>,
    links: Vec<LinkDoc>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnerDoc {
    owner: String,
    pipeline_id: String,
    destination_id: String,
    source: SourceRef,
    reconciliation: ReconciliationMode,
    published_at: String,
    operation_id: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputDoc {
    path: String,
    size: u64,
    sha256: ContentHash,
    // Boxed (16 bytes, not 24): a million parsed documents are converted in place into
    // records, whose size they then set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etag: Option<Box<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<Box<str>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkDoc {
    path: String,
    target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
}

impl StateFile {
    /// Classifies the bytes of a state file.
    pub fn parse(bytes: &[u8]) -> StateFile {
        Self::of(parse_state(&|| serde_json::Deserializer::from_slice(bytes)))
    }

    /// Classifies a state file as it is read, without holding its bytes: `open` gives a
    /// reader from the document's start for each pass parsing takes (the head, then the
    /// typed records). A state that is not valid is read whole to explain why, exactly as
    /// [`StateFile::parse`] does (a reader's error positions are a column off).
    /// `outputs` is how many outputs it likely lists (0 when not known): their list is
    /// allocated at that size once, not doubled up to it (at a million outputs, the last
    /// doubling holds 150 MB at once).
    pub fn parse_from<R: std::io::Read>(open: impl Fn() -> R, outputs: usize) -> StateFile {
        OUTPUTS_HINT.with(|h| h.set(outputs));
        let short = short_way(&|| serde_json::Deserializer::from_reader(open()));
        OUTPUTS_HINT.with(|h| h.set(0));
        if let Some(valid) = short
            && valid.is_ok()
        {
            return Self::of(valid);
        }
        let mut bytes = Vec::new();
        match open().read_to_end(&mut bytes) {
            Ok(_) => StateFile::parse(&bytes),
            Err(e) => StateFile::Invalid(format!("cannot be read: {e}")),
        }
    }

    fn of(parsed: Result<State, String>) -> StateFile {
        match parsed {
            Ok(s) => StateFile::Valid(s),
            Err(reason) => StateFile::Invalid(reason),
        }
    }

    /// Valid state of another version than the backend's (`1` local, `2` s3) becomes
    /// invalid: a local destination never holds ETags, an s3 one always does.
    pub fn for_version(self, version: u32) -> StateFile {
        match self {
            StateFile::Valid(s) if s.version != version => StateFile::Invalid(format!(
                "state_version {} is not the state of this backend, accepted: state_version {version} ({})",
                s.version,
                if version == 2 {
                    "s3 destinations record each output's etag"
                } else {
                    "local destinations"
                }
            )),
            StateFile::Untrusted(why, inner) => {
                StateFile::Untrusted(why, Box::new(inner.for_version(version)))
            }
            other => other,
        }
    }

    /// What the file holds, believed (its owner, mode and links aside): for a state file
    /// the journal in use vouches for.
    pub fn believed(self) -> StateFile {
        match self {
            StateFile::Untrusted(_, inner) => inner.believed(),
            other => other,
        }
    }
}

/// The two keys that say how to read the rest of a state file. Read first, skipping every
/// other value unparsed, so that the document itself is then read once, straight into its
/// typed form (a generic JSON tree of 100,000 outputs costs more than the whole plan).
/// distributor writes them first, so a first look stops as soon as both are in and the
/// typed pass reads the whole document; should that find anything wrong, the state is read
/// again the long way (the head from the whole document first), so that an invalid state
/// file gets the same reason whichever way it is broken.
#[derive(Default)]
struct Head {
    state_version: Option<serde_json::Value>,
    state_mode: Option<serde_json::Value>,
}

/// The error that stops the head's reading once both keys are in.
const HEAD_READ: &str = "distributor: state head read";

/// Reads the head into `.0`; stops once both keys are in when `.1`.
struct HeadSeed<'h>(&'h mut Head, bool);

impl<'de> serde::de::DeserializeSeed<'de> for HeadSeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for HeadSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (head, early) = (self.0, self.1);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "state_version" => head.state_version = Some(map.next_value()?),
                "state_mode" => head.state_mode = Some(map.next_value()?),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            if early && head.state_version.is_some() && head.state_mode.is_some() {
                return Err(serde::de::Error::custom(HEAD_READ));
            }
        }
        Ok(())
    }
}

thread_local! {
    /// How many outputs the state file parsed on this thread likely lists
    /// ([`StateFile::parse_from`]); taken by the first list of outputs parsed.
    static OUTPUTS_HINT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A state's outputs, allocated for [`OUTPUTS_HINT`] of them up front.
fn sized_outputs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<OutputDoc>, D::Error> {
    struct Outputs;
    impl<'de> serde::de::Visitor<'de> for Outputs {
        type Value = Vec<OutputDoc>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a sequence")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let hint = OUTPUTS_HINT.with(|h| h.take());
            let mut outputs = Vec::with_capacity(hint.max(seq.size_hint().unwrap_or(0)));
            while let Some(o) = seq.next_element()? {
                outputs.push(o);
            }
            Ok(outputs)
        }
    }
    d.deserialize_seq(Outputs)
}

/// A JSON reader over a state document, from its start.
type Open<'o, R> = &'o dyn Fn() -> serde_json::Deserializer<R>;

fn parse_state<'de, R: serde_json::de::Read<'de>>(open: Open<R>) -> Result<State, String> {
    if let Some(validated) = short_way(open) {
        return validated;
    }
    // The long way, which explains what is wrong.
    let (head, read) = read_head(open(), false);
    read.map_err(|e| match e.classify() {
        serde_json::error::Category::Data => "not a JSON object".to_string(),
        _ => format!("not JSON: {e}"),
    })?;
    let (version, mode) = mode_of(&head)?;
    let state = typed_state(open(), version, mode)?;
    validate(&state)?;
    Ok(state)
}

/// The short way: the head from the first keys, then the typed pass, then validation;
/// `None` when reading fails. It is taken only when all the reading succeeds, and then it
/// is what the long way would have found: the typed pass read the whole document (a
/// duplicate key, a syntax error or anything after the object fails it).
fn short_way<'de, R: serde_json::de::Read<'de>>(open: Open<R>) -> Option<Result<State, String>> {
    let (head, read) = read_head(open(), true);
    if read.is_err_and(|e| e.to_string().starts_with(HEAD_READ))
        && let Ok((version, mode)) = mode_of(&head)
        && let Ok(state) = typed_state(open(), version, mode)
    {
        return Some(validate(&state).map(|()| state));
    }
    None
}

/// The planned post-state `bytes` (rendered before anything was uploaded) with each
/// output's ETag filled in by `etag_of(path, sha256)`, as state version 2 (SPEC §14).
/// An output no ETag is known for is an error: the state would not prove it.
pub(crate) fn fill_etags(
    bytes: &[u8],
    mut etag_of: impl FnMut(&str, &ContentHash) -> Option<String>,
) -> Result<Vec<u8>, String> {
    let open = || serde_json::Deserializer::from_slice(bytes);
    let (head, read) = read_head(open(), false);
    read.map_err(|e| format!("planned post-state is not JSON: {e}"))?;
    let (_, mode) = mode_of(&head)?;
    let mut state = typed_state(open(), 2, mode)?;
    for o in state.outputs.iter_mut() {
        let etag = etag_of(&o.path, &o.sha256).ok_or_else(|| {
            format!(
                "no ETag is known for '{}': it was neither uploaded by this operation nor recorded with the same content before",
                o.path
            )
        })?;
        o.etag = Some(etag);
    }
    state.version = 2;
    validate(&state)?;
    Ok(state.render())
}

/// Reads the head of a state file, and the whole document as JSON after it; with `early`,
/// stops with the [`HEAD_READ`] error as soon as both keys are in.
fn read_head<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    early: bool,
) -> (Head, serde_json::Result<()>) {
    let mut head = Head::default();
    let read = serde::de::DeserializeSeed::deserialize(HeadSeed(&mut head, early), &mut de)
        .and_then(|()| de.end());
    (head, read)
}

/// The whole document read as a `T`.
fn read_whole<'de, T: Deserialize<'de>, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
) -> serde_json::Result<T> {
    let value = T::deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// The version and mode the head names, if it is a state this distributor reads.
fn mode_of(head: &Head) -> Result<(u32, StateMode), String> {
    let version = match head.state_version.as_ref().and_then(|v| v.as_u64()) {
        Some(v @ (1 | 2)) => v as u32,
        Some(v) if v > 2 => {
            return Err(format!(
                "state_version {v} was written by a newer distributor; this one reads state_version 1 and 2"
            ));
        }
        _ => return Err("state_version is missing or not 1 or 2".into()),
    };
    match head.state_mode.as_ref().and_then(|v| v.as_str()) {
        Some("single_owner") => Ok((version, StateMode::SingleOwner)),
        Some("shared_root") => Ok((version, StateMode::SharedRoot)),
        other => Err(format!(
            "state_mode {other:?} is unknown, accepted: single_owner, shared_root"
        )),
    }
}

/// The document read as state of `mode` (not validated yet).
fn typed_state<'de, R: serde_json::de::Read<'de>>(
    de: serde_json::Deserializer<R>,
    version: u32,
    mode: StateMode,
) -> Result<State, String> {
    match mode {
        StateMode::SingleOwner => {
            let d: SingleOwnerDoc =
                read_whole(de).map_err(|e| format!("single_owner state: {e}"))?;
            single_owner_state(d, version)
        }
        StateMode::SharedRoot => {
            let d: SharedRootDoc = read_whole(de).map_err(|e| format!("shared_root state: {e}"))?;
            shared_root_state(d, version)
        }
    }
}

/// A single-owner document as a [`State`]: its one owner owns every path, and no path
/// names an owner of its own.
fn single_owner_state(d: SingleOwnerDoc, version: u32) -> Result<State, String> {
    let owner = Owner::new(d.pipeline_id, d.destination_id);
    let shared = Arc::new(owner.clone());
    // Converted in place: the records reuse the parsed documents' allocation (at a
    // million outputs, a second list would be another 100 MB while both are held).
    let outputs = (d.outputs.into_iter())
        .map(|o| match o.owner {
            Some(_) => Err(format!(
                "output '{}': single_owner state has no per-path owner",
                o.path
            )),
            None => Ok(RecordedOutput {
                path: o.path,
                size: o.size,
                sha256: o.sha256,
                etag: o.etag.map(String::from),
                owner: Arc::clone(&shared),
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut links = Vec::with_capacity(d.links.len());
    for l in d.links {
        if l.owner.is_some() {
            return Err(format!(
                "link '{}': single_owner state has no per-path owner",
                l.path
            ));
        }
        links.push(RecordedLink {
            path: l.path,
            target: l.target,
            owner: Arc::clone(&shared),
        });
    }
    Ok(State {
        version,
        mode: StateMode::SingleOwner,
        owners: vec![OwnerRecord {
            owner,
            source: d.source,
            reconciliation: d.reconciliation,
            published_at: d.published_at,
            operation_id: d.operation_id,
        }],
        outputs,
        links,
    })
}

/// A shared-root document as a [`State`]: each owner's name matches its ids, and each
/// path names a listed owner.
fn shared_root_state(d: SharedRootDoc, version: u32) -> Result<State, String> {
    let mut owners = Vec::with_capacity(d.owners.len());
    for o in d.owners {
        let owner = Owner::new(o.pipeline_id, o.destination_id);
        if owner.to_string() != o.owner {
            return Err(format!(
                "owner '{}' does not match its pipeline_id/destination_id '{owner}'",
                o.owner
            ));
        }
        owners.push(OwnerRecord {
            owner,
            source: o.source,
            reconciliation: o.reconciliation,
            published_at: o.published_at,
            operation_id: o.operation_id,
        });
    }
    // Owners by name, looked up once per path.
    let by_name: std::collections::HashMap<String, Arc<Owner>> = owners
        .iter()
        .map(|r| (r.owner.to_string(), Arc::new(r.owner.clone())))
        .collect();
    let find = |name: Option<&str>, path: &str| -> Result<Arc<Owner>, String> {
        let name = name.ok_or_else(|| format!("'{path}' names no owner"))?;
        by_name
            .get(name)
            .map(Arc::clone)
            .ok_or_else(|| format!("'{path}' names owner '{name}', which is not listed in owners"))
    };
    // In place, as for a single owner.
    let outputs = (d.outputs.into_iter())
        .map(|o| {
            Ok(RecordedOutput {
                owner: find(o.owner.as_deref(), &o.path)?,
                path: o.path,
                size: o.size,
                sha256: o.sha256,
                etag: o.etag.map(String::from),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut links = Vec::with_capacity(d.links.len());
    for l in d.links {
        let owner = find(l.owner.as_deref(), &l.path)?;
        links.push(RecordedLink {
            path: l.path,
            target: l.target,
            owner,
        });
    }
    Ok(State {
        version,
        mode: StateMode::SharedRoot,
        owners,
        outputs,
        links,
    })
}

fn validate(s: &State) -> Result<(), String> {
    for (i, r) in s.owners.iter().enumerate() {
        if !is_valid_id(&r.owner.pipeline_id) || !is_valid_id(&r.owner.destination_id) {
            return Err(format!(
                "owner '{}' has an invalid pipeline or destination id",
                r.owner
            ));
        }
        if s.owners[..i].iter().any(|o| o.owner == r.owner) {
            return Err(format!("owner '{}' is listed twice", r.owner));
        }
        if !is_valid_source_id(&r.source.id) {
            return Err(format!(
                "owner '{}': source id '{}' is invalid",
                r.owner, r.source.id
            ));
        }
        if r.source.created().is_none() {
            return Err(format!(
                "owner '{}': source created_at '{}' is not RFC 3339",
                r.owner, r.source.created_at
            ));
        }
        if !r
            .source
            .digest
            .strip_prefix("sha256:")
            .is_some_and(is_sha256_hex)
        {
            return Err(format!(
                "owner '{}': source digest is not sha256:<64 hex>",
                r.owner
            ));
        }
        if parse_time(&r.published_at).is_none() {
            return Err(format!(
                "owner '{}': published_at '{}' is not RFC 3339",
                r.owner, r.published_at
            ));
        }
        if r.operation_id.is_empty() {
            return Err(format!("owner '{}': operation_id is empty", r.owner));
        }
    }
    for o in &s.outputs {
        check_safe_path(&o.path).map_err(|e| format!("output '{}': {e}", o.path.escape_debug()))?;
        match (s.version, &o.etag) {
            (1, Some(_)) => {
                return Err(format!(
                    "output '{}': etag is recorded only in state_version 2",
                    o.path
                ));
            }
            (2, None) => {
                return Err(format!(
                    "output '{}': state_version 2 records an etag for every output",
                    o.path
                ));
            }
            (2, Some(e)) if e.is_empty() || e.len() > 256 || e.chars().any(char::is_control) => {
                return Err(format!(
                    "output '{}': etag is empty, longer than 256 characters or holds a control character",
                    o.path
                ));
            }
            _ => {}
        }
    }
    for l in &s.links {
        check_safe_path(&l.path).map_err(|e| format!("link '{}': {e}", l.path.escape_debug()))?;
        check_safe_path(&l.target)
            .map_err(|e| format!("link '{}' target: {e}", l.path.escape_debug()))?;
    }
    check_path_set(
        s.outputs
            .iter()
            .map(|o| o.path.as_str())
            .chain(s.links.iter().map(|l| l.path.as_str())),
    )
    .map_err(|e| e.to_string())
}

impl State {
    /// How many outputs and links `owner` has recorded.
    pub fn recorded_of(&self, owner: &Owner) -> u64 {
        (self.outputs.iter().filter(|r| *r.owner == *owner).count()
            + self.links.iter().filter(|r| *r.owner == *owner).count()) as u64
    }

    /// The record of `owner`, if any.
    pub fn owner(&self, owner: &Owner) -> Option<&OwnerRecord> {
        self.owners.iter().find(|r| &r.owner == owner)
    }

    /// Renders the state in its stable on-disk form (pretty JSON, trailing newline).
    /// Outputs and links are sorted by path; owner records without paths are dropped.
    /// Renders from borrowed records into one buffer sized up front: at a million outputs
    /// a copy of the records, or a buffer grown by doubling, would be hundreds of
    /// megabytes more at the publication's peak.
    pub fn render<'s>(&'s self) -> Vec<u8> {
        let mut outputs: Vec<&RecordedOutput> = self.outputs.iter().collect();
        outputs.sort_by(|a, b| a.path.cmp(&b.path));
        let mut links: Vec<&RecordedLink> = self.links.iter().collect();
        links.sort_by(|a, b| a.path.cmp(&b.path));
        let shared = self.mode == StateMode::SharedRoot;
        let out = |o: &&'s RecordedOutput| OutputOut {
            path: &o.path,
            size: o.size,
            sha256: o.sha256,
            etag: o.etag.as_deref(),
            owner: shared.then_some(OwnerName(&o.owner)),
        };
        let link = |l: &&'s RecordedLink| LinkOut {
            path: &l.path,
            target: &l.target,
            owner: shared.then_some(OwnerName(&l.owner)),
        };
        let mut bytes = Vec::with_capacity(rendered_size(&self.outputs, &self.links, shared));
        let written = match self.mode {
            StateMode::SingleOwner => {
                let r = &self.owners[0];
                serde_json::to_writer_pretty(
                    &mut bytes,
                    &SingleOwnerOut {
                        state_version: self.version,
                        state_mode: StateMode::SingleOwner,
                        record: RecordOut::of(r),
                        outputs: Seq(&outputs, out),
                        links: Seq(&links, link),
                    },
                )
            }
            StateMode::SharedRoot => {
                let mut owners: Vec<&OwnerRecord> = self
                    .owners
                    .iter()
                    .filter(|r| {
                        outputs.iter().any(|o| *o.owner == r.owner)
                            || links.iter().any(|l| *l.owner == r.owner)
                    })
                    .collect();
                owners.sort_by(|a, b| a.owner.cmp(&b.owner));
                let owner = |r: &&'s OwnerRecord| OwnerOut {
                    owner: OwnerName(&r.owner),
                    record: RecordOut::of(r),
                };
                serde_json::to_writer_pretty(
                    &mut bytes,
                    &SharedRootOut {
                        state_version: self.version,
                        state_mode: StateMode::SharedRoot,
                        owners: Seq(&owners, owner),
                        outputs: Seq(&outputs, out),
                        links: Seq(&links, link),
                    },
                )
            }
        };
        written.expect("state serializes");
        bytes.push(b'\n');
        bytes
    }
}

/// An upper bound of the rendered size of these records (pretty JSON: each output's
/// fixed text is under 150 bytes besides its path, ETag and owner), plus the head.
fn rendered_size(outputs: &[RecordedOutput], links: &[RecordedLink], shared: bool) -> usize {
    let owner = |o: &Owner| match shared {
        true => o.pipeline_id.len() + o.destination_id.len() + 24,
        false => 0,
    };
    let o: usize = (outputs.iter())
        .map(|o| 150 + o.path.len() + o.etag.as_ref().map_or(0, |e| e.len() + 20) + owner(&o.owner))
        .sum();
    let l: usize = (links.iter())
        .map(|l| 80 + l.path.len() + l.target.len() + owner(&l.owner))
        .sum();
    o + l + 4096
}

/// An owner written `pipeline/destination`, without a string per path.
struct OwnerName<'a>(&'a Owner);

impl Serialize for OwnerName<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self.0)
    }
}

// The on-disk documents as rendered: the fields of the `*Doc` forms that parse them, in
// the same order, borrowed from the records.

#[derive(Serialize)]
struct SingleOwnerOut<'a, O, L> {
    state_version: u32,
    state_mode: StateMode,
    #[serde(flatten)]
    record: RecordOut<'a>,
    outputs: O,
    links: L,
}

#[derive(Serialize)]
struct SharedRootOut<W, O, L> {
    state_version: u32,
    state_mode: StateMode,
    owners: W,
    outputs: O,
    links: L,
}

#[derive(Serialize)]
struct OwnerOut<'a> {
    owner: OwnerName<'a>,
    #[serde(flatten)]
    record: RecordOut<'a>,
}

/// An owner record's fields, as both forms write them.
#[derive(Serialize)]
struct RecordOut<'a> {
    pipeline_id: &'a str,
    destination_id: &'a str,
    source: &'a SourceRef,
    reconciliation: ReconciliationMode,
    published_at: &'a str,
    operation_id: &'a str,
}

impl<'a> RecordOut<'a> {
    fn of(r: &'a OwnerRecord) -> Self {
        RecordOut {
            pipeline_id: &r.owner.pipeline_id,
            destination_id: &r.owner.destination_id,
            source: &r.source,
            reconciliation: r.reconciliation,
            published_at: &r.published_at,
            operation_id: &r.operation_id,
        }
    }
}

#[derive(Serialize)]
struct OutputOut<'a> {
    path: &'a str,
    size: u64,
    sha256: ContentHash,
    #[serde(skip_serializing_if = "Option::is_none")]
    etag: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<OwnerName<'a>>,
}

#[derive(Serialize)]
struct LinkOut<'a> {
    path: &'a str,
    target: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<OwnerName<'a>>,
}

#[cfg(test)]
mod tests;
