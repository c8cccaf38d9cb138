"""Replay dry runs over HTTP take the scope that reads lag, but each holds a database
transaction (and the row locks of what it changes) and a Kafka consumer for as long as it reads:
at most one runs per deployment at a time, a second is told to come back; and a login that may
not act as the deployment's role is told what it lacks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI

from spectral.api.app import build_app
from spectral.auth.scopes import OPS_READ
from spectral.cli.api import compose_app, deployment_topics, resources_for
from spectral.devstack import Endpoints
from spectral.ops import api as ops_api
from spectral.ops.views import Deployment
from spectral.replay.range import Start, Stop
from spectral.replay.replay import Mode, ReplayReport
from spectral.settings import Settings
from tests.integration.api.support import mint
from tests.support import database_login

pytestmark = pytest.mark.integration


@asynccontextmanager
async def lag_reader(app: FastAPI, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` started, and a client of it holding an ops:read token."""
    token = await mint(database_url, "lag-reader", OPS_READ)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://api",
            headers={"Authorization": f"Bearer {token}"},
        ) as http,
    ):
        yield http


async def test_one_dry_run_per_deployment_at_a_time(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    runs = 0

    async def slow_dry_run(start: Start, stop: Stop | None) -> ReplayReport:
        del start, stop
        nonlocal runs
        runs += 1
        started.set()
        await release.wait()
        return ReplayReport(
            replay_id="r",
            consumer="slow",
            mode=Mode.DRY_RUN,
            ranges=(),
            counts={},
            records=0,
            complete=True,
            committed=False,
            seconds=0.0,
        )

    resources = resources_for(settings, Endpoints(kafka_bootstrap, database_url))
    deployments = [Deployment("slow", "slow", ("t",), slow_dry_run)]
    app = build_app(resources, routers=[ops_api.router(resources, deployments)])
    async with lag_reader(app, database_url) as http:
        path = "/ops/consumers/slow/replay-dry-run"
        first = asyncio.create_task(http.post(path, json={"from_beginning": True}))
        await asyncio.wait_for(started.wait(), timeout=30)
        try:  # answered at once, not queued behind the first
            second = await asyncio.wait_for(
                http.post(path, json={"from_beginning": True}), timeout=10
            )
        finally:
            release.set()
        assert second.status_code == 409, second.text
        assert second.json()["type"] == "/problems/dry-run-busy"
        assert "retry-after" in second.headers
        assert (await first).status_code == 200
        again = await http.post(path, json={"from_beginning": True})
        assert again.status_code == 200, again.text
    assert runs == 2


async def test_a_dry_run_the_login_cannot_run_says_what_it_needs(
    settings: Settings, database_url: str, kafka_bootstrap: str
) -> None:
    """A dry run runs the deployment's handler as its role (rolled back): an API login granted
    only the surface roles cannot, and is told so — not a bare 500."""
    roles = ("spectral_authenticator", "spectral_operator", "spectral_producer")
    async with database_login(database_url, *roles) as (login, url):
        endpoints = Endpoints(kafka_bootstrap, url)
        app = compose_app(settings, endpoints, await deployment_topics(settings, url))
        async with lag_reader(app, database_url) as http:
            done = await http.post(
                "/ops/consumers/rule-candidates/replay-dry-run", json={"from_beginning": True}
            )
        assert done.status_code == 501, done.text
        assert done.json()["type"] == "/problems/dry-run-not-configured"
        assert login not in done.text
