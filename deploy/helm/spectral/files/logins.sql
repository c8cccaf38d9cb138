-- One deployment's login, run by the chart's setup hook as the schema owner after the
-- migrations (which create the roles), once per login:
--
--   LOGIN_PASSWORD=... psql "$OWNER_URL" -X -v ON_ERROR_STOP=1 -v login=L -v role=R -f logins.sql
--
-- The password comes from the environment, never a command line. The login is created when
-- missing — NOINHERIT, a member of the one role its deployment assumes, as
-- deploy/postgres/logins.sql creates them for compose.yaml — and its password is set each time,
-- so a password changed in the Secret takes effect at the next upgrade.
\getenv password LOGIN_PASSWORD
SELECT format('CREATE ROLE %I LOGIN NOINHERIT IN ROLE %I', :'login', :'role')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'login')
\gexec
SELECT format('ALTER ROLE %I LOGIN NOINHERIT PASSWORD %L', :'login', :'password')
\gexec
SELECT format('GRANT %I TO %I', :'role', :'login')
WHERE NOT pg_has_role(:'login', :'role', 'MEMBER')
\gexec
