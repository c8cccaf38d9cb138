-- 0027 nested budgets: besides its org's budget (work.budgets, unchanged), a call counts against
-- the budgets of its project, its thread, its thread's parent thread (a generate-all) and its
-- model route. Every scope's limit holds at once: admission (the claim, under the scheduler's
-- lock) reserves the call's worst case in every scope it belongs to and admits it only if no
-- scope's settled spend plus outstanding reservations would pass its limit.
--
-- work.scope_budgets        the budgets of the other scope kinds: 'project' (a project id),
--                           'thread' (a thread id: counts the thread's own calls and those of
--                           its child threads), 'route' (a model route, every org's calls to it).
--                           Same periods and limits as an org's budget.
-- work.budget_scopes        every budget, the org budgets included, as (scope_kind, scope_id):
--                           what admission, the resumption of parked items and the surfaces read.
-- work.spend.project_id, thread_id, parent_thread_id
--                           the scopes an attempt was reserved in (with org_id and model),
--                           written by the claim; existing rows are filled from their items.
-- work.work_items.park_scope_kind, park_scope_id
--                           the scope whose budget parked the item; it resumes when that scope's
--                           budget changes, is removed, or its period rolls over. Items parked
--                           before this migration were parked by their org's budget.

CREATE TABLE work.scope_budgets (
    scope_kind  text           NOT NULL CHECK (scope_kind IN ('project', 'thread', 'route')),
    scope_id    text           NOT NULL CHECK (
        CASE scope_kind
            WHEN 'project' THEN scope_id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'
            WHEN 'thread' THEN scope_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
            ELSE scope_id ~ '^[[:graph:]]{1,200}$'
        END),
    period      text           NOT NULL CHECK (period IN ('hour', 'day', 'week', 'month', 'total')),
    token_limit bigint         NULL CHECK (token_limit >= 0),
    cost_limit  numeric(24, 9) NULL CHECK (cost_limit >= 0),
    updated_at  timestamptz    NOT NULL DEFAULT now(),
    updated_by  text           NOT NULL DEFAULT core.current_actor(),
    PRIMARY KEY (scope_kind, scope_id),
    CHECK (token_limit IS NOT NULL OR cost_limit IS NOT NULL)
);

CREATE VIEW work.budget_scopes AS
    SELECT 'org'::text AS scope_kind, org_id AS scope_id, period, token_limit, cost_limit,
           updated_at, updated_by
    FROM work.budgets
    UNION ALL
    SELECT scope_kind, scope_id, period, token_limit, cost_limit, updated_at, updated_by
    FROM work.scope_budgets;

ALTER TABLE work.spend
    ADD COLUMN project_id text NULL,
    ADD COLUMN thread_id uuid NULL,
    ADD COLUMN parent_thread_id uuid NULL;
UPDATE work.spend s
SET project_id = w.project_id, thread_id = w.thread_id, parent_thread_id = t.parent_thread_id
FROM work.work_items w
JOIN work.threads t ON t.thread_id = w.thread_id
WHERE w.work_item_id = s.work_item_id;
CREATE INDEX spend_by_project ON work.spend (project_id, reserved_at)
    INCLUDE (state, reserved_tokens, reserved_cost, tokens, cost);
CREATE INDEX spend_by_thread ON work.spend (thread_id, reserved_at)
    INCLUDE (state, reserved_tokens, reserved_cost, tokens, cost);
CREATE INDEX spend_by_parent_thread ON work.spend (parent_thread_id, reserved_at)
    INCLUDE (state, reserved_tokens, reserved_cost, tokens, cost)
    WHERE parent_thread_id IS NOT NULL;
CREATE INDEX spend_by_model ON work.spend (model, reserved_at)
    INCLUDE (state, reserved_tokens, reserved_cost, tokens, cost);

ALTER TABLE work.work_items
    ADD COLUMN park_scope_kind text NULL
        CHECK (park_scope_kind IN ('org', 'project', 'thread', 'route')),
    ADD COLUMN park_scope_id text NULL;
UPDATE work.work_items
SET park_scope_kind = 'org', park_scope_id = org_id
WHERE status = 'parked' AND org_id IS NOT NULL;
CREATE INDEX work_items_parked_by_scope ON work.work_items (park_scope_kind, park_scope_id)
    WHERE status = 'parked';

-- Roles: as for the org budgets (0014).
GRANT SELECT ON work.scope_budgets, work.budget_scopes TO spectral_operator, spectral_executor;
GRANT SELECT, INSERT, UPDATE, DELETE ON work.scope_budgets TO spectral_producer;
GRANT SELECT ON work.budget_scopes TO spectral_producer;
GRANT UPDATE (project_id, thread_id, parent_thread_id) ON work.spend TO spectral_executor;
GRANT UPDATE (park_scope_kind, park_scope_id) ON work.work_items
    TO spectral_executor, spectral_producer;
