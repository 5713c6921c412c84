-- PostgreSQL keeps its events (endpoint, id) index: nothing changes there.
SELECT 1;
