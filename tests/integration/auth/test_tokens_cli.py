"""`spectral tokens create | list | revoke` as an operator types them, and what the API then
accepts: a token works at once, is never stored or listed in clear, and stops working the
moment it is revoked."""

from __future__ import annotations

import asyncio
import hashlib
import json

import asyncpg
import pytest

from spectral.auth.scopes import OPS_READ
from spectral.auth.tokens import TOKEN_ADMIN_ROLE, AmbiguousTokenError, TokenAdmin
from spectral.db.connect import connect
from spectral.settings import Settings
from tests.integration.api.support import surface
from tests.integration.replay.support import spectral_cli

pytestmark = pytest.mark.integration


async def _cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    done = await asyncio.to_thread(spectral_cli, env, *args)
    return done.returncode, done.stdout, done.stderr


async def test_create_use_list_and_revoke_a_token(
    settings: Settings, database_url: str, kafka_bootstrap: str, spectral_env: dict[str, str]
) -> None:
    code, out, err = await _cli(
        spectral_env, "tokens", "create", "--name", "ops-dana", "--scope", "triage:read"
    )
    assert code == 0, err
    token = out.strip()
    assert token.startswith("spt_")
    assert "shown once" in err
    async with surface(settings, database_url, kafka_bootstrap) as s:
        auth = {"Authorization": f"Bearer {token}"}
        assert (await s.http.get("/clusters", headers=auth)).status_code == 200
        assert (await s.http.get("/ops/consumers", headers=auth)).status_code == 403

        code, out, _ = await _cli(spectral_env, "tokens", "list", "--json")
        assert code == 0
        listed = json.loads(out)
        assert [t["name"] for t in listed] == ["ops-dana"]
        assert listed[0]["scopes"] == ["triage:read"]
        assert listed[0]["last_used_at"] is not None
        assert listed[0]["created_by"].startswith("cli:")
        # No part of the secret: not its first characters (which ended up in lists before), not
        # any 6 characters of it; a fingerprint of its hash instead.
        secret = token.removeprefix("spt_")
        assert not any(secret[i : i + 6] in out for i in range(len(secret) - 5))
        assert (
            listed[0]["fingerprint"] == "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:8]
        )
        code, text, _ = await _cli(spectral_env, "tokens", "list")
        assert code == 0
        assert not any(secret[i : i + 6] in text for i in range(len(secret) - 5))
        assert listed[0]["fingerprint"] in text

        # One live token per name; unknown scopes and bad names are refused.
        code, _, err = await _cli(
            spectral_env, "tokens", "create", "--name", "ops-dana", "--scope", "ops:read"
        )
        assert code == 1
        assert "already named" in err
        code, _, err = await _cli(
            spectral_env, "tokens", "create", "--name", "x", "--scope", "root"
        )
        assert code == 2
        assert "unknown scope 'root'" in err
        code, _, err = await _cli(
            spectral_env, "tokens", "create", "--name", "has space", "--scope", "ops:read"
        )
        assert code == 1
        assert "must match" in err
        code, _, err = await _cli(
            spectral_env,
            "tokens",
            "create",
            "--name",
            "far",
            "--scope",
            "ops:read",
            "--expires-in-days",
            "99999999",
        )
        assert code == 2, err
        assert "Traceback" not in err

        code, out, _ = await _cli(spectral_env, "tokens", "revoke", "ops-dana")
        assert code == 0
        assert "revoked ops-dana" in out
        assert (await s.http.get("/clusters", headers=auth)).status_code == 401
        code, _, err = await _cli(spectral_env, "tokens", "revoke", "ops-dana")
        assert code == 1
        code, out, _ = await _cli(spectral_env, "tokens", "list", "--all", "--json")
        assert json.loads(out)[0]["revoked_at"] is not None
    owner = await asyncpg.connect(database_url)
    try:
        stored = repr([dict(r) for r in await owner.fetch("SELECT * FROM core.api_tokens")])
    finally:
        await owner.close()
    assert token not in stored


async def test_revoke_refuses_what_matches_several_live_tokens(database_url: str) -> None:
    """A name may read like another token's id: revoking by that text must not revoke both
    (nor an arbitrary one of them); the id of either still works, in any case."""
    conn = await connect(database_url, role=TOKEN_ADMIN_ROLE)
    try:
        admin = TokenAdmin(conn)
        first = await admin.create("first", [OPS_READ])
        lookalike = await admin.create(str(first.info.token_id), [OPS_READ])
        with pytest.raises(AmbiguousTokenError, match="matches 2 live tokens"):
            await admin.revoke(str(first.info.token_id))
        assert {t.name for t in await admin.list()} == {"first", lookalike.info.name}

        revoked = await admin.revoke(str(lookalike.info.token_id).upper())
        assert revoked is not None
        assert revoked.token_id == lookalike.info.token_id
        # Now the text matches one live token only: the first, by its id.
        again = await admin.revoke(str(first.info.token_id))
        assert again is not None
        assert again.name == "first"
        assert await admin.list() == []
    finally:
        await conn.close()
