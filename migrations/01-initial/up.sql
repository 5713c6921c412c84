-- Endpoints: identity is (pool, scheme, host, port, user); user is '' when absent so the
-- UNIQUE constraint also covers credential-less endpoints.
CREATE TABLE endpoints (
    id               INTEGER PRIMARY KEY,
    pool             TEXT    NOT NULL,
    scheme           TEXT    NOT NULL,
    host             TEXT    NOT NULL,
    port             INTEGER NOT NULL,
    user             TEXT    NOT NULL DEFAULT '',
    password         TEXT,
    label            TEXT,
    source           TEXT,
    state            TEXT    NOT NULL
                     CHECK (state IN ('available', 'cooling', 'probe_allowed', 'disabled')),
    reason           TEXT,
    phase            TEXT,
    detail           TEXT,
    streak           INTEGER NOT NULL DEFAULT 0,
    cooldown_ms      INTEGER,
    cooldown_until   TEXT,
    state_changed_at TEXT    NOT NULL,
    created_at       TEXT    NOT NULL,
    UNIQUE (pool, scheme, host, port, user)
);

CREATE INDEX endpoints_pool_state ON endpoints (pool, state);

-- Events are kept after an endpoint is removed: no foreign key.
CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    at         TEXT    NOT NULL,
    endpoint   INTEGER,
    kind       TEXT    NOT NULL,
    from_state TEXT,
    to_state   TEXT,
    reason     TEXT,
    phase      TEXT,
    detail     TEXT,
    lease      TEXT
);

CREATE INDEX events_endpoint ON events (endpoint, id);
