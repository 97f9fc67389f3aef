//! Reading the journal: an operation's status, record and plan, what is unfinished, the
//! state file a publication committed, where a destination log ended, and placement
//! fingerprints.

use super::placements::read_fingerprints;
use super::{
    ACTION_KINDS, ActionRecord, CommittedSource, Event, Journal, SCHEMA_VERSION,
    committed_post_state, jerr,
};
use crate::error::{Error, JournalError, Result};
use rusqlite::{Connection, OptionalExtension, params};
use std::borrow::Cow;
use std::path::Path;

impl Journal {
    /// The source whose post-state a publication in `bundle_path` committed as the state
    /// file `file` identifies, with the records of its owner being exactly that source's
    /// manifest (schema 12; the newest such file of the bundle path, and only while its
    /// operation counts as committed: applied, committed or rolled forward). `None` when
    /// the newest one recorded is another file, or none was.
    pub fn republishable_state(
        &self,
        bundle_path: &str,
        file: &crate::backend::StateFileId,
    ) -> Result<Option<CommittedSource>> {
        let row = self
            .conn
            .query_row(
                "SELECT s.dev, s.ino, s.size, s.mtime_ns, s.ctime_ns, o.pipeline_id,
                        o.destination_id, o.state_mode, o.source_id, o.source_created_at,
                        o.source_digest, o.status, o.operation_id
                   FROM (SELECT * FROM journal_state_files WHERE bundle_path = ?1
                          ORDER BY id DESC LIMIT 1) s
                   JOIN operations o ON o.operation_id = s.operation_id",
                [bundle_path],
                |r| {
                    let recorded = crate::backend::StateFileId {
                        dev: r.get::<_, i64>(0)? as u64,
                        ino: r.get::<_, i64>(1)? as u64,
                        size: r.get::<_, i64>(2)? as u64,
                        mtime_ns: r.get(3)?,
                        ctime_ns: r.get(4)?,
                    };
                    Ok((
                        recorded,
                        r.get::<_, String>(11)?,
                        r.get::<_, String>(12)?,
                        r.get::<_, String>(7)?,
                        (r.get(5)?, r.get(6)?),
                        crate::model::SourceRef {
                            id: r.get(8)?,
                            created_at: r.get(9)?,
                            digest: r.get(10)?,
                        },
                    ))
                },
            )
            .optional()
            .map_err(|e| jerr(&self.path, e))?;
        let Some((recorded, status, operation_id, state_mode, owner, source)) = row else {
            return Ok(None);
        };
        if recorded != *file
            || !matches!(status.as_str(), "applied" | "committed" | "rolled_forward")
        {
            return Ok(None);
        }
        let (pipeline_id, destination_id) = owner;
        Ok(Some(CommittedSource {
            pipeline_id,
            destination_id,
            state_mode: column(&self.path, &operation_id, "state_mode", &state_mode)?,
            source,
        }))
    }

