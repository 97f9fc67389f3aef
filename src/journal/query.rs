//! Read-only queries for `distributor history` (SPEC §9): operations with their derived
//! status, filtered and newest first, and one operation with its events and actions.
//!
//! Everything here reads the documented views (`operations`) plus the raw rows they are
//! built from; nothing writes.

use super::{Journal, jerr};
use crate::error::{Error, Result};
use crate::model::SourceRef;
use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

/// Statuses an operation can have, as the `operations` view derives them.
pub const STATUSES: &[&str] = &[
    "in_progress",
    "committed",
    "applied",
    "failed",
    "rolled_forward",
    "rolled_back",
    "diverged",
    "abandoned",
    "closed",
    "refused",
    "staged",
];

/// Filters of `history`; `None` means any.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Pipeline id.
    pub pipeline: Option<String>,
    /// Destination id.
    pub destination: Option<String>,
    /// Decision (`replace_takeover` for the takeover audit).
    pub action: Option<String>,
    /// Derived status.
    pub status: Option<String>,
    /// Started at or after (normalised by [`time_bound`]).
    pub since: Option<String>,
    /// Started before (normalised by [`time_bound`]).
    pub until: Option<String>,
    /// At most this many, newest first.
    pub limit: Option<u64>,
    /// The recorded actor, or its name after the `cli:` / `token:` channel.
    pub actor: Option<String>,
    /// Only operations whose paths changed hands between owners (`cross_owner`).
    pub takeovers: bool,
    /// Only operations that wrote, deleted or took over a path these globs match.
    pub paths: Option<crate::globs::PathGlobs>,
    /// Only operations whose reason contains this text (case-insensitively).
    pub reason_contains: Option<String>,
}

impl Filter {
    /// Whether a filter is applied after the SQL query (and the limit with it).
    fn filters_after(&self) -> bool {
        self.actor.is_some()
            || self.takeovers
            || self.paths.is_some()
            || self.reason_contains.is_some()
    }
}

/// The owner and source an operation replaced.
#[derive(Debug, Clone, Serialize)]
pub struct PreviousRef {
    /// `pipeline/destination`.
    pub owner: String,
    /// Its source.
    pub source: SourceRef,
}

/// One operation as `history` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct OperationSummary {
    /// Operation id.
    pub operation_id: String,
    /// When it started.
    pub started_at: String,
    /// Time of its latest event.
    pub updated_at: Option<String>,
    /// `publish`.
    pub command: String,
    /// `cli:<user>` or `token:<name>`.
    pub actor: String,
    /// Pipeline id.
    pub pipeline_id: String,
    /// Destination id.
    pub destination_id: String,
    /// Bundle path.
    pub bundle_path: String,
    /// State mode.
    pub state_mode: String,
    /// Decision.
    pub decision: String,
    /// Takeover mode.
    pub takeover_mode: String,
    /// Derived status.
    pub status: String,
    /// The source published.
    pub source: SourceRef,
    /// Previous owner and source (shared root: the current owner's own previous record).
    pub previous: Option<PreviousRef>,
    /// Paths that changed hands: `[{from_owner, from_source_id, paths}]`.
    pub takeovers: serde_json::Value,
    /// sha256 of the state file before (None: absent).
    pub pre_state_sha256: Option<String>,
    /// sha256 of the state file the operation commits.
    pub post_state_sha256: String,
    /// The releases retention removed after it (a releases publication or rollback) or
    /// that it removed (`prune`); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub releases_removed: Vec<String>,
    /// Whether paths changed hands from another owner (docs/operations.md, "Source ids,
    /// versions and takeovers"): true when a takeover took another owner's paths, false
    /// when only this owner's source id changed, null when nothing changed hands.
    pub cross_owner: Option<bool>,
    /// Why it was run (`--reason`), when given.
    pub reason: Option<String>,
    /// The journal that recorded it (its `journal_id`), where known.
    pub journal_id: Option<String>,
}

