-- deploy-tracker's tables, its projector role, and the role's registration as the consumer
-- `deploy-tracker` (row-level security of core.event_handled keeps the role to that name).
CREATE SCHEMA deploys;

CREATE TABLE deploys.deploys (
    deploy_id   text PRIMARY KEY,
    service     text NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'rolled_back')),
    finished_at timestamptz NOT NULL
);

CREATE TABLE deploys.service_outcomes (
    service     text NOT NULL,
    outcome     text NOT NULL,
    deploys     bigint NOT NULL CHECK (deploys >= 0),
    last_at     timestamptz NOT NULL,
    PRIMARY KEY (service, outcome)
);

DO $r$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'deploys_projector') THEN
        CREATE ROLE deploys_projector NOLOGIN;
    END IF;
END $r$;
GRANT spectral_consumer TO deploys_projector;
GRANT USAGE ON SCHEMA deploys TO deploys_projector;
-- DELETE: a rebuild empties the projection before the topic fills it again.
GRANT SELECT, INSERT, UPDATE, DELETE ON deploys.deploys, deploys.service_outcomes
    TO deploys_projector;
INSERT INTO core.consumer_roles (consumer, role) VALUES ('deploy-tracker', 'deploys_projector');
