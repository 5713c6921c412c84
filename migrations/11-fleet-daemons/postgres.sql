-- The fleet as one (docs/fleet.md, "The fleet as one"): each daemon registers itself and
-- beats every 2 s by the database's clock; `status`, `/api/status` and the status page
-- list them. Rows of daemons gone for an hour are deleted by the others.
CREATE TABLE fleet_daemons (
    id           TEXT        PRIMARY KEY,
    host         TEXT        NOT NULL,
    pid          INTEGER     NOT NULL,
    version      TEXT        NOT NULL,
    -- JSON: the daemon's listeners (socket, gateways, HTTP, TCP).
    addresses    TEXT        NOT NULL,
    leases       BIGINT      NOT NULL DEFAULT 0,
    -- JSON: live leases by pool.
    pool_leases  TEXT        NOT NULL DEFAULT '{}',
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Work one daemon of the fleet does for all (sniffing a pool's sources): who does it, until
-- when it holds it unless it asks again, and when it last ran, by the database's clock.
-- Another daemon takes a job over once its hold lapsed or its holder's heartbeat is older
-- than 10 s.
CREATE TABLE fleet_jobs (
    job        TEXT        PRIMARY KEY,
    holder     TEXT        NOT NULL,
    held_until TIMESTAMPTZ NOT NULL,
    last_run   TIMESTAMPTZ NOT NULL DEFAULT now()
);
