//! `distributor blame` (docs/audit.md): who owns a path of a destination now, which
//! source placed it, and which operation last wrote it (with `--all`, every operation
//! that wrote, deleted or was refused on it, newest first). The owner and source come
//! from the state the destination holds (shared root: the path's owner record); the
//! operations from the journals given, merged by time, each naming the journal that
//! recorded it.
//!
//! Must never: write anything, or take a lock.

use crate::backend::{self, BundleStore};
use crate::config::{Config, Destination};
use crate::error::{Error, Result};
use crate::globs::PathGlobs;
use crate::journal::Journal;
use crate::journal::query::{self, PathEvent};
use crate::model::SourceRef;
use crate::state::{State, StateFile};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// `blame_version` of the JSON this build writes.
pub(crate) const BLAME_VERSION: u32 = 1;

use crate::journal::query::WROTE;

/// What `blame` was asked.
pub(crate) struct BlameRequest<'a> {
    /// The config, whose destinations are searched (`None`: the journals alone).
    pub config: Option<&'a Config>,
    /// Only these destinations (with a config).
    pub destinations: &'a [String],
    /// The journals, opened, with their paths.
    pub journals: &'a [(PathBuf, Journal)],
    /// The paths or globs asked about, bundle-relative.
    pub paths: &'a [String],
    /// The whole chain of each path, not only its last writer.
    pub all: bool,
    /// Answer from the destinations alone: their state and their logs' path lists, no
    /// journal (docs/audit.md, "From the destination alone").
    pub destination_only: bool,
}

/// One path's answer.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Blame {
    /// Always [`BLAME_VERSION`].
    pub blame_version: u32,
    /// The destination (with a config), else null.
    pub destination_id: Option<String>,
    /// The bundle path.
    pub bundle_path: String,
    /// The path, bundle-relative.
    pub path: String,
    /// Whether the state records it now.
    pub present: bool,
    /// `managed` (the state records it) or `unmanaged` (no state records it: what the
    /// journals know of it follows).
    pub status: &'static str,
    /// Its owner now, `pipeline/destination` (from the state).
    pub owner: Option<String>,
    /// The source that placed it (the owner record's).
    pub source: Option<SourceRef>,
    /// Its sha256 now (files), as the state records it.
    pub sha256: Option<String>,
    /// The operation that last wrote or deleted it.
    pub last: Option<Event>,
    /// `--all`: every operation that wrote, deleted or was refused on it, newest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain: Option<Vec<Event>>,
}

/// One operation on a path.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Event {
    /// The operation.
    pub operation_id: String,
    /// `publish`, `rollback`, ...
    pub command: String,
    /// Its decision.
    pub decision: String,
    /// Its status (`applied`, `refused`, ...).
    pub status: String,
    /// What it did to the path (`file_overwrite`, ..., or `refused`).
    pub action: String,
    /// A refusal's conflict kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    /// Who ran it.
    pub actor: String,
    /// On which host (known from the destination log; `None` from a journal).
    pub host: Option<String>,
    /// Why (`--reason`), when given.
    pub reason: Option<String>,
    /// Which owner ran it, `pipeline/destination`.
    pub owner: String,
    /// Its source.
    pub source: SourceRef,
    /// When it started.
    pub started_at: String,
    /// Where this comes from: `journal <journal_id>`, or `log <seq>`.
    pub from: String,
}

impl Event {
    /// What the log entry `e` says its operation did to a path (`what`).
    fn of_entry(e: &LogEntry, what: &str) -> Event {
        Event {
            operation_id: e.operation_id.clone(),
            command: e.command.clone(),
            decision: e.decision.clone(),
            // A logged operation passed its commit point.
            status: "applied".into(),
            action: what.to_string(),
            conflict: None,
            actor: e.actor.clone(),
            host: Some(e.host.clone()),
            reason: e.reason.clone(),
            owner: e.owner().unwrap_or_default(),
            source: e.source.clone().unwrap_or_else(|| SourceRef {
                id: String::new(),
                created_at: String::new(),
                digest: String::new(),
            }),
            started_at: e.started_at.clone(),
            from: format!("log {}", e.seq),
        }
    }
}

use crate::backend::local::log::Entry as LogEntry;

impl Event {
    fn of(e: &PathEvent) -> Event {
        let o = &e.operation;
        Event {
            operation_id: o.operation_id.clone(),
            command: o.command.clone(),
            decision: o.decision.clone(),
            status: o.status.clone(),
            action: e.action.clone(),
            conflict: e.conflict.clone(),
            actor: o.actor.clone(),
            host: None,
            reason: o.reason.clone(),
            owner: o.owner(),
            source: o.source.clone(),
            started_at: o.started_at.clone(),
            from: format!("journal {}", o.journal_id.as_deref().unwrap_or("?")),
        }
    }
}

