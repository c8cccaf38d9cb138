-- 0014 the database login beside every declared creator (core.api_tokens.created_by and
-- work.threads.requested_by, as 0013 did for the triage audit), and spectral_api, the role the
-- HTTP API's own login is granted so that it need not run as the owner.
--
-- created_by and requested_by default to core.current_actor(), the setting spectral.actor that
-- the surface running the transaction declares ('token:NAME' from the API, 'cli:USER' from
-- `spectral tokens`, where USER is whatever the environment says) and that any session may set
-- to anything. The login (session_user: who opened the connection; SET ROLE and SECURITY
-- DEFINER do not change it) cannot be chosen that way. A trigger writes it, so a role allowed to
-- INSERT the row cannot supply another value, and keeps it on UPDATE. Rows written before this
-- migration have none (NULL).
ALTER TABLE core.api_tokens ADD COLUMN created_by_login text NULL;
ALTER TABLE work.threads ADD COLUMN requested_by_login text NULL;

-- The trigger's argument names the column: the login on INSERT, the old value on UPDATE.
CREATE FUNCTION core.stamp_login() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    login jsonb := CASE TG_OP
        WHEN 'INSERT' THEN to_jsonb(session_user::text)
        ELSE to_jsonb(OLD) -> TG_ARGV[0]
    END;
BEGIN
    NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[0], login));
    RETURN NEW;
END
$fn$;

CREATE TRIGGER api_tokens_created_by_login
    BEFORE INSERT OR UPDATE ON core.api_tokens
    FOR EACH ROW EXECUTE FUNCTION core.stamp_login('created_by_login');
CREATE TRIGGER threads_requested_by_login
    BEFORE INSERT OR UPDATE ON work.threads
    FOR EACH ROW EXECUTE FUNCTION core.stamp_login('requested_by_login');

-- spectral_api: what the HTTP API (and console) needs, and nothing else — it checks tokens as
-- spectral_authenticator, triages and reads as spectral_operator and submits work as
-- spectral_producer, each pool assuming its role (spectral/api/resources.py). Never the token
-- admin, the maintainer, the relay, nor the owner's DDL, TRUNCATE or role changes. Grant it to
-- the API's own login instead of running the API as the owner:
--   CREATE ROLE spectral_api_login LOGIN NOINHERIT PASSWORD '...' IN ROLE spectral_api;
-- (NOINHERIT: the bare session holds no privilege until a pool assumes its role.) A replay dry
-- run acts as the deployment's own role: grant spectral_projector / spectral_executor to that
-- login as well to offer it (else the endpoint answers 501).
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'spectral_api') THEN
        CREATE ROLE spectral_api NOLOGIN;
    END IF;
END
$roles$;
GRANT spectral_authenticator, spectral_operator, spectral_producer TO spectral_api;
