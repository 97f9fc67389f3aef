-- distributor journal, schema 1. Never edit this file once landed; add a new numbered one.
-- Every table is append-only: triggers refuse UPDATE and DELETE. Statuses are derived
-- from events by the views at the end.

CREATE TABLE journal_operations (
    operation_id               TEXT PRIMARY KEY,
    started_at                 TEXT NOT NULL,
    command                    TEXT NOT NULL,
    actor                      TEXT NOT NULL,
    pipeline_id                TEXT NOT NULL,
    destination_id             TEXT NOT NULL,
    bundle_path                TEXT NOT NULL,
    state_mode                 TEXT NOT NULL,
    decision                   TEXT NOT NULL,
    takeover_mode              TEXT NOT NULL,
    previous_owner             TEXT,
    previous_source_id         TEXT,
    previous_source_created_at TEXT,
    previous_source_digest     TEXT,
    source_id                  TEXT NOT NULL,
    source_created_at          TEXT NOT NULL,
    source_digest              TEXT NOT NULL,
    pre_state_sha256           TEXT,
    post_state_sha256          TEXT NOT NULL,
    takeovers_json             TEXT NOT NULL,
    plan_json                  TEXT NOT NULL
);
CREATE INDEX journal_operations_bundle ON journal_operations (bundle_path);

CREATE TABLE journal_actions (
    operation_id TEXT NOT NULL REFERENCES journal_operations (operation_id),
    seq          INTEGER NOT NULL,
    kind         TEXT NOT NULL,      -- file_create, file_overwrite, file_delete, link_create, link_overwrite, link_delete
    path         TEXT NOT NULL,
    size         INTEGER,
    sha256       TEXT,
    target       TEXT,
    PRIMARY KEY (operation_id, seq)
);

CREATE TABLE journal_events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL REFERENCES journal_operations (operation_id),
    at           TEXT NOT NULL,
    event        TEXT NOT NULL,      -- staged, moved_aside, placed, committed, completed, rolled_back, recovered_forward, recovered_back, diverged
    detail       TEXT
);
CREATE INDEX journal_events_operation ON journal_events (operation_id);

CREATE TABLE journal_placements (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL REFERENCES journal_operations (operation_id),
    bundle_path  TEXT NOT NULL,
    path         TEXT NOT NULL,
    size         INTEGER NOT NULL,
    mtime_ns     INTEGER NOT NULL,
    ino          INTEGER NOT NULL,
    sha256       TEXT NOT NULL
);
CREATE INDEX journal_placements_path ON journal_placements (bundle_path, path);

CREATE TRIGGER journal_operations_no_update BEFORE UPDATE ON journal_operations BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_operations_no_delete BEFORE DELETE ON journal_operations BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_actions_no_update BEFORE UPDATE ON journal_actions BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_actions_no_delete BEFORE DELETE ON journal_actions BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_events_no_update BEFORE UPDATE ON journal_events BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_events_no_delete BEFORE DELETE ON journal_events BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_placements_no_update BEFORE UPDATE ON journal_placements BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_placements_no_delete BEFORE DELETE ON journal_placements BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;

-- One row per operation with its derived status:
--   in_progress    started, commit point not reached, not rolled back (recovery due)
--   committed      commit point reached, cleanup unfinished (recovery due: roll forward)
--   applied        finished
--   failed         an error rolled it back in process
--   rolled_forward recover finished it
--   rolled_back    recover undid it
--   diverged       recover found neither pre- nor post-state (recovery due, by hand)
CREATE VIEW operations AS
SELECT o.operation_id, o.started_at, o.command, o.actor, o.pipeline_id, o.destination_id,
       o.bundle_path, o.state_mode, o.decision, o.takeover_mode,
       o.previous_owner, o.previous_source_id, o.previous_source_created_at,
       o.source_id, o.source_created_at, o.source_digest,
       o.pre_state_sha256, o.post_state_sha256,
       (SELECT e.at FROM journal_events e WHERE e.operation_id = o.operation_id ORDER BY e.id DESC LIMIT 1) AS updated_at,
       CASE (SELECT e.event FROM journal_events e
              WHERE e.operation_id = o.operation_id
                AND e.event IN ('committed', 'completed', 'rolled_back', 'recovered_forward', 'recovered_back', 'diverged')
              ORDER BY e.id DESC LIMIT 1)
           WHEN 'completed' THEN 'applied'
           WHEN 'rolled_back' THEN 'failed'
           WHEN 'recovered_forward' THEN 'rolled_forward'
           WHEN 'recovered_back' THEN 'rolled_back'
           WHEN 'diverged' THEN 'diverged'
           WHEN 'committed' THEN 'committed'
           ELSE 'in_progress'
       END AS status
FROM journal_operations o;

-- One row per owner whose paths changed hands in a takeover (or a forced replacement of
-- another owner's content).
CREATE VIEW takeovers AS
SELECT op.operation_id, op.started_at, op.actor, op.pipeline_id, op.destination_id, op.bundle_path,
       op.decision, op.takeover_mode,
       json_extract(t.value, '$.from_owner')     AS from_owner,
       json_extract(t.value, '$.from_source_id') AS from_source_id,
       op.source_id                              AS new_source_id,
       json_extract(t.value, '$.paths')          AS paths,
       op.status
FROM operations op
JOIN journal_operations jo ON jo.operation_id = op.operation_id,
     json_each(jo.takeovers_json) t;
