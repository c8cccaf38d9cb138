-- 0002 rule candidates: the operator triage inbox of failure clusters (ADR-057 D3), the hourly
-- signal record behind the cluster_id churn alarm (ADR-057 open risk), and the privileges that
-- keep the projection and the operators out of each other's columns.

-- Exactly the ADR-057 D3 columns, then what this project adds (marked below).
-- No secondary index on purpose: the table holds one row per cluster (thousands), every list
-- query is a cheap scan, and without indexes on the snapshot columns each signal update is a HOT
-- update (no index maintenance on the hot path). fillfactor leaves room on the page for them.
CREATE TABLE platform.rule_candidates_pending (
    cluster_id          uuid        PRIMARY KEY,
    snapshot_hash       text        NOT NULL,
    rule_id             uuid        NOT NULL,
    workspace_id        uuid        NOT NULL,
    severity            text        NOT NULL CHECK (severity IN ('low', 'medium', 'high')),
    failure_count       int         NOT NULL,
    first_observed_at   timestamptz NOT NULL,
    last_observed_at    timestamptz NOT NULL,
    evidence_bundle     jsonb       NOT NULL,
    suggested_rule_stub text        NULL,
    -- Operator-managed columns (preserved across snapshot upserts)
    status              text        NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'in_review', 'dismissed', 'resolved')),
    assigned_to         uuid        NULL,
    notes               text        NULL,
    -- Lifecycle
    created_at          timestamptz NOT NULL DEFAULT now(),
    last_signaled_at    timestamptz NOT NULL DEFAULT now(),
    deleted_at          timestamptz NULL,
    -- Added by this project --------------------------------------------------------------
    -- "Cluster is back": set by the projection when a dismissed or resolved cluster receives a
    -- newer snapshot with different content. Status is left alone; the operator decides.
    resurfaced_at       timestamptz NULL,
    -- When the operator last changed status; set by the trigger below (neither role writes it
    -- directly). A cluster counts as resurfaced while resurfaced_at is later than this, so a
    -- cluster the operator re-triages after it came back leaves the `--resurfaced` view.
    status_changed_at   timestamptz NULL
) WITH (fillfactor = 80);

COMMENT ON COLUMN platform.rule_candidates_pending.resurfaced_at IS
    'Last time a newer, different snapshot arrived while status was dismissed or resolved.';
COMMENT ON COLUMN platform.rule_candidates_pending.status_changed_at IS
    'Last operator status change (trigger-maintained).';

-- Column privileges are checked against the SET list only, so a BEFORE trigger may stamp a
-- column the updating role cannot write itself.
CREATE FUNCTION platform.rule_candidates_stamp_status_change() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        NEW.status_changed_at := now();
    END IF;
    RETURN NEW;
END
$fn$;

CREATE TRIGGER rule_candidates_status_changed
    BEFORE UPDATE OF status ON platform.rule_candidates_pending
    FOR EACH ROW EXECUTE FUNCTION platform.rule_candidates_stamp_status_change();

-- The churn alarm's record: which cluster_ids were signalled (a snapshot applied) in which hour.
-- One row per (hour, cluster) however many snapshots arrive, written by the same statement as
-- the upsert (ON CONFLICT DO NOTHING), so the hot path adds one index probe per cluster per batch
-- and no row per event. The gauge reads at most 8 days (8 x 24 buckets); the projection prunes
-- older hours. Neither rule_candidates_pending (last_signaled_at is overwritten, so past windows
-- are lost) nor core.event_handled (one row per event, no time index, shared by every consumer)
-- can answer "distinct cluster_ids per 24 h over the last 8 days" that cheaply.
CREATE TABLE platform.cluster_signal_hours (
    hour       timestamptz NOT NULL,
    cluster_id uuid        NOT NULL,
    PRIMARY KEY (hour, cluster_id)
);

-- Privileges: the database, not careful SQL, keeps each role in its own columns.
REVOKE ALL ON platform.rule_candidates_pending, platform.cluster_signal_hours FROM PUBLIC;

-- The projection (rule-candidates consumer): reads everything (it needs status to detect a
-- resurfaced cluster), inserts only snapshot columns (status, created_at, last_signaled_at take
-- their defaults, so a new row is always 'pending'), updates only snapshot columns,
-- last_signaled_at and resurfaced_at. It can never write status, assigned_to, notes, deleted_at.
GRANT SELECT ON platform.rule_candidates_pending TO spectral_projector;
GRANT INSERT (cluster_id, snapshot_hash, rule_id, workspace_id, severity, failure_count,
              first_observed_at, last_observed_at, evidence_bundle, suggested_rule_stub)
    ON platform.rule_candidates_pending TO spectral_projector;
GRANT UPDATE (snapshot_hash, rule_id, workspace_id, severity, failure_count,
              first_observed_at, last_observed_at, evidence_bundle, suggested_rule_stub,
              last_signaled_at, resurfaced_at)
    ON platform.rule_candidates_pending TO spectral_projector;
GRANT SELECT, INSERT, DELETE ON platform.cluster_signal_hours TO spectral_projector;

-- Operators (`spectral triage`): read everything, write only the triage columns.
GRANT SELECT ON platform.rule_candidates_pending TO spectral_operator;
GRANT UPDATE (status, assigned_to, notes, deleted_at)
    ON platform.rule_candidates_pending TO spectral_operator;
GRANT SELECT ON platform.cluster_signal_hours TO spectral_operator;

-- The consumer engine runs the rule-candidates deployment as spectral_projector and, in the
-- batch's transaction, marks stale keys (UPDATE outcome) and forgets rejected ones (DELETE);
-- 0001 granted the projector only SELECT and INSERT on the dedup record.
GRANT UPDATE (outcome), DELETE ON core.event_handled TO spectral_projector;
