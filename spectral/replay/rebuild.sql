-- name: forget_consumer
-- A rebuild applies every record of the consumer's topics again: its dedup keys go first (in
-- the rebuild's transaction: they come back with the replayed records, or not at all).
DELETE FROM core.event_handled WHERE consumer = $1;
