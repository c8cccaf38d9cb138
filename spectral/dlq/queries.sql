-- The redrive record (core.dlq_redrives, migration 0007), as the operator role.

-- name: redriven_among
-- Which of these dead letters (partition, offset) were redriven.
SELECT d.dlq_partition, d.dlq_offset
FROM core.dlq_redrives AS d
JOIN unnest($2::int[], $3::bigint[]) AS t(p, o) ON d.dlq_partition = t.p AND d.dlq_offset = t.o
WHERE d.dlq_topic = $1;

-- name: redriven_present
-- How many dead letters still on the topic (at or after each partition's first offset) were
-- redriven.
SELECT count(*)
FROM core.dlq_redrives AS d
JOIN unnest($2::int[], $3::bigint[]) AS t(p, first) ON d.dlq_partition = t.p
WHERE d.dlq_topic = $1 AND d.dlq_offset >= t.first;

-- name: claim_redrives
-- The dead letters of this batch nobody redrove before; a concurrent redrive of the same ones
-- waits on these rows and then finds them taken.
INSERT INTO core.dlq_redrives (dlq_topic, dlq_partition, dlq_offset, reason, source_topic)
SELECT $1, p, o, r, $2
FROM unnest($3::int[], $4::bigint[], $5::text[]) AS t(p, o, r)
ON CONFLICT (dlq_topic, dlq_partition, dlq_offset) DO NOTHING
RETURNING dlq_partition, dlq_offset;

-- name: record_targets
-- Where each redriven record landed on the source topic.
UPDATE core.dlq_redrives AS d
SET redriven_partition = t.rp, redriven_offset = t.ro
FROM unnest($2::int[], $3::bigint[], $4::int[], $5::bigint[]) AS t(p, o, rp, ro)
WHERE d.dlq_topic = $1 AND d.dlq_partition = t.p AND d.dlq_offset = t.o;

-- name: release_redrives
-- Claims of this transaction whose records the broker refused: not redriven, left for a later run.
DELETE FROM core.dlq_redrives AS d
USING unnest($2::int[], $3::bigint[]) AS t(p, o)
WHERE d.dlq_topic = $1 AND d.dlq_partition = t.p AND d.dlq_offset = t.o;
