-- The dedup claim answers with the keys that were already held, not with the new ones.
--
-- core.dedup_claim (0053 dedup_claim_probes_live_slots_only) returns a row for every key it
-- inserted: on a live stream, where nearly every key is new, the whole batch travels back to
-- the consumer, which decodes a row per key and matches each against the batch to learn what it
-- already knew — that all of them are new. core.dedup_claim_held makes the same claim — it calls
-- core.dedup_claim, so the probe of the live slots in key order, the plain INSERT whose
-- uniqueness check settles a race between two members, the plan settings and the row-level
-- security stay that function's, and a later migration replacing it changes both — and answers
-- with one array instead: the keys of the batch that a slot already held (not inserted), empty
-- when every key was new. The keys inserted are gathered in the function (array_agg over
-- core.dedup_claim's rows) instead of being sent, and only when some key was held are the held
-- ones worked out (the batch's keys less the inserted ones; all of them when none was
-- inserted). core.dedup_claim stays, for a consumer of an earlier release running beside this
-- one.

CREATE FUNCTION core.dedup_claim_held(
    of_consumer text, keys bytea[], events uuid[], partitions integer[], offsets bigint[]
)
RETURNS bytea[]
LANGUAGE plpgsql VOLATILE
SET jit = off
AS $fn$
DECLARE
    inserted bytea[];
BEGIN
    SELECT array_agg(claimed.k) INTO inserted
    FROM core.dedup_claim(of_consumer, keys, events, partitions, offsets) AS claimed (k);
    IF inserted IS NULL THEN
        RETURN coalesce(keys, '{}');  -- none inserted: every key was held
    END IF;
    IF cardinality(inserted) = cardinality(keys) THEN
        RETURN '{}';  -- every key new
    END IF;
    RETURN ARRAY(
        SELECT u.k FROM unnest(keys) AS u (k)
        EXCEPT ALL
        SELECT i.k FROM unnest(inserted) AS i (k)
    );
END
$fn$;

GRANT EXECUTE ON FUNCTION core.dedup_claim_held(text, bytea[], uuid[], integer[], bigint[])
    TO spectral_projector, spectral_executor, spectral_consumer;
