-- The dedup record stores its keys compactly.
--
-- What is deduplicated does not change: the idempotency key exactly as the envelope carries it,
-- per consumer. Only its stored form does: core.event_handled.idempotency_key (text) becomes
-- dedup_key (bytea). A key spelled '{uuid}:{32 hex digits}' in lowercase (a failure-cluster
-- snapshot's cluster_id:snapshot_hash, 69 characters) is stored as 33 bytes: a zero byte, the
-- UUID's 16 bytes, the hash's 16. Any other key is stored as its UTF-8 bytes, which never start
-- with a zero byte (text cannot hold U+0000). The form is one-to-one, so no two keys that were
-- distinct become one, nor the reverse; core.dedup_key_text gives the key back, and operators
-- read the keys through the view core.event_handled_keys, in the form they were written.
-- spectral/engine/keys.py is the same mapping in Python (the engine encodes a batch's keys
-- before its claim; a test holds the two together).
--
-- Every existing row is converted in place (each slot's partition is rewritten and its primary
-- key rebuilt, under an exclusive lock: consumers wait for it, in proportion to the rows the
-- ring holds). The functions that find rows by key take the stored form.

CREATE FUNCTION core.dedup_key(key text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT CASE
        WHEN key COLLATE "C"
             ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:[0-9a-f]{32}$'
        THEN '\x00'::bytea || decode(translate(key, '-:', ''), 'hex')
        ELSE convert_to(key, 'UTF8')
    END
$fn$;

CREATE FUNCTION core.dedup_key_text(stored bytea) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT CASE
        WHEN length(stored) = 33 AND get_byte(stored, 0) = 0
        THEN encode(substr(stored, 2, 16), 'hex')::uuid::text
             || ':' || encode(substr(stored, 18, 16), 'hex')
        ELSE convert_from(stored, 'UTF8')
    END
$fn$;

DROP FUNCTION core.dedup_rows_of(text, text[]);

ALTER TABLE core.event_handled RENAME COLUMN idempotency_key TO dedup_key;
ALTER TABLE core.event_handled
    ALTER COLUMN dedup_key TYPE bytea USING core.dedup_key(dedup_key);

-- As 0011 bounded_state, by the stored form: one probe of the primary key per key.
CREATE FUNCTION core.dedup_rows_of(of_consumer text, keys bytea[])
RETURNS TABLE (tableoid oid, ctid tid)
LANGUAGE sql STABLE AS $fn$
    SELECT found.tableoid, found.ctid
    FROM unnest(keys) AS k (key)
    CROSS JOIN LATERAL (
        SELECT e.tableoid, e.ctid
        FROM core.event_handled AS e
        WHERE e.consumer = of_consumer AND e.dedup_key = k.key
        LIMIT 1
    ) AS found
$fn$;

-- The dedup record as operators read it: each key in the form it was written. The reader's own
-- privileges and row-level security apply (security_invoker).
CREATE VIEW core.event_handled_keys WITH (security_invoker = true) AS
SELECT consumer, core.dedup_key_text(dedup_key) AS idempotency_key, dedup_key, event_id, outcome,
       source_partition, source_offset, handled_at, slot
FROM core.event_handled;
GRANT SELECT ON core.event_handled_keys
    TO spectral_projector, spectral_executor, spectral_consumer, spectral_maintainer;