impl OperationSummary {
    /// The owner that ran it, `pipeline/destination`.
    pub fn owner(&self) -> String {
        format!("{}/{}", self.pipeline_id, self.destination_id)
    }

    /// The takeovers as recorded: `(from_owner, from_source_id, paths)`.
    pub fn takeover_entries(&self) -> Vec<(String, String, Vec<String>)> {
        (self.takeovers.as_array().into_iter().flatten())
            .map(|t| {
                let paths = (t["paths"].as_array().into_iter().flatten())
                    .filter_map(|p| p.as_str().map(str::to_string))
                    .collect();
                (
                    t["from_owner"].as_str().unwrap_or("?").to_string(),
                    t["from_source_id"].as_str().unwrap_or("?").to_string(),
                    paths,
                )
            })
            .collect()
    }

    /// Whether the actor is `a`, or `a` is its name after the `cli:` / `token:` channel.
    fn actor_is(&self, a: &str) -> bool {
        self.actor == a
            || ["cli:", "token:"]
                .iter()
                .any(|c| self.actor.strip_prefix(c) == Some(a))
    }
}

/// `cross_owner` of an operation whose takeovers are `takeovers` (`owner` ran it): any
/// entry from another owner; `None` when nothing changed hands.
fn cross_owner(takeovers: &serde_json::Value, owner: &str) -> Option<bool> {
    let list = takeovers.as_array().filter(|a| !a.is_empty())?;
    Some(list.iter().any(|t| {
        t["cross_owner"]
            .as_bool()
            .unwrap_or_else(|| t["from_owner"].as_str() != Some(owner))
    }))
}

/// One journal event.
#[derive(Debug, Clone, Serialize)]
pub struct EventRow {
    /// When.
    pub at: String,
    /// Event name.
    pub event: String,
    /// Detail (error text, who recovered, ...).
    pub detail: Option<String>,
}

/// One planned action.
#[derive(Debug, Clone, Serialize)]
pub struct ActionRow {
    /// Order in the plan.
    pub seq: i64,
    /// `file_create`, `file_overwrite`, `file_delete`, `link_create`, `link_overwrite`, `link_delete`.
    pub kind: String,
    /// Bundle-relative path.
    pub path: String,
    /// Size (files).
    pub size: Option<i64>,
    /// sha256 (files).
    pub sha256: Option<String>,
    /// Target (links).
    pub target: Option<String>,
}

/// One operation with everything the journal holds about it.
#[derive(Debug, Clone, Serialize)]
pub struct OperationDetail {
    /// The operation.
    #[serde(flatten)]
    pub operation: OperationSummary,
    /// Its events, in order.
    pub events: Vec<EventRow>,
    /// Its actions, in plan order.
    pub actions: Vec<ActionRow>,
    /// A refused publication's conflicts (as the report had them); absent otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<serde_json::Value>,
}

const SELECT: &str =
    "SELECT o.operation_id, o.started_at, o.updated_at, o.command, o.actor, o.pipeline_id,
        o.destination_id, o.bundle_path, o.state_mode, o.decision, o.takeover_mode, o.status,
        o.source_id, o.source_created_at, o.source_digest, o.previous_owner, o.previous_source_id,
        o.previous_source_created_at, jo.previous_source_digest, jo.takeovers_json,
        o.pre_state_sha256, o.post_state_sha256,
        (SELECT e.detail FROM journal_events e
          WHERE e.operation_id = o.operation_id AND e.event = 'pruned' ORDER BY e.id DESC LIMIT 1),
        jo.reason
   FROM operations o JOIN journal_operations jo ON jo.operation_id = o.operation_id";

