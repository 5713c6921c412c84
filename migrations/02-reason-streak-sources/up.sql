-- disable_after counts consecutive failures of one reason; it must survive a restart.
ALTER TABLE endpoints ADD COLUMN reason_streak INTEGER NOT NULL DEFAULT 0;

-- Last sniff of each source of a sniffing pool, for `proxypool sources`.
CREATE TABLE sources (
    pool        TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    last_at     TEXT,
    last_ok     INTEGER,
    last_detail TEXT,
    last_count  INTEGER,
    PRIMARY KEY (pool, name)
);
