-- distributor journal, schema 10. Never edit this file once landed; add a new numbered one.
-- Where each object store's destination log ended when this journal last wrote to it
-- (SPEC §18 "Finding the tail"): the next writer lists the log from that entry on (one
-- request) instead of listing the whole log. `location` names the store and the bundle
-- path (`<endpoint>|s3://<bucket>/<prefix>`, `aws` for AWS's own endpoint). Only a hint:
-- a writer that does not find the entry named here lists the whole log. Append-only like
-- every table: the newest row of a location is the one read.
CREATE TABLE journal_log_tails (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    location     TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    at           TEXT NOT NULL
);
CREATE INDEX journal_log_tails_latest ON journal_log_tails (location, id);

CREATE TRIGGER journal_log_tails_no_update BEFORE UPDATE ON journal_log_tails BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_log_tails_no_delete BEFORE DELETE ON journal_log_tails BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_log_tails_no_replace BEFORE INSERT ON journal_log_tails
    WHEN EXISTS (SELECT 1 FROM journal_log_tails WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
