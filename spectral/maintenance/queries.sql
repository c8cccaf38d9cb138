-- Statements of spectral/maintenance/repository.py, run as spectral_maintainer (migration
-- bounded_state).
-- Partition names ({partition}) are filled in from a closed set (core.event_handled_0..1,
-- core.outbox_0..3), never from input.

-- name: try_lock
-- One maintenance run at a time (a session lock, released when the run's session ends).
SELECT pg_try_advisory_lock($1::int, $2::int)

-- name: unlock
SELECT pg_advisory_unlock($1::int, $2::int)

-- name: set_lock_timeout
-- How long a rotation may wait for the transactions in flight on a table (they wait behind it).
SELECT set_config('lock_timeout', $1::text, true)

-- name: clock
SELECT clock_timestamp() AS now

-- name: dedup_generations
SELECT generation, slot, started_at, ended_at, forgotten_at, copies_before, rows_forgotten
FROM core.dedup_generations
ORDER BY generation

-- name: outbox_generations
SELECT generation, slot, started_at, ended_at, fully_published_at, truncated_at, rows_pruned
FROM core.outbox_generations
ORDER BY generation

-- name: consumers_in_slot
-- The consumers with rows in one dedup slot. Triggers on core.event_handled keep the candidates
-- (migration dedup_key_leads: added with each insert, removed when the slot is truncated), a
-- list that never omits a consumer with rows but may still name one whose rows were deleted one
-- by one (a rebuild, an operator clearing an unknown consumer's keys as the alert says): each
-- candidate is confirmed by one row of it in the slot. A consumer with rows is found at the first
-- of them; only a stale candidate costs a read of the slot, once per maintenance run, and it is
-- then no longer named, so it never holds a rotation back. The confirmation is a subquery with a
-- LIMIT, run once per candidate: written as EXISTS, it was planned as a semi-join that made the
-- slot's side unique by aggregating every row of the slot (no index leads with the consumer),
-- every pass (2 million rows: 0.7 s).
SELECT DISTINCT c.consumer
FROM core.dedup_slot_consumers AS c
WHERE c.slot = $1
  AND (SELECT true FROM core.event_handled AS h
       WHERE h.slot = $1 AND h.consumer = c.consumer
       LIMIT 1)
ORDER BY c.consumer

-- name: recent_redrives
-- Dead letters redriven since $1 (their copies may still be read), the earliest per DLQ topic.
SELECT dlq_topic, min(redriven_at) AS first_redriven_at
FROM core.dlq_redrives
WHERE redriven_at > $1
GROUP BY dlq_topic
ORDER BY dlq_topic

-- name: outbox_unpublished
-- Unpublished rows of one slot, and how many of them no relay can publish within the margin
-- (core.outbox_held_back). The others are due: the slot waits for the relays. Partial indexes
-- keep both cheap.
SELECT
    (SELECT count(*) FROM core.outbox WHERE slot = $1 AND published_at IS NULL) AS unpublished,
    (SELECT count(*) FROM core.outbox_held_back($1::smallint, $2::interval)) AS movable

-- name: evacuate_delayed
-- Move the rows of an ended slot that no relay can publish within the margin, with their ids, to
-- the current slot. No relay can have them in flight: a relay fetches a row only once its
-- available_at has passed and no earlier row of its key is delayed.
UPDATE core.outbox AS o
SET slot = (SELECT slot FROM core.outbox_generations WHERE ended_at IS NULL)
FROM core.outbox_held_back($1::smallint, $2::interval) AS held
WHERE o.id = held.id AND o.slot = $1

-- name: mark_fully_published
-- $2: a time taken after the check found no unpublished row.
UPDATE core.outbox_generations
SET fully_published_at = $2
WHERE generation = $1 AND ended_at IS NOT NULL AND fully_published_at IS NULL

-- name: lock_outbox_partition
LOCK TABLE {partition} IN ACCESS EXCLUSIVE MODE

-- name: estimated_rows
-- Live rows of one partition as the statistics know them (an estimate; counting would read it).
SELECT coalesce(
    (SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = $1::regclass), 0
)::bigint AS estimate

-- name: truncate_partition
TRUNCATE {partition}

-- name: mark_truncated
UPDATE core.outbox_generations
SET truncated_at = $2, rows_pruned = $3
WHERE generation = $1

-- name: lock_outbox_writers
-- Waits for every transaction that inserted outbox rows; none can insert until this commits, and
-- those after it read the new current slot. Relays' reads go on (SHARE does not block them).
-- (LOCK TABLE core.outbox IN SHARE MODE, through a function of migration bounded_state.)
SELECT core.lock_outbox_for_rotation()

-- name: end_outbox_generation
-- $2: a time taken once the lock was granted (every earlier row is in the ending generation).
UPDATE core.outbox_generations
SET ended_at = $2
WHERE generation = $1 AND ended_at IS NULL

-- name: start_outbox_generation
INSERT INTO core.outbox_generations (generation, slot, started_at)
VALUES ($1, $2, $3)

-- name: lock_dedup
-- Waits for every transaction that claimed keys (they hold a lock on the table until they end);
-- claims wait behind it and then read the new current slot.
-- (LOCK TABLE core.event_handled IN ACCESS EXCLUSIVE MODE, through a function of migration
-- bounded_state.)
SELECT core.lock_dedup_for_rotation()

-- name: forget_generation
-- $2: a time taken once the lock was granted; $3: the readable lifetime the cutoff was computed
-- with (every record carrying one of the generation's keys was appended before $2 - $3).
UPDATE core.dedup_generations
SET forgotten_at = $2::timestamptz,
    copies_before = $2::timestamptz - $3::interval,
    rows_forgotten = $4
WHERE generation = $1 AND forgotten_at IS NULL

-- name: end_dedup_generation
-- $2: a time taken once the lock was granted: every key of the ending generation was handled by a
-- transaction that began before it.
UPDATE core.dedup_generations
SET ended_at = $2
WHERE generation = $1 AND ended_at IS NULL

-- name: start_dedup_generation
INSERT INTO core.dedup_generations (generation, slot, started_at)
VALUES ($1, $2, $3)

-- name: table_sizes
-- Rows (statistics' estimate) and bytes (heap, indexes, TOAST) of every partition of the two
-- tables.
SELECT
    p.relname AS partition,
    (SELECT c.relname FROM pg_class AS c WHERE c.oid = i.inhparent) AS parent,
    coalesce(s.n_live_tup, 0)::bigint AS rows,
    pg_total_relation_size(p.oid)::bigint AS bytes
FROM pg_inherits AS i
JOIN pg_class AS p ON p.oid = i.inhrelid
JOIN pg_namespace AS n ON n.oid = p.relnamespace
LEFT JOIN pg_stat_user_tables AS s ON s.relid = p.oid
WHERE n.nspname = 'core'
  AND i.inhparent IN ('core.event_handled'::regclass, 'core.outbox'::regclass)
ORDER BY p.relname
