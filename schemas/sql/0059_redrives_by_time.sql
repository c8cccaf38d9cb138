-- Retention prunes the redrive record through an index of its rows' times.
--
-- Retention deletes, batch after batch, the redrives of one (dead-letter topic, source topic)
-- older than the horizon (spectral/maintenance/retention.sql, prune_redrives: LIMIT a batch).
-- No index held redriven_at: each statement walked the rows from the start of the primary key
-- (partition, offset) or the whole table, reading again every row kept before the first it
-- deleted, so a pass cost its batches x the rows kept (400,000 rows, 200,000 pruned in batches
-- of 5,000: 2.9 s). The index below finds the rows past the horizon of a topic pair, oldest
-- first, and nothing else; it serves the dead-letter tools' read of recent redrives per topic as
-- well. A redrive is an operator's act (a row per dead letter redriven): the index costs those
-- writes one entry each.

CREATE INDEX dlq_redrives_by_time ON core.dlq_redrives (dlq_topic, source_topic, redriven_at);
