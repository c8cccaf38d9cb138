"""The database pools a surface acts through, opened at start-up and closed at shutdown.

Each pool's sessions act as one role that can do no more than its callers need (invariant 8):
``operator`` (triage, reads of work, the redrive record), ``producer`` (work commands) and
``authenticator`` (token checks only). Routers receive this object when they are built and
reach the pools only once the app has started, as they reach the key that signs their cursors
(:attr:`Resources.cursors`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import asyncpg

from spectral.api.cursor import MIN_KEY_BYTES, Cursors
from spectral.api.settings import ApiSettings
from spectral.auth.tokens import AUTHENTICATOR_ROLE, TokenVerifier
from spectral.db.connect import connect, create_pool, guarded
from spectral.db.queries import load_queries
from spectral.errors import ConfigurationError, TransientError
from spectral.settings import Settings

OPERATOR_ROLE: Final = "spectral_operator"
PRODUCER_ROLE: Final = "spectral_producer"
API_ROLE: Final = "spectral_api"
"""The role to grant the API's own login (every role above, nothing of the owner's)."""
_SQL: Final = load_queries(Path(__file__).with_name("resources.sql"))


@dataclass
class Resources:
    settings: Settings
    database_url: str
    kafka_bootstrap: str
    operator_database_url: str | None = None
    """A login that already is an operator (SPECTRAL_OPERATOR_DATABASE_URL), if any."""
    submits_work: bool = True
    """Whether the surface submits work (opens the ``producer`` pool); a surface that only reads
    and triages (``spectral mcp``) never holds a session that could write work or the outbox."""
    _pools: dict[str, asyncpg.Pool] = field(default_factory=dict)
    _cursors: Cursors | None = None

    async def open(self) -> None:
        self._pools["authenticator"] = await create_pool(
            self.database_url, role=AUTHENTICATOR_ROLE, max_size=4
        )
        self._cursors = Cursors(await self._cursor_key())
        if self.operator_database_url is not None:
            self._pools["operator"] = await create_pool(self.operator_database_url, max_size=8)
        else:
            self._pools["operator"] = await create_pool(
                self.database_url, role=OPERATOR_ROLE, max_size=8
            )
        if self.submits_work:
            self._pools["producer"] = await create_pool(
                self.database_url, role=PRODUCER_ROLE, max_size=8
            )

    async def _cursor_key(self) -> bytes:
        configured = ApiSettings.of(self.settings).cursor_key
        if configured is not None:
            key = configured.get_secret_value().encode()
            if len(key) < MIN_KEY_BYTES:
                raise ConfigurationError(
                    f"SPECTRAL_CURSOR_KEY must have at least {MIN_KEY_BYTES} bytes"
                )
            return key
        pool = self._pools["authenticator"]

        async def read() -> bytes | None:
            async with pool.acquire() as conn:
                found: bytes | None = await conn.fetchval(_SQL["surface_key"], "cursor")
                return found

        stored = await guarded("read the cursor key", read)
        if stored is None:
            raise ConfigurationError("core.surface_keys has no cursor key: run spectral db migrate")
        return stored

    async def close(self) -> None:
        self._cursors = None
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            with contextlib.suppress(Exception):
                await pool.close()

    async def overprivileged(self) -> str | None:
        """Why the API's login can do more than the API needs (a superuser, or a member of
        the role that owns the schemas: it could alter or drop anything); None otherwise."""
        conn = await connect(self.database_url)
        try:
            row = await guarded("check the API's login", lambda: conn.fetchrow(_SQL["login"]))
        finally:
            await conn.close()
        if row is None:
            return None
        if row["superuser"]:
            return f"its login {row['login']!r} is a superuser"
        if row["owner"]:
            return f"its login {row['login']!r} owns the schemas (or is a member of their owner)"
        return None

    def _pool(self, name: str) -> asyncpg.Pool:
        pool = self._pools.get(name)
        if pool is None:
            raise TransientError("the service is starting or stopping")
        return pool

    @property
    def cursors(self) -> Cursors:
        """Signs and checks the cursors of every listing (the key read at start-up)."""
        if self._cursors is None:
            raise TransientError("the service is starting or stopping")
        return self._cursors

    @property
    def operator(self) -> asyncpg.Pool:
        return self._pool("operator")

    @property
    def producer(self) -> asyncpg.Pool:
        return self._pool("producer")

    @property
    def verifier(self) -> TokenVerifier:
        return TokenVerifier(self._pool("authenticator"))
