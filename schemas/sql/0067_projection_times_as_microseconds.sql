-- The projection's upsert takes and answers its times as microseconds since the Unix epoch, and
-- answers the snapshot a row replaced only when the row asks for it.
--
-- platform.upsert_rule_candidate_snapshots (0051 projection_insert_only_when_needed) takes each
-- snapshot's first_observed_at, last_observed_at and ordered_at as timestamptz and answers, for
-- every cluster it updated, the replaced snapshot's order key (prior_ordered_at,
-- prior_last_observed_at, prior_failure_count, prior_snapshot_hash). The consumer holds the times
-- as integers (FailureClusterView.first_observed_us, last_observed_us: the contract check reads
-- the digits of each written timestamp), and its driver encodes an aware datetime in Python
-- objects (to UTC, less its epoch) and decodes one into a datetime, where an integer costs it a
-- fraction of that; and it compares the prior key only for a cluster with superseded snapshots
-- in its batch (about one written row in five in a first pass of the benchmark's stream).
-- platform.upsert_rule_candidate_snapshots_us is the same statement over
-- platform.rule_candidate_snapshot_us, whose three times are bigint microseconds and whose
-- prior_wanted says whether the row's prior key is wanted: it answers the two prior times as
-- bigint microseconds, and all four prior columns NULL for a row that did not ask. What it
-- writes, its order, its arms, its plan settings and its privileges are 0051's.
--
-- The conversions are exact for every time a record may hold (years 1970-9998, contracts/
-- fields.py) and every time the table holds: into timestamptz, one interval multiplication up to
-- 2**53 microseconds (the year 2255: a float8 factor is exact up to there), whole seconds and
-- the microseconds within the second added apart beyond; out of it, extract(epoch) is numeric
-- (exact). A stored time that is not finite (a rebuild sets ordered_at and last_observed_at to
-- -infinity before it replays the topic) is answered as the least or the greatest bigint, which
-- order as it does against every finite time.
--
-- Measured: the driver's CPU per row (1,360-row batches, best of 40, load ~1.1), two
-- timestamptz fields encoded in 1.49 us and two bigint in 0.22, two timestamptz columns decoded
-- in 1.24 us and two bigint in 0.18; the database's conversions ~0.05-0.09 us a value in and
-- ~0.17 out (hence the prior times only when asked). benchmarks.hotpath --rounds 12 --compare
-- (40,000 events, 2,000-record batches, A B B A, load ~1): the batch transaction's client side
-- 10.76 -> 8.28 us an event (medians; lower in 10 of 12 pairs), PostgreSQL's 17.25 -> 17.0
-- (lower in 7 of 12: unchanged within its noise).
--
-- platform.rule_candidate_snapshot and platform.upsert_rule_candidate_snapshots stay, for a
-- consumer of the previous release running beside this one.

CREATE TYPE platform.rule_candidate_snapshot_us AS (
    cluster_id          uuid,
    snapshot_hash       text,
    rule_id             uuid,
    workspace_id        uuid,
    severity            text,
    failure_count       bigint,
    first_observed_us   bigint,
    last_observed_us    bigint,
    suggested_rule_stub text,
    evidence            bytea,
    ordered_us          bigint,
    prior_wanted        boolean
);

-- Microseconds since the Unix epoch as timestamptz, exactly (inlined where it is called): one
-- multiplication up to 2**53 microseconds either side of the epoch (a float8 factor holds them
-- exactly), whole seconds and microseconds apart beyond.
CREATE FUNCTION platform.from_epoch_us(micros bigint) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE
    WHEN micros BETWEEN -9007199254740992 AND 9007199254740992
    THEN timestamptz 'epoch' + micros * interval '1 microsecond'
    ELSE timestamptz 'epoch' + (micros / 1000000) * interval '1 second'
                             + (micros % 1000000) * interval '1 microsecond'
END;

-- A timestamptz as microseconds since the Unix epoch, exactly; -infinity and infinity as the
-- least and the greatest bigint, NULL as NULL (inlined where it is called).
CREATE FUNCTION platform.epoch_us(moment timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE
    WHEN moment IS NULL THEN NULL
    WHEN isfinite(moment) THEN (extract(epoch FROM moment) * 1000000)::bigint
    WHEN moment < timestamptz 'epoch' THEN -9223372036854775808
    ELSE 9223372036854775807
END;

CREATE FUNCTION platform.upsert_rule_candidate_snapshots_us(
    snapshots platform.rule_candidate_snapshot_us[]
)
RETURNS TABLE (
    cluster_id text,
    inserted boolean,
    resurfaced boolean,
    prior_ordered_us bigint,
    prior_last_observed_us bigint,
    prior_failure_count bigint,
    prior_snapshot_hash text
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH updated AS (
        UPDATE platform.rule_candidates_pending AS t SET
            snapshot_hash       = i.snapshot_hash,
            rule_id             = i.rule_id,
            workspace_id        = i.workspace_id,
            severity            = i.severity,
            failure_count       = i.failure_count,
            first_observed_at   = i.first_observed_at,
            last_observed_at    = i.last_observed_at,
            evidence_bundle     = CASE WHEN get_byte(i.evidence, 0) = 91  -- '[': the bundle itself
                                       THEN convert_from(i.evidence, 'UTF8')::jsonb
                                       ELSE convert_from(i.evidence, 'UTF8')::jsonb
                                            -> 'payload' -> 'evidence_bundle'
                                  END,
            suggested_rule_stub = i.suggested_rule_stub,
            ordered_at          = i.ordered_at,
            last_signaled_at    = now(),
            resurfaced_at       = CASE
                WHEN t.status IN ('dismissed', 'resolved')
                     AND t.snapshot_hash IS DISTINCT FROM i.snapshot_hash
                THEN now()
                ELSE t.resurfaced_at
            END
        FROM (SELECT s.cluster_id, s.snapshot_hash, s.rule_id, s.workspace_id, s.severity,
                     s.failure_count,
                     platform.from_epoch_us(s.first_observed_us) AS first_observed_at,
                     platform.from_epoch_us(s.last_observed_us) AS last_observed_at,
                     s.suggested_rule_stub, s.evidence, s.prior_wanted,
                     platform.from_epoch_us(COALESCE(s.ordered_us, s.last_observed_us))
                         AS ordered_at
              FROM unnest(snapshots) AS s) AS i, platform.rule_candidates_pending AS p
        WHERE t.cluster_id = i.cluster_id
          AND p.ctid = t.ctid
          AND (i.ordered_at, i.last_observed_at, i.failure_count, i.snapshot_hash COLLATE "C")
            > (t.ordered_at, t.last_observed_at, t.failure_count, t.snapshot_hash COLLATE "C")
        RETURNING t.cluster_id,
                  t.failure_count,
                  t.resurfaced_at IS NOT DISTINCT FROM now() AS resurfaced,
                  CASE WHEN i.prior_wanted THEN platform.epoch_us(p.ordered_at) END
                      AS prior_ordered_us,
                  CASE WHEN i.prior_wanted THEN platform.epoch_us(p.last_observed_at) END
                      AS prior_last_observed_us,
                  CASE WHEN i.prior_wanted THEN p.failure_count END AS prior_failure_count,
                  CASE WHEN i.prior_wanted THEN p.snapshot_hash END AS prior_snapshot_hash,
                  p.last_signaled_at AS prior_last_signaled_at
    ),
    inserted AS (
        INSERT INTO platform.rule_candidates_pending AS t
            (cluster_id, snapshot_hash, rule_id, workspace_id, severity, failure_count,
             first_observed_at, last_observed_at, evidence_bundle, suggested_rule_stub, ordered_at)
        SELECT i.cluster_id, i.snapshot_hash, i.rule_id, i.workspace_id, i.severity,
               i.failure_count, i.first_observed_at, i.last_observed_at,
               CASE WHEN get_byte(i.evidence, 0) = 91
                    THEN convert_from(i.evidence, 'UTF8')::jsonb
                    ELSE convert_from(i.evidence, 'UTF8')::jsonb -> 'payload' -> 'evidence_bundle'
               END,
               i.suggested_rule_stub, i.ordered_at
        FROM (SELECT s.cluster_id, s.snapshot_hash, s.rule_id, s.workspace_id, s.severity,
                     s.failure_count,
                     platform.from_epoch_us(s.first_observed_us) AS first_observed_at,
                     platform.from_epoch_us(s.last_observed_us) AS last_observed_at,
                     s.suggested_rule_stub, s.evidence, s.prior_wanted,
                     platform.from_epoch_us(COALESCE(s.ordered_us, s.last_observed_us))
                         AS ordered_at
              FROM unnest(snapshots) AS s) AS i
        WHERE (SELECT count(*) FROM updated) < cardinality(snapshots)
          AND NOT EXISTS (SELECT FROM updated AS u WHERE u.cluster_id = i.cluster_id)
        ON CONFLICT (cluster_id) DO UPDATE SET
            snapshot_hash       = excluded.snapshot_hash,
            rule_id             = excluded.rule_id,
            workspace_id        = excluded.workspace_id,
            severity            = excluded.severity,
            failure_count       = excluded.failure_count,
            first_observed_at   = excluded.first_observed_at,
            last_observed_at    = excluded.last_observed_at,
            evidence_bundle     = excluded.evidence_bundle,
            suggested_rule_stub = excluded.suggested_rule_stub,
            ordered_at          = excluded.ordered_at,
            last_signaled_at    = now(),
            resurfaced_at       = CASE
                WHEN t.status IN ('dismissed', 'resolved')
                     AND t.snapshot_hash IS DISTINCT FROM excluded.snapshot_hash
                THEN now()
                ELSE t.resurfaced_at
            END
        WHERE (excluded.ordered_at, excluded.last_observed_at, excluded.failure_count,
               excluded.snapshot_hash COLLATE "C")
            > (t.ordered_at, t.last_observed_at, t.failure_count, t.snapshot_hash COLLATE "C")
        RETURNING t.cluster_id,
                  t.failure_count,
                  t.xmax = 0 AS inserted,
                  t.xmax <> 0 AND t.resurfaced_at IS NOT DISTINCT FROM now() AS resurfaced
    ),
    signalled AS (
        INSERT INTO platform.cluster_signal_hours (hour, cluster_id, failure_count)
        SELECT date_trunc('hour', now()), u.cluster_id, u.failure_count
        FROM updated AS u
        WHERE date_trunc('hour', u.prior_last_signaled_at) <> date_trunc('hour', now())
        UNION ALL
        SELECT date_trunc('hour', now()), n.cluster_id, n.failure_count
        FROM inserted AS n
        ON CONFLICT DO NOTHING
    )
    SELECT u.cluster_id::text AS cluster_id, false AS inserted, u.resurfaced,
           u.prior_ordered_us, u.prior_last_observed_us, u.prior_failure_count,
           u.prior_snapshot_hash
    FROM updated AS u
    UNION ALL
    SELECT n.cluster_id::text, n.inserted, n.resurfaced,
           NULL::bigint, NULL::bigint, NULL::bigint, NULL::text
    FROM inserted AS n;
END
$fn$;

REVOKE ALL ON FUNCTION platform.upsert_rule_candidate_snapshots_us(
    platform.rule_candidate_snapshot_us[]
) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION platform.upsert_rule_candidate_snapshots_us(
    platform.rule_candidate_snapshot_us[]
) TO spectral_projector;
