-- distributor journal, schema 4. Never edit this file once landed; add a new numbered one.
-- The UPDATE and DELETE triggers of schema 1 keep rows from changing, but an
-- INSERT OR REPLACE (or an UPSERT) that hits an existing key deletes the old row without
-- firing a DELETE trigger. These refuse any insert whose key is already taken, so a row,
-- once written, stays exactly as it was.
CREATE TRIGGER journal_operations_no_replace BEFORE INSERT ON journal_operations
    WHEN EXISTS (SELECT 1 FROM journal_operations WHERE operation_id = NEW.operation_id)
BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_actions_no_replace BEFORE INSERT ON journal_actions
    WHEN EXISTS (SELECT 1 FROM journal_actions WHERE operation_id = NEW.operation_id AND seq = NEW.seq)
BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_events_no_replace BEFORE INSERT ON journal_events
    WHEN EXISTS (SELECT 1 FROM journal_events WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
CREATE TRIGGER journal_placements_no_replace BEFORE INSERT ON journal_placements
    WHEN EXISTS (SELECT 1 FROM journal_placements WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
