-- The dedup claim is parsed once per session, and row-level security finds the current role's
-- consumer names without a join.
--
-- core.dedup_claim (0037 dedup_claim_without_speculation) was a LANGUAGE sql function: it is
-- not inlined (it inserts), so every call parsed, analysed and rewritten its statement (the
-- row-level security policies included) before planning it. At the engine's small batches (~20
-- records at 2,000 events/s) that fixed work was a large part of the claim. As PL/pgSQL the
-- statement is parsed once per session; it is still planned at every call with the call's
-- values (plan_cache_mode = force_custom_plan for the function's own statements: the current
-- slot grows from empty after every rotation, and a plan cached while it was small could scan
-- it for every key once it is large; see 0037). The statement, its result (the keys new to the
-- consumer), its barrier with a rotation and its unique violation on a lost race are unchanged.
--
-- core.consumers_of_current_role() (0011, 0033), which the policies on core.event_handled
-- evaluate once per statement (twice for the claim: USING and WITH CHECK), joined
-- core.consumer_roles with pg_roles, a view over the whole role catalogue, to find each
-- registered role's oid. to_regrole finds it by name instead (a catalogue cache lookup; NULL for
-- a role that does not exist, which pg_has_role then excludes, as the join did). What it returns
-- is unchanged: the consumers registered for a role the current user is a member of, read when
-- the statement runs. Measured in one session: ~30 -> ~10 us per call.

CREATE OR REPLACE FUNCTION core.consumers_of_current_role() RETURNS text[]
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    RETURN (
        SELECT coalesce(array_agg(c.consumer), '{}')
        FROM core.consumer_roles AS c
        WHERE pg_has_role(current_user, to_regrole(quote_ident(c.role)), 'MEMBER')
    );
END
$fn$;

CREATE OR REPLACE FUNCTION core.dedup_claim(
    of_consumer text, keys bytea[], events uuid[], partitions integer[], offsets bigint[]
)
RETURNS SETOF bytea
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_custom_plan
AS $fn$
BEGIN
    RETURN QUERY
    INSERT INTO core.event_handled AS h
        (consumer, dedup_key, event_id, outcome, source_partition, source_offset, slot)
    SELECT of_consumer, t.k, t.e, 'applied', t.p, t.o, (SELECT core.dedup_current_slot())
    FROM unnest(keys, events, partitions, offsets) AS t (k, e, p, o)
    LEFT JOIN LATERAL (
        SELECT true AS held
        FROM core.event_handled AS earlier
        WHERE earlier.consumer = of_consumer AND earlier.dedup_key = t.k
        LIMIT 1
    ) AS found ON true
    WHERE found.held IS NULL
    RETURNING h.dedup_key;
END
$fn$;
