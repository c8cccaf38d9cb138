-- 0008 the dead-letter table: the last resort of the consumer engine. A record whose dead letter
-- the broker refuses even as a small reference (the dead-letter topic's record limit smaller than
-- a few kilobytes, the topic name over Kafka's limit, no write permission on it...) is recorded
-- here instead — its coordinates, why it failed, why the broker refused it, and as much of the
-- record as fits — so the consumer can commit past it and nothing is lost.
-- One row per (consumer, source record): a replay or a restart that dead-letters the same record
-- again finds its row (ON CONFLICT DO NOTHING). `spectral dlq list/show` read it beside T.dlq.
-- Header names and values are stored as JSON [name, base64 value | null] pairs: a header may hold
-- any bytes, including NUL, which text columns refuse.
CREATE TABLE core.dead_letters (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer         text        NOT NULL,
    source_topic     text        NOT NULL,
    source_partition integer     NOT NULL,
    source_offset    bigint      NOT NULL,
    reason           text        NOT NULL,
    detail           text        NOT NULL,
    refusal          text        NOT NULL,
    failed_at        timestamptz NOT NULL,
    record_key       bytea       NULL,
    key_size         integer     NOT NULL,
    value_head       bytea       NOT NULL,
    value_size       bigint      NOT NULL,
    value_sha256     text        NOT NULL,
    headers          jsonb       NOT NULL,
    header_count     integer     NOT NULL,
    history          jsonb       NOT NULL,
    recorded_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (consumer, source_topic, source_partition, source_offset)
);
CREATE INDEX dead_letters_topic ON core.dead_letters (source_topic, id);

COMMENT ON TABLE core.dead_letters IS
    'Dead letters the broker refused even as a reference: coordinates and as much of the record as fits.';

REVOKE ALL ON core.dead_letters FROM PUBLIC;
-- The consumer deployments write it (their engine acts as their role); operators read it.
GRANT INSERT ON core.dead_letters TO spectral_projector, spectral_executor;
GRANT SELECT ON core.dead_letters TO spectral_operator;

-- A redrive the broker refuses releases its claim on the dead letter in the same transaction
-- (spectral/dlq/redrive.py), so a later run tries it again.
GRANT DELETE ON core.dlq_redrives TO spectral_operator;
