-- 0020 the network surfaces' shared keys, and token fingerprints.
-- The key that signs pagination cursors (HMAC) is made at random here once, so every replica of the API and the MCP server signs and checks cursors
-- alike with no setting to distribute (SPECTRAL_CURSOR_KEY, when set, is used instead). Only the
-- authenticator, which every surface holds, reads it; nobody writes it but the owner.
CREATE TABLE core.surface_keys (
    name       text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z_]{0,30}$'),
    secret     bytea       NOT NULL CHECK (octet_length(secret) >= 16),
    created_at timestamptz NOT NULL DEFAULT now()
);
-- 2 x 122 random bits (gen_random_uuid draws from the server's strong random source).
INSERT INTO core.surface_keys (name, secret)
VALUES ('cursor', decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

REVOKE ALL ON core.surface_keys FROM PUBLIC;
GRANT SELECT (name, secret) ON core.surface_keys TO spectral_authenticator;

-- A token is recognised in `spectral tokens list` by a fingerprint of its hash, no longer by its
-- first characters: those were part of the secret. The column keeps its name; the rows made
-- before this migration get the fingerprint too (the hash reveals nothing of the token).
UPDATE core.api_tokens SET display_prefix = 'sha256:' || left(token_hash, 8);
ALTER TABLE core.api_tokens
    ADD CONSTRAINT api_tokens_display_is_a_fingerprint CHECK (display_prefix ~ '^sha256:[0-9a-f]{8}$');
