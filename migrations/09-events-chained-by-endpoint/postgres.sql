-- PostgreSQL keeps its events (endpoint, id) index: its WAL records the entry, not the
-- whole page, so the index costs a commit little there.
SELECT 1;
