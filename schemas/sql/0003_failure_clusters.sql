-- 0003 failure clusters (issue 5): FailureClusterService's own state, its rule-stub leases
-- (ADR-0023), and the index the outbox relay needs.
--
-- Why a schema of its own (`clusters`) and not `platform`: this is the producer's private
-- state. ADR-057 rejects "producer-side table + poll between contexts" — the triage inbox is the
-- consumer's materialization (platform.rule_candidates_pending) and the only way cluster state
-- reaches it is the event. A separate schema on which only spectral_producer has USAGE makes that
-- boundary a database fact: the projector and operator roles cannot even name these tables.

CREATE SCHEMA IF NOT EXISTS clusters;

-- Rule criticality (one input of the severity policy, producers/clusters/severity.py).
-- A rule without a row has the service's default criticality (a setting, 'normal' unless set).
CREATE TABLE clusters.rule_criticality (
    rule_id     uuid        PRIMARY KEY,
    criticality text        NOT NULL CHECK (criticality IN ('low', 'normal', 'high', 'critical')),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per cluster = per grouping key (workspace_id, rule_id, signature). cluster_id is minted
-- once, by the INSERT that first sees the key (ADR-057 D1); the UNIQUE key makes a concurrent
-- replica's INSERT ... ON CONFLICT DO NOTHING resolve to the row that won, so every replica, and
-- every restart, maps the key to the same cluster_id.
--
-- revision counts ingests that added failures; evaluated_revision is the revision the last
-- evaluation saw. revision > evaluated_revision = the cluster needs a tick. published_hash is the
-- snapshot_hash of the last snapshot put in the outbox (published iff the new hash differs).
CREATE TABLE clusters.clusters (
    cluster_id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id       uuid        NOT NULL,
    rule_id            uuid        NOT NULL,
    signature          text        NOT NULL CHECK (length(signature) BETWEEN 1 AND 512),
    detected_at        timestamptz NOT NULL DEFAULT now(),
    revision           bigint      NOT NULL DEFAULT 0,
    evaluated_revision bigint      NOT NULL DEFAULT 0,
    published_hash     text        NULL,
    published_at       timestamptz NULL,
    CONSTRAINT clusters_grouping_key UNIQUE (workspace_id, rule_id, signature)
);
CREATE INDEX clusters_dirty ON clusters.clusters (cluster_id) WHERE revision > evaluated_revision;

-- Every ingested failure, once (failure_id, opaque text of the scan system, is the idempotency
-- key of ingestion). attributes keeps the input line's other fields for later refinements.
-- COLLATE "C": ties in the evidence selection are broken by code point order, the same order
-- the pure policy (producers/clusters/evidence.py) uses, whatever the database's collation.
CREATE TABLE clusters.failures (
    failure_id  text COLLATE "C" PRIMARY KEY CHECK (length(failure_id) BETWEEN 1 AND 256),
    cluster_id  uuid        NOT NULL REFERENCES clusters.clusters (cluster_id),
    observed_at timestamptz NOT NULL,
    summary     text COLLATE "C" NOT NULL CHECK (length(summary) <= 2000),
    attributes  jsonb       NOT NULL DEFAULT '{}'::jsonb,
    ingested_at timestamptz NOT NULL DEFAULT now()
);
-- Aggregates and evidence selection per cluster read this index only.
CREATE INDEX failures_by_cluster ON clusters.failures (cluster_id, observed_at DESC, failure_id);

-- ADR-0023 lease-then-LLM for the model-written suggested_rule_stub. The natural key is
-- (cluster_id, content_hash): content_hash is the snapshot_hash of the snapshot without a stub,
-- i.e. exactly the content the model is asked about. Step 1 INSERTs a 'pending' row with an
-- empty stub ON CONFLICT DO NOTHING: only the replica whose INSERT lands calls the model. Step 3
-- finalizes with an UPDATE to 'llm'. generated_at is the stamp: the claim time while pending
-- (re-stamped by the recovery clause, which re-claims pending rows older than a timeout), the
-- finalize time afterwards. request is the model input, so a recovered lease asks exactly what
-- the crashed holder asked. A recovered lease whose content is no longer the cluster's current
-- content is finalized as 'superseded' without a model call (nobody would read its stub).
-- Read paths use clusters.rule_stubs, which has only model-written ('llm') rows.
CREATE TABLE clusters.rule_stub_leases (
    cluster_id          uuid        NOT NULL REFERENCES clusters.clusters (cluster_id),
    content_hash        text        NOT NULL,
    generation_mode     text        NOT NULL DEFAULT 'pending'
                                    CHECK (generation_mode IN ('pending', 'llm', 'superseded')),
    suggested_rule_stub text        NOT NULL DEFAULT '',
    request             jsonb       NOT NULL,
    holder              text        NOT NULL,
    attempts            integer     NOT NULL DEFAULT 1,
    generated_at        timestamptz NOT NULL DEFAULT now(),
    model               text        NULL,
    PRIMARY KEY (cluster_id, content_hash),
    CHECK (generation_mode <> 'llm' OR model IS NOT NULL)
);
CREATE INDEX rule_stub_leases_pending ON clusters.rule_stub_leases (generated_at)
    WHERE generation_mode = 'pending';

-- The read path: finalized, model-written stubs only (never a pending placeholder).
CREATE VIEW clusters.rule_stubs AS
    SELECT cluster_id, content_hash, suggested_rule_stub, model, generated_at
    FROM clusters.rule_stub_leases
    WHERE generation_mode = 'llm';

-- Model usage, recorded in the finalize transaction and only when the finalize UPDATE changed a
-- pending row: at most one row per lease, never one for a call whose result was not kept.
CREATE TABLE clusters.model_usage (
    cluster_id   uuid        NOT NULL,
    content_hash text        NOT NULL,
    model        text        NOT NULL,
    usage        jsonb       NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, content_hash),
    FOREIGN KEY (cluster_id, content_hash)
        REFERENCES clusters.rule_stub_leases (cluster_id, content_hash)
);

-- The outbox relay looks up "is there an earlier unpublished row of this key?" per candidate row
-- (per-key order across delayed rows); this makes it one index probe.
CREATE INDEX outbox_unpublished_by_key ON core.outbox (record_key, id) WHERE published_at IS NULL;

GRANT USAGE ON SCHEMA clusters TO spectral_producer;
GRANT SELECT, INSERT, UPDATE ON clusters.clusters, clusters.rule_stub_leases,
    clusters.rule_criticality TO spectral_producer;
GRANT SELECT, INSERT ON clusters.failures, clusters.model_usage TO spectral_producer;
GRANT SELECT ON clusters.rule_stubs TO spectral_producer;
