-- 0007 dead-letter redrives: which dead letters `spectral dlq redrive` has put back on their
-- source topic, and where they went. One row per dead-letter record (its topic, partition and
-- offset), inserted in the same transaction that waits for the broker's acknowledgement of the
-- redriven record: a dead letter is redriven at most once across runs, whatever --reason filter
-- each run used (a committed consumer-group offset could not skip records a filter left behind),
-- and two redrives running at once serialise on the primary key. A crash after the broker's
-- acknowledgement and before the commit redrives that batch again on the next run: harmless,
-- redriven records keep their idempotency keys and the consumer deduplicates them.
CREATE TABLE core.dlq_redrives (
    dlq_topic          text        NOT NULL,
    dlq_partition      integer     NOT NULL,
    dlq_offset         bigint      NOT NULL,
    reason             text        NOT NULL,
    source_topic       text        NOT NULL,
    redriven_partition integer     NULL,
    redriven_offset    bigint      NULL,
    redriven_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dlq_topic, dlq_partition, dlq_offset)
);

COMMENT ON TABLE core.dlq_redrives IS
    'Dead letters redriven by `spectral dlq redrive` (at most once each) and where they went.';

REVOKE ALL ON core.dlq_redrives FROM PUBLIC;
-- Operators run the dead-letter tools.
GRANT SELECT, INSERT ON core.dlq_redrives TO spectral_operator;
GRANT UPDATE (redriven_partition, redriven_offset) ON core.dlq_redrives TO spectral_operator;
