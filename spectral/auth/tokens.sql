-- API tokens (core.api_tokens, migration 0008). Verification runs as spectral_authenticator,
-- management as spectral_token_admin.

-- name: verify_token
-- A live token by the hash of its clear text; NULL when unknown, revoked or expired.
SELECT token_id, name, scopes
FROM core.api_tokens
WHERE token_hash = $1
  AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > now());

-- name: touch_token
-- last_used_at, at most once a minute per token (no write on most requests).
UPDATE core.api_tokens SET last_used_at = now()
WHERE token_id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute');

-- name: create_token
INSERT INTO core.api_tokens (token_id, name, token_hash, display_prefix, scopes, expires_at)
VALUES ($1, $2, $3, $4, $5::text[], $6)
ON CONFLICT DO NOTHING
RETURNING token_id, name, display_prefix, scopes, created_at, created_by, created_by_login, expires_at,
          revoked_at, last_used_at;

-- name: list_tokens
-- $1: include revoked ones.
SELECT token_id, name, display_prefix, scopes, created_at, created_by, created_by_login, expires_at, revoked_at,
       last_used_at
FROM core.api_tokens
WHERE $1::boolean OR revoked_at IS NULL
ORDER BY created_at, name;

-- name: live_tokens_matching
-- The live tokens named $1 or whose id is $1 (a name may look like another token's id): the
-- caller revokes only when exactly one matches. Locked until the revocation commits.
SELECT token_id, name, display_prefix
FROM core.api_tokens
WHERE revoked_at IS NULL AND (name = $1::text OR token_id::text = lower($1::text))
ORDER BY created_at
FOR UPDATE;

-- name: revoke_token
-- The live token of this id; returns it as revoked now.
UPDATE core.api_tokens SET revoked_at = now()
WHERE revoked_at IS NULL AND token_id = $1
RETURNING token_id, name, display_prefix, scopes, created_at, created_by, created_by_login, expires_at,
          revoked_at, last_used_at;
