-- The dead-letter table core.dead_letters (migration "dead_letter_table"): the engine's last
-- resort when the broker refuses even a reference dead letter.

-- name: record_dead_letters
-- One row per refused dead letter, set-based; a record recorded before (a replay, a restart
-- before the offset commit) keeps its first row.
INSERT INTO core.dead_letters
    (consumer, source_topic, source_partition, source_offset, reason, detail, refusal, failed_at,
     record_key, key_size, value_head, value_size, value_sha256, headers, header_count, history)
SELECT *
FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::text[], $6::text[], $7::text[],
            $8::timestamptz[], $9::bytea[], $10::int[], $11::bytea[], $12::bigint[], $13::text[],
            $14::jsonb[], $15::int[], $16::jsonb[])
ON CONFLICT DO NOTHING;

-- name: dead_letter_summaries_of_topic
-- A listing: no value and no headers (a row may hold 16 MiB of value and 1 MiB of headers), the
-- key's first KiB; the oldest $3 rows (of reason $2 unless null).
SELECT id, consumer, source_topic, source_partition, source_offset, reason, detail, refusal,
       failed_at, substring(record_key FROM 1 FOR 1024) AS record_key, key_size,
       ''::bytea AS value_head, value_size, value_sha256, '[]'::jsonb AS headers,
       header_count, history, recorded_at
FROM core.dead_letters
WHERE source_topic = $1 AND ($2::text IS NULL OR reason = $2)
ORDER BY id
LIMIT $3;

-- name: dead_letter_of_topic
SELECT id, consumer, source_topic, source_partition, source_offset, reason, detail, refusal,
       failed_at, record_key, key_size, value_head, value_size, value_sha256, headers,
       header_count, history, recorded_at
FROM core.dead_letters
WHERE source_topic = $1 AND id = $2;
