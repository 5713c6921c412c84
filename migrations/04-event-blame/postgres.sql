-- Whom each failure counted against: endpoint, pair, target or pending (see up.sql).
ALTER TABLE events ADD COLUMN blame TEXT;
