-- Queries of consumers/work_executor/repository.py. Every write that belongs to a lease holder
-- is guarded by "lease_token = $token AND status IN ('claimed', 'running')": a worker whose
-- lease was re-claimed (stale recovery) changes nothing any more.

-- name: waiting_items
-- Which delivered items are still waiting for a claim (their delivery is a wake-up of the
-- executor's claims); the others are running, done or canceled: the delivery is stale.
SELECT work_item_id
FROM work.work_items
WHERE work_item_id = ANY($1::uuid[]) AND status IN ('queued', 'failed', 'parked')

-- name: recover_stale
-- ADR-0023 stamp-based recovery: a lease older than the timeout belongs to a dead (or cut off)
-- worker; re-stamping it makes this worker the holder. What happened to the old holder's call
-- is then read from the ledger (plan.py). $5: items the recovering process still drives itself.
WITH stale AS (
    SELECT work_item_id
    FROM work.work_items
    WHERE status IN ('claimed', 'running')
      AND leased_at < now() - make_interval(secs => $1)
      AND NOT (work_item_id = ANY($5::uuid[]))
    ORDER BY leased_at, work_item_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE work.work_items w
SET status = 'claimed', lease_token = $3, leased_at = now(), leased_by = $4
FROM stale s
WHERE w.work_item_id = s.work_item_id
RETURNING w.work_item_id

-- name: load_items
-- The claimed items of a batch with their threads (one round trip for the batch), and whether
-- the spend of each one's next attempt is reserved (an attempt starts only against one).
SELECT w.work_item_id, w.thread_id, w.sequence, w.status, w.attempt, w.lock_scope,
       w.project_id, w.function_key, w.input::text AS input, w.not_before, w.lease_token,
       w.leased_at, w.error_message, w.created_at, w.started_at, w.finished_at, w.priority,
       w.tenant, w.org_id, w.cancel_requested_at, w.route,
       t.kind AS thread_kind, t.parent_thread_id, t.target_ref::text AS target_ref,
       EXISTS (SELECT 1 FROM work.spend s
               WHERE s.work_item_id = w.work_item_id AND s.attempt = w.attempt + 1
                 AND s.state = 'reserved') AS reserved
FROM work.work_items w
JOIN work.threads t ON t.thread_id = w.thread_id
WHERE w.work_item_id = ANY($1::uuid[])

-- name: load_bare_item
-- One item and its thread links, no JSON column read (the last resort of an item whose full
-- load fails: enough to dead-letter it).
SELECT w.work_item_id, w.thread_id, w.sequence, w.status, w.attempt, w.lock_scope,
       w.project_id, w.function_key, '{}' AS input, w.not_before, w.lease_token, w.leased_at,
       NULL::text AS error_message, w.created_at, w.started_at, w.finished_at,
       t.kind AS thread_kind, t.parent_thread_id
FROM work.work_items w
JOIN work.threads t ON t.thread_id = w.thread_id
WHERE w.work_item_id = $1

-- name: items_ledger
SELECT entry_id, seq, thread_id, work_item_id, attempt, entry_type, payload::text AS payload,
       hash, created_at
FROM work.ledger_entries
WHERE work_item_id = ANY($1::uuid[])
ORDER BY seq

-- name: get_documents
SELECT document_id, version, content::text AS content
FROM work.documents
WHERE document_id = ANY($1::text[])

-- name: lock_documents
-- The documents a transaction mutates, row-locked in ascending id order (deadlock freedom
-- between transactions that mutate several documents).
SELECT document_id, version, content::text AS content
FROM work.documents
WHERE document_id = ANY($1::text[])
ORDER BY document_id
FOR UPDATE

-- name: start_attempts
-- Attempt n of each item starts: counted before the paid call, in the transaction that records
-- its prompt. Only items whose lease ($2) is still held, whose attempt is still n-1 ($3) and
-- whose cancellation nobody asked for start; their rows are locked in id order first.
WITH wanted AS (
    SELECT s.work_item_id, s.lease_token, s.previous
    FROM unnest($1::uuid[], $2::uuid[], $3::integer[]) AS s (work_item_id, lease_token, previous)
), held AS (
    SELECT w.work_item_id
    FROM work.work_items w
    JOIN wanted s ON s.work_item_id = w.work_item_id
    WHERE w.lease_token = s.lease_token AND w.status IN ('claimed', 'running')
      AND w.attempt = s.previous AND w.cancel_requested_at IS NULL
    ORDER BY w.work_item_id
    FOR UPDATE OF w
)
UPDATE work.work_items w
SET status = 'running', attempt = w.attempt + 1, started_at = coalesce(w.started_at, now()),
    leased_at = now()
FROM held h
WHERE w.work_item_id = h.work_item_id
RETURNING w.work_item_id, w.attempt

-- name: release_items
-- Transient failures: each item waits its backoff ($3 seconds, from the database clock) and
-- its lease is released; the next attempt is delivered when due.
WITH wanted AS (
    SELECT s.work_item_id, s.lease_token, s.backoff, s.message
    FROM unnest($1::uuid[], $2::uuid[], $3::float8[], $4::text[])
        AS s (work_item_id, lease_token, backoff, message)
), held AS (
    SELECT w.work_item_id, s.backoff, s.message
    FROM work.work_items w
    JOIN wanted s ON s.work_item_id = w.work_item_id
    WHERE w.lease_token = s.lease_token AND w.status IN ('claimed', 'running')
      AND w.cancel_requested_at IS NULL
    ORDER BY w.work_item_id
    FOR UPDATE OF w
)
UPDATE work.work_items w
SET status = 'failed', not_before = now() + make_interval(secs => h.backoff),
    error_message = h.message, lease_token = NULL, leased_at = NULL, leased_by = NULL
FROM held h
WHERE w.work_item_id = h.work_item_id
RETURNING w.work_item_id, w.not_before, now() AS now

-- name: dead_letter_items
WITH wanted AS (
    SELECT s.work_item_id, s.lease_token, s.message
    FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS s (work_item_id, lease_token, message)
), held AS (
    SELECT w.work_item_id, s.message
    FROM work.work_items w
    JOIN wanted s ON s.work_item_id = w.work_item_id
    WHERE w.lease_token = s.lease_token AND w.status IN ('claimed', 'running')
      AND w.cancel_requested_at IS NULL
    ORDER BY w.work_item_id
    FOR UPDATE OF w
)
UPDATE work.work_items w
SET status = 'dead_letter', error_message = h.message, finished_at = now(),
    lease_token = NULL, leased_at = NULL, leased_by = NULL
FROM held h
WHERE w.work_item_id = h.work_item_id
RETURNING w.work_item_id

-- name: mark_applied_items
-- In the mutation transaction, under the target locks: the item rows locked in id order, each
-- lease proved still held, the items applied — one statement. Returns the items whose lease
-- was held, and whether each one's mutation had been applied before.
WITH wanted AS (
    SELECT s.work_item_id, s.lease_token
    FROM unnest($1::uuid[], $2::uuid[]) AS s (work_item_id, lease_token)
), held AS (
    SELECT w.work_item_id
    FROM work.work_items w
    JOIN wanted s ON s.work_item_id = w.work_item_id
    WHERE w.lease_token = s.lease_token AND w.status IN ('claimed', 'running')
      AND w.cancel_requested_at IS NULL
    ORDER BY w.work_item_id
    FOR UPDATE OF w
)
UPDATE work.work_items w
SET status = 'applied', error_message = NULL, finished_at = now(),
    lease_token = NULL, leased_at = NULL, leased_by = NULL
FROM held h
WHERE w.work_item_id = h.work_item_id
RETURNING w.work_item_id,
          EXISTS (SELECT 1 FROM work.mutations m WHERE m.work_item_id = w.work_item_id)
              AS applied_before

-- name: close_threads
-- A thread closes when its live item ends (ADR-035 §7.1 step 5); a closed one stays closed.
UPDATE work.threads t
SET status = s.status, outcome = s.outcome::jsonb, closed_at = now(), updated_at = now()
FROM unnest($1::uuid[], $2::text[], $3::text[]) AS s (thread_id, status, outcome)
WHERE t.thread_id = s.thread_id AND t.status IN ('open', 'running')

-- name: insert_mutations
-- A mutation id is applied once; the caller inserts only those not applied before.
INSERT INTO work.mutations (mutation_id, work_item_id, thread_id, document_id, lock_scope,
                           operation, arguments, base_version, result_version)
SELECT m.mutation_id, m.work_item_id, m.thread_id, m.document_id, m.lock_scope, m.operation,
       m.arguments::jsonb, m.base_version, m.base_version + 1
FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[],
            $8::integer[], $9::integer[])
    AS m (mutation_id, work_item_id, thread_id, document_id, lock_scope, operation, arguments,
          base_version, ord)
ORDER BY m.ord

-- name: update_documents
-- Each document moves from the version it was read at ($2, row-locked) to its last new one.
UPDATE work.documents d
SET version = u.version, content = u.content::jsonb, content_hash = u.content_hash,
    updated_at = now()
FROM unnest($1::text[], $2::integer[], $3::integer[], $4::text[], $5::text[])
    AS u (document_id, base_version, version, content, content_hash)
WHERE d.document_id = u.document_id AND d.version = u.base_version
RETURNING d.document_id

-- name: insert_document_versions
-- Every version a mutation made, one per mutation (intermediate ones included).
INSERT INTO work.document_versions (document_id, version, content, content_hash, mutation_id)
SELECT v.document_id, v.version, v.content::jsonb, v.content_hash, v.mutation_id
FROM unnest($1::text[], $2::integer[], $3::text[], $4::text[], $5::uuid[])
    AS v (document_id, version, content, content_hash, mutation_id)

-- name: lock_parent
SELECT thread_id, space_id, status, continue_on_error, cancel_requested_at
FROM work.threads
WHERE thread_id = $1
FOR UPDATE

-- name: children_of
SELECT c.thread_id, c.status, c.target_ref ->> 'epic_id' AS epic_id
FROM work.threads c
WHERE c.parent_thread_id = $1
ORDER BY c.created_at, c.thread_id

-- name: cancelable_items
-- Items of a stop-on-error orchestration's children that have not started a paid call and
-- hold no lease: they are canceled when a sibling failed.
SELECT w.work_item_id, w.thread_id, w.attempt, w.lock_scope
FROM work.work_items w
JOIN work.threads c ON c.thread_id = w.thread_id
WHERE c.parent_thread_id = $1 AND c.status IN ('open', 'running')
  AND w.status IN ('queued', 'failed', 'parked')
FOR UPDATE OF w SKIP LOCKED

-- name: cancel_requested_held
-- Of these leased items, those whose cancellation was asked for (a guarded transition left
-- them alone: their holder ends them canceled instead).
SELECT w.work_item_id
FROM work.work_items w
JOIN unnest($1::uuid[], $2::uuid[]) AS s (work_item_id, lease_token)
    ON s.work_item_id = w.work_item_id
WHERE w.lease_token = s.lease_token AND w.status IN ('claimed', 'running')
  AND w.cancel_requested_at IS NOT NULL

-- name: cancel_held_items
-- The holder ends items whose cancellation was asked for: no new call; an answer in flight
-- was recorded, its mutation is not applied.
WITH wanted AS (
    SELECT s.work_item_id, s.lease_token, s.message
    FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS s (work_item_id, lease_token, message)
), held AS (
    SELECT w.work_item_id, s.message
    FROM work.work_items w
    JOIN wanted s ON s.work_item_id = w.work_item_id
    WHERE w.lease_token = s.lease_token AND w.status IN ('claimed', 'running')
      AND w.cancel_requested_at IS NOT NULL
    ORDER BY w.work_item_id
    FOR UPDATE OF w
)
UPDATE work.work_items w
SET status = 'canceled', error_message = h.message, finished_at = now(),
    lease_token = NULL, leased_at = NULL, leased_by = NULL
FROM held h
WHERE w.work_item_id = h.work_item_id
RETURNING w.work_item_id

-- name: requeue_items
-- Leased items handed back without an attempt (no spend reserved for one: only a claim
-- reserves): they wait for the next claim, nothing counted, nothing failed.
WITH wanted AS (
    SELECT s.work_item_id, s.lease_token
    FROM unnest($1::uuid[], $2::uuid[]) AS s (work_item_id, lease_token)
), held AS (
    SELECT w.work_item_id
    FROM work.work_items w
    JOIN wanted s ON s.work_item_id = w.work_item_id
    WHERE w.lease_token = s.lease_token AND w.status IN ('claimed', 'running')
      AND w.cancel_requested_at IS NULL
    ORDER BY w.work_item_id
    FOR UPDATE OF w
)
UPDATE work.work_items w
SET status = CASE WHEN w.attempt > 0 THEN 'failed' ELSE 'queued' END,
    lease_token = NULL, leased_at = NULL, leased_by = NULL
FROM held h
WHERE w.work_item_id = h.work_item_id
RETURNING w.work_item_id

-- name: release_unstarted_spend
-- Leases ended: the reservations of attempts that never started are released.
UPDATE work.spend s
SET state = 'released'
FROM work.work_items w
WHERE s.work_item_id = w.work_item_id AND w.work_item_id = ANY($1::uuid[])
  AND s.attempt > w.attempt AND s.state = 'reserved'

-- name: mark_attempt_spend
-- A failed attempt's reservation: released when the provider answered that it did not do the
-- call, 'unknown' (counted in full) when its outcome is unknown. A settled one stays settled.
UPDATE work.spend s
SET state = m.state
FROM unnest($1::uuid[], $2::integer[], $3::text[]) AS m (work_item_id, attempt, state)
WHERE s.work_item_id = m.work_item_id AND s.attempt = m.attempt AND s.state = 'reserved'

-- name: settle_spend
-- Paid answers settle their attempt's reservation from the usage they report (in the
-- transaction that records them): the tokens, and their cost at the prices reserved with.
-- An answer without usage settles at the reservation. Settling twice changes nothing.
UPDATE work.spend s
SET state = 'settled', settled_at = now(),
    tokens = CASE WHEN u.prompt_tokens IS NULL AND u.completion_tokens IS NULL
                  THEN s.reserved_tokens
                  ELSE coalesce(u.prompt_tokens, 0) + coalesce(u.completion_tokens, 0) END,
    cost = CASE WHEN u.prompt_tokens IS NULL AND u.completion_tokens IS NULL
                THEN s.reserved_cost
                ELSE (coalesce(u.prompt_tokens, 0) * s.prompt_price
                      + coalesce(u.completion_tokens, 0) * s.completion_price) / 1000000 END
