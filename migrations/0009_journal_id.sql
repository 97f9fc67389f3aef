-- distributor journal, schema 9. Never edit this file once landed; add a new numbered one.
-- Each journal keeps an id of its own (SPEC §18: the destination log's `journal_id`, so a
-- destination says which journal wrote each of its entries): a random uuid (version 4),
-- made once, when the journal is created or first migrated to this schema.

CREATE TABLE journal_meta (
    journal_id TEXT NOT NULL
);

INSERT INTO journal_meta (journal_id) VALUES (
    lower(
        hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2)
        || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2)
        || '-' || hex(randomblob(6))
    )
);
