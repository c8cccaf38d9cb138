-- 0024 retention: `spectral maintenance` prunes every table that grows with traffic behind a
-- documented horizon (spectral/maintenance/retention.py, producers/clusters/retention.py), acting
-- as spectral_maintainer, with no more privilege than each prune needs.
--
-- Failures of a cluster are pruned once they are older than the retention and no snapshot can
-- still need them one by one: what the snapshot needs of them is rolled up first, in the same
-- transaction, so a cluster's snapshot — its failure_count, first_observed_at and evidence — is
-- the same after a prune as before (producers/clusters/queries.sql reads both):
--   clusters.clusters.pruned_failures / pruned_first_observed_at: the count and the earliest
--     observation of the failures pruned from the cluster;
--   clusters.pruned_summaries: per pruned summary, how many failures had it and the most recent
--     of them (its representative in the evidence, should the summary rank among the top).

ALTER TABLE clusters.clusters
    ADD COLUMN pruned_failures bigint NOT NULL DEFAULT 0 CHECK (pruned_failures >= 0),
    ADD COLUMN pruned_first_observed_at timestamptz NULL;

CREATE TABLE clusters.pruned_summaries (
    cluster_id       uuid             NOT NULL REFERENCES clusters.clusters (cluster_id),
    summary          text COLLATE "C" NOT NULL,
    failure_count    bigint           NOT NULL CHECK (failure_count > 0),
    last_failure_id  text COLLATE "C" NOT NULL,
    last_observed_at timestamptz      NOT NULL,
    PRIMARY KEY (cluster_id, summary)
);

COMMENT ON TABLE clusters.pruned_summaries IS
    'Failures pruned by retention, rolled up per (cluster, summary): their count and the most recent.';

REVOKE ALL ON clusters.pruned_summaries FROM PUBLIC;
GRANT SELECT ON clusters.pruned_summaries TO spectral_producer;

GRANT USAGE ON SCHEMA clusters TO spectral_maintainer;
GRANT SELECT, DELETE ON clusters.failures TO spectral_maintainer;
GRANT SELECT (cluster_id, pruned_failures, pruned_first_observed_at),
    UPDATE (pruned_failures, pruned_first_observed_at) ON clusters.clusters TO spectral_maintainer;
GRANT SELECT, INSERT, UPDATE ON clusters.pruned_summaries TO spectral_maintainer;

-- Dead letters the broker refused (kept like the dead-letter topics' records), the redrive
-- record (kept while its dead letter or its redriven copy may still be read), tokens revoked or
-- expired longer than the retention.
GRANT SELECT (id, recorded_at), DELETE ON core.dead_letters TO spectral_maintainer;
GRANT DELETE ON core.dlq_redrives TO spectral_maintainer;
GRANT SELECT (token_id, expires_at, revoked_at), DELETE ON core.api_tokens TO spectral_maintainer;
