-- distributor journal, schema 12. Never edit this file once landed; add a new numbered one.
-- The identity of a state file a publication committed in a local bundle path (device,
-- inode, size, mtime and ctime, taken from the file after it was renamed into place),
-- written with the `committed` event, and only when that post-state records the
-- operation's owner with the operation's source and exactly its manifest's outputs and
-- links. While `.distributor.json` still has that identity it holds those bytes (a
-- rewrite, a rename over it, a chmod or a chown changes its ctime), so a republication
-- of that very source decides `unchanged` without reading or parsing the state.
CREATE TABLE journal_state_files (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL REFERENCES journal_operations (operation_id),
    bundle_path  TEXT NOT NULL,
    dev          INTEGER NOT NULL,
    ino          INTEGER NOT NULL,
    size         INTEGER NOT NULL,
    mtime_ns     INTEGER NOT NULL,
    ctime_ns     INTEGER NOT NULL
);
CREATE INDEX journal_state_files_latest ON journal_state_files (bundle_path, id);

CREATE TRIGGER journal_state_files_no_update BEFORE UPDATE ON journal_state_files BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_state_files_no_delete BEFORE DELETE ON journal_state_files BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_state_files_no_replace BEFORE INSERT ON journal_state_files
    WHEN EXISTS (SELECT 1 FROM journal_state_files WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
