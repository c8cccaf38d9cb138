-- 0022 the budget as a hard cap: usage a provider bills above what its call was allowed (its
-- reservation) is a provider overrun — recorded as billed, visible on its spend row, and fed
-- back to the call's model route so it cannot repeat unchecked.
--
-- work.spend.reserve_ratio      the route's reserve ratio the reservation was made with
-- work.spend.overrun_tokens,    billed above the reservation (generated; 0 when within it)
--            overrun_cost
-- work.provider_routes.reserve_ratio   every reservation of the route is its worst case (prompt
--                               tokens as counted + the completion bound, priced) times this
--                               ratio (>= 1): after an overrun, the largest billed/worst-case
--                               ratio the route has shown (policy 'raise')
-- work.provider_routes.overruns, overrun_tokens, overrun_cost   what the route billed beyond
--                               its reservations, in total
-- work.provider_routes.suspended_at, suspend_reason   a suspended route takes no new call until
--                               an operator resumes it (policy 'suspend', or an overrun beyond
--                               the largest ratio the policy raises to)

ALTER TABLE work.spend
    ADD COLUMN reserve_ratio numeric NOT NULL DEFAULT 1 CHECK (reserve_ratio >= 1),
    ADD COLUMN overrun_tokens bigint
        GENERATED ALWAYS AS (greatest(coalesce(tokens, 0) - reserved_tokens, 0)) STORED,
    ADD COLUMN overrun_cost numeric
        GENERATED ALWAYS AS (greatest(coalesce(cost, 0) - reserved_cost, 0)) STORED;

ALTER TABLE work.provider_routes
    ADD COLUMN reserve_ratio numeric NOT NULL DEFAULT 1 CHECK (reserve_ratio >= 1),
    ADD COLUMN overruns bigint NOT NULL DEFAULT 0 CHECK (overruns >= 0),
    ADD COLUMN overrun_tokens bigint NOT NULL DEFAULT 0 CHECK (overrun_tokens >= 0),
    ADD COLUMN overrun_cost numeric NOT NULL DEFAULT 0 CHECK (overrun_cost >= 0),
    ADD COLUMN suspended_at timestamptz NULL,
    ADD COLUMN suspend_reason text NULL CHECK (length(suspend_reason) <= 2000),
    ADD CONSTRAINT provider_routes_suspended_has_reason
        CHECK ((suspended_at IS NULL) = (suspend_reason IS NULL));

GRANT UPDATE (reserve_ratio) ON work.spend TO spectral_executor;
GRANT UPDATE (reserve_ratio, overruns, overrun_tokens, overrun_cost, suspended_at,
              suspend_reason) ON work.provider_routes TO spectral_executor;
-- Operators resume a suspended route (`spectral work routes resume`).
GRANT SELECT ON work.provider_routes TO spectral_producer;
GRANT UPDATE (reserve_ratio, suspended_at, suspend_reason, updated_at) ON work.provider_routes
    TO spectral_producer;

-- The executor's sweep counts the reservations whose call's outcome is unknown (a gauge).
CREATE INDEX spend_unknown_outcome ON work.spend (reserved_at) WHERE state = 'unknown';
