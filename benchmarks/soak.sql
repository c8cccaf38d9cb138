-- Statements of benchmarks/soak.py: the soak's traffic for the tables its writers fill one row
-- at a time elsewhere (the engine's dead-letter fallback, `spectral dlq redrive`, `spectral
-- tokens`), and the sizes it samples.

-- name: dead_letter
INSERT INTO core.dead_letters (consumer, source_topic, source_partition, source_offset, reason,
    detail, refusal, failed_at, record_key, key_size, value_head, value_size, value_sha256,
    headers, header_count, history)
VALUES ('rule-candidates', 'soak', 0, $1, 'not_json', 'not JSON', 'MessageSizeTooLargeError',
    now(), NULL, 0, '\x7b6e6f74'::bytea, 4, '', '[]', 0, '[]')

-- name: redrive
INSERT INTO core.dlq_redrives (dlq_topic, dlq_partition, dlq_offset, reason, source_topic,
    redriven_partition, redriven_offset)
VALUES ($1, 0, $2, 'not_json', $3, 0, $2)

-- name: revoked_token
INSERT INTO core.api_tokens (token_id, name, token_hash, display_prefix, scopes, revoked_at)
VALUES ($1, $2, $3, 'spt_soak', ARRAY['work:read'], now())

-- name: table_size
-- Rows and bytes of one table ({table}: a schema-qualified name from the soak's fixed list,
-- never input).
SELECT (SELECT count(*) FROM {table}) AS rows, pg_total_relation_size('{table}'::regclass) AS bytes
