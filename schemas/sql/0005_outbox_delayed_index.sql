-- 0005 (issue 5): the outbox relay's "is an earlier row of this key still delayed?" check.
-- Without it the planner answers that part of the relay's fetch with a sequential scan of the
-- whole outbox (published rows included) on every batch: 55 ms per batch at 50k rows and
-- growing with the table. With it, the delayed rows (usually none) are one index range read
-- and a 1000-row fetch takes ~3 ms.
CREATE INDEX outbox_unpublished_available ON core.outbox (available_at) WHERE published_at IS NULL;
