-- Endpoint tags (docs/selection.md, "Tags"): a JSON object of strings, e.g.
-- {"country":"us","tier":"dc"}; NULL when the endpoint has none.
ALTER TABLE endpoints ADD COLUMN tags TEXT;
