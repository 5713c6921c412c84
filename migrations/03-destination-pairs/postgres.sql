-- Per-destination health: only pairs that are not `available` have a row (see up.sql).
CREATE TABLE destination_pairs (
    endpoint         BIGINT      NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    destination      TEXT        NOT NULL,
    state            TEXT        NOT NULL
                     CHECK (state IN ('cooling', 'probe_allowed', 'disabled')),
    reason           TEXT,
    phase            TEXT,
    status           INTEGER,
    detail           TEXT,
    streak           INTEGER     NOT NULL DEFAULT 0,
    reason_streak    INTEGER     NOT NULL DEFAULT 0,
    cooldown_ms      BIGINT,
    cooldown_until   TIMESTAMPTZ,
    state_changed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (endpoint, destination)
);

CREATE INDEX destination_pairs_destination ON destination_pairs (destination);

ALTER TABLE events ADD COLUMN destination TEXT;
ALTER TABLE events ADD COLUMN status INTEGER;
