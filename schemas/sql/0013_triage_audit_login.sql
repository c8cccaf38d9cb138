-- 0012 the database login of every triage change, beside the principal the surface declared.
--
-- The declared principal (core.current_actor: 'token:NAME' from the API, console and MCP) is the
-- setting spectral.actor, which any database session may set: on its own, anyone holding a
-- login could write a change the trail attributes to someone else's token. The login
-- (session_user: who opened the connection; SECURITY DEFINER and SET ROLE do not change it)
-- cannot be chosen that way, so each row now says both — 'token:ops-alice' through the API's
-- login, or the same name through somebody's own login, which gives the forgery away.
-- Rows written before this migration have no login recorded (NULL).
ALTER TABLE platform.triage_audit ADD COLUMN db_login text NULL;
-- Set as a default afterwards, so existing rows are not rewritten (nor their immutability
-- trigger met); the audit trigger's INSERT leaves the column to its default.
ALTER TABLE platform.triage_audit ALTER COLUMN db_login SET DEFAULT session_user;
