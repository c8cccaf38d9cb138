-- 0004 work: durable LLM work (ADR-035 §6, hardened per ADR-0008, ordered per ADR-0023).
--
-- threads        durable intent containers, idempotent by semantic identity
-- work_items     queue-executed units (one paid call + validation + one mutation), leased
-- ledger_entries immutable record of what was paid for and received (append-only, enforced here)
-- documents      canonical stored documents (current version) + document_versions (history)
-- mutations      the explicit, idempotent changes applied to documents, one per work item
--
-- Locks (ADR-035 §9) are PostgreSQL transaction-scoped advisory locks taken in code
-- (spectral/work/locks.py): no table. The lease of a work item (ADR-0023) is the stamped row
-- itself: lease_token + leased_at, re-claimable once leased_at is older than the lease timeout.

CREATE TABLE work.documents (
    document_id  text        PRIMARY KEY,
    project_id   text        NOT NULL,
    doc_type     text        NOT NULL CHECK (doc_type IN ('story_backlog')),
    version      integer     NOT NULL CHECK (version >= 1),
    content      jsonb       NOT NULL,
    content_hash text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX documents_by_project ON work.documents (project_id);

-- Every version a document ever had; version 1 is its creation, later ones name their mutation.
CREATE TABLE work.document_versions (
    document_id  text        NOT NULL REFERENCES work.documents (document_id),
    version      integer     NOT NULL CHECK (version >= 1),
    content      jsonb       NOT NULL,
    content_hash text        NOT NULL,
    mutation_id  uuid        NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (document_id, version),
    CHECK ((version = 1) = (mutation_id IS NULL))
);

CREATE TABLE work.threads (
    thread_id         uuid        PRIMARY KEY,
    kind              text        NOT NULL
                                  CHECK (kind IN ('story_generate_epic', 'story_generate_all')),
    space_type        text        NOT NULL,
    space_id          text        NOT NULL,
    target_ref        jsonb       NOT NULL,
    status            text        NOT NULL
                                  CHECK (status IN ('open', 'running', 'complete', 'failed',
                                                    'canceled')),
    parent_thread_id  uuid        NULL REFERENCES work.threads (thread_id),
    idempotency_key   text        NOT NULL,
    continue_on_error boolean     NOT NULL DEFAULT true,
    outcome           jsonb       NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    closed_at         timestamptz NULL,
    CHECK ((status IN ('complete', 'failed', 'canceled')) = (closed_at IS NOT NULL)),
    CHECK (parent_thread_id IS DISTINCT FROM thread_id)
);
-- ADR-035 §8: at most one open|running thread per semantic identity. Two concurrent identical
-- commands race on this index; the loser finds the winner's thread and returns it.
CREATE UNIQUE INDEX threads_one_active_per_identity
    ON work.threads (idempotency_key) WHERE status IN ('open', 'running');
CREATE INDEX threads_by_identity ON work.threads (idempotency_key, created_at DESC);
CREATE INDEX threads_by_parent ON work.threads (parent_thread_id)
    WHERE parent_thread_id IS NOT NULL;
CREATE INDEX threads_by_space ON work.threads (space_type, space_id, created_at DESC);

CREATE TABLE work.work_items (
    work_item_id  uuid        PRIMARY KEY,
    thread_id     uuid        NOT NULL REFERENCES work.threads (thread_id),
    sequence      integer     NOT NULL CHECK (sequence >= 1),
    status        text        NOT NULL
                              CHECK (status IN ('queued', 'claimed', 'running', 'applied',
                                                'failed', 'dead_letter')),
    attempt       integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    lock_scope    text        NOT NULL,
    project_id    text        NOT NULL,
    function_key  text        NOT NULL,
    input         jsonb       NOT NULL,
    not_before    timestamptz NOT NULL DEFAULT now(),
    lease_token   uuid        NULL,
    leased_at     timestamptz NULL,
    leased_by     text        NULL,
    error_message text        NULL,  -- informational only; the ledger is authoritative
    created_at    timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz NULL,
    finished_at   timestamptz NULL,
    UNIQUE (thread_id, sequence),
    CHECK ((status IN ('claimed', 'running')) = (lease_token IS NOT NULL AND leased_at IS NOT NULL)),
    CHECK ((status IN ('applied', 'dead_letter')) = (finished_at IS NOT NULL))
);
-- ADR-035 §8: no duplicate work items for the same target concurrently — one live item per
-- thread, and one active thread per target (above).
CREATE UNIQUE INDEX work_items_one_live_per_thread
    ON work.work_items (thread_id) WHERE status IN ('queued', 'claimed', 'running', 'failed');
CREATE INDEX work_items_due ON work.work_items (not_before) WHERE status IN ('queued', 'failed');
CREATE INDEX work_items_leased ON work.work_items (leased_at) WHERE status IN ('claimed', 'running');

CREATE TABLE work.ledger_entries (
    entry_id      uuid        PRIMARY KEY,
    seq           bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    thread_id     uuid        NOT NULL REFERENCES work.threads (thread_id),
    work_item_id  uuid        NULL REFERENCES work.work_items (work_item_id),
    attempt       integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    entry_type    text        NOT NULL
                              CHECK (entry_type IN ('prompt', 'response', 'parse_report',
                                                    'mutation_report', 'error')),
    payload       jsonb       NOT NULL,
    hash          text        NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
    created_at    timestamptz NOT NULL DEFAULT now()
);
-- One prompt, one response, one parse_report and one mutation_report per attempt of an item:
-- a retried append is recognised (ON CONFLICT DO NOTHING), and "at most one paid call per
-- attempt" is a fact the database keeps, not a hope. Errors are not limited (an attempt declared
-- unknown may still see its late answer refused by validation).
CREATE UNIQUE INDEX ledger_one_per_attempt
    ON work.ledger_entries (work_item_id, attempt, entry_type)
    WHERE work_item_id IS NOT NULL AND entry_type <> 'error';