fn summary(r: &Row<'_>) -> rusqlite::Result<OperationSummary> {
    let previous = match (
        r.get::<_, Option<String>>(15)?,
        r.get::<_, Option<String>>(16)?,
    ) {
        (Some(owner), Some(id)) => Some(PreviousRef {
            owner,
            source: SourceRef {
                id,
                created_at: r.get::<_, Option<String>>(17)?.unwrap_or_default(),
                digest: r.get::<_, Option<String>>(18)?.unwrap_or_default(),
            },
        }),
        _ => None,
    };
    let takeovers: String = r.get(19)?;
    let takeovers =
        serde_json::from_str(&takeovers).unwrap_or(serde_json::Value::String(takeovers));
    let owner = format!("{}/{}", r.get::<_, String>(5)?, r.get::<_, String>(6)?);
    Ok(OperationSummary {
        operation_id: r.get(0)?,
        started_at: r.get(1)?,
        updated_at: r.get(2)?,
        command: r.get(3)?,
        actor: r.get(4)?,
        pipeline_id: r.get(5)?,
        destination_id: r.get(6)?,
        bundle_path: r.get(7)?,
        state_mode: r.get(8)?,
        decision: r.get(9)?,
        takeover_mode: r.get(10)?,
        status: r.get(11)?,
        source: SourceRef {
            id: r.get(12)?,
            created_at: r.get(13)?,
            digest: r.get(14)?,
        },
        previous,
        cross_owner: cross_owner(&takeovers, &owner),
        takeovers,
        pre_state_sha256: r.get(20)?,
        post_state_sha256: r.get(21)?,
        releases_removed: removed_in(r.get::<_, Option<String>>(22)?.as_deref()),
        reason: r.get(23)?,
        journal_id: None,
    })
}

/// What the detail of a `pruned` event says was removed: `removed releases A, B`.
const REMOVED: &str = "removed releases ";

fn removed_in(detail: Option<&str>) -> Vec<String> {
    match detail.and_then(|d| d.strip_prefix(REMOVED)) {
        Some(list) => list
            .split(", ")
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .collect(),
        None => Vec::new(),
    }
}

/// The releases that retention removed after the operation `op_id`, as its `pruned`
/// event records them (empty when it removed none, or when it failed).
pub fn releases_removed(j: &Journal, op_id: &str) -> Result<Vec<String>> {
    let detail: Option<String> = j
        .connection()
        .query_row(
            "SELECT detail FROM journal_events WHERE operation_id = ?1 AND event = 'pruned'
             ORDER BY id DESC LIMIT 1",
            [op_id],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| jerr(j.path(), e))?
        .flatten();
    Ok(removed_in(detail.as_deref()))
}

/// Operations matching `f`, newest first. `replace_takeover` is the takeover audit
/// (SPEC §9): it also matches a `force_replace` that took paths from another owner, since
/// content changed hands there too. Likewise `prune` also matches a publication or
/// rollback after which retention removed releases.
pub fn list(j: &Journal, f: &Filter) -> Result<Vec<OperationSummary>> {
    let sql = format!(
        "{SELECT}
         WHERE (?1 IS NULL OR o.pipeline_id = ?1) AND (?2 IS NULL OR o.destination_id = ?2)
           AND (?3 IS NULL OR o.decision = ?3
                OR (?3 = 'replace_takeover' AND jo.takeovers_json NOT IN ('', '[]'))
                OR (?3 = 'prune' AND EXISTS (SELECT 1 FROM journal_events e
                     WHERE e.operation_id = o.operation_id AND e.event = 'pruned'
                       AND e.detail LIKE 'removed releases %')))
           AND (?4 IS NULL OR o.status = ?4)
           AND (?5 IS NULL OR o.started_at >= ?5) AND (?6 IS NULL OR o.started_at < ?6)
         ORDER BY o.started_at DESC, jo.rowid DESC
         LIMIT ?7"
    );
    let limit = match f.filters_after() {
        true => -1,
        false => f.limit.map(|l| l.min(i64::MAX as u64) as i64).unwrap_or(-1),
    };
    let conn = j.connection();
    let mut stmt = conn.prepare(&sql).map_err(|e| jerr(j.path(), e))?;
    let rows = stmt
        .query_map(
            params![
                f.pipeline,
                f.destination,
                f.action,
                f.status,
                f.since,
                f.until,
                limit
            ],
            summary,
        )
        .map_err(|e| jerr(j.path(), e))?;
    let mut ops = rows
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(|e| jerr(j.path(), e))?;
    if f.filters_after() {
        let touching = match &f.paths {
            Some(g) => Some(operations_touching(j, g)?),
            None => None,
        };
        ops.retain(|o| {
            f.actor.as_deref().is_none_or(|a| o.actor_is(a))
                && (!f.takeovers || o.cross_owner == Some(true))
                && f.reason_contains.as_deref().is_none_or(|t| {
                    (o.reason.as_deref())
                        .is_some_and(|r| r.to_lowercase().contains(&t.to_lowercase()))
                })
                && touching.as_ref().is_none_or(|t| {
                    t.contains(&o.operation_id)
                        || (o.takeover_entries().iter())
                            .any(|(_, _, paths)| paths.iter().any(|p| f.paths_match(p)))
                })
        });
        if let Some(l) = f.limit {
            ops.truncate(l.min(usize::MAX as u64) as usize);
        }
    }
    let id = j.journal_id().ok();
    for o in &mut ops {
        o.journal_id = id.clone();
    }
    Ok(ops)
}

