-- 0013 durable work at production scale: cancellation, priorities with ageing, fair claims
-- across tenants, provider limits per model route, spend budgets per org.
--
-- work_items
--   org_id, tenant   the org the item is paid for (its input's org_id) and the tenant it is
--                    scheduled as: 'org:{org_id}', else 'project:{project_id}'. Generated from
--                    the row itself, so every writer (and every existing row) agrees.
--   priority, rank_at  one of a small fixed set; rank_at = enqueue time + the priority's delay
--                    (spectral/work/priority.py): claims take a tenant's items in rank_at order,
--                    so an item waiting long enough overtakes newer items of a higher priority
--                    (ageing). A retry keeps its rank.
--   route            the model the current lease's call goes to (provider limits count it).
--   cancel_requested_at  a cancellation asked for while the item was leased: its holder ends
--                    it 'canceled' (no new call; an answer in flight is recorded, not applied).
--   park_reason, parked_at  why and since when a 'parked' item waits (its org's budget is used
--                    up for the period); it resumes when the budget changes after parked_at or
--                    a new period starts.
-- New statuses: 'parked' (live: waiting for budget, not failed, nothing paid; resumes when the
-- budget allows) and 'canceled' (terminal).

ALTER TABLE work.work_items
    DROP CONSTRAINT work_items_status_check,
    ADD CONSTRAINT work_items_status_check
        CHECK (status IN ('queued', 'claimed', 'running', 'applied', 'failed', 'dead_letter',
                          'parked', 'canceled')),
    DROP CONSTRAINT work_items_check1,
    ADD CONSTRAINT work_items_terminal_finished
        CHECK ((status IN ('applied', 'dead_letter', 'canceled')) = (finished_at IS NOT NULL)),
    ADD COLUMN org_id text GENERATED ALWAYS AS (input ->> 'org_id') STORED,
    ADD COLUMN tenant text GENERATED ALWAYS AS (
        CASE WHEN input ->> 'org_id' IS NULL THEN 'project:' || project_id
             ELSE 'org:' || (input ->> 'org_id') END) STORED,
    ADD COLUMN priority text NOT NULL DEFAULT 'normal'
        CHECK (priority IN ('high', 'normal', 'low')),
    ADD COLUMN rank_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN route text NULL,
    ADD COLUMN cancel_requested_at timestamptz NULL,
    ADD COLUMN park_reason text NULL CHECK (length(park_reason) <= 2000),
    ADD COLUMN parked_at timestamptz NULL,
    ADD CONSTRAINT work_items_parked_has_reason
        CHECK ((status = 'parked') = (park_reason IS NOT NULL AND parked_at IS NOT NULL));
UPDATE work.work_items SET rank_at = created_at;

-- One live item per thread: a parked item is live.
DROP INDEX work.work_items_one_live_per_thread;
CREATE UNIQUE INDEX work_items_one_live_per_thread
    ON work.work_items (thread_id) WHERE status IN ('queued', 'claimed', 'running', 'failed', 'parked');
-- The scheduler's reads: the tenants with waiting items (a skip scan), each tenant's best items
-- by rank, the parked items of an org, and the leased items (in flight per tenant and route).
DROP INDEX work.work_items_due;
CREATE INDEX work_items_waiting ON work.work_items (tenant, rank_at, work_item_id)
    WHERE status IN ('queued', 'failed');
CREATE INDEX work_items_parked ON work.work_items (org_id) WHERE status = 'parked';

ALTER TABLE work.threads
    ADD COLUMN cancel_requested_at timestamptz NULL,
    ADD COLUMN cancel_requested_by text NULL,
    ADD COLUMN cancel_reason text NULL CHECK (length(cancel_reason) <= 2000);

-- Budgets per org and period (UTC calendar periods; 'total' never resets), in tokens and/or
-- cost (the unit of the prices in the provider limits, e.g. USD). No row: no limit.
CREATE TABLE work.budgets (
    org_id      text          PRIMARY KEY CHECK (org_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
    period      text          NOT NULL CHECK (period IN ('hour', 'day', 'week', 'month', 'total')),
    token_limit bigint        NULL CHECK (token_limit >= 0),
    cost_limit  numeric(24, 9) NULL CHECK (cost_limit >= 0),
    updated_at  timestamptz   NOT NULL DEFAULT now(),
    updated_by  text          NOT NULL DEFAULT core.current_actor(),
    CHECK (token_limit IS NOT NULL OR cost_limit IS NOT NULL)
);

-- Spend, one row per attempt of an item: reserved in the claim (lease) transaction before any
-- call — an upper bound of what the call can cost — and settled from the usage the response
-- reports, in the transaction that records the response in the ledger. A reservation whose
-- call never started is released when the lease ends; one whose call's outcome is unknown (the
-- worker died, the call timed out) stays counted. An org's spend in a period is the sum, over
-- the attempts reserved in it, of: the settled usage, else the reservation (unless released).
CREATE TABLE work.spend (
    work_item_id    uuid           NOT NULL REFERENCES work.work_items (work_item_id),
    attempt         integer        NOT NULL CHECK (attempt >= 1),
    org_id          text           NULL,
    model           text           NULL,
    function_key    text           NOT NULL,
    state           text           NOT NULL
                                   CHECK (state IN ('reserved', 'settled', 'released', 'unknown')),
    reserved_tokens bigint         NOT NULL CHECK (reserved_tokens >= 0),
    reserved_cost   numeric        NOT NULL CHECK (reserved_cost >= 0),
    prompt_price    numeric        NOT NULL DEFAULT 0 CHECK (prompt_price >= 0),
    completion_price numeric       NOT NULL DEFAULT 0 CHECK (completion_price >= 0),
    tokens          bigint         NULL CHECK (tokens >= 0),
    cost            numeric        NULL CHECK (cost >= 0),
    reserved_at     timestamptz    NOT NULL DEFAULT now(),
    settled_at      timestamptz    NULL,
    PRIMARY KEY (work_item_id, attempt),
    CHECK ((state = 'settled') = (tokens IS NOT NULL AND cost IS NOT NULL AND settled_at IS NOT NULL))
);
CREATE INDEX spend_by_org ON work.spend (org_id, reserved_at)
    INCLUDE (state, reserved_tokens, reserved_cost, tokens, cost);

-- The start of the budget period containing `at` (UTC calendar periods; 'total' has none).
CREATE FUNCTION work.period_start(period text, at timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $fn$
    SELECT CASE period WHEN 'total' THEN '-infinity'::timestamptz
                       ELSE date_trunc(period, at, 'UTC') END
$fn$;
GRANT EXECUTE ON FUNCTION work.period_start(text, timestamptz) TO PUBLIC;

-- Per model route: the rate limiters' state (GCRA theoretical arrival times for requests and
-- tokens) and a pause a gateway asked for (429 with Retry-After). Written under the
-- scheduler's lock only.
CREATE TABLE work.provider_routes (
    model        text        PRIMARY KEY,
    request_tat  timestamptz NOT NULL DEFAULT '-infinity',
    token_tat    timestamptz NOT NULL DEFAULT '-infinity',
    paused_until timestamptz NOT NULL DEFAULT '-infinity',
    rate_limited bigint      NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Roles. The executor claims, reserves, settles, parks and resumes; commands (API, CLI) also
-- cancel (ending waiting items with their ledger entries) and set budgets (resuming parked
-- items); the operator reads.
GRANT SELECT ON work.budgets, work.spend, work.provider_routes TO spectral_operator;
GRANT SELECT ON work.budgets TO spectral_executor;
GRANT SELECT, INSERT ON work.spend, work.provider_routes TO spectral_executor;
GRANT UPDATE (state, reserved_tokens, reserved_cost, prompt_price, completion_price, tokens,
              cost, reserved_at, settled_at, model) ON work.spend TO spectral_executor;
GRANT UPDATE (request_tat, token_tat, paused_until, rate_limited, updated_at)
    ON work.provider_routes TO spectral_executor;
GRANT UPDATE (route, park_reason, parked_at) ON work.work_items TO spectral_executor;

GRANT SELECT, INSERT, UPDATE, DELETE ON work.budgets TO spectral_producer;
GRANT SELECT ON work.spend TO spectral_producer;
GRANT UPDATE (status, error_message, finished_at, cancel_requested_at, park_reason, parked_at)
    ON work.work_items TO spectral_producer;
GRANT UPDATE (cancel_requested_at, cancel_requested_by, cancel_reason) ON work.threads
    TO spectral_producer;

-- Commands never write the ledger directly: a cancellation's entries (thread-level
-- 'cancel_requested', item-level 'canceled', both of type error) go through this function,
-- which refuses any other entry.
CREATE FUNCTION work.append_cancellation_entries(
    entry_ids uuid[], thread_ids uuid[], item_ids uuid[], attempts integer[], payloads text[],
    hashes text[]
) RETURNS SETOF uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(payloads) AS p (payload)
               WHERE coalesce(p.payload::jsonb ->> 'kind', '')
                     NOT IN ('canceled', 'cancel_requested')) THEN
        RAISE EXCEPTION 'only cancellation entries may be appended this way'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN QUERY
    INSERT INTO work.ledger_entries (entry_id, thread_id, work_item_id, attempt, entry_type,
                                     payload, hash)
    SELECT e.entry_id, e.thread_id, e.work_item_id, e.attempt, 'error', e.payload::jsonb, e.hash
    FROM unnest(entry_ids, thread_ids, item_ids, attempts, payloads, hashes)
        WITH ORDINALITY AS e (entry_id, thread_id, work_item_id, attempt, payload, hash, ord)
    ORDER BY e.ord
    RETURNING entry_id;
END
$fn$;
REVOKE ALL ON FUNCTION work.append_cancellation_entries(uuid[], uuid[], uuid[], integer[], text[],
                                                        text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION work.append_cancellation_entries(uuid[], uuid[], uuid[], integer[],
                                                           text[], text[])
    TO spectral_producer, spectral_executor;

-- Two new scopes: work:cancel (cancel threads) and work:budget (set budgets).
ALTER TABLE core.api_tokens
    DROP CONSTRAINT api_tokens_scopes_check,
    ADD CONSTRAINT api_tokens_scopes_check CHECK (
        cardinality(scopes) >= 1
        AND scopes <@ ARRAY['work:read', 'work:submit', 'work:cancel', 'work:budget',
                            'triage:read', 'triage:write', 'ops:read', 'ops:redrive']::text[]
    );
