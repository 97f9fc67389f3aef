-- distributor journal, schema 5. Never edit this file once landed; add a new numbered one.
-- A committed operation's placement fingerprints as one row instead of a row per file:
-- a republication reads them back as one value (SQLite spends about as long stepping to a
-- row as distributor spends on the rest of a file's check). `placements` is a JSON array
-- of [path, size, mtime_ns, ino, sha256], one element per file placed. Operations
-- committed before schema 5 keep their rows in journal_placements; the `placements` view
-- shows both, one row per file placed.
CREATE TABLE journal_placement_sets (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL REFERENCES journal_operations (operation_id),
    bundle_path  TEXT NOT NULL,
    placements   TEXT NOT NULL
);
-- Newest first per bundle path, straight from the index (as journal_placements_latest).
CREATE INDEX journal_placement_sets_latest ON journal_placement_sets (bundle_path, id);

CREATE TRIGGER journal_placement_sets_no_update BEFORE UPDATE ON journal_placement_sets BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_placement_sets_no_delete BEFORE DELETE ON journal_placement_sets BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_placement_sets_no_replace BEFORE INSERT ON journal_placement_sets
    WHEN EXISTS (SELECT 1 FROM journal_placement_sets WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;

-- One row per file placed, whichever schema recorded it.
CREATE VIEW placements AS
SELECT p.operation_id, p.bundle_path, p.path, p.size, p.mtime_ns, p.ino, p.sha256
FROM journal_placements p
UNION ALL
SELECT s.operation_id, s.bundle_path,
       json_extract(e.value, '$[0]') AS path,
       json_extract(e.value, '$[1]') AS size,
       json_extract(e.value, '$[2]') AS mtime_ns,
       json_extract(e.value, '$[3]') AS ino,
       json_extract(e.value, '$[4]') AS sha256
FROM journal_placement_sets s, json_each(s.placements) e;
