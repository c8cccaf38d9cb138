-- One login per deployment, each a member of the one role its deployment assumes and nothing
-- else: run by the owner after `spectral db migrate` (which creates the roles), as
--
--   psql "$OWNER_URL" -v ON_ERROR_STOP=1 -v password="$LOGIN_PASSWORD" -f deploy/postgres/logins.sql
--
-- compose.yaml runs it as the one-shot service `logins`. Idempotent: a login that exists is
-- left as it is (its password too). NOINHERIT: a bare session of a login can do nothing; a
-- deployment's connections assume its role (SET ROLE) as they open. Production deployments
-- would give each login a password of its own (or certificate authentication) instead of the
-- one `password` here.
--
--   login                          role it assumes        deployment
--   spectral_relay_login           spectral_relay         spectral outbox relay
--   spectral_projector_login       spectral_projector     spectral consume rule-candidates
--   spectral_executor_login        spectral_executor      spectral consume work-executor
--   spectral_producer_login        spectral_producer      spectral clusters tick / ingest
--   spectral_maintainer_login      spectral_maintainer    spectral maintenance
--   spectral_api_login             spectral_api           spectral api (and spectral mcp)

SELECT format(
    'CREATE ROLE %I LOGIN NOINHERIT PASSWORD %L IN ROLE %I',
    deployment.login, :'password', deployment.role
)
FROM (VALUES
    ('spectral_relay_login', 'spectral_relay'),
    ('spectral_projector_login', 'spectral_projector'),
    ('spectral_executor_login', 'spectral_executor'),
    ('spectral_producer_login', 'spectral_producer'),
    ('spectral_maintainer_login', 'spectral_maintainer'),
    ('spectral_api_login', 'spectral_api')
) AS deployment (login, role)
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = deployment.login)
\gexec
