"""The composed HTTP surface (spectral/cli/api.py) over ASGI against this test's database and
broker, tokens minted through the real token admin, and rule candidates seeded through the real
projection."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import httpx
import uvicorn
from fastapi import FastAPI

from consumers.rule_candidates.transitions import Status
from spectral.auth.tokens import TOKEN_ADMIN_ROLE, TokenAdmin
from spectral.cli.api import compose_app, deployment_topics
from spectral.db.connect import connect
from spectral.declaration import Scope
from spectral.devstack import Endpoints
from spectral.devstack.ports import free_port
from spectral.settings import Settings
from tests.integration.rule_candidates.helpers import (
    apply,
    deliveries,
    new_cluster,
    new_handler,
    snapshot,
)


async def mint(database_url: str, name: str, *scopes: Scope) -> str:
    conn = await connect(database_url, role=TOKEN_ADMIN_ROLE)
    try:
        made = await TokenAdmin(conn).create(name, scopes)
    finally:
        await conn.close()
    return made.token


@dataclass
class Surface:
    app: FastAPI
    http: httpx.AsyncClient
    database_url: str

    async def token(self, name: str, *scopes: Scope) -> str:
        return await mint(self.database_url, name, *scopes)

    async def client(self, *scopes: Scope, name: str | None = None) -> httpx.AsyncClient:
        """A client of the same app sending a new token with ``scopes``."""
        token = await self.token(
            name or "t-" + "-".join(s.name.replace(":", "_") for s in scopes), *scopes
        )
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app),
            base_url="http://api",
            headers={"Authorization": f"Bearer {token}"},
        )


@contextmanager
def served(app: FastAPI) -> Iterator[int]:
    """``app`` served by uvicorn on a real socket, in a thread of its own (its own event loop
    and lifespan); yields the port."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, port=port, log_level="warning", lifespan="on", proxy_headers=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive(), "the API did not start"
        assert time.monotonic() < deadline, "the API did not start within 60 s"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@asynccontextmanager
async def surface(
    settings: Settings,
    database_url: str,
    kafka_bootstrap: str,
    *,
    login_url: str | None = None,
    **options: Any,
) -> AsyncIterator[Surface]:
    """The composed app acting through ``login_url`` (default: ``database_url``, the owner's;
    tokens are minted through ``database_url``)."""
    endpoints = Endpoints(kafka_bootstrap, login_url or database_url)
    topics = await deployment_topics(settings, database_url)
    app = compose_app(settings, endpoints, topics, **options)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as http,
    ):
        yield Surface(app, http, database_url)


async def seed_clusters(
    database_url: str, count: int, *, severities: Sequence[str] = ("high", "medium", "low")
) -> list[UUID]:
    """``count`` clusters through the real projection, spread over severities and times."""
    ids = [new_cluster() for _ in range(count)]
    envelopes = [
        snapshot(cid, minutes=i, failures=3 + i, severity=severities[i % len(severities)])  # type: ignore[arg-type]
        for i, cid in enumerate(ids)
    ]
    await apply(database_url, new_handler(), deliveries(*envelopes))
    return ids


ALL_STATUSES = [s.value for s in Status]
