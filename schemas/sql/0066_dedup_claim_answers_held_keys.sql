-- The dedup claim answers with the keys that were already held, not with the new ones.
--
-- core.dedup_claim (0053 dedup_claim_probes_live_slots_only) returns a row for every key it
-- inserted: on a live stream, where nearly every key is new, the whole batch travels back to
-- the consumer, which decodes a row per key and matches each against the batch to learn what it
-- already knew — that all of them are new. core.dedup_claim_held makes the same claim and
-- answers with one array: the keys of the batch that a slot already held (not inserted), empty
-- when every key was new. The claim itself — its probe of the live slots in key order, its
-- plain INSERT whose uniqueness check settles a race between two members, its plan settings,
-- its row-level security — is 0053's statement unchanged; the keys it inserts are gathered in
-- the function (array_agg over its RETURNING) instead of being sent, and only when some key was
-- held are the held ones worked out (the batch's keys less the inserted ones: every key was
-- held when none was inserted). core.dedup_claim stays for a consumer of an earlier release
-- running beside this one.

CREATE FUNCTION core.dedup_claim_held(
    of_consumer text, keys bytea[], events uuid[], partitions integer[], offsets bigint[]
)
RETURNS bytea[]
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $fn$
DECLARE
    inserted bytea[];
BEGIN
    WITH claimed AS (
        INSERT INTO core.event_handled AS h
            (consumer, dedup_key, event_id, outcome, source_partition, source_offset, slot)
        SELECT of_consumer, t.k, t.e, 'applied', t.p, t.o, (SELECT core.dedup_current_slot())
        FROM (
            SELECT u.k, u.e, u.p, u.o
            FROM unnest(keys, events, partitions, offsets) AS u (k, e, p, o)
            ORDER BY u.k
        ) AS t
        LEFT JOIN LATERAL (
            SELECT true AS held
            FROM core.event_handled AS earlier
            WHERE earlier.dedup_key = t.k AND earlier.consumer = of_consumer
              AND earlier.slot >= (SELECT min(g.slot) FROM core.dedup_generations AS g
                                   WHERE g.forgotten_at IS NULL)
              AND earlier.slot <= (SELECT max(g.slot) FROM core.dedup_generations AS g
                                   WHERE g.forgotten_at IS NULL)
            LIMIT 1
        ) AS found ON true
        WHERE found.held IS NULL
        RETURNING h.dedup_key
    )
    SELECT array_agg(claimed.dedup_key) INTO inserted FROM claimed;
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
