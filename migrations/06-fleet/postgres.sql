-- Several daemons on one database (docs/fleet.md). Every writing transaction first takes
-- the next value of fleet_sequence.change_seq (locking its one row until commit), so the
-- change sequence follows commit order and event ids do too. Each row it writes gets that
-- value as `rev`; a daemon follows the others by reading rows with a larger `rev`, and
-- fleet_removals holds the deletions (endpoints removed, pairs recovered) the same way.
CREATE TABLE fleet_sequence (
    id              SMALLINT PRIMARY KEY CHECK (id = 1),
    change_seq      BIGINT   NOT NULL,
    -- Removals up to this change were pruned: a daemon further behind reloads everything.
    removed_through BIGINT   NOT NULL
);
INSERT INTO fleet_sequence VALUES (1, 0, 0);

CREATE TABLE fleet_removals (
    rev         BIGINT      NOT NULL,
    endpoint    BIGINT      NOT NULL,
    -- NULL: the endpoint was removed; else one of its pairs recovered.
    destination TEXT,
    at          TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX fleet_removals_rev ON fleet_removals (rev);

-- The single trial of a probe_allowed endpoint or pair is claimed by one daemon: the
-- claim's epoch is the change that made it (it only grows), and it lapses at claim_until
-- by the database's clock unless its daemon renews it.
ALTER TABLE endpoints ADD COLUMN rev BIGINT NOT NULL DEFAULT 0;
ALTER TABLE endpoints ADD COLUMN claim_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE endpoints ADD COLUMN claim_until TIMESTAMPTZ;
CREATE INDEX endpoints_rev ON endpoints (rev, id);

ALTER TABLE destination_pairs ADD COLUMN rev BIGINT NOT NULL DEFAULT 0;
ALTER TABLE destination_pairs ADD COLUMN claim_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE destination_pairs ADD COLUMN claim_until TIMESTAMPTZ;
CREATE INDEX destination_pairs_rev ON destination_pairs (rev);
