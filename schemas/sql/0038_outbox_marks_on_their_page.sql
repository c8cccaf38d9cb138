-- The relay's mark of a row is written on the row's own page.
--
-- core.outbox_mark_published sets published_at on each row the relay published. published_at is
-- in the predicate of the outbox's partial indexes (WHERE published_at IS NULL), so PostgreSQL
-- never makes that update a HOT update: whatever the free space, every mark writes a new row
-- version and a new entry in the primary key. Where that new version goes is what free space
-- decides. On a page the writers filled (the default fillfactor, 100) there is no room: it goes
-- to another page, and the WAL record carries the whole new row (~1.1 KB with its envelope).
-- With half of each page left free by the inserts, a row's new version fits beside it, and an
-- update on the same page logs only the bytes that changed: 682 KB of WAL for a mark of 500
-- rows became 80 KB, and a relay draining 50,000 rows published 14,300-17,000 rows/s instead of
-- 12,100-12,500 (interleaved, load 5.5-7). The slots are emptied by TRUNCATE (maintenance), so
-- the space the inserts leave free costs each slot only while it lives. Only new pages follow
-- the setting; no row is rewritten.

ALTER TABLE core.outbox_0 SET (fillfactor = 50);
ALTER TABLE core.outbox_1 SET (fillfactor = 50);
ALTER TABLE core.outbox_2 SET (fillfactor = 50);
ALTER TABLE core.outbox_3 SET (fillfactor = 50);
