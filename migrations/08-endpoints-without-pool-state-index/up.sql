-- endpoints_pool_state (pool, state) served no query: `WHERE pool = ?` is served as well by
-- the UNIQUE (pool, scheme, host, port, user) index, whose first column is the pool, and
-- listing by state scans either way. Every state change moved the endpoint's entry in it,
-- two more random pages in each commit (BENCHMARKS.md, "Persisted reports").
DROP INDEX IF EXISTS endpoints_pool_state;