impl Filter {
    fn paths_match(&self, p: &str) -> bool {
        self.paths.as_ref().is_some_and(|g| g.is_match(p))
    }
}

/// The range of paths that start with `prefix`: `[prefix, prefix + U+10FFFF)`, in SQLite's
/// text order (bytes); the whole range for the empty prefix.
fn prefix_range(prefix: &str) -> (String, String) {
    (prefix.to_string(), format!("{prefix}\u{10FFFF}"))
}

/// The literal start of a glob: everything before its first `*`, `?`, `[`, `{` or `\\`
/// (a path it matches starts with it).
pub fn literal_prefix(glob: &str) -> &str {
    let end = glob.find(['*', '?', '[', '{', '\\']).unwrap_or(glob.len());
    &glob[..end]
}

/// The operations that have an action on a path `globs` match: the action rows whose
/// path starts with the globs' common literal start, each matched.
fn operations_touching(
    j: &Journal,
    globs: &crate::globs::PathGlobs,
) -> Result<std::collections::HashSet<String>> {
    let conn = j.connection();
    let (low, high) = prefix_range(&globs.common_prefix());
    let mut stmt = conn
        .prepare(
            "SELECT DISTINCT operation_id, path FROM journal_actions WHERE path >= ?1 AND path < ?2",
        )
        .map_err(|e| jerr(j.path(), e))?;
    let mut rows = stmt.query([&low, &high]).map_err(|e| jerr(j.path(), e))?;
    let mut out = std::collections::HashSet::new();
    while let Some(r) = rows.next().map_err(|e| jerr(j.path(), e))? {
        let path: String = r.get(1).map_err(|e| jerr(j.path(), e))?;
        if globs.is_match(&path) {
            out.insert(r.get::<_, String>(0).map_err(|e| jerr(j.path(), e))?);
        }
    }
    Ok(out)
}

/// What one operation did to one path, as `blame` shows it: the action, or the conflict
/// a refused publication reported there.
#[derive(Debug, Clone, Serialize)]
pub struct PathEvent {
    /// The path.
    pub path: String,
    /// `file_create`, `file_overwrite`, `file_delete`, `link_create`, `link_overwrite`,
    /// `link_delete`, or `refused` (a refused publication's conflict on the path).
    pub action: String,
    /// A refusal's conflict kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    /// The operation.
    pub operation: OperationSummary,
}