CREATE INDEX ledger_by_thread ON work.ledger_entries (thread_id, seq);

-- The ledger is append-only in the database itself: UPDATE and DELETE of a row and TRUNCATE
-- raise, whoever asks — the application roles and the table owner alike (only a superuser can
-- switch triggers off, and doing so is visible in the server log and the catalog).
CREATE FUNCTION work.refuse_ledger_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'work.ledger_entries is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'ledger entries are immutable (ADR-035 §5.3); append a new entry instead';
END
$$;
CREATE TRIGGER ledger_entries_immutable_rows
    BEFORE UPDATE OR DELETE ON work.ledger_entries
    FOR EACH ROW EXECUTE FUNCTION work.refuse_ledger_change();
CREATE TRIGGER ledger_entries_no_truncate
    BEFORE TRUNCATE ON work.ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION work.refuse_ledger_change();

CREATE TABLE work.mutations (
    mutation_id    uuid        PRIMARY KEY,
    work_item_id   uuid        NOT NULL UNIQUE REFERENCES work.work_items (work_item_id),
    thread_id      uuid        NOT NULL REFERENCES work.threads (thread_id),
    document_id    text        NOT NULL REFERENCES work.documents (document_id),
    lock_scope     text        NOT NULL,
    operation      text        NOT NULL CHECK (operation IN ('replace_epic_stories')),
    arguments      jsonb       NOT NULL,
    base_version   integer     NOT NULL CHECK (base_version >= 1),
    result_version integer     NOT NULL CHECK (result_version = base_version + 1),
    applied_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mutations_by_document ON work.mutations (document_id, result_version);
ALTER TABLE work.document_versions
    ADD FOREIGN KEY (mutation_id) REFERENCES work.mutations (mutation_id);

-- Roles. Commands (API, CLI) act as spectral_producer; the executor as spectral_executor;
-- `spectral threads` as spectral_operator (read only). Nobody is granted UPDATE, DELETE or
-- TRUNCATE on the ledger, and the triggers refuse them anyway.
GRANT SELECT ON ALL TABLES IN SCHEMA work TO spectral_operator;

GRANT SELECT, INSERT ON work.threads, work.work_items TO spectral_producer;
GRANT UPDATE (status, parent_thread_id, continue_on_error, outcome, updated_at, closed_at)
    ON work.threads TO spectral_producer;
GRANT SELECT, INSERT ON work.documents, work.document_versions TO spectral_producer;
GRANT SELECT ON work.ledger_entries, work.mutations TO spectral_producer;

GRANT SELECT ON work.threads, work.work_items, work.documents TO spectral_executor;
GRANT UPDATE (status, outcome, updated_at, closed_at) ON work.threads TO spectral_executor;
GRANT UPDATE (status, attempt, not_before, lease_token, leased_at, leased_by, error_message,
              started_at, finished_at)
    ON work.work_items TO spectral_executor;
GRANT UPDATE (version, content, content_hash, updated_at) ON work.documents TO spectral_executor;
GRANT SELECT, INSERT ON work.document_versions, work.mutations, work.ledger_entries
    TO spectral_executor;
