-- Token scopes are declared by plugins (spectral's built-in features among them: work:*,
-- triage:*; the framework keeps ops:*), so the database no longer fixes their vocabulary:
-- `spectral tokens create` refuses a scope no installed plugin registers. The database keeps
-- the shape every scope has (area:verb, as spectral/declaration.py states it), at least one
-- scope and no NULL. Tokens made with the scopes of before keep working unchanged.
ALTER TABLE core.api_tokens
    DROP CONSTRAINT api_tokens_scopes_check,
    ADD CONSTRAINT api_tokens_scopes_check CHECK (
        cardinality(scopes) BETWEEN 1 AND 64
        AND array_position(scopes, NULL) IS NULL
        AND array_to_string(scopes, ' ')
            ~ '^[a-z][a-z0-9_-]{0,30}:[a-z][a-z0-9_-]{0,30}( [a-z][a-z0-9_-]{0,30}:[a-z][a-z0-9_-]{0,30})*$'
    );