FROM unnest($1::uuid[], $2::integer[], $3::bigint[], $4::bigint[])
    AS u (work_item_id, attempt, prompt_tokens, completion_tokens)
WHERE s.work_item_id = u.work_item_id AND s.attempt = u.attempt
  AND s.state IN ('reserved', 'unknown')
RETURNING s.work_item_id, s.attempt, s.org_id, s.model, s.function_key, s.tokens, s.cost,
          s.reserved_tokens, u.prompt_tokens, u.completion_tokens

-- name: pause_route
-- A gateway answered 429: no call of the model starts before its Retry-After has passed.
INSERT INTO work.provider_routes AS r (model, paused_until, rate_limited)
SELECT p.model, now() + make_interval(secs => p.seconds), 1
FROM unnest($1::text[], $2::float8[]) AS p (model, seconds)
ON CONFLICT (model) DO UPDATE
    SET paused_until = greatest(r.paused_until, excluded.paused_until),
        rate_limited = r.rate_limited + 1, updated_at = now()

-- name: cancel_threads
UPDATE work.threads
SET status = 'canceled', outcome = $2::jsonb, closed_at = now(), updated_at = now()
WHERE thread_id = ANY($1::uuid[]) AND status IN ('open', 'running')

-- name: close_parent
UPDATE work.threads
SET status = $2, outcome = $3::jsonb, closed_at = now(), updated_at = now()
WHERE thread_id = $1 AND status IN ('open', 'running')

