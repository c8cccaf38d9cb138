"""`spectral mcp`: the Ops Agent's tools over MCP (stdio or streamable HTTP), composed here.

The consumer operations' tools are the framework's (spectral/ops/tools.py); every other tool
comes from a plugin's declaration (``tools``: spectral's built-in features declare theirs like
any plugin). They act through the same roles and tokens as the HTTP API. Over stdio the token
comes from ``SPECTRAL_API_TOKEN`` (checked at start and again on every call); over HTTP every
request carries ``Authorization: Bearer spt_…``; ``/healthz`` and ``/readyz`` (the database
reachable) answer there unauthenticated, and ``--metrics-port`` serves them with ``/metrics``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from spectral.cli._common import (
    EXIT_CONFIGURATION,
    MAX_PORT,
    METRICS_HOST_HELP,
    METRICS_PORT_HELP,
    fail,
    listen,
    serve_health,
    settings,
)
from spectral.plugins import InstalledPlugin, installed_plugins

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from spectral.api.resources import Resources
    from spectral.ops.views import Deployment

INTRODUCTION = "spectral's operator tools."
OPERATIONS = "Consumer operations: consumer_lag, dead_letter_summary, list_dead_letters."
CLOSING = "Each tool says which token scope it needs."


def instructions(plugins: Sequence[InstalledPlugin]) -> str:
    """What the server tells the agent: each plugin's tools, then the operations'."""
    said = [tools.instructions for plugin in plugins for tools in plugin.declaration.tools]
    return " ".join(part for part in (INTRODUCTION, *said, OPERATIONS, CLOSING) if part)


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "http"


def build_mcp(
    resources: Resources,
    deployments: Sequence[Deployment],
    *,
    stdio_token: str | None = None,
    http_url: str | None = None,
) -> MCPServer:
    """The server; ``http_url`` (e.g. http://127.0.0.1:8765) turns on bearer authentication."""
    from mcp.server.auth.settings import AuthSettings  # noqa: PLC0415 - served only
    from mcp.server.mcpserver import MCPServer  # noqa: PLC0415

    from spectral.mcp.tools import BearerVerifier, Caller  # noqa: PLC0415
    from spectral.ops import tools as ops_tools  # noqa: PLC0415

    auth = None
    verifier = None
    if http_url is not None:
        auth = AuthSettings(
            issuer_url=http_url,
            resource_server_url=f"{http_url}/mcp",
            validate_token_resource=False,
        )
        verifier = BearerVerifier(resources)
    plugins = installed_plugins()
    server: MCPServer = MCPServer(
        "spectral",
        instructions=instructions(plugins),
        version="1",
        token_verifier=verifier,
        auth=auth,
    )
    caller = Caller(resources, stdio_token)
    for plugin in plugins:
        for tools in plugin.declaration.tools:
            plugin.load(tools.register, "MCP tools")(server, caller)
    ops_tools.register(server, caller, deployments)
    return server


def mcp(
    transport: Annotated[
        Transport, typer.Option(help="stdio (for an agent that starts it) or http.")
    ] = Transport.STDIO,
    host: Annotated[str, typer.Option(help="http: interface to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="http: TCP port (the endpoint is /mcp).", min=0, max=MAX_PORT)
    ] = 8765,
    metrics_port: Annotated[
        int | None, typer.Option(help=METRICS_PORT_HELP, min=0, max=MAX_PORT)
    ] = None,
    metrics_host: Annotated[str | None, typer.Option(help=METRICS_HOST_HELP)] = None,
) -> None:
    """Serve the Ops Agent tools over MCP (the features' tools, consumer operations)."""
    current = settings()
    # MCP and the web stack load once the settings are known to be good (a bad one exits 2 first).
    import uvicorn  # noqa: PLC0415
    from prometheus_client import REGISTRY  # noqa: PLC0415

    from spectral.api.proxy import ForwardedHeaders, TrustedProxies  # noqa: PLC0415
    from spectral.api.settings import ApiSettings  # noqa: PLC0415
    from spectral.cli.api import deployment_topics, resources_for  # noqa: PLC0415
    from spectral.db.connect import ping  # noqa: PLC0415
    from spectral.devstack import resolve_endpoints  # noqa: PLC0415
    from spectral.kafka.topics import group_for  # noqa: PLC0415
    from spectral.observability.health import HealthASGI, run_with_health  # noqa: PLC0415
    from spectral.observability.http import HttpMetrics, ObservedASGI  # noqa: PLC0415
    from spectral.observability.metrics import listening  # noqa: PLC0415
    from spectral.ops.views import Deployment  # noqa: PLC0415

    endpoints = resolve_endpoints(current)
    resources = resources_for(current, endpoints, submits_work=False)  # its tools only read
    sock = listen(host, port) if transport is Transport.HTTP else None
    health = serve_health(current, metrics_port, metrics_host)
    health.probe("database", lambda: ping(endpoints.database_url))

    async def serve() -> None:
        topics = await deployment_topics(current, endpoints.database_url)
        deployments = [
            Deployment(name, group_for(name, current.topic_prefix), names)
            for name, names in topics.items()
        ]
        await resources.open()
        try:
            if transport is Transport.STDIO:
                secret = current.api_token
                token = secret.get_secret_value().strip() if secret is not None else ""
                if await resources.verifier.verify(token) is None:
                    print(
                        "error: SPECTRAL_API_TOKEN must hold a live API token "
                        "(spectral tokens create …)",
                        file=sys.stderr,
                    )
                    raise SystemExit(EXIT_CONFIGURATION)
                await build_mcp(resources, deployments, stdio_token=token).run_stdio_async()
                return
            url = f"http://{host}:{port}"
            app = build_mcp(resources, deployments, http_url=url).streamable_http_app(host=host)
            assert sock is not None  # noqa: S101 - bound above for HTTP
            listening("mcp", host, int(sock.getsockname()[1]), endpoint="/mcp")
            trusted = TrustedProxies(ApiSettings.of(current).forwarded_allow_ips)
            observed = ObservedASGI(
                ForwardedHeaders(app, trusted=trusted), HttpMetrics(REGISTRY, "mcp")
            )
            config = uvicorn.Config(
                # /healthz and /readyz on MCP's port too, as on the API's (the heartbeat
                # already runs beside serve())
                HealthASGI(observed, health, beats=False),
                proxy_headers=False,  # believed from SPECTRAL_FORWARDED_ALLOW_IPS only
                host=host,
                port=port,
                log_level="warning",
                log_config=None,  # uvicorn's lines go through spectral's logging (JSON, masked)
                access_log=False,
            )
            await uvicorn.Server(config).serve(sockets=[sock])
        finally:
            await resources.close()

    try:
        asyncio.run(run_with_health(health, serve()))
    except KeyboardInterrupt:
        fail("interrupted", 130)
