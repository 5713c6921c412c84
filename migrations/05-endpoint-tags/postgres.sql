-- PostgreSQL twin of up.sql: endpoint tags, a JSON object of strings; NULL when none.
ALTER TABLE endpoints ADD COLUMN tags TEXT;
