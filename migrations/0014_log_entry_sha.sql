-- distributor journal, schema 14. Never edit this file once landed; add a new numbered one.
-- The sha256 of the destination log entry this journal last wrote (or found its
-- operation's) at a location (docs/operations.md, "The hash chain"): `verify` reports
-- `log_mismatch` when that entry's bytes in the log differ, which the chain alone cannot
-- see for the newest entry. NULL in rows written before schema 14.
ALTER TABLE journal_log_tails ADD COLUMN entry_sha256 TEXT;
