-- Queries of producers/work/routes.py: model routes and their provider overruns.

-- name: list_routes
SELECT model, reserve_ratio, overruns, overrun_tokens, overrun_cost, suspended_at,
       suspend_reason, probation
FROM work.provider_routes
ORDER BY model

-- name: resume_route
-- An operator lifts a route's suspension; with $2 its reservations go back to the worst case.
-- The route is on probation again: one call at a time until a bill settles within its reservation.
UPDATE work.provider_routes
SET suspended_at = NULL, suspend_reason = NULL, probation = true,
    reserve_ratio = CASE WHEN $2::boolean THEN 1 ELSE reserve_ratio END, updated_at = now()
WHERE model = $1
RETURNING model, reserve_ratio, overruns, overrun_tokens, overrun_cost, suspended_at,
          suspend_reason, probation