/// Every operation of the journal that wrote, deleted or was refused on a path `matches`
/// accepts (`exact`: the one path; else the paths starting with `prefix`), newest first; `bundle` keeps those at that bundle path only. With
/// `newest_written`, each path's events stop at the newest operation that wrote it.
pub fn path_events(
    j: &Journal,
    bundle: Option<&str>,
    exact: Option<&str>,
    prefix: Option<&str>,
    matches: &dyn Fn(&str) -> bool,
    newest_written: bool,
) -> Result<Vec<PathEvent>> {
    let conn = j.connection();
    let jr = |e| jerr(j.path(), e);
    let mut hits: Vec<(String, String, String, Option<String>)> = Vec::new();
    {
        // One path exactly; a glob by the range of its literal start.
        let (low, high) = match exact {
            Some(p) => (p.to_string(), format!("{p}\0")),
            None => prefix_range(prefix.unwrap_or("")),
        };
        let sql =
            "SELECT operation_id, path, kind FROM journal_actions WHERE path >= ?1 AND path < ?2";
        let mut stmt = conn.prepare(sql).map_err(jr)?;
        let mut rows = stmt.query([&low, &high]).map_err(jr)?;
        while let Some(r) = rows.next().map_err(jr)? {
            let path: String = r.get(1).map_err(jr)?;
            if matches(&path) {
                hits.push((r.get(0).map_err(jr)?, path, r.get(2).map_err(jr)?, None));
            }
        }
    }
    // Refused publications: the paths their conflicts name (`plan_json`).
    {
        let mut stmt = conn
            .prepare(
                "SELECT o.operation_id, jo.plan_json FROM operations o
                   JOIN journal_operations jo ON jo.operation_id = o.operation_id
                  WHERE o.status = 'refused'",
            )
            .map_err(jr)?;
        let mut rows = stmt.query([]).map_err(jr)?;
        while let Some(r) = rows.next().map_err(jr)? {
            let plan: String = r.get(1).map_err(jr)?;
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&plan) else {
                continue;
            };
            for c in v["conflicts"].as_array().into_iter().flatten() {
                if let Some(p) = c["path"].as_str().filter(|p| matches(p)) {
                    let kind = c["kind"].as_str().unwrap_or("conflict").to_string();
                    hits.push((
                        r.get(0).map_err(jr)?,
                        p.to_string(),
                        "refused".into(),
                        Some(kind),
                    ));
                }
            }
        }
    }
    // Newest first by start time (a primary-key lookup each), so that `newest_written`
    // reads whole operations only until the newest one that wrote each path.
    let mut started = conn
        .prepare("SELECT started_at, bundle_path FROM journal_operations WHERE operation_id = ?1")
        .map_err(jr)?;
    let mut keyed = Vec::with_capacity(hits.len());
    for h in hits {
        let row: Option<(String, String)> = started
            .query_row([&h.0], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(jr)?;
        if let Some((at, at_bundle)) = row
            && bundle.is_none_or(|b| b == at_bundle)
        {
            keyed.push((at, h));
        }
    }
    keyed.sort_by(|a, b| b.0.cmp(&a.0));
    let mut out = Vec::new();
    let mut stmt = conn
        .prepare(&format!("{SELECT} WHERE o.operation_id = ?1"))
        .map_err(jr)?;
    let id = j.journal_id().ok();
    let mut summaries: std::collections::HashMap<String, Option<OperationSummary>> =
        Default::default();
    let mut written: std::collections::HashSet<String> = Default::default();
    for (_, (op, path, action, conflict)) in keyed {
        if newest_written && written.contains(&path) {
            continue;
        }
        let summary = match summaries.get(&op) {
            Some(s) => s.clone(),
            None => {
                let s = stmt.query_row([&op], summary).optional().map_err(jr)?;
                summaries.insert(op.clone(), s.clone());
                s
            }
        };
        let Some(mut operation) = summary else {
            continue;
        };
        if bundle.is_some_and(|b| b != operation.bundle_path) {
            continue;
        }
        operation.journal_id = id.clone();
        if action != "refused" && WROTE.contains(&operation.status.as_str()) {
            written.insert(path.clone());
        }
        out.push(PathEvent {
            path,
            action,
            conflict,
            operation,
        });
    }
    out.sort_by(|a, b| b.operation.started_at.cmp(&a.operation.started_at));
    Ok(out)
}

