-- distributor journal, schema 15. Never edit this file once landed; add a new numbered one.
-- The audit's questions by path (docs/audit.md: `blame PATH`, `history --path GLOB`) look
-- up action rows by path: one index, about 30 bytes per action row.
CREATE INDEX journal_action_rows_path ON journal_action_rows (path);
