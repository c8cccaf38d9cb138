-- Each cluster's failures counted per summary as they are recorded, so a tick's evidence reads
-- the counts instead of counting a hot cluster's whole window.
--
-- The evidence rule (producers/clusters/evidence.py) picks among the most recent failure of each
-- of a cluster's most frequent summaries and its most recent failures, each with the number of
-- failures sharing its summary. evidence_candidates (producers/clusters/queries.sql) counted the
-- summaries from the failures themselves, joined every failure back to its count and sorted them
-- all twice: every failure the retention keeps (30 days by default) was read at every tick that
-- found the cluster dirty, under its row lock — a hot cluster is dirty at every tick (200,000
-- failures: 1.2-1.3 s per evaluation, its sorts spilled to disk;
-- tests/integration/clusters/test_evaluation_plans.py).
--
-- clusters.summary_counts keeps, per (cluster, summary), the number of failures ever recorded
-- and the most recent of them (observed_at descending, then failure_id: the evidence's order),
-- written by a statement trigger on clusters.failures' inserts. The retention's prune deletes
-- failures only to roll them up into clusters.pruned_summaries, so a summary's count (live +
-- pruned, what the evidence counted) and its most recent failure (live, or the pruned one the
-- roll-up keeps) never change when it prunes: the table needs no other writer. It is filled
-- from the failures and the roll-up under a lock that holds inserts and prunes back until the
-- trigger exists.

LOCK TABLE clusters.failures IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE clusters.summary_counts (
    cluster_id       uuid             NOT NULL REFERENCES clusters.clusters (cluster_id),
    summary          text COLLATE "C" NOT NULL,
    failure_count    bigint           NOT NULL CHECK (failure_count > 0),
    last_failure_id  text COLLATE "C" NOT NULL,
    last_observed_at timestamptz      NOT NULL,
    PRIMARY KEY (cluster_id, summary)
);

COMMENT ON TABLE clusters.summary_counts IS
    'Failures recorded per (cluster, summary), pruned or not: their count and the most recent.';

REVOKE ALL ON clusters.summary_counts FROM PUBLIC;
GRANT SELECT ON clusters.summary_counts TO spectral_producer;

INSERT INTO clusters.summary_counts
    (cluster_id, summary, failure_count, last_failure_id, last_observed_at)
SELECT DISTINCT ON (cluster_id, summary)
    cluster_id, summary, sum(n) OVER (PARTITION BY cluster_id, summary), failure_id, observed_at
FROM (
    SELECT f.cluster_id, f.summary, 1::bigint AS n, f.failure_id, f.observed_at
    FROM clusters.failures AS f
    UNION ALL
    SELECT p.cluster_id, p.summary, p.failure_count, p.last_failure_id, p.last_observed_at
    FROM clusters.pruned_summaries AS p
) AS every_kind
ORDER BY cluster_id, summary, observed_at DESC, failure_id;

-- The statement's new failures, per (cluster, summary), in key order (two ingests at once
-- cannot deadlock on the counts).
CREATE FUNCTION clusters.failures_recorded() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    INSERT INTO clusters.summary_counts AS s
        (cluster_id, summary, failure_count, last_failure_id, last_observed_at)
    SELECT DISTINCT ON (r.cluster_id, r.summary)
        r.cluster_id, r.summary, count(*) OVER (PARTITION BY r.cluster_id, r.summary),
        r.failure_id, r.observed_at
    FROM new_rows AS r
    ORDER BY r.cluster_id, r.summary, r.observed_at DESC, r.failure_id
    ON CONFLICT (cluster_id, summary) DO UPDATE
    SET failure_count = s.failure_count + excluded.failure_count,
        last_failure_id = CASE
            WHEN (excluded.last_observed_at, s.last_failure_id)
                 > (s.last_observed_at, excluded.last_failure_id)
            THEN excluded.last_failure_id ELSE s.last_failure_id END,
        last_observed_at = greatest(s.last_observed_at, excluded.last_observed_at);
    RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION clusters.failures_recorded() FROM PUBLIC;

CREATE TRIGGER failures_recorded AFTER INSERT ON clusters.failures
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION clusters.failures_recorded();
