-- Statements of spectral/maintenance/retention.py, run as spectral_maintainer (migration
-- retention). Each prune deletes at most $n rows per statement (its own short transaction).

-- name: prune_dead_letters
WITH doomed AS (
    SELECT id FROM core.dead_letters WHERE recorded_at < $1 ORDER BY id LIMIT $2
)
DELETE FROM core.dead_letters AS d USING doomed WHERE d.id = doomed.id

-- name: count_dead_letters
SELECT count(*) FROM core.dead_letters WHERE recorded_at < $1

-- name: redrive_topics
-- Every (dead-letter topic, source topic) pair the redrive record names, with its oldest row.
SELECT dlq_topic, source_topic, min(redriven_at) AS oldest
FROM core.dlq_redrives
GROUP BY dlq_topic, source_topic
ORDER BY dlq_topic, source_topic

-- name: prune_redrives
-- Oldest first, through dlq_redrives_by_time (migration redrives_by_time), and deleted by their
-- addresses: a batch reads the rows it deletes, not again the rows kept before them (in a plan
-- that walked the table, a pass cost its batches x the rows kept). A row an operator's redrive
-- updated meanwhile has moved and is left to the next batch.
DELETE FROM core.dlq_redrives
WHERE ctid = ANY (ARRAY(
    SELECT ctid
    FROM core.dlq_redrives
    WHERE dlq_topic = $1 AND source_topic = $2 AND redriven_at < $3
    ORDER BY redriven_at
    LIMIT $4
))

-- name: count_redrives
SELECT count(*) FROM core.dlq_redrives
WHERE dlq_topic = $1 AND source_topic = $2 AND redriven_at < $3

-- name: prune_tokens
-- Revoked or expired before $1 (LEAST ignores a NULL: a token that is only revoked, or only
-- expired, counts from that one time).
WITH doomed AS (
    SELECT token_id FROM core.api_tokens WHERE least(revoked_at, expires_at) < $1 LIMIT $2
)
DELETE FROM core.api_tokens AS t USING doomed WHERE t.token_id = doomed.token_id

-- name: count_tokens
SELECT count(*) FROM core.api_tokens WHERE least(revoked_at, expires_at) < $1

-- name: table_sizes
-- Rows (statistics' estimate) and bytes (heap, indexes, TOAST; every partition of a partitioned
-- table) of the named tables ("schema.table"; a name that is no table is left out). Read from
-- the catalogs: no privilege on the tables or their schemas is needed.
SELECT
    t.name AS "table",
    coalesce(sum(s.n_live_tup), 0)::bigint AS rows,
    coalesce(sum(pg_total_relation_size(p.oid)), 0)::bigint AS bytes
FROM unnest($1::text[]) AS t (name)
JOIN pg_namespace AS n ON n.nspname = split_part(t.name, '.', 1)
JOIN pg_class AS c ON c.relnamespace = n.oid AND c.relname = split_part(t.name, '.', 2)
JOIN pg_class AS p ON p.oid = c.oid OR p.oid IN (
    SELECT inhrelid FROM pg_inherits WHERE inhparent = c.oid
)
LEFT JOIN pg_stat_all_tables AS s ON s.relid = p.oid
GROUP BY t.name
ORDER BY t.name
