-- distributor journal, schema 13. Never edit this file once landed; add a new numbered one.
-- Why an operation was run (docs/audit.md): `--reason`, `DISTRIBUTOR_REASON`, or serve's
-- `X-Distributor-Reason` header; at most 1 KiB of UTF-8 without control characters,
-- checked before the operation began. NULL when none was given, and for every operation
-- journaled before schema 13.
ALTER TABLE journal_operations ADD COLUMN reason TEXT;
