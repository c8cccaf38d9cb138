"""`spectral api`: the HTTP surface, composed here.

One app serves the JSON API (the features' and the operations'), its OpenAPI document with local
docs, and the web console. The operations routes and pages are the framework's (spectral/ops);
every other router and page comes from a plugin's declaration (``routers``, ``pages``: spectral's
built-in features declare theirs like any plugin), so this module names no feature.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from spectral.api.guard import DEFAULT_MAX_BODY_BYTES
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
from spectral.cli.deployments import deployments, handler_factory, what_each_reads
from spectral.declaration import NavEntry
from spectral.plugins import InstalledPlugin, installed_plugins

if TYPE_CHECKING:
    from fastapi import APIRouter, FastAPI

    from spectral.api.resources import Resources
    from spectral.auth.scopes import Vocabulary
    from spectral.console.site import Console
    from spectral.devstack import Endpoints
    from spectral.ops.views import ReplayDryRun
    from spectral.replay.range import Start, Stop
    from spectral.replay.replay import ReplayReport
    from spectral.settings import Settings

INTRODUCTION = """\
The operator and service surface of spectral: the features' APIs and consumer operations.
"""

AUTHENTICATION = """\
**Authentication.** Every operation except `/healthz` needs `Authorization: Bearer spt_…`, a
token made with `spectral tokens create --name NAME --scope SCOPE…`. Scopes: {scopes}. 401: no
valid token; 403: the token lacks the scope named in the problem document.
"""

ERRORS = """\
**Errors** are `application/problem+json` (RFC 9457); `type` names the problem
(`/problems/stale-version`, `/problems/missing-scope`, …). Request bodies are limited in size
(413); text must be UTF-8 without NUL.
"""


def describe_api(vocabulary: Vocabulary, sections: Sequence[str]) -> str:
    """The API's description: authentication with every registered scope, each plugin's
    section, the problem documents."""
    scopes = ", ".join(
        f"`{scope.name}`" + (f" (implies {', '.join(scope.implies)})" if scope.implies else "")
        for scope in vocabulary.scopes
    )
    parts = [INTRODUCTION, AUTHENTICATION.format(scopes=scopes), *sections, ERRORS]
    return "\n".join(part.strip() + "\n" for part in parts if part.strip())


@dataclass(frozen=True)
class Surfaces:
    """What the installed plugins add to the HTTP surface, loaded."""

    routers: tuple[Callable[[Resources], APIRouter], ...]
    descriptions: tuple[str, ...]
    pages: tuple[Callable[[Console, Resources], APIRouter], ...]
    templates: tuple[str, ...]
    """Packages whose ``templates/`` folder holds console templates."""
    nav: tuple[NavEntry, ...]


def plugin_surfaces(plugins: Sequence[InstalledPlugin]) -> Surfaces:
    """The routers, console pages and navigation of ``plugins``."""
    routers: list[Callable[[Resources], APIRouter]] = []
    pages: list[Callable[[Console, Resources], APIRouter]] = []
    descriptions: list[str] = []
    templates: list[str] = []
    nav: list[NavEntry] = []
    for plugin in plugins:
        for router in plugin.declaration.routers:
            routers.append(plugin.load(router.factory, "router"))
            descriptions.append(router.description)
        for page in plugin.declaration.pages:
            pages.append(plugin.load(page.factory, "console pages"))
            if page.templates is not None:
                templates.append(plugin.module_name(page.templates))
            nav.extend(page.nav)
    return Surfaces(tuple(routers), tuple(descriptions), tuple(pages), tuple(templates), tuple(nav))


async def deployment_topics(current: Settings, database_url: str) -> dict[str, tuple[str, ...]]:
    """Each consumer deployment's topics, by deployment name."""
    return {
        reads.deployment: reads.topics(current.topic_prefix)
        for reads in await what_each_reads(current, database_url)
    }