/// The answers, and the PATHs that matched nothing.
pub(crate) struct Blamed {
    /// One per (destination, path) matched.
    pub found: Vec<Blame>,
    /// PATHs no state, journal or log knows.
    pub unknown: Vec<String>,
}

/// A PATH: one path, or a glob (`*`, `?`, `[`, `{`, or a trailing `/`).
struct Asked {
    text: String,
    globs: Option<PathGlobs>,
}

impl Asked {
    fn new(text: &str) -> Result<Asked> {
        let is_glob = text.contains(['*', '?', '[', '{']) || text.ends_with('/');
        let globs = is_glob
            .then(|| PathGlobs::new(&[text.to_string()]))
            .transpose()
            .map_err(|e| Error::Usage(format!("PATH {text}: {e}")))?;
        if !is_glob {
            crate::paths::check_safe_path(text)
                .map_err(|why| Error::Usage(format!("PATH {text}: {why}")))?;
        }
        Ok(Asked {
            text: text.to_string(),
            globs,
        })
    }

    fn matches(&self, p: &str) -> bool {
        match &self.globs {
            Some(g) => g.is_match(p),
            None => p == self.text,
        }
    }

    fn exact(&self) -> Option<&str> {
        self.globs.is_none().then_some(self.text.as_str())
    }
}

/// Answers `req`.
pub(crate) fn blame(req: &BlameRequest<'_>) -> Result<Blamed> {
    let asked: Vec<Asked> = req
        .paths
        .iter()
        .map(|p| Asked::new(p))
        .collect::<Result<_>>()?;
    let mut found = Vec::new();
    let mut unknown = Vec::new();
    for a in &asked {
        let before = found.len();
        match req.config {
            Some(config) => {
                for dest in selected(config, req.destinations)? {
                    for bundle in crate::ops::inspect::bundle_paths(dest)? {
                        found.extend(blame_bundle(req, a, Some(dest), &bundle)?);
                    }
                }
            }
            None => found.extend(blame_journals(req, a)?),
        }
        if found.len() == before {
            unknown.push(a.text.clone());
        }
    }
    Ok(Blamed { found, unknown })
}

fn selected<'c>(config: &'c Config, ids: &[String]) -> Result<Vec<&'c Destination>> {
    if ids.is_empty() {
        Ok(config.destinations.iter().collect())
    } else {
        config.select(ids)
    }
}

/// The events on paths `a` matches at `bundle` (every bundle path: `None`), in every
/// journal, newest first.
fn events(req: &BlameRequest<'_>, a: &Asked, bundle: Option<&str>) -> Result<Vec<Found>> {
    let mut all = Vec::new();
    for (_, j) in req.journals {
        let prefix = query::literal_prefix(&a.text);
        all.extend(
            query::path_events(
                j,
                bundle,
                a.exact(),
                Some(prefix),
                &|p| a.matches(p),
                !req.all,
            )?
            .iter()
            .map(|e| Found {
                path: e.path.clone(),
                bundle: e.operation.bundle_path.clone(),
                event: Event::of(e),
            }),
        );
    }
    all.sort_by(|x, y| y.event.started_at.cmp(&x.event.started_at));
    Ok(all)
}

/// An operation on a path, from a journal or the destination log.
#[derive(Debug, Clone)]
struct Found {
    path: String,
    bundle: String,
    event: Event,
}

/// The answers for `a` at one bundle path of `dest`: the paths its state records and
/// those the journals know there.
fn blame_bundle(
    req: &BlameRequest<'_>,
    a: &Asked,
    dest: Option<&Destination>,
    bundle: &Path,
) -> Result<Vec<Blame>> {
    let state = match dest {
        Some(d) => read_state(d, bundle)?,
        None => None,
    };
    let key = bundle.to_string_lossy().into_owned();
    let events = match (req.destination_only, dest) {
        (true, Some(d)) => logged_events(d, bundle, a)?,
        _ => events(req, a, Some(&key))?,
    };
    let mut paths: std::collections::BTreeSet<String> = Default::default();
    if let Some(st) = &state {
        paths.extend(
            st.outputs
                .iter()
                .map(|o| &o.path)
                .filter(|p| a.matches(p))
                .cloned(),
        );
        paths.extend(
            st.links
                .iter()
                .map(|l| &l.path)
                .filter(|p| a.matches(p))
                .cloned(),
        );
    }
    paths.extend(events.iter().map(|e| e.path.clone()));
    Ok(paths
        .into_iter()
        .map(|p| answer(req, dest, &key, &p, state.as_ref(), &events))
        .collect())
}

