-- distributor journal, schema 3. Never edit this file once landed; add a new numbered one.
-- The placement fingerprints a publication consults are the latest per path of its bundle
-- path. Reading them newest first through this index stops as soon as every path the
-- state records is found, so the cost follows the destination's size, not the length of
-- its history (an hourly "latest" destination places its files again every hour).
CREATE INDEX journal_placements_latest ON journal_placements (bundle_path, id);
