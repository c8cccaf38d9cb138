-- 0008 the operator and service surfaces (HTTP API, MCP server, web console): API tokens hashed
-- at rest with scopes, the acting principal of a transaction, triage status transitions and
-- optimistic concurrency enforced by the database, and the append-only triage audit trail.

DO $roles$
DECLARE
    r text;
BEGIN
    -- spectral_authenticator: what every network surface uses to check a bearer token.
    -- spectral_token_admin: `spectral tokens create | list | revoke`.
    FOREACH r IN ARRAY ARRAY['spectral_authenticator', 'spectral_token_admin']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$roles$;

-- The acting principal of the current transaction: what the surface that runs it declared with
-- set_config('spectral.actor', ..., true) (e.g. 'token:ops-alice'), else the database session's
-- login (psql, a studio, a script), so a change is never anonymous.
CREATE FUNCTION core.current_actor() RETURNS text
LANGUAGE sql STABLE AS $fn$
    SELECT coalesce(nullif(current_setting('spectral.actor', true), ''), 'db:' || session_user)
$fn$;
GRANT EXECUTE ON FUNCTION core.current_actor() TO PUBLIC;

-- API tokens. Only the SHA-256 of a token is stored (tokens are 256 random bits, so a fast hash
-- is enough: there is nothing to brute-force); the clear token is printed once at creation.
-- display_prefix (the first characters) lets an operator recognise a token in a list.
-- The scope vocabulary is fixed here, so a token can never carry a scope nobody checks.
CREATE TABLE core.api_tokens (
    token_id       uuid        PRIMARY KEY,
    name           text        NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$'),
    token_hash     text        NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    display_prefix text        NOT NULL,
    scopes         text[]      NOT NULL CHECK (
        cardinality(scopes) >= 1
        AND scopes <@ ARRAY['work:read', 'work:submit', 'triage:read', 'triage:write',
                            'ops:read', 'ops:redrive']::text[]
    ),
    created_at     timestamptz NOT NULL DEFAULT now(),
    created_by     text        NOT NULL DEFAULT core.current_actor(),
    expires_at     timestamptz NULL,
    revoked_at     timestamptz NULL,
    last_used_at   timestamptz NULL
);
-- One live token per name, so a name in the audit trail points at one credential at a time.
CREATE UNIQUE INDEX api_tokens_one_live_name ON core.api_tokens (name) WHERE revoked_at IS NULL;

REVOKE ALL ON core.api_tokens FROM PUBLIC;
GRANT USAGE ON SCHEMA core TO spectral_authenticator, spectral_token_admin;
GRANT SELECT (token_id, name, token_hash, scopes, expires_at, revoked_at, last_used_at)
    ON core.api_tokens TO spectral_authenticator;
GRANT UPDATE (last_used_at) ON core.api_tokens TO spectral_authenticator;
GRANT SELECT, INSERT ON core.api_tokens TO spectral_token_admin;
GRANT UPDATE (revoked_at) ON core.api_tokens TO spectral_token_admin;

-- Threads record who asked for them (the principal of the command's transaction).
ALTER TABLE work.threads ADD COLUMN requested_by text NULL DEFAULT core.current_actor();

-- =============================================================================================
-- Triage: transitions, version, audit trail
-- =============================================================================================

-- The triage status policy (consumers/rule_candidates/transitions.py; a test proves both agree).
CREATE TABLE platform.triage_transitions (
    from_status text NOT NULL,
    to_status   text NOT NULL,
    PRIMARY KEY (from_status, to_status),
    CHECK (from_status <> to_status)
);
INSERT INTO platform.triage_transitions (from_status, to_status) VALUES
    ('pending', 'in_review'), ('pending', 'dismissed'), ('pending', 'resolved'),
    ('in_review', 'pending'), ('in_review', 'dismissed'), ('in_review', 'resolved'),
    ('dismissed', 'pending'), ('dismissed', 'in_review'),
    ('resolved', 'pending'), ('resolved', 'in_review');
REVOKE ALL ON platform.triage_transitions FROM PUBLIC;
GRANT SELECT ON platform.triage_transitions TO spectral_operator;

-- triage_version counts the changes of the operator columns: the HTTP API's ETag and the
-- console's hidden field, so an edit made against an older version is refused (optimistic
-- concurrency). Snapshot updates by the projection do not change it.
ALTER TABLE platform.rule_candidates_pending
    ADD COLUMN triage_version bigint NOT NULL DEFAULT 0 CHECK (triage_version >= 0);