    /// Operations on `bundle_path` that are not finished (recovery is due).
    pub fn unfinished_for(&self, bundle_path: &str) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT operation_id FROM operations WHERE bundle_path = ?1 AND status IN ('in_progress', 'committed', 'diverged')
                 ORDER BY started_at",
            )
            .map_err(|e| jerr(&self.path, e))?;
        let rows = stmt
            .query_map([bundle_path], |r| r.get::<_, String>(0))
            .map_err(|e| jerr(&self.path, e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| jerr(&self.path, e))
    }

    /// This journal's own id (SPEC §18 `journal_id`), kept from its creation.
    pub fn journal_id(&self) -> Result<String> {
        self.conn
            .query_row("SELECT journal_id FROM journal_meta", [], |r| r.get(0))
            .map_err(|e| jerr(&self.path, e))
    }

    /// The last seq of the destination log at `location` this journal saw (SPEC §18
    /// "Finding the tail"), `None` when it never wrote there.
    pub fn log_tail(&self, location: &str) -> Result<Option<u64>> {
        self.conn
            .query_row(
                "SELECT seq FROM journal_log_tails WHERE location = ?1 ORDER BY id DESC LIMIT 1",
                [location],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map(|s| s.map(|s| s as u64))
            .map_err(|e| jerr(&self.path, e))
    }

    /// The last entry of the destination log at `location` this journal wrote, with the
    /// sha256 of its bytes (docs/operations.md, "The hash chain"); `None` when it kept
    /// none there.
    pub fn log_entry_written(&self, location: &str) -> Result<Option<(u64, String)>> {
        self.conn
            .query_row(
                "SELECT seq, entry_sha256 FROM journal_log_tails
                  WHERE location = ?1 AND entry_sha256 IS NOT NULL ORDER BY id DESC LIMIT 1",
                [location],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?)),
            )
            .optional()
            .map_err(|e| jerr(&self.path, e))
    }

    /// Whether the journal recorded that operation `op` passed its commit point (its
    /// `committed` event), whatever came after.
    pub fn recorded_commit(&self, op: &str) -> Result<bool> {
        self.conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM journal_events WHERE operation_id = ?1 AND event = ?2)",
                params![op, Event::Committed],
                |r| r.get::<_, bool>(0),
            )
            .map_err(|e| jerr(&self.path, e))
    }

    /// Whether operation `op` committed at `bundle_path` (its status `applied`,
    /// `committed` or `rolled_forward`): the id of its `committed` event (the journal's
    /// order) and the release it activated, as its record says (a rollback's or promote's
    /// `activates`, else the operation itself).
    pub fn committed_release(&self, bundle_path: &str, op: &str) -> Result<Option<(i64, String)>> {
        let row: Option<(String, Option<i64>)> = self
            .conn
            .query_row(
                "SELECT j.plan_json,
                        (SELECT MIN(e.id) FROM journal_events e
                          WHERE e.operation_id = o.operation_id AND e.event = ?3)
                   FROM operations o JOIN journal_operations j USING (operation_id)
                  WHERE o.operation_id = ?1 AND o.bundle_path = ?2
                    AND o.status IN ('applied', 'committed', 'rolled_forward')",
                params![op, bundle_path, Event::Committed],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| jerr(&self.path, e))?;
        let Some((plan, Some(order))) = row else {
            return Ok(None);
        };
        let activates = serde_json::from_str::<serde_json::Value>(&plan)
            .ok()
            .and_then(|v| v["releases"]["activates"].as_str().map(str::to_string));
        Ok(Some((order, activates.unwrap_or_else(|| op.to_string()))))
    }

    /// Whether an operation on `bundle_path` committed a state file of exactly this
    /// sha256 (SPEC §17: a state file an earlier version wrote is believed through the
    /// journal that committed it).
    pub fn committed_post_state(&self, bundle_path: &str, sha256: &str) -> Result<bool> {
        committed_post_state(&self.conn, &self.path, bundle_path, sha256)
    }

    /// Every unfinished operation (any bundle path), oldest first: id and bundle path.
    pub fn unfinished(&self) -> Result<Vec<(String, String)>> {
        unfinished(&self.conn, &self.path)
    }

    /// The derived status of an operation (`None` when the journal does not know it).
    pub fn status(&self, operation_id: &str) -> Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT status FROM operations WHERE operation_id = ?1",
                [operation_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| jerr(&self.path, e))
    }

    /// Fills `wanted` with the newest placement fingerprint of each of its paths at
    /// `bundle_path`: the bundle path's placement sets are read newest first, then (for a
    /// journal older than schema 5) its per-file placement rows, newest first, each
    /// through an index, and only until every wanted path has had its newest placement
    /// offered. Every set is newer than every per-file row: schema 5 writes sets only.
    pub fn fingerprints(
        &self,
        bundle_path: &str,
        wanted: &mut crate::backend::types::Fingerprints<'_>,
    ) -> Result<()> {
        read_fingerprints(
            &self.conn,
            &self.path,
            SCHEMA_VERSION as i64,
            bundle_path,
            wanted,
        )
    }

    /// The plan JSON of an operation, as its staging directory's `plan.json` has it: from
    /// schema 8 on, the stored `plan_json` lacks the actions, which are put back from
    /// `journal_action_rows`.
    pub fn plan_json(&self, operation_id: &str) -> Result<Option<String>> {
        let err = |e| jerr(&self.path, e);
        let Some(stored) = self
            .conn
            .query_row(
                "SELECT plan_json FROM journal_operations WHERE operation_id = ?1",
                [operation_id],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(err)?
        else {
            return Ok(None);
        };
        let set: Option<i64> = self
            .conn
            .query_row(
                "SELECT id FROM journal_action_sets WHERE operation_id = ?1",
                [operation_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(err)?;
        let Some(set) = set else {
            return Ok(Some(stored));
        };
        let actions = read_actions(&self.conn, &self.path, set)?;
        let actions = serde_json::to_string(&actions).map_err(|e| JournalError::Corrupt {
            path: self.path.clone(),
            message: format!("cannot render the actions of {operation_id}: {e}"),
        })?;
        let body = stored.trim_end();
        let Some(body) = body.strip_suffix('}') else {
            return Err(JournalError::Corrupt {
                path: self.path.clone(),
                message: format!("plan_json of {operation_id} is not a JSON object"),
            }
            .into());
        };
        let sep = if body.trim_end().ends_with('{') {
            ""
        } else {
            ","
        };
        Ok(Some(format!("{body}{sep}\"actions\":{actions}}}")))
    }
}

/// The actions of action set `set`, in plan order.
fn read_actions(conn: &Connection, path: &Path, set: i64) -> Result<Vec<ActionRecord<'static>>> {
    let err = |e| jerr(path, e);
    let mut stmt = conn
        .prepare(
            "SELECT seq, kind, path, size, sha256, target, replaces FROM journal_action_rows
             WHERE action_set = ?1 ORDER BY seq",
        )
        .map_err(err)?;
    let mut rows = stmt.query([set]).map_err(err)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(err)? {
        let seq: i64 = r.get(0).map_err(err)?;
        let code: i64 = r.get(1).map_err(err)?;
        let corrupt = |what: &str| {
            Error::from(JournalError::Corrupt {
                path: path.to_path_buf(),
                message: format!("journal_action_rows ({set}, {seq}): {what}"),
            })
        };
        if seq != out.len() as i64 {
            return Err(corrupt("actions are not numbered 0, 1, 2, ..."));
        }
        let kind = usize::try_from(code)
            .ok()
            .and_then(|c| ACTION_KINDS.get(c))
            .ok_or_else(|| corrupt("unknown kind code"))?;
        let sha256 = match r.get_ref(4).map_err(err)? {
            rusqlite::types::ValueRef::Null => None,
            rusqlite::types::ValueRef::Blob(b) => match <[u8; 32]>::try_from(b) {
                Ok(b) => Some(crate::hash::ContentHash(b)),
                Err(_) => return Err(corrupt("sha256 is not 32 bytes")),
            },
            _ => return Err(corrupt("sha256 is not 32 bytes")),
        };
        out.push(ActionRecord {
            kind: Cow::Borrowed(kind),
            path: Cow::Owned(r.get(2).map_err(err)?),
            size: r.get::<_, Option<i64>>(3).map_err(err)?.map(|s| s as u64),
            sha256,
            target: r.get::<_, Option<String>>(5).map_err(err)?.map(Cow::Owned),
            replaces: r.get::<_, Option<String>>(6).map_err(err)?.map(Cow::Owned),
        });
    }
    Ok(out)
}

/// The value that the text `value` of `column` in operation `operation_id`'s row spells;
/// an error naming the journal, the operation, the column and what it accepts when it
/// spells none.
pub(super) fn column<T: std::str::FromStr<Err = String>>(
    path: &Path,
    operation_id: &str,
    column: &str,
    value: &str,
) -> Result<T> {
    value.parse().map_err(|why: String| {
        JournalError::Corrupt {
            path: path.to_path_buf(),
            message: format!("operation {operation_id}: column {column}: {why}"),
        }
        .into()
    })
}

/// Every unfinished operation (any bundle path) in the journal at `path` open on `conn`,
/// oldest first: id and bundle path. Read by the writer and by the read-only view.
pub(super) fn unfinished(conn: &Connection, path: &Path) -> Result<Vec<(String, String)>> {
    let mut stmt = conn
        .prepare(
            "SELECT operation_id, bundle_path FROM operations WHERE status IN ('in_progress', 'committed', 'diverged')
             ORDER BY started_at, operation_id",
        )
        .map_err(|e| jerr(path, e))?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .map_err(|e| jerr(path, e))?;
    rows.collect::<rusqlite::Result<Vec<_>>>()
        .map_err(|e| jerr(path, e))
}

impl crate::backend::History for Journal {
    fn committed_release(&self, bundle: &str, op: &str) -> Result<Option<(i64, String)>> {
        Journal::committed_release(self, bundle, op)
    }
}