/// The statuses of an operation that wrote what it planned.
pub const WROTE: &[&str] = &["applied", "rolled_forward", "committed", "closed"];

/// The `--action` values besides the decisions: the journal's own operations that are not
/// publications (`distributor prune` and retention, `distributor releases adopt`).
pub(crate) const OPERATIONS: &[&str] = crate::model::RecordedDecision::OPERATIONS;

/// Every accepted `--action` value: the decisions, then [`OPERATIONS`].
pub fn actions() -> Vec<&'static str> {
    crate::model::Decision::ALL
        .iter()
        .chain(OPERATIONS)
        .copied()
        .collect()
}

/// Refuses (usage error) text that cannot be an operation id or the start of one.
pub(crate) fn check_operation_id(id: &str) -> Result<()> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Err(Error::Usage(format!(
            "'{id}' is not an operation id (a UUID, or the start of one)"
        )));
    }
    Ok(())
}

/// The operation `id` (or the one operation whose id starts with `id`), with its events and
/// actions; `None` when there is none.
pub fn show(j: &Journal, id: &str) -> Result<Option<OperationDetail>> {
    let conn = j.connection();
    let jr = |e| jerr(j.path(), e);
    check_operation_id(id)?;
    let mut ids: Vec<String> = conn
        .prepare(
            "SELECT operation_id FROM journal_operations WHERE operation_id = ?1
             UNION SELECT operation_id FROM journal_operations WHERE operation_id LIKE ?2 LIMIT 3",
        )
        .and_then(|mut s| {
            s.query_map(params![id, format!("{}%", id.to_ascii_lowercase())], |r| {
                r.get(0)
            })?
            .collect()
        })
        .map_err(jr)?;
    if ids.iter().any(|x| x == id) {
        ids.retain(|x| x == id);
    }
    let op_id = match ids.as_slice() {
        [] => return Ok(None),
        [one] => one.clone(),
        _ => {
            return Err(Error::Usage(format!(
                "operation id '{id}' is ambiguous ({} ...); give more of it",
                ids.join(", ")
            )));
        }
    };
    let operation = conn
        .query_row(
            &format!("{SELECT} WHERE o.operation_id = ?1"),
            [&op_id],
            summary,
        )
        .optional()
        .map_err(jr)?;
    let Some(operation) = operation else {
        return Ok(None);
    };
    let events = conn
        .prepare("SELECT at, event, detail FROM journal_events WHERE operation_id = ?1 ORDER BY id")
        .and_then(|mut s| {
            s.query_map([&op_id], |r| {
                Ok(EventRow {
                    at: r.get(0)?,
                    event: r.get(1)?,
                    detail: r.get(2)?,
                })
            })?
            .collect()
        })
        .map_err(jr)?;
    let actions = conn
        .prepare(
            "SELECT seq, kind, path, size, sha256, target FROM journal_actions WHERE operation_id = ?1 ORDER BY seq",
        )
        .and_then(|mut s| {
            s.query_map([&op_id], |r| {
                Ok(ActionRow {
                    seq: r.get(0)?,
                    kind: r.get(1)?,
                    path: r.get(2)?,
                    size: r.get(3)?,
                    sha256: r.get(4)?,
                    target: r.get(5)?,
                })
            })?
            .collect()
        })
        .map_err(jr)?;
    let conflicts = match operation.status.as_str() {
        "refused" => {
            let plan: String = conn
                .query_row(
                    "SELECT plan_json FROM journal_operations WHERE operation_id = ?1",
                    [&op_id],
                    |r| r.get(0),
                )
                .map_err(jr)?;
            serde_json::from_str::<serde_json::Value>(&plan)
                .ok()
                .and_then(|v| v["conflicts"].as_array().cloned())
                .unwrap_or_default()
        }
        _ => Vec::new(),
    };
    Ok(Some(OperationDetail {
        operation,
        events,
        actions,
        conflicts,
    }))
}

