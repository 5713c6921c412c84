-- The address each endpoint leaves from (docs/exit.md): NULL while unknown.
ALTER TABLE endpoints ADD COLUMN exit_ip TEXT;
ALTER TABLE endpoints ADD COLUMN exit_seen_at TIMESTAMPTZ;
