-- disable_after counts consecutive failures of one reason; it must survive a restart.
ALTER TABLE endpoints ADD COLUMN reason_streak INTEGER NOT NULL DEFAULT 0;

-- Last sniff of each source of a sniffing pool, for `proxypool sources`.
CREATE TABLE sources (
    pool        TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    last_at     TIMESTAMPTZ,
    last_ok     BOOLEAN,
    last_detail TEXT,
    last_count  BIGINT,
    PRIMARY KEY (pool, name)
);