/// The events on paths `a` matches that the destination log at `bundle` records, from its
/// path lists, newest first: each list is read once and believed only when its sha256 is
/// the one its entry names (else the answer is refused, naming the list).
fn logged_events(dest: &Destination, bundle: &Path, a: &Asked) -> Result<Vec<Found>> {
    let Some(store) = backend::for_destination(dest)?.open(&dest.path, bundle)? else {
        return Ok(Vec::new());
    };
    let store: &dyn BundleStore = store.as_ref();
    let log = match crate::ops::inspect::read_log_at(bundle, Some(store)) {
        Some(l) => l?,
        None => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for e in log.entries.iter().rev() {
        let lines = match crate::backend::releases::ReleaseStore::of(store) {
            Some(r) if !r.is_plain() => {
                crate::backend::local::log::read_paths(r.record_base()?, e)?
            }
            _ => match store.log() {
                Some(l) => l.read_paths(e)?,
                None => crate::backend::local::log::read_paths_below(bundle, e)?,
            },
        };
        let lines = match lines {
            None => continue,
            Some(Ok(l)) => l,
            Some(Err(why)) => return Err(Error::Untrusted(format!("path list refused: {why}"))),
        };
        for l in lines.iter().filter(|l| a.matches(&l.path)) {
            out.push(Found {
                path: l.path.clone(),
                bundle: bundle.to_string_lossy().into_owned(),
                event: Event::of_entry(e, &l.what),
            });
        }
    }
    Ok(out)
}

/// With no config: every bundle path the journals know a matching path at.
fn blame_journals(req: &BlameRequest<'_>, a: &Asked) -> Result<Vec<Blame>> {
    let events = events(req, a, None)?;
    let mut keys: std::collections::BTreeSet<(String, String)> = Default::default();
    for e in &events {
        keys.insert((e.bundle.clone(), e.path.clone()));
    }
    Ok(keys
        .into_iter()
        .map(|(bundle, p)| {
            let here: Vec<Found> = (events.iter())
                .filter(|e| e.bundle == bundle)
                .cloned()
                .collect();
            answer(req, None, &bundle, &p, None, &here)
        })
        .collect())
}

/// One path's answer from the state (if read) and the events at its bundle path.
fn answer(
    req: &BlameRequest<'_>,
    dest: Option<&Destination>,
    bundle: &str,
    path: &str,
    state: Option<&State>,
    events: &[Found],
) -> Blame {
    let mine: Vec<&Event> = (events.iter())
        .filter(|e| e.path == path)
        .map(|e| &e.event)
        .collect();
    let last = (mine.iter())
        .find(|e| e.action != "refused" && WROTE.contains(&e.status.as_str()))
        .map(|e| (*e).clone());
    let recorded = state.and_then(|st| {
        let output = st.outputs.iter().find(|o| o.path == path);
        let owner = match output {
            Some(o) => Some((*o.owner).clone()),
            None => st
                .links
                .iter()
                .find(|l| l.path == path)
                .map(|l| (*l.owner).clone()),
        }?;
        let record = st.owners.iter().find(|r| r.owner == owner)?;
        Some((owner, record.source.clone(), output.map(|o| o.sha256.hex())))
    });
    let (owner, source, sha256) = match &recorded {
        Some((o, s, h)) => (Some(o.to_string()), Some(s.clone()), h.clone()),
        // Without a state read (journals alone): the last writer's, if it did not delete.
        None if state.is_none() => match &last {
            Some(e) if !e.action.ends_with("_delete") => {
                (Some(e.owner.clone()), Some(e.source.clone()), None)
            }
            _ => (None, None, None),
        },
        None => (None, None, None),
    };
    Blame {
        blame_version: BLAME_VERSION,
        destination_id: dest.map(|d| d.id.clone()),
        bundle_path: bundle.to_string(),
        path: path.to_string(),
        present: recorded.is_some(),
        status: if recorded.is_some() {
            "managed"
        } else {
            "unmanaged"
        },
        owner,
        source,
        sha256,
        last,
        chain: req.all.then(|| mine.iter().map(|e| (*e).clone()).collect()),
    }
}

/// The state `dest` holds at `bundle` now, when there is one distributor believes.
fn read_state(dest: &Destination, bundle: &Path) -> Result<Option<State>> {
    let Some(store) = backend::for_destination(dest)?.open(&dest.path, bundle)? else {
        return Ok(None);
    };
    let store: &dyn BundleStore = store.as_ref();
    let (state, _) = store.read_state_parsed(0)?;
    Ok(
        match state.for_version(store.capabilities().state_version) {
            StateFile::Valid(st) => Some(st),
            _ => None,
        },
    )
}
