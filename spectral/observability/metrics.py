"""The Prometheus /metrics endpoint every long-running command can expose (``--metrics-port``)."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server


def serve_metrics(
    port: int | None, registry: CollectorRegistry = REGISTRY, addr: str = "127.0.0.1"
) -> None:
    """Start the /metrics HTTP endpoint in a daemon thread; ``None`` or 0 means no endpoint."""
    if port:
        start_http_server(port, addr=addr, registry=registry)
