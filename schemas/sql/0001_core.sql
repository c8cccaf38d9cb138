-- 0001 core: the dedup record of every consumer and the transactional outbox of every producer,
-- plus the database roles the deployments act as.

CREATE SCHEMA IF NOT EXISTS core;
CREATE SCHEMA IF NOT EXISTS platform;
CREATE SCHEMA IF NOT EXISTS work;

-- Roles are cluster-wide: create them once, whichever database migrates first.
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['spectral_projector', 'spectral_operator', 'spectral_producer',
                             'spectral_executor']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$roles$;

-- One row per (consumer, idempotency_key) whose effect was applied (or judged stale), written in
-- the same transaction as the effect. A redelivered or replayed event finds its row and is
-- deduplicated.
CREATE TABLE core.event_handled (
    consumer        text        NOT NULL,
    idempotency_key text        NOT NULL,
    event_id        uuid        NOT NULL,
    outcome         text        NOT NULL CHECK (outcome IN ('applied', 'stale')),
    source_partition integer    NOT NULL,
    source_offset   bigint      NOT NULL,
    handled_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, idempotency_key)
);

-- Events written in the same transaction as the producer's state change; the relay publishes
-- them in id order per key and stamps published_at. available_at delays an event (retries).
CREATE TABLE core.outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_type      text        NOT NULL,
    record_key      text        NOT NULL,
    idempotency_key text        NOT NULL,
    envelope        bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    available_at    timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz NULL
);
CREATE INDEX outbox_unpublished ON core.outbox (id) WHERE published_at IS NULL;

GRANT USAGE ON SCHEMA core, platform, work
    TO spectral_projector, spectral_operator, spectral_producer, spectral_executor;
GRANT SELECT, INSERT ON core.event_handled TO spectral_projector, spectral_executor;
GRANT SELECT, INSERT, UPDATE ON core.outbox TO spectral_producer, spectral_executor;
