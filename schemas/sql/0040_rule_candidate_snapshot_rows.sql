-- The rule-candidates projection's upsert takes its snapshots as one array of rows.
--
-- The upsert (consumers/rule_candidates/queries.sql upsert_snapshots) took eleven parallel
-- arrays, one per column. The consumer's driver checks every array element against Python's
-- collection interfaces before encoding it (one to three checks per element, ~150-250 ns of the
-- consumer's CPU each), so eleven arrays cost eleven checked elements per snapshot: 5.3 us of
-- the consumer's CPU per snapshot in all, measured in-process on 2,000-snapshot batches. One
-- array of this type costs one check per snapshot, its fields encoded directly: 4.2 us (the
-- database's CPU per snapshot not higher). The statement reads the rows with unnest, which
-- expands them into the same columns as before; what it writes is unchanged.
--
-- The fields are in the order of FailureClusterView's (contracts/failure_cluster.py), then
-- ordered_at, so the consumer builds a row from a view's fields as they are.
CREATE TYPE platform.rule_candidate_snapshot AS (
    cluster_id          uuid,
    snapshot_hash       text,
    rule_id             uuid,
    workspace_id        uuid,
    severity            text,
    failure_count       bigint,
    first_observed_at   timestamptz,
    last_observed_at    timestamptz,
    suggested_rule_stub text,
    evidence            bytea,
    ordered_at          timestamptz
);
