-- 0021 one machine for paid calls: the suggested rule stub of a failure cluster becomes work on
-- the ledger (the work function 'rule_stub', run by the work executor like story generation:
-- one lease, one attempt counter, one retry policy, one response journal), and the lease guard
-- of the executor's transitions becomes one function.
--
-- work.threads.kind 'rule_stub'      one thread per (cluster, content hash): its identity is
--                                    'rule_stub/{cluster_id}/{content_hash}'
-- work.documents.doc_type 'rule_stub' the stub of that content: {"cluster_id", "content_hash",
--                                    "rule_stub": null | text}; version 1 is created with the
--                                    thread, the item's mutation ('set_rule_stub') makes version 2
-- work.work_items.prompt_bytes       an upper bound of the UTF-8 length of the item's prompt, set
--                                    when it is enqueued (the claim reserves its spend from it);
--                                    NULL on items enqueued before this migration (the claim then
--                                    bounds a story prompt from its document, as before)
-- clusters.clusters.stub_awaited     the stub thread a cluster's last snapshot went out without
--                                    (it was still running): when it closes, the cluster is
--                                    evaluated again and published with its stub
--
-- Existing rule-stub leases move onto the ledger here, each as the thread, item, document and
-- ledger entries the executor would have written, so nothing is lost and nothing is paid again:
--   llm (finalized)      thread complete, item applied, document version 2 with the stub, its
--                        mutation, and the entries of its last attempt (prompt, response when
--                        kept, parse_report, mutation_report)
--   failed (given up)    thread failed, item dead_letter (no call is made for it again)
--   superseded           thread canceled, item canceled
--   pending, retry due   item failed (waiting for its retry at retry_at), attempt kept
--   pending, in flight   item claimed under a lease stamped when its call started: the
--                        executor's stale-lease recovery takes it up and, finding a prompt
--                        without an answer, applies the unknown-outcome rule to it (the prompt
--                        entry keeps the idempotency key that call was sent with)
-- Attempts before the last one left no record but their count: each gets a prompt and an error
-- entry saying so (the ledger's paid-call count stays true). Entries are hashed as the
-- application hashes them (work.canonical_json below, equal to its canonical text). The lease
-- table stays as the archive it now is (read only); clusters.rule_stubs reads the documents.

-- The canonical text of a JSON value (keys sorted by code point, no insignificant whitespace,
-- non-ASCII characters unescaped): what producers/work/domain/hashing.py canonical_text writes
-- for the same value. Ledger entries and documents are hashed over it.
CREATE FUNCTION work.canonical_json(value jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
    parts text;
BEGIN
    CASE jsonb_typeof(value)
    WHEN 'object' THEN
        SELECT string_agg(to_json(e.key)::text || ':' || work.canonical_json(e.value), ','
                          ORDER BY e.key COLLATE "C")
        INTO parts
        FROM jsonb_each(value) AS e;
        RETURN '{' || coalesce(parts, '') || '}';
    WHEN 'array' THEN
        SELECT string_agg(work.canonical_json(e.value), ',' ORDER BY e.ord)
        INTO parts
        FROM jsonb_array_elements(value) WITH ORDINALITY AS e (value, ord);
        RETURN '[' || coalesce(parts, '') || ']';
    ELSE
        RETURN value::text;
    END CASE;
END
$fn$;
GRANT EXECUTE ON FUNCTION work.canonical_json(jsonb) TO PUBLIC;

-- The lease guard of every transition a lease holder writes (executor transitions.sql): of
-- these (item, lease token) pairs, the items whose lease is still that token — claimed or
-- running — and whose cancellation was (not) asked for, row-locked in id order (the order every
-- writer of several items takes them: no deadlock).
CREATE FUNCTION work.held_items(item_ids uuid[], tokens uuid[], cancel_requested boolean)
RETURNS TABLE (work_item_id uuid, attempt integer)
LANGUAGE sql VOLATILE AS $fn$
    SELECT w.work_item_id, w.attempt
    FROM work.work_items AS w
    JOIN unnest(item_ids, tokens) AS s (work_item_id, lease_token)
        ON s.work_item_id = w.work_item_id
    WHERE w.lease_token = s.lease_token AND w.status IN ('claimed', 'running')
      AND (w.cancel_requested_at IS NOT NULL) = cancel_requested
    ORDER BY w.work_item_id
    FOR UPDATE OF w
$fn$;
REVOKE ALL ON FUNCTION work.held_items(uuid[], uuid[], boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION work.held_items(uuid[], uuid[], boolean) TO spectral_executor;

ALTER TABLE work.threads
    DROP CONSTRAINT threads_kind_check,
    ADD CONSTRAINT threads_kind_check
        CHECK (kind IN ('story_generate_epic', 'story_generate_all', 'rule_stub'));
ALTER TABLE work.documents
    DROP CONSTRAINT documents_doc_type_check,
    ADD CONSTRAINT documents_doc_type_check CHECK (doc_type IN ('story_backlog', 'rule_stub'));
ALTER TABLE work.mutations
    DROP CONSTRAINT mutations_operation_check,
    ADD CONSTRAINT mutations_operation_check
        CHECK (operation IN ('replace_epic_stories', 'set_rule_stub'));
ALTER TABLE work.work_items
    ADD COLUMN prompt_bytes integer NULL CHECK (prompt_bytes >= 0);

-- The live stub threads of a cluster (the tick cancels those of contents it moved on from).
CREATE INDEX threads_live_rule_stubs ON work.threads ((target_ref ->> 'cluster_id'))
    WHERE kind = 'rule_stub' AND status IN ('open', 'running');

ALTER TABLE clusters.clusters ADD COLUMN stub_awaited uuid NULL;
CREATE INDEX clusters_stub_awaited ON clusters.clusters (stub_awaited)
    WHERE stub_awaited IS NOT NULL;

-- -- the existing leases, onto the ledger ------------------------------------------------------

CREATE TEMPORARY TABLE legacy_stub ON COMMIT DROP AS
SELECT l.cluster_id, l.content_hash, l.generation_mode AS mode, l.suggested_rule_stub AS stub,
       l.request, l.holder, l.attempts, l.generated_at, l.model, l.retry_at, l.last_error,
       l.response, c.workspace_id,
       gen_random_uuid() AS thread_id, gen_random_uuid() AS work_item_id,
       gen_random_uuid() AS mutation_id,
       'rule_stub:' || l.cluster_id || ':' || l.content_hash AS document_id,
       'rule_stub/' || l.cluster_id || '/' || l.content_hash AS identity
FROM clusters.rule_stub_leases AS l
JOIN clusters.clusters AS c USING (cluster_id);

INSERT INTO work.threads (thread_id, kind, space_type, space_id, target_ref, status,
                          parent_thread_id, idempotency_key, continue_on_error, outcome,
                          created_at, updated_at, closed_at)
SELECT s.thread_id, 'rule_stub', 'workspace', s.workspace_id::text,
       jsonb_build_object('document_id', s.document_id, 'cluster_id', s.cluster_id,
                          'content_hash', s.content_hash),
       x.status, NULL, s.identity, true,
       CASE WHEN x.status = 'running' THEN NULL
            ELSE jsonb_build_object('work_item_id', s.work_item_id, 'item_status', x.item_status)
       END,
       s.generated_at, s.generated_at,
       CASE WHEN x.status = 'running' THEN NULL ELSE s.generated_at END
FROM legacy_stub AS s
CROSS JOIN LATERAL (
    SELECT CASE s.mode WHEN 'llm' THEN 'complete' WHEN 'failed' THEN 'failed'
                       WHEN 'superseded' THEN 'canceled' ELSE 'running' END AS status,
           CASE s.mode WHEN 'llm' THEN 'applied' WHEN 'failed' THEN 'dead_letter'
                       WHEN 'superseded' THEN 'canceled' ELSE NULL END AS item_status
) AS x;

INSERT INTO work.work_items (work_item_id, thread_id, sequence, status, attempt, lock_scope,
                             project_id, function_key, input, not_before, lease_token,
                             leased_at, leased_by, error_message, created_at, started_at,
                             finished_at, priority, rank_at, prompt_bytes)
SELECT s.work_item_id, s.thread_id, 1, x.status, s.attempts, 'cluster:' || s.cluster_id,
       s.workspace_id::text, 'rule_stub',
       jsonb_build_object('document_id', s.document_id, 'cluster_id', s.cluster_id,
                          'content_hash', s.content_hash, 'prompt', s.request ->> 'prompt',
                          'model_input', coalesce(s.request -> 'input', '{}'::jsonb)),
       coalesce(s.retry_at, s.generated_at),
       CASE WHEN x.status = 'claimed' THEN gen_random_uuid() END,
       CASE WHEN x.status = 'claimed' THEN s.generated_at END,
       CASE WHEN x.status = 'claimed' THEN s.holder END,
       left(s.last_error, 2000), s.generated_at, s.generated_at,
       CASE WHEN x.status IN ('applied', 'dead_letter', 'canceled') THEN s.generated_at END,
       'normal', s.generated_at, octet_length(coalesce(s.request ->> 'prompt', ''))
FROM legacy_stub AS s
CROSS JOIN LATERAL (
    SELECT CASE s.mode WHEN 'llm' THEN 'applied' WHEN 'failed' THEN 'dead_letter'
                       WHEN 'superseded' THEN 'canceled'
                       ELSE CASE WHEN s.retry_at IS NOT NULL THEN 'failed' ELSE 'claimed' END
           END AS status
) AS x;

CREATE TEMPORARY TABLE legacy_document ON COMMIT DROP AS
SELECT s.document_id, s.workspace_id, s.mutation_id, s.work_item_id, s.thread_id, s.cluster_id,
       s.mode,
       jsonb_build_object('cluster_id', s.cluster_id::text, 'content_hash', s.content_hash,
                          'rule_stub', NULL) AS first,
       jsonb_build_object('cluster_id', s.cluster_id::text, 'content_hash', s.content_hash,
                          'rule_stub', s.stub) AS finalized
FROM legacy_stub AS s;

INSERT INTO work.documents (document_id, project_id, doc_type, version, content, content_hash,
                            created_at, updated_at)
SELECT d.document_id, d.workspace_id::text, 'rule_stub', v.version, v.content,
       encode(sha256(convert_to(work.canonical_json(v.content), 'UTF8')), 'hex'), now(), now()
FROM legacy_document AS d
CROSS JOIN LATERAL (
    SELECT CASE WHEN d.mode = 'llm' THEN 2 ELSE 1 END AS version,
           CASE WHEN d.mode = 'llm' THEN d.finalized ELSE d.first END AS content
) AS v;

INSERT INTO work.mutations (mutation_id, work_item_id, thread_id, document_id, lock_scope,
                            operation, arguments, base_version, result_version)
SELECT d.mutation_id, d.work_item_id, d.thread_id, d.document_id, 'cluster:' || d.cluster_id,
       'set_rule_stub', jsonb_build_object('rule_stub', d.finalized -> 'rule_stub'), 1, 2
FROM legacy_document AS d
WHERE d.mode = 'llm';

INSERT INTO work.document_versions (document_id, version, content, content_hash, mutation_id)
SELECT d.document_id, v.version, v.content,
       encode(sha256(convert_to(work.canonical_json(v.content), 'UTF8')), 'hex'), v.mutation_id
FROM legacy_document AS d
CROSS JOIN LATERAL (
    VALUES (1, d.first, NULL::uuid), (2, d.finalized, d.mutation_id)
) AS v (version, content, mutation_id)
WHERE v.version = 1 OR d.mode = 'llm';

-- The ledger: attempts 1..n-1 (a prompt and an error each), then the last attempt's entries.
CREATE TEMPORARY TABLE legacy_entry ON COMMIT DROP AS
SELECT e.thread_id, e.work_item_id, e.attempt, e.entry_type, e.payload, e.ord
FROM (
    SELECT s.thread_id, s.work_item_id, a.attempt, 'prompt' AS entry_type,
           jsonb_build_object(
               'function_key', 'rule_stub', 'prompt', coalesce(s.request ->> 'prompt', ''),
               'input', coalesce(s.request -> 'input', '{}'::jsonb),
               'idempotency_key', coalesce(s.request ->> 'idempotency_key', s.identity),
               'org_id', s.request -> 'org_id') AS payload,
           a.attempt * 10 AS ord
    FROM legacy_stub AS s
    CROSS JOIN generate_series(1, greatest(s.attempts, 1)) AS a (attempt)
    UNION ALL
    SELECT s.thread_id, s.work_item_id, a.attempt, 'error',
           jsonb_build_object(
               'kind', 'transient', 'reason', 'unknown', 'disposition', 'retry',
               'attempt', a.attempt,
               'message', 'an earlier attempt of the rule-stub lease: its outcome was not kept '
                          '(recorded when the lease moved onto the ledger)'),
           a.attempt * 10 + 1
    FROM legacy_stub AS s
    CROSS JOIN generate_series(1, s.attempts - 1) AS a (attempt)
    UNION ALL
    SELECT s.thread_id, s.work_item_id, greatest(s.attempts, 1), 'response', s.response,
           greatest(s.attempts, 1) * 10 + 2
    FROM legacy_stub AS s
    WHERE s.response IS NOT NULL
    UNION ALL
    SELECT s.thread_id, s.work_item_id, greatest(s.attempts, 1), 'parse_report',
           jsonb_build_object('ok', true, 'errors', '[]'::jsonb,
                              'response_attempt', greatest(s.attempts, 1),
                              'stub_chars', char_length(s.stub)),
           greatest(s.attempts, 1) * 10 + 3
    FROM legacy_stub AS s
    WHERE s.mode = 'llm'
    UNION ALL
    SELECT s.thread_id, s.work_item_id, greatest(s.attempts, 1), 'mutation_report',
           jsonb_build_object(
               'mutation_id', s.mutation_id::text, 'document_id', s.document_id,
               'operation', 'set_rule_stub', 'base_version', 1, 'result_version', 2,
               'already_applied', false, 'lock_scope', 'cluster:' || s.cluster_id,
               'stub_chars', char_length(s.stub)),
           greatest(s.attempts, 1) * 10 + 4
    FROM legacy_stub AS s
    WHERE s.mode = 'llm'
    UNION ALL
    SELECT s.thread_id, s.work_item_id, greatest(s.attempts, 1), 'error',
           jsonb_strip_nulls(jsonb_build_object(
               'kind', CASE WHEN s.mode = 'superseded' THEN 'canceled'
                            WHEN s.mode = 'failed' THEN 'permanent' ELSE 'transient' END,
               'reason', CASE WHEN s.mode = 'superseded' THEN 'canceled' ELSE 'synthesizer' END,
               'message', left(coalesce(s.last_error,
                                        CASE WHEN s.mode = 'superseded'
                                             THEN 'superseded: the cluster moved on to other content'
                                             ELSE 'the attempt failed' END), 2000),
               'disposition', CASE s.mode WHEN 'failed' THEN 'dead_letter'
                                          WHEN 'superseded' THEN 'canceled' ELSE 'retry' END,
               'attempt', greatest(s.attempts, 1),
               'not_before', CASE WHEN s.mode = 'pending' THEN to_jsonb(s.retry_at) END,
               'dead_letter_reason', CASE WHEN s.mode <> 'failed' THEN NULL
                                          WHEN s.last_error LIKE 'max_attempts_exceeded%'
                                          THEN 'max_attempts_exceeded'
                                          ELSE 'permanent_failure' END)),
           greatest(s.attempts, 1) * 10 + 5
    FROM legacy_stub AS s
    WHERE s.mode IN ('failed', 'superseded') OR (s.mode = 'pending' AND s.retry_at IS NOT NULL)
) AS e;

INSERT INTO work.ledger_entries (entry_id, thread_id, work_item_id, attempt, entry_type,
                                 payload, hash)
SELECT gen_random_uuid(), e.thread_id, e.work_item_id, e.attempt, e.entry_type, e.payload,
       encode(sha256(convert_to(work.canonical_json(e.payload), 'UTF8')), 'hex')
FROM legacy_entry AS e
ORDER BY e.work_item_id, e.ord;

-- Clusters with stub work still to do are evaluated again by the next tick: it holds or
-- publishes them as for any stub in flight, and cancels the work of a content it moved on from.
UPDATE clusters.clusters AS c
SET revision = c.revision + 1
WHERE EXISTS (SELECT 1 FROM legacy_stub AS s WHERE s.cluster_id = c.cluster_id AND s.mode = 'pending');

-- The read path of stubs: the finalized ones, now documents written by the executor.
CREATE OR REPLACE VIEW clusters.rule_stubs AS
    SELECT (d.content ->> 'cluster_id')::uuid AS cluster_id, d.content ->> 'content_hash' AS content_hash,
           d.content ->> 'rule_stub' AS suggested_rule_stub,
           NULL::text AS model, d.updated_at AS generated_at
    FROM work.documents AS d
    WHERE d.doc_type = 'rule_stub' AND d.content ->> 'rule_stub' IS NOT NULL;

-- The lease table and the usage of its calls stay as the archive they are.
REVOKE INSERT, UPDATE ON clusters.rule_stub_leases FROM spectral_producer;
REVOKE INSERT ON clusters.model_usage FROM spectral_producer;
