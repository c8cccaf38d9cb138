-- Queries of route probation (consumers/work_executor/schedule.py says what it is): read in the
-- claim transaction, ended and begun again in the transaction that settles a route's bills.

-- name: on_probation
-- Of these routes, those on probation: never seen (no row yet) or not proven since.
SELECT m.model
FROM unnest($1::text[]) AS m (model)
LEFT JOIN work.provider_routes r ON r.model = m.model
WHERE r.model IS NULL OR r.probation

-- name: end_probation
-- Routes with a bill settled within its reservation in this transaction leave probation. Only
-- the rows on probation are written (and locked): a proven route's row is not touched, so
-- settling its calls never contends on it.
WITH m AS (
    SELECT DISTINCT model FROM unnest($1::text[]) AS u (model)
), proven AS (
    UPDATE work.provider_routes r
    SET probation = false, updated_at = now()
    FROM m
    WHERE r.model = m.model AND r.probation
    RETURNING r.model
)
INSERT INTO work.provider_routes (model, probation)
SELECT m.model, false
FROM m
WHERE NOT EXISTS (SELECT 1 FROM work.provider_routes r WHERE r.model = m.model)
ORDER BY m.model
ON CONFLICT (model) DO NOTHING

-- name: begin_probation
-- Routes whose provider overran a reservation settled in this transaction (their reservations
-- were just raised, or they were suspended) go back on probation: one call at a time until a
-- bill settles within the new reservation.
UPDATE work.provider_routes
SET probation = true, updated_at = now()
WHERE model = ANY($1::text[]) AND NOT probation