-- name: parents_to_settle
-- Orchestrations with no live child left, or stop-on-error ones with a failed child and live
-- siblings: the sweep settles them (a crash between an item's end and its parent's settlement
-- cannot leave a parent open forever).
SELECT p.thread_id, p.space_id
FROM work.threads p
WHERE p.kind = 'story_generate_all' AND p.status IN ('open', 'running')
  AND (
    NOT EXISTS (SELECT 1 FROM work.threads c
                WHERE c.parent_thread_id = p.thread_id AND c.status IN ('open', 'running'))
    OR (NOT p.continue_on_error
        AND EXISTS (SELECT 1 FROM work.threads c
                    WHERE c.parent_thread_id = p.thread_id AND c.status IN ('failed', 'canceled')))
  )
ORDER BY p.created_at
LIMIT $1

-- name: oldest_lease_age
-- Seconds since the oldest live lease was stamped (0 with none): past the lease timeout it is
-- stale and the sweep should recover it; the alert on work_oldest_lease_age_seconds says it did
-- not. Reads the partial index work_items_leased.
SELECT coalesce(extract(epoch FROM now() - min(leased_at)), 0)::float8
FROM work.work_items
WHERE status IN ('claimed', 'running')

-- name: queue_depth
SELECT status, count(*)::integer AS items
FROM work.work_items
WHERE status NOT IN ('applied', 'canceled')
GROUP BY status

-- name: parents_needing_settling
-- Cheap check before taking project locks: which of these orchestrations are still open with
-- either no live child left, or a failed child while they stop on error? (Run after the
-- children's own transactions committed: of two last siblings finishing together, the later
-- sees both done.) "Open or running" is written "closed_at IS NULL" (the same by the threads'
-- CHECK): with the status list the planner ANDs in the partial index of all live threads and
-- reads it whole for every parent while a backlog runs.
SELECT p.thread_id, p.space_id
FROM unnest($1::uuid[]) AS wanted (thread_id)
JOIN work.threads p ON p.thread_id = wanted.thread_id
WHERE p.closed_at IS NULL
  AND (
    NOT EXISTS (SELECT 1 FROM work.threads c
                WHERE c.parent_thread_id = p.thread_id AND c.closed_at IS NULL)
    OR (NOT p.continue_on_error
        AND EXISTS (SELECT 1 FROM work.threads c
                    WHERE c.parent_thread_id = p.thread_id
                      AND c.status IN ('failed', 'canceled')))
  )
ORDER BY p.thread_id