def _replay_dry_run(name: str, current: Settings, endpoints: Endpoints) -> ReplayDryRun:
    from spectral.replay.replay import Mode, ReplayRequest  # noqa: PLC0415 - the web stack's
    from spectral.replay.replay import replay as run_replay  # noqa: PLC0415

    make_handler = handler_factory(name, current)

    async def dry_run(start: Start, stop: Stop | None) -> ReplayReport:
        return await run_replay(
            make_handler,
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
    from spectral.api.resources import API_ROLE  # noqa: PLC0415 - the web stack's
    from spectral.observability.logging import get_logger  # noqa: PLC0415

    try:
        await resources.open()
    finally:
        await resources.close()
    why = await resources.overprivileged()
    if why is not None:
        get_logger(__name__).warning(
            "the API's database login can do more than the API needs",
            reason=why,
            fix=f"run it as a login granted {API_ROLE} (docs/howto/secure/api-roles-and-proxy.md)",
        )


def resources_for(
    current: Settings, endpoints: Endpoints, *, submits_work: bool = True
) -> Resources:
    """The pools every surface acts through (the operator login when one is configured; the
    producer role only for a surface that submits work)."""
    from spectral.api.resources import Resources  # noqa: PLC0415 - the web stack's

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
    from spectral.api.app import build_app  # noqa: PLC0415 - the web stack, once it is served
    from spectral.auth.scopes import installed_vocabulary  # noqa: PLC0415
    from spectral.console.site import Console  # noqa: PLC0415
    from spectral.kafka.topics import group_for  # noqa: PLC0415
    from spectral.ops import api as ops_api  # noqa: PLC0415
    from spectral.ops import console as ops_console  # noqa: PLC0415
    from spectral.ops.views import Deployment  # noqa: PLC0415

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
    surfaces = plugin_surfaces(installed_plugins())
    console = Console(
        resources,
        template_packages=(*surfaces.templates, ops_console.__name__.rpartition(".")[0]),
        nav=(*surfaces.nav, ops_console.NAV),
    )

    def pages(app: FastAPI) -> None:
        console.install(app)
        for page in surfaces.pages:
            app.include_router(page(console, resources))
        app.include_router(ops_console.router(console, resources, known))

    return build_app(
        resources,
        routers=[
            *(router(resources) for router in surfaces.routers),
            ops_api.router(resources, known),
        ],
        title="spectral",
        description=describe_api(installed_vocabulary(), surfaces.descriptions),
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
    # The web stack loads once the settings are known to be good (a bad one exits 2 first).
    import uvicorn  # noqa: PLC0415
    from prometheus_client import REGISTRY  # noqa: PLC0415

    from spectral.db.connect import ping  # noqa: PLC0415
    from spectral.devstack import resolve_endpoints  # noqa: PLC0415
    from spectral.observability.health import HealthASGI  # noqa: PLC0415
    from spectral.observability.http import HttpMetrics, ObservedASGI  # noqa: PLC0415
    from spectral.observability.metrics import listening  # noqa: PLC0415

    endpoints = resolve_endpoints(current)
    # The pools open inside uvicorn's lifespan, where a refused login would only be "startup
    # failed" (uvicorn's exit 3, with a traceback): check every login the app uses first, so a
    # bad setting is exit 2 with one line and a server down is exit 3, as for every command.
    run(check_logins(resources_for(current, endpoints)))
    topics = asyncio.run(deployment_topics(current, endpoints.database_url))
    sock = listen(host, port)
    health = serve_health(current, metrics_port, metrics_host)
    health.probe("database", lambda: ping(endpoints.database_url))
    app = compose_app(current, endpoints, topics, max_body_bytes=max_body_bytes, groups=groups)
    listening("api", host, int(sock.getsockname()[1]), docs="/docs", console="/console")
    server = uvicorn.Server(
        uvicorn.Config(
            HealthASGI(ObservedASGI(app, HttpMetrics(REGISTRY, "api")), health),
            host=host,
            port=port,
            log_level=current.log_level.lower(),
            log_config=None,  # uvicorn's lines go through spectral's logging (JSON, masked)
            access_log=False,
            # Forwarded headers are the app's business (spectral/api/proxy.py): believed from
            # SPECTRAL_FORWARDED_ALLOW_IPS only, and dropped from anyone else.
            proxy_headers=False,
        )
    )
    server.run(sockets=[sock])
    if not server.started:  # the app's start-up failed (its pools: the database went away)
        fail("the API did not start (see the log above)", EXIT_UNAVAILABLE)
