-- 0025 route probation: a model route none of whose bills has settled within its reservation
-- yet takes one call at a time (consumers/work_executor/schedule.py), so a provider that bills
-- more than a call is allowed overruns by one call at most before that bill is fed back.
--
-- work.provider_routes.probation   true for a new route (a route without a row is on probation
--                               too), after an overrun raised or suspended it, and when an
--                               operator resumes it; false once a bill settles within its
--                               reservation

ALTER TABLE work.provider_routes ADD COLUMN probation boolean NOT NULL DEFAULT true;

-- Routes already billed within their reservations have proven themselves.
UPDATE work.provider_routes r
SET probation = false
WHERE r.suspended_at IS NULL
  AND EXISTS (SELECT 1 FROM work.spend s
              WHERE s.model = r.model AND s.state = 'settled' AND s.overrun_tokens = 0
                AND s.overrun_cost = 0);

GRANT UPDATE (probation) ON work.provider_routes TO spectral_executor, spectral_producer;
