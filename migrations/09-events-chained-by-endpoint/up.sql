-- An endpoint's events are read through a chain instead of the `events_endpoint` index:
-- each event names the endpoint's previous event (`prev`), and the endpoint's row its
-- newest (`last_event`). The index put an entry for every event into the leaf page of
-- its endpoint, a random page of its own in each commit; the chain's head sits in the
-- endpoint's row, which a state change (most events are one) writes anyway.
--
-- The backfill rewrites every event row once: time and WAL space in proportion to the
-- events kept.
--
-- A removed endpoint's head moves to `removed_endpoints`, so its events stay readable
-- and its id is never handed out again (the next id is one above the largest in
-- `endpoints` and `removed_endpoints`).
ALTER TABLE events ADD COLUMN prev INTEGER;
ALTER TABLE endpoints ADD COLUMN last_event INTEGER;
CREATE TABLE removed_endpoints (
    id         INTEGER PRIMARY KEY,
    last_event INTEGER NOT NULL
);
UPDATE events SET prev = (
    SELECT MAX(p.id) FROM events p WHERE p.endpoint = events.endpoint AND p.id < events.id
) WHERE endpoint IS NOT NULL;
UPDATE endpoints SET last_event = (SELECT MAX(e.id) FROM events e WHERE e.endpoint = endpoints.id);
INSERT INTO removed_endpoints (id, last_event)
    SELECT endpoint, MAX(id) FROM events
    WHERE endpoint IS NOT NULL AND endpoint NOT IN (SELECT id FROM endpoints)
    GROUP BY endpoint;
-- Pruning finds the removed endpoints whose events are all gone through this.
CREATE INDEX removed_endpoints_last_event ON removed_endpoints (last_event);
DROP INDEX events_endpoint;