/// The distinct values of `column` (`pipeline_id`, `destination_id` or `decision`) in
/// the journal, sorted: what a `history` filter can match.
pub(crate) fn distinct(j: &Journal, column: &str) -> Result<Vec<String>> {
    let column = match column {
        "pipeline_id" | "destination_id" | "decision" => column,
        other => return Err(Error::Failed(format!("not a filter column: {other}"))),
    };
    let conn = j.connection();
    let mut stmt = conn
        .prepare(&format!(
            "SELECT DISTINCT {column} FROM journal_operations ORDER BY {column}"
        ))
        .map_err(|e| jerr(j.path(), e))?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(|e| jerr(j.path(), e))?;
    rows.collect::<rusqlite::Result<Vec<_>>>()
        .map_err(|e| jerr(j.path(), e))
}

/// Normalises a `--since`/`--until` value to the journal's time format (UTC, milliseconds,
/// `Z`), so times compare as text. Accepts RFC 3339, a date `YYYY-MM-DD` (midnight UTC),
/// or a duration counted back from now (`90m`, `12h`, `7d`: a whole number and s, m, h, d
/// or w).
pub(crate) fn time_bound(s: &str) -> std::result::Result<String, String> {
    time_bound_at(s, chrono::Utc::now())
}

fn time_bound_at(
    s: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> std::result::Result<String, String> {
    use chrono::{NaiveDate, SecondsFormat, Utc};
    if s.ends_with(['s', 'm', 'h', 'd', 'w']) && s.len() > 1 && s.as_bytes()[0].is_ascii_digit() {
        let secs = crate::config::parse_age(s)?;
        let back = i64::try_from(secs)
            .ok()
            .and_then(chrono::TimeDelta::try_seconds)
            .and_then(|d| now.checked_sub_signed(d))
            .ok_or_else(|| format!("'{s}' reaches back before any time distributor can write"))?;
        return Ok(back.to_rfc3339_opts(SecondsFormat::Millis, true));
    }
    if let Some(t) = crate::model::parse_time(s) {
        return Ok(t
            .with_timezone(&Utc)
            .to_rfc3339_opts(SecondsFormat::Millis, true));
    }
    if let Some(t) = NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
    {
        return Ok(t.and_utc().to_rfc3339_opts(SecondsFormat::Millis, true));
    }
    Err(format!(
        "'{s}' is not a time: accepted are RFC 3339 (2026-12-02T06:00:00Z), a date (2026-12-02) or a duration back from now (90m, 12h, 7d)"
    ))
}

#[cfg(test)]
mod tests {
    use super::{time_bound, time_bound_at};

    #[test]
    fn time_bounds_normalise_to_utc_millis() {
        assert_eq!(
            time_bound("2026-12-02T08:00:00+02:00").unwrap(),
            "2026-12-02T06:00:00.000Z"
        );
        assert_eq!(
            time_bound("2026-12-02").unwrap(),
            "2026-12-02T00:00:00.000Z"
        );
        assert!(time_bound("yesterday").is_err());
    }

    #[test]
    fn durations_count_back_from_now() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-08T12:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(
            time_bound_at("90m", now).unwrap(),
            "2026-12-08T10:30:00.000Z"
        );
        assert_eq!(
            time_bound_at("12h", now).unwrap(),
            "2026-12-08T00:00:00.000Z"
        );
        assert_eq!(
            time_bound_at("7d", now).unwrap(),
            "2026-12-01T12:00:00.000Z"
        );
        assert_eq!(
            time_bound_at("1w", now).unwrap(),
            "2026-12-01T12:00:00.000Z"
        );
        let e = time_bound_at("7y", now).unwrap_err();
        assert!(e.contains("90m, 12h, 7d"), "{e}");
        assert!(time_bound_at("99999999999999w", now).is_err());
    }
}
