"""API tokens: minted with 256 random bits, stored as their SHA-256 only, checked per request.

A token reads ``spt_`` followed by 43 URL-safe characters. It is printed once, when it is
created; the database keeps its hash, a fingerprint of the hash (``sha256:`` and 8 hex digits,
what ``spectral tokens list`` shows: no character of the secret), its name and scopes. Verification
is one indexed lookup by hash (no cache, so a revocation takes effect on the next request).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final
from uuid import UUID

import asyncpg

from spectral.auth.scopes import installed_vocabulary
from spectral.db.connect import guarded
from spectral.db.queries import load_queries
from spectral.declaration import Scope
from spectral.errors import PermanentError

AUTHENTICATOR_ROLE: Final = "spectral_authenticator"
TOKEN_ADMIN_ROLE: Final = "spectral_token_admin"  # noqa: S105 - a role name
TOKEN_PREFIX: Final = "spt_"  # noqa: S105 - the marker every token starts with
_SECRET_BYTES: Final = 32
_FINGERPRINT_HEX: Final = 8
_MAX_TOKEN_CHARS: Final = 200
_SQL: Final = load_queries(Path(__file__).with_name("tokens.sql"))
NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"
"""Token names (also a CHECK constraint of core.api_tokens.name)."""


class TokenNameTakenError(PermanentError):
    """A live token already has this name."""


class AmbiguousTokenError(PermanentError):
    """What names the token to revoke matches several live tokens (a name that reads like
    another token's id): nothing is revoked."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's name and id and what it may do."""

    token_id: UUID
    name: str
    scopes: frozenset[str]
    """The scopes the token holds, those they imply included."""

    @property
    def actor(self) -> str:
        """How the principal is recorded (audit trail, threads): ``token:NAME``."""
        return f"token:{self.name}"

    def allows(self, scope: Scope | str) -> bool:
        return str(scope) in self.scopes


@dataclass(frozen=True, slots=True)
class TokenInfo:
    token_id: UUID
    name: str
    fingerprint: str
    """``sha256:`` and the first hex digits of the token's hash: recognisable, no secret."""
    scopes: tuple[str, ...]
    created_at: datetime
    created_by: str
    """Who the creating session declared itself (cli:USER, from the environment)."""
    created_by_login: str | None
    """The database login that created it (cannot be declared; None before it was recorded)."""
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "token_id": str(self.token_id),
            "name": self.name,
            "fingerprint": self.fingerprint,
            "scopes": list(self.scopes),
            "created_at": self.created_at.isoformat(),
            "created_by": self.created_by,
            "created_by_login": self.created_by_login,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
        }


@dataclass(frozen=True, slots=True)
class NewToken:
    info: TokenInfo
    token: str
    """The clear token: shown once, never stored."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def fingerprint(token: str) -> str:
    """How lists name a token: a prefix of its hash, never a character of the token."""
    return f"sha256:{token_hash(token)[:_FINGERPRINT_HEX]}"


def looks_like_token(token: str) -> bool:
    """A cheap shape check before any database round trip."""
    return token.startswith(TOKEN_PREFIX) and len(token) <= _MAX_TOKEN_CHARS and token.isascii()


class TokenVerifier:
    """Checks bearer tokens against ``core.api_tokens`` (a pool acting as the authenticator)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def verify(self, token: str) -> Principal | None:
        """The principal of a live token; None for anything else."""
        if not looks_like_token(token):
            return None
        digest = token_hash(token)

        async def run() -> Principal | None:
            async with self._pool.acquire() as conn:
                row = await conn.fetchrow(_SQL["verify_token"], digest)
                if row is None:
                    return None
                await conn.execute(_SQL["touch_token"], row["token_id"])
            return Principal(
                row["token_id"], row["name"], installed_vocabulary().effective(row["scopes"])
            )

        return await guarded("verify token", run)


class TokenAdmin:
    """``spectral tokens``: create, list, revoke (a connection acting as the token admin)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def create(
        self, name: str, scopes: Sequence[Scope | str], *, expires_at: datetime | None = None
    ) -> NewToken:
        """A new token holding ``scopes``, each one registered (PermanentError otherwise)."""
        if not re.fullmatch(NAME_PATTERN, name):
            raise PermanentError(f"token name {name!r} must match {NAME_PATTERN}")
        try:
            names = installed_vocabulary().parse(str(s) for s in scopes)
        except ValueError as exc:
            raise PermanentError(str(exc)) from None
        token = TOKEN_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)
        row = await guarded(
            "create token",
            lambda: self._conn.fetchrow(
                _SQL["create_token"],
                uuid.uuid4(),
                name,
                token_hash(token),
                fingerprint(token),
                list(names),
                expires_at,
            ),
        )
        if row is None:
            raise TokenNameTakenError(
                f"a live token is already named {name!r}; revoke it first or pick another name"
            )
        return NewToken(_info(row), token)

    async def list(self, *, include_revoked: bool = False) -> list[TokenInfo]:
        rows = await guarded(
            "list tokens", lambda: self._conn.fetch(_SQL["list_tokens"], include_revoked)
        )
        return [_info(r) for r in rows]

    async def revoke(self, name_or_id: str) -> TokenInfo | None:
        """Revoke the one live token of this name or id; None when there is none, and
        AmbiguousTokenError (nothing revoked) when several match."""

        async def run() -> asyncpg.Record | None:
            async with self._conn.transaction():
                matches = await self._conn.fetch(_SQL["live_tokens_matching"], name_or_id)
                if len(matches) > 1:
                    listed = ", ".join(
                        f"{m['name']} (token_id {m['token_id']}, {m['display_prefix']})"
                        for m in matches
                    )
                    raise AmbiguousTokenError(
                        f"{name_or_id!r} matches {len(matches)} live tokens: {listed}; nothing "
                        "was revoked. Revoke one by its token_id (spectral tokens list)"
                    )
                if not matches:
                    return None
                row: asyncpg.Record | None = await self._conn.fetchrow(
                    _SQL["revoke_token"], matches[0]["token_id"]
                )
                return row

        row = await guarded("revoke token", run)
        return _info(row) if row is not None else None


def _info(row: asyncpg.Record) -> TokenInfo:
    return TokenInfo(
        token_id=row["token_id"],
        name=row["name"],
        fingerprint=row["display_prefix"],
        scopes=tuple(row["scopes"]),
        created_at=row["created_at"],
        created_by=row["created_by"],
        created_by_login=row["created_by_login"],
        expires_at=row["expires_at"],
        revoked_at=row["revoked_at"],
        last_used_at=row["last_used_at"],
    )
