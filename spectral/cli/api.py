"""`spectral api`: the HTTP surface, composed here (the composition root).

One app serves the JSON API (work, triage, operations), its OpenAPI document with local docs,
and the web console. The routers are built beside their domains — producers/work/api.py,
consumers/rule_candidates/api.py, spectral/ops/api.py and their console pages — and only this
module names them all: ``spectral`` itself never imports ``producers`` or ``consumers``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated

import typer
import uvicorn
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from consumers.rule_candidates import api as triage_api
from consumers.rule_candidates import console as triage_console
from producers.work import api as work_api
from producers.work import console as work_console
from spectral.api.app import build_app
from spectral.api.guard import DEFAULT_MAX_BODY_BYTES
from spectral.api.resources import API_ROLE, Resources
from spectral.cli._common import (
    EXIT_UNAVAILABLE,
    MAX_PORT,
    METRICS_HOST_HELP,
    METRICS_PORT_HELP,
    fail,
    listen,
    run,
    serve_health,
    settings,
)
from spectral.cli.deployments import deployments, factory, what_each_reads
from spectral.console.site import Console
from spectral.db.connect import ping
from spectral.devstack import Endpoints, resolve_endpoints
from spectral.kafka.topics import group_for
from spectral.observability.health import HealthASGI
from spectral.observability.logging import get_logger
from spectral.ops import api as ops_api
from spectral.ops import console as ops_console
from spectral.ops.views import Deployment, ReplayDryRun
from spectral.replay.range import Start, Stop
from spectral.replay.replay import Mode, ReplayReport, ReplayRequest
from spectral.replay.replay import replay as run_replay
from spectral.settings import Settings

log = get_logger(__name__)

DESCRIPTION = """\
The operator and service surface of spectral: durable LLM work (ADR-035 §12), the failure
cluster triage inbox (ADR-057 D5) and consumer operations.

**Authentication.** Every operation except `/healthz` needs `Authorization: Bearer spt_…`, a
token made with `spectral tokens create --name NAME --scope SCOPE…`. Scopes: `work:read`,
`work:submit`, `work:cancel`, `work:budget` (each implies work:read), `triage:read`,
`triage:write` (implies triage:read), `ops:read`, `ops:redrive` (implies ops:read). 401: no
valid token; 403: the token lacks the scope named in the problem document.