-- Whoever updates the operator columns (the API, the CLI, SQL typed by hand): an illegal status
-- change is refused, and any real change bumps triage_version. The trigger fires only when one
-- of these columns is in the SET list, which the projection never does.
CREATE FUNCTION platform.rule_candidates_guard_triage() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    allowed text;
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status AND NOT EXISTS (
        SELECT 1 FROM platform.triage_transitions
        WHERE from_status = OLD.status AND to_status = NEW.status
    ) THEN
        SELECT string_agg(to_status, ', ' ORDER BY to_status) INTO allowed
        FROM platform.triage_transitions WHERE from_status = OLD.status;
        RAISE EXCEPTION 'cannot move cluster % from % to %', OLD.cluster_id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation',
                  CONSTRAINT = 'rule_candidates_triage_transition',
                  DETAIL = format('allowed from %s: %s', OLD.status, coalesce(allowed, 'none'));
    END IF;
    IF (NEW.status, NEW.assigned_to, NEW.notes, NEW.deleted_at)
        IS DISTINCT FROM (OLD.status, OLD.assigned_to, OLD.notes, OLD.deleted_at) THEN
        NEW.triage_version := OLD.triage_version + 1;
    ELSE
        NEW.triage_version := OLD.triage_version;
    END IF;
    RETURN NEW;
END
$fn$;

CREATE TRIGGER rule_candidates_guard_triage
    BEFORE UPDATE OF status, assigned_to, notes, deleted_at ON platform.rule_candidates_pending
    FOR EACH ROW EXECUTE FUNCTION platform.rule_candidates_guard_triage();

-- The audit trail: one row per change of the operator columns, written by the trigger below and
-- by nothing else (no role may insert; the function runs as its owner), never changed after.
CREATE TABLE platform.triage_audit (
    audit_id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id      uuid        NOT NULL,
    triage_version  bigint      NOT NULL,
    changed_at      timestamptz NOT NULL DEFAULT now(),
    actor           text        NOT NULL,
    from_status     text        NOT NULL,
    to_status       text        NOT NULL,
    from_assignee   uuid        NULL,
    to_assignee     uuid        NULL,
    from_notes      text        NULL,
    to_notes        text        NULL,
    from_deleted_at timestamptz NULL,
    to_deleted_at   timestamptz NULL,
    UNIQUE (cluster_id, triage_version)
);

CREATE FUNCTION platform.rule_candidates_audit_triage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    INSERT INTO platform.triage_audit
        (cluster_id, triage_version, actor, from_status, to_status, from_assignee, to_assignee,
         from_notes, to_notes, from_deleted_at, to_deleted_at)
    VALUES (NEW.cluster_id, NEW.triage_version, core.current_actor(), OLD.status, NEW.status,
            OLD.assigned_to, NEW.assigned_to, OLD.notes, NEW.notes, OLD.deleted_at, NEW.deleted_at);
    RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION platform.rule_candidates_audit_triage() FROM PUBLIC;

CREATE TRIGGER rule_candidates_audit_triage
    AFTER UPDATE OF status, assigned_to, notes, deleted_at ON platform.rule_candidates_pending
    FOR EACH ROW WHEN (OLD.triage_version IS DISTINCT FROM NEW.triage_version)
    EXECUTE FUNCTION platform.rule_candidates_audit_triage();

CREATE FUNCTION platform.refuse_audit_change() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'platform.triage_audit is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$fn$;
CREATE TRIGGER triage_audit_immutable_rows
    BEFORE UPDATE OR DELETE ON platform.triage_audit
    FOR EACH ROW EXECUTE FUNCTION platform.refuse_audit_change();
CREATE TRIGGER triage_audit_no_truncate
    BEFORE TRUNCATE ON platform.triage_audit
    FOR EACH STATEMENT EXECUTE FUNCTION platform.refuse_audit_change();

REVOKE ALL ON platform.triage_audit FROM PUBLIC;
GRANT SELECT ON platform.triage_audit TO spectral_operator;
