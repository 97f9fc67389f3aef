-- distributor journal, schema 8. Never edit this file once landed; add a new numbered one.
-- Each published file's path and sha256 are stored once (SPEC §7, issue 16: at most 150
-- bytes of journal per published file). Before, a publication stored them three times:
-- in plan_json, in journal_actions (with its own index) and in its placement set.
--
-- From schema 8 an operation's actions are rows of journal_action_rows, keyed by a small
-- integer (its journal_action_sets id) with the kind as a code and the sha256 as 32 bytes;
-- plan_json holds the rest of the plan (distributor puts the actions back when it reads
-- it). The placement set a commit writes names each file by the seq of the action that
-- placed it: path, size and sha256 are the action's. `journal_actions` and `placements`
-- are views that show every schema's rows as before, sha256 as lowercase hex.

CREATE TABLE journal_action_sets (
    id           INTEGER PRIMARY KEY,
    operation_id TEXT NOT NULL UNIQUE REFERENCES journal_operations (operation_id)
);

CREATE TABLE journal_action_kinds (
    code INTEGER PRIMARY KEY,
    kind TEXT NOT NULL UNIQUE
);
INSERT INTO journal_action_kinds (code, kind) VALUES
    (0, 'file_create'), (1, 'file_overwrite'), (2, 'file_delete'),
    (3, 'link_create'), (4, 'link_overwrite'), (5, 'link_delete');

CREATE TABLE journal_action_rows (
    action_set INTEGER NOT NULL REFERENCES journal_action_sets (id),
    seq        INTEGER NOT NULL,
    kind       INTEGER NOT NULL REFERENCES journal_action_kinds (code),
    path       TEXT NOT NULL,
    size       INTEGER,
    sha256     BLOB,               -- 32 bytes
    target     TEXT,
    replaces   TEXT,               -- what an overwrite or delete moves aside: file, link
    PRIMARY KEY (action_set, seq)
) WITHOUT ROWID;

CREATE TRIGGER journal_action_sets_no_update BEFORE UPDATE ON journal_action_sets BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_action_sets_no_delete BEFORE DELETE ON journal_action_sets BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_action_sets_no_replace BEFORE INSERT ON journal_action_sets
    WHEN EXISTS (SELECT 1 FROM journal_action_sets WHERE id = NEW.id OR operation_id = NEW.operation_id)
BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_action_kinds_no_update BEFORE UPDATE ON journal_action_kinds BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_action_kinds_no_delete BEFORE DELETE ON journal_action_kinds BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_action_kinds_no_replace BEFORE INSERT ON journal_action_kinds
    WHEN EXISTS (SELECT 1 FROM journal_action_kinds WHERE code = NEW.code OR kind = NEW.kind)
BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_action_rows_no_update BEFORE UPDATE ON journal_action_rows BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_action_rows_no_delete BEFORE DELETE ON journal_action_rows BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_action_rows_no_replace BEFORE INSERT ON journal_action_rows
    WHEN EXISTS (SELECT 1 FROM journal_action_rows WHERE action_set = NEW.action_set AND seq = NEW.seq)
BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;

-- The rows of schemas 1-7 keep their table under a new name; journal_actions shows both.
ALTER TABLE journal_actions RENAME TO journal_actions_v1;

CREATE VIEW journal_actions AS
SELECT operation_id, seq, kind, path, size, sha256, target FROM journal_actions_v1
UNION ALL
SELECT s.operation_id, r.seq, k.kind, r.path, r.size,
       CASE WHEN r.sha256 IS NULL THEN NULL ELSE lower(hex(r.sha256)) END,
       r.target
FROM journal_action_sets s
CROSS JOIN journal_action_rows r ON r.action_set = s.id
JOIN journal_action_kinds k ON k.code = r.kind;

-- A commit's placement set (schema 8): `action_set` names the operation's actions, and
-- each element of `placements` is [seq, mtime_ns - mtime_base, ino, ctime_ns - ctime_base]
-- for the file action `seq` placed. Sets written otherwise (a releases destination's
-- fingerprints retaken after linking, a rollback's) keep the schema 5 form and a NULL
-- action_set.
ALTER TABLE journal_placement_sets ADD COLUMN action_set INTEGER REFERENCES journal_action_sets (id);
ALTER TABLE journal_placement_sets ADD COLUMN mtime_base INTEGER;
ALTER TABLE journal_placement_sets ADD COLUMN ctime_base INTEGER;

-- One row per file placed, whichever schema recorded it. (CROSS JOIN keeps SQLite reading
-- each set's elements first and finding each one's action by key.)
DROP VIEW placements;
CREATE VIEW placements AS
SELECT p.operation_id, p.bundle_path, p.path, p.size, p.mtime_ns, p.ino, p.sha256,
       NULL AS ctime_ns
FROM journal_placements p
UNION ALL
SELECT s.operation_id, s.bundle_path,
       json_extract(e.value, '$[0]') AS path,
       json_extract(e.value, '$[1]') AS size,
       json_extract(e.value, '$[2]') AS mtime_ns,
       json_extract(e.value, '$[3]') AS ino,
       json_extract(e.value, '$[4]') AS sha256,
       json_extract(e.value, '$[5]') AS ctime_ns
FROM journal_placement_sets s, json_each(s.placements) e
WHERE s.action_set IS NULL
UNION ALL
SELECT s.operation_id, s.bundle_path, r.path, r.size,
       s.mtime_base + json_extract(e.value, '$[1]') AS mtime_ns,
       json_extract(e.value, '$[2]') AS ino,
       lower(hex(r.sha256)) AS sha256,
       s.ctime_base + json_extract(e.value, '$[3]') AS ctime_ns
FROM journal_placement_sets s
CROSS JOIN json_each(s.placements) e
CROSS JOIN journal_action_rows r ON r.action_set = s.action_set AND r.seq = json_extract(e.value, '$[0]')
WHERE s.action_set IS NOT NULL;
