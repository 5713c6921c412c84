-- Whom each failure counted against (docs/blame.md): endpoint, pair, target or pending.
-- NULL on events that are not failures. Target events (target_down, target_up) have no
-- endpoint: the target is in `destination`.
ALTER TABLE events ADD COLUMN blame TEXT;
