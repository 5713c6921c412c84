-- Writers no longer queue on one row (docs/fleet.md, "Propagation"). A writing
-- transaction takes the next value of fleet_change_seq, records it in fleet_changes with
-- its own transaction id, and writes that value as `rev` of every row it changes, only
-- where the row's `rev` is smaller (operator commands lock the tables they change before
-- they take their number): a row's `rev` grows in commit order. The numbers of different
-- transactions commit in any order; a daemon follows by transaction ids instead: every
-- change committed after its last read was made by a transaction whose id is at least the
-- oldest one that read saw running (`pg_snapshot_xmin`).
CREATE SEQUENCE fleet_change_seq;
SELECT setval('fleet_change_seq', change_seq + 1, false) FROM fleet_sequence WHERE id = 1;

CREATE TABLE fleet_changes (
    seq BIGINT      PRIMARY KEY,
    xid xid8        NOT NULL DEFAULT pg_current_xact_id(),
    at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX fleet_changes_xid ON fleet_changes (xid);
CREATE INDEX fleet_changes_at ON fleet_changes (at);

-- change_seq is no longer taken; removed_through now holds the newest transaction id whose
-- changes and removals were pruned (a daemon that read before it reloads everything).
ALTER TABLE fleet_sequence DROP COLUMN change_seq;
UPDATE fleet_sequence SET removed_through = 0;

-- `proxypool events --follow` follows the same way (event ids are taken before commit).
ALTER TABLE events ADD COLUMN xid xid8;
ALTER TABLE events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
CREATE INDEX events_xid ON events (xid);
