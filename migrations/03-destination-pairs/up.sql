-- Per-destination health (docs/destinations.md). Only pairs that are not `available` have a row: a
-- pair that recovers is deleted (with an event), so the table holds the bans, not the
-- cross product of endpoints and every site ever visited.
--
-- Primary key (endpoint, destination), WITHOUT ROWID: the key is the natural identity,
-- every write is an upsert or delete by it, and a rowid table would keep a second b-tree
-- for the same key. Its leading column also serves `show ID` (pairs of one endpoint) and
-- the ON DELETE CASCADE lookup when an endpoint is removed.
CREATE TABLE destination_pairs (
    endpoint         INTEGER NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    destination      TEXT    NOT NULL,
    state            TEXT    NOT NULL
                     CHECK (state IN ('cooling', 'probe_allowed', 'disabled')),
    reason           TEXT,
    phase            TEXT,
    status           INTEGER,
    detail           TEXT,
    streak           INTEGER NOT NULL DEFAULT 0,
    -- disable_after counts consecutive failures of one reason; it must survive a restart.
    reason_streak    INTEGER NOT NULL DEFAULT 0,
    cooldown_ms      INTEGER,
    cooldown_until   TEXT,
    state_changed_at TEXT    NOT NULL,
    PRIMARY KEY (endpoint, destination)
) WITHOUT ROWID;

-- `list --destination D` reads one destination's pairs without a full scan. Loading on
-- start reads the whole table and needs no index.
CREATE INDEX destination_pairs_destination ON destination_pairs (destination);

-- Events carry the destination (NULL when endpoint-scoped) and the HTTP status seen.
-- No index on events.destination: every event insert would pay for it, and events are
-- read by id or by endpoint, which the existing indexes serve.
ALTER TABLE events ADD COLUMN destination TEXT;
ALTER TABLE events ADD COLUMN status INTEGER;
