-- name: insert_deploys
-- One row per deploy; a deploy already there (a second event of one deploy id) is left alone.
INSERT INTO deploys.deploys (deploy_id, service, outcome, finished_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
ON CONFLICT (deploy_id) DO NOTHING
RETURNING deploy_id, service, outcome, finished_at;

-- name: count_outcomes
-- The counts of the deploys just inserted, per service and outcome.
INSERT INTO deploys.service_outcomes AS s (service, outcome, deploys, last_at)
SELECT service, outcome, count(*), max(finished_at)
FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS d (service, outcome, finished_at)
GROUP BY service, outcome
ON CONFLICT (service, outcome) DO UPDATE
SET deploys = s.deploys + excluded.deploys, last_at = greatest(s.last_at, excluded.last_at);

-- name: forget_all
-- A rebuild starts from nothing: every row comes back from the topic.
DELETE FROM deploys.service_outcomes;
DELETE FROM deploys.deploys;

-- name: count_rows
SELECT count(*) FROM deploys.deploys;

-- name: outcomes
-- Deploys per service and outcome ($1: one service, or NULL for all); the read side of the
-- command, the HTTP route and the MCP tool.
SELECT service, outcome, deploys, last_at
FROM deploys.service_outcomes
WHERE $1::text IS NULL OR service = $1
ORDER BY service, outcome;
