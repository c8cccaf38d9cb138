-- Queries of consumers/work_executor/transitions.py: the transitions a lease holder writes.
-- Every one of them is guarded by work.held_items (migration 0021): the items whose lease is
-- still the caller's token, claimed or running, cancellation asked for or not, row-locked in id
-- order. A worker whose lease was re-claimed (stale recovery) changes nothing any more.

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

-- name: lock_documents
-- The documents a transaction mutates, row-locked in ascending id order (deadlock freedom
-- between transactions that mutate several documents).
SELECT document_id, doc_type, version, content::text AS content
FROM work.documents
WHERE document_id = ANY($1::text[])
ORDER BY document_id
FOR UPDATE

-- name: start_attempts
-- Attempt n of each item starts: counted before the paid call, in the transaction that records
-- its prompt. Only items whose lease ($2) is still held, whose attempt is still n-1 ($3) and
-- whose cancellation nobody asked for start.
WITH held AS (
    SELECT h.work_item_id
    FROM work.held_items($1::uuid[], $2::uuid[], false) AS h
    JOIN unnest($1::uuid[], $3::integer[]) AS s (work_item_id, previous)
        ON s.work_item_id = h.work_item_id AND s.previous = h.attempt
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
WITH held AS (
    SELECT s.work_item_id, s.backoff, s.message
    FROM work.held_items($1::uuid[], $2::uuid[], false) AS h
    JOIN unnest($1::uuid[], $3::float8[], $4::text[]) AS s (work_item_id, backoff, message)
        ON s.work_item_id = h.work_item_id
)
UPDATE work.work_items w
SET status = 'failed', not_before = now() + make_interval(secs => h.backoff),
    error_message = h.message, lease_token = NULL, leased_at = NULL, leased_by = NULL
FROM held h
WHERE w.work_item_id = h.work_item_id
RETURNING w.work_item_id, w.not_before, now() AS now

-- name: end_held_items
-- The holder ends items ($1, leases $2) with their messages ($3): 'dead_letter' (their
-- cancellation not asked for, $4 = false) or 'canceled' (asked for, $4 = true: no new call; an
-- answer in flight was recorded, its mutation is not applied).
WITH held AS (
    SELECT s.work_item_id, s.message
    FROM work.held_items($1::uuid[], $2::uuid[], $4::boolean) AS h
    JOIN unnest($1::uuid[], $3::text[]) AS s (work_item_id, message)
        ON s.work_item_id = h.work_item_id
)
UPDATE work.work_items w
SET status = CASE WHEN $4::boolean THEN 'canceled' ELSE 'dead_letter' END,
    error_message = h.message, finished_at = now(),
    lease_token = NULL, leased_at = NULL, leased_by = NULL
FROM held h
WHERE w.work_item_id = h.work_item_id
RETURNING w.work_item_id

-- name: mark_applied_items
-- In the mutation transaction, under the target locks: each lease proved still held, the items
-- applied — one statement. Returns the items whose lease was held, and whether each one's
-- mutation had been applied before.
WITH held AS (
    SELECT h.work_item_id FROM work.held_items($1::uuid[], $2::uuid[], false) AS h
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

-- name: cancel_requested_held
-- Of these leased items, those whose cancellation was asked for (a guarded transition left
-- them alone: their holder ends them canceled instead).
SELECT h.work_item_id FROM work.held_items($1::uuid[], $2::uuid[], true) AS h

-- name: requeue_items
-- Leased items handed back without an attempt (no spend reserved for one: only a claim
-- reserves): they wait for the next claim, nothing counted, nothing failed.
WITH held AS (
    SELECT h.work_item_id FROM work.held_items($1::uuid[], $2::uuid[], false) AS h
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
          s.reserved_tokens, s.reserved_cost, s.reserve_ratio, u.prompt_tokens,
          u.completion_tokens

-- name: feed_back_overruns
-- Provider overruns of the attempts just settled (usage billed above the reservation: the
-- spend rows keep it as billed), per route: $1 model, $2 the billed/worst-case ratio, $3 the
-- tokens and $4 the cost billed beyond the reservation. The route counts them, and its
-- reservations rise to the largest ratio it has shown, at most $6 — unless the policy suspends
-- it ($5) or it billed more than $6 times its worst case: then it is suspended (no new call
-- until an operator resumes it). A suspended route stays suspended with its first reason.
INSERT INTO work.provider_routes AS r (model, reserve_ratio, overruns, overrun_tokens,
                                       overrun_cost, suspended_at, suspend_reason)
SELECT o.model, least(greatest(max(o.ratio), 1), $6::numeric), count(*), sum(o.tokens),
       sum(o.cost),
       CASE WHEN $5::boolean OR max(o.ratio) > $6::numeric THEN now() END,
       CASE WHEN $5::boolean OR max(o.ratio) > $6::numeric
            THEN 'provider overrun: billed ' || round(max(o.ratio), 2)
                 || ' times the worst case of a call (' || sum(o.tokens)
                 || ' tokens beyond its reservations)'
       END
FROM unnest($1::text[], $2::numeric[], $3::bigint[], $4::numeric[])
    AS o (model, ratio, tokens, cost)
GROUP BY o.model
ON CONFLICT (model) DO UPDATE
    SET reserve_ratio = greatest(r.reserve_ratio, excluded.reserve_ratio),
        overruns = r.overruns + excluded.overruns,
        overrun_tokens = r.overrun_tokens + excluded.overrun_tokens,
        overrun_cost = r.overrun_cost + excluded.overrun_cost,
        suspend_reason = coalesce(r.suspend_reason, excluded.suspend_reason),
        suspended_at = coalesce(r.suspended_at, excluded.suspended_at),
        updated_at = now()
RETURNING r.model, r.reserve_ratio, r.suspended_at IS NOT NULL AS suspended

-- name: pause_route
-- A gateway answered 429: no call of the model starts before its Retry-After has passed.
INSERT INTO work.provider_routes AS r (model, paused_until, rate_limited)
SELECT p.model, now() + make_interval(secs => p.seconds), 1
FROM unnest($1::text[], $2::float8[]) AS p (model, seconds)
ON CONFLICT (model) DO UPDATE
    SET paused_until = greatest(r.paused_until, excluded.paused_until),
        rate_limited = r.rate_limited + 1, updated_at = now()
