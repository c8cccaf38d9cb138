-- Queries of producers/work/reconcile.py: the spend ledger's side of a provider's billing
-- export (read only, as spectral_operator).

-- name: spend_of
-- The attempts these Idempotency-Keys name ($1 work items, $2 attempts).
SELECT s.work_item_id, s.attempt, s.state, s.org_id, s.model, s.tokens, s.cost,
       s.reserved_tokens, s.reserved_cost, s.reserved_at
FROM unnest($1::uuid[], $2::integer[]) AS k (work_item_id, attempt)
JOIN work.spend s ON s.work_item_id = k.work_item_id AND s.attempt = k.attempt

-- name: settled_between
-- The calls the ledger settled whose reservation was made in [$1, $2]: each should be billed.
SELECT s.work_item_id, s.attempt, s.org_id, s.model, s.tokens, s.cost, s.settled_at
FROM work.spend s
WHERE s.state = 'settled' AND s.reserved_at >= $1 AND s.reserved_at <= $2
ORDER BY s.reserved_at, s.work_item_id, s.attempt
