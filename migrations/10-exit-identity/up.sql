-- The address each endpoint leaves from, as an address page or a provider's header told
-- it (docs/exit.md): NULL while unknown. `exit_seen_at` is when it was last learned.
ALTER TABLE endpoints ADD COLUMN exit_ip TEXT;
ALTER TABLE endpoints ADD COLUMN exit_seen_at TEXT;
