-- endpoints_pool_state (pool, state) served no query here either: `WHERE pool = ?` is
-- served by the UNIQUE (pool, scheme, host, port, "user") index, and every state change
-- moved the endpoint's entry in it.
DROP INDEX IF EXISTS endpoints_pool_state;
