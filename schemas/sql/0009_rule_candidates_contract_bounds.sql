-- 0009 rule candidates meet the wire contract: failure_count holds every count the contract
-- allows, and the stale guard orders snapshots by an observation time a producer's clock
-- cannot push into the future.

-- The contract allows failure_count up to 2^53 - 1; int stopped at 2^31 - 1 and dead-lettered
-- the rest. bigint holds them all (ADR-057 D3's column widened, values unchanged).
ALTER TABLE platform.rule_candidates_pending ALTER COLUMN failure_count TYPE bigint;

-- ordered_at: last_observed_at capped at the record's Kafka timestamp plus five minutes
-- (consumers/rule_candidates/collapse.py). It leads the stale guard's order, so one snapshot
-- from a producer whose clock ran ahead can no longer make every later real snapshot of its
-- cluster stale. Rows stored before it are capped the same way with the best record time they
-- kept, last_signaled_at; that also releases rows stored as +infinity (a year-9999 timestamp,
-- which the contract now refuses) that nothing could supersede.
ALTER TABLE platform.rule_candidates_pending ADD COLUMN ordered_at timestamptz;
UPDATE platform.rule_candidates_pending
SET ordered_at = least(last_observed_at, last_signaled_at + interval '5 minutes');
ALTER TABLE platform.rule_candidates_pending ALTER COLUMN ordered_at SET NOT NULL;

-- A row inserted without it (by hand, by tools that predate it) is ordered by its observation
-- time uncapped, as before this column existed.
CREATE FUNCTION platform.rule_candidates_default_ordered_at() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.ordered_at := coalesce(NEW.ordered_at, NEW.last_observed_at);
    RETURN NEW;
END
$fn$;

CREATE TRIGGER rule_candidates_ordered_at
    BEFORE INSERT ON platform.rule_candidates_pending
    FOR EACH ROW EXECUTE FUNCTION platform.rule_candidates_default_ordered_at();

COMMENT ON COLUMN platform.rule_candidates_pending.ordered_at IS
    'last_observed_at capped at the record timestamp + 5 min: the stale guard''s order.';

GRANT INSERT (ordered_at), UPDATE (ordered_at)
    ON platform.rule_candidates_pending TO spectral_projector;
