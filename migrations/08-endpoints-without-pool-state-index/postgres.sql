-- SQLite only (up.sql): PostgreSQL keeps its endpoints_pool_state index for now.
SELECT 1; -- a statement, so this version is applied and recorded like any other