**Durable work.** Commands take a `priority` (`high`, `normal`, `low`; ageing keeps low ones
from starving) and an `org_id` (its budget, its fair share of the executors). Items are
`queued`, `claimed`, `running`, `failed` (waiting for a retry), `parked` (waiting for its
org's budget: not failed, nothing paid; `park_reason` says why), or ended: `applied`,
`dead_letter`, `canceled`. `POST /threads/{id}/cancel` ends waiting items at once and lets a
call in flight finish (its answer is recorded, not applied).

**Errors** are `application/problem+json` (RFC 9457); `type` names the problem
(`/problems/stale-version`, `/problems/missing-scope`, …). Request bodies are limited in size
(413); text must be UTF-8 without NUL.

**Concurrency.** `GET /clusters/{id}` returns an `ETag`; `PATCH` needs it in `If-Match`
(412 when the cluster changed meanwhile, 428 without it).
"""


async def deployment_topics(current: Settings, database_url: str) -> dict[str, tuple[str, ...]]:
    """Each consumer deployment's topics, by deployment name."""
    return {
        reads.deployment: reads.topics(current.topic_prefix)
        for reads in await what_each_reads(current, database_url)
    }


def _replay_dry_run(name: str, current: Settings, endpoints: Endpoints) -> ReplayDryRun:
    build = factory(name)

    async def dry_run(start: Start, stop: Stop | None) -> ReplayReport:
        return await run_replay(
            lambda url: build(current, url, CollectorRegistry()),
            current,
            kafka_bootstrap=endpoints.kafka_bootstrap,
            database_url=endpoints.database_url,
            request=ReplayRequest(start=start, stop=stop, mode=Mode.DRY_RUN, idle_timeout=20.0),
        )

    return dry_run


async def check_logins(resources: Resources) -> None:
    """Open and close the pools the surfaces act through (ConfigurationError for a refused
    login or a role the login cannot assume, TransientError when the server is down); warn
    when the login can do more than the surfaces need."""
    try:
        await resources.open()
    finally:
        await resources.close()
    why = await resources.overprivileged()
    if why is not None:
        log.warning(
            "the API's database login can do more than the API needs",
            reason=why,
            fix=f"run it as a login granted {API_ROLE} (README, 'Operator and agent surfaces')",
        )


def resources_for(
    current: Settings, endpoints: Endpoints, *, submits_work: bool = True
) -> Resources:
    """The pools every surface acts through (the operator login when one is configured; the
    producer role only for a surface that submits work)."""
    operator_url = current.operator_database_url
    return Resources(
        settings=current,
        database_url=endpoints.database_url,
        kafka_bootstrap=endpoints.kafka_bootstrap,
        operator_database_url=operator_url.get_secret_value() if operator_url else None,
        submits_work=submits_work,
    )


def compose_app(
    current: Settings,
    endpoints: Endpoints,
    topics: dict[str, tuple[str, ...]],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    groups: Mapping[str, str] | None = None,
) -> FastAPI:
    """The whole HTTP surface over these endpoints; ``topics`` from :func:`deployment_topics`,
    ``groups`` the consumer group of a deployment that does not run under its own name."""
    resources = resources_for(current, endpoints)
    known = [
        Deployment(
            name,
            (groups or {}).get(name, group_for(name, current.topic_prefix)),
            names,
            _replay_dry_run(name, current, endpoints),
        )
        for name, names in topics.items()
    ]
    console = Console(
        resources,
        template_packages=("consumers.rule_candidates", "producers.work", "spectral.ops"),
    )

    def pages(app: FastAPI) -> None:
        console.install(app)
        app.include_router(triage_console.router(console, resources))
        app.include_router(ops_console.router(console, resources, known))
        app.include_router(work_console.router(console, resources))

    return build_app(
        resources,
        routers=[
            work_api.router(resources),
            triage_api.router(resources),
            ops_api.router(resources, known),
        ],
        title="spectral",
        description=DESCRIPTION,
        max_body_bytes=max_body_bytes,
        extra_setup=[pages],
    )


def api(  # noqa: PLR0917 - typer maps each parameter to an option
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", min=0, max=MAX_PORT)] = 8000,
    metrics_port: Annotated[
        int | None, typer.Option(help=METRICS_PORT_HELP, min=0, max=MAX_PORT)
    ] = None,
    metrics_host: Annotated[str | None, typer.Option(help=METRICS_HOST_HELP)] = None,
    max_body_bytes: Annotated[
        int, typer.Option(min=1024, help="Largest request body accepted (413 above).")
    ] = DEFAULT_MAX_BODY_BYTES,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group",
            metavar="DEPLOYMENT=GROUP",
            help="The consumer group of a deployment run with `consume --group` (repeatable).",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs) and the web console
    (/console).

    /healthz and /readyz (database reachable) answer on the API's port too, unauthenticated.
    """
    groups: dict[str, str] = {}
    for pair in group or []:
        name, sep, value = pair.partition("=")
        if not sep or name not in deployments().names() or not value:
            fail(f"--group takes DEPLOYMENT=GROUP with a known deployment, not {pair!r}", 2)
        groups[name] = value
    current = settings()
    endpoints = resolve_endpoints(current)
    # The pools open inside uvicorn's lifespan, where a refused login would only be "startup
    # failed" (uvicorn's exit 3, with a traceback): check every login the app uses first, so a
    # bad setting is exit 2 with one line and a server down is exit 3, as for every command.
    run(check_logins(resources_for(current, endpoints)))
    topics = asyncio.run(deployment_topics(current, endpoints.database_url))
    sock = listen(host, port)
    health = serve_health(current, metrics_port, metrics_host)
    health.probe("database", lambda: ping(endpoints.database_url))
    server = uvicorn.Server(
        uvicorn.Config(
            HealthASGI(
                compose_app(
                    current, endpoints, topics, max_body_bytes=max_body_bytes, groups=groups
                ),
                health,
            ),
            host=host,
            port=port,
            log_level=current.log_level.lower(),
            log_config=None,  # uvicorn's lines go through spectral's logging (JSON, masked)
            access_log=False,
        )
    )
    server.run(sockets=[sock])
    if not server.started:  # the app's start-up failed (its pools: the database went away)
        fail("the API did not start (see the log above)", EXIT_UNAVAILABLE)
