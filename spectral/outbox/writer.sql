-- Queries of spectral/outbox/writer.py: the writer side of core.outbox.

-- name: enqueue
-- One statement for the whole batch. Rows are fed to the INSERT in input order (ORDER BY ord),
-- so the identity values grow in input order: items of one key keep their order in the outbox.
-- A NULL available_at means "now" (the column default).
INSERT INTO core.outbox (event_type, record_key, idempotency_key, envelope, available_at)
SELECT t.event_type, t.record_key, t.idempotency_key, t.envelope, coalesce(t.available_at, now())
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::timestamptz[])
    WITH ORDINALITY AS t (event_type, record_key, idempotency_key, envelope, available_at, ord)
ORDER BY t.ord
RETURNING id
