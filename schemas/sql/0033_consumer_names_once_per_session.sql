-- Row-level security on the dedup record finds the current role's consumer names without
-- planning a query every time.
--
-- The policies on core.event_handled (0011 bounded_state, 0018 dedup_keys_bytewise) compare each
-- row's consumer with core.consumers_of_current_role(), once per statement (a scalar sub-select,
-- run as an InitPlan). As a LANGUAGE sql function that is not inlined (it aggregates), its query
-- was planned afresh on every call: about 0.2-0.5 ms of database CPU for each statement the
-- engine sends (the claim evaluates it twice, once for the policy's USING and once for its WITH
-- CHECK; the stale marks and the forgetting once more). PL/pgSQL keeps the plan of its query for
-- the session. What it returns is unchanged: the consumers registered in core.consumer_roles for
-- a role the current user is a member of, read when the statement runs.

CREATE OR REPLACE FUNCTION core.consumers_of_current_role() RETURNS text[]
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    RETURN (
        SELECT coalesce(array_agg(c.consumer), '{}')
        FROM core.consumer_roles AS c
        JOIN pg_roles AS r ON r.rolname = c.role
        WHERE pg_has_role(current_user, r.oid, 'MEMBER')
    );
END
$fn$;
