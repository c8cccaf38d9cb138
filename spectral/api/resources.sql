-- The API's own login (resources.py), before any role is assumed.

-- name: login
-- Is the session's login a superuser, or a member of the owner of the core schema?
SELECT session_user AS login,
       r.rolsuper AS superuser,
       pg_has_role(session_user, n.nspowner, 'MEMBER') AS owner
FROM pg_roles AS r, pg_namespace AS n
WHERE r.rolname = session_user AND n.nspname = 'core'

-- name: surface_key
-- A key the surfaces share (core.surface_keys), as the authenticator reads it.
SELECT secret FROM core.surface_keys WHERE name = $1
