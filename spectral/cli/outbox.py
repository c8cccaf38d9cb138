"""`spectral outbox relay | status`: publish core.outbox to Kafka."""

from __future__ import annotations

import typer

from spectral.cli._common import (
    MAX_PORT,
    METRICS_HOST_HELP,
    METRICS_PORT_HELP,
    run,
    serve_health,
    settings,
    summary,
    warn_missing_topics,
)
from spectral.plugins import installed_registry

app = typer.Typer(help="The transactional outbox: relay its rows to Kafka.", no_args_is_help=True)


@app.command()
def relay(  # noqa: PLR0917 - typer maps each parameter to an option
    once: bool = typer.Option(default=False, help="Publish what is publishable now, then exit."),
    batch: int = typer.Option(500, "--batch", min=1, help="Most rows per batch."),
    poll_interval: float = typer.Option(
        0.2,
        "--poll-interval",
        min=0.01,
        help="Seconds an idle relay waits before reading the outbox again when no writer "
        "wakes it (the fallback; with --no-listen, the delay between polls).",
    ),
    listen: bool = typer.Option(
        default=True,
        help="Sleep on LISTEN/NOTIFY when idle (writers wake the relay at once). --no-listen "
        "polls only: for a connection pooler that cannot hold a LISTEN (PgBouncer in "
        "transaction mode).",
    ),
    metrics_port: int | None = typer.Option(None, help=METRICS_PORT_HELP, min=0, max=MAX_PORT),
    metrics_host: str | None = typer.Option(None, help=METRICS_HOST_HELP),
) -> None:
    """Publish outbox rows (idempotent producer, acks=all), in id order per key, at least once.

    Several relays may run at once: keys are split into shards guarded by advisory locks.
    SIGTERM/SIGINT finish the batch in flight and exit 0. A row Kafka refuses for good (too
    large for its topic, a topic the relay may not write) holds its key back and is tried again
    later; with --once the run then exits 1.
    """
    current = settings()
    # The relay (Kafka client, database driver, metrics) loads once the settings are good.
    from prometheus_client import REGISTRY  # noqa: PLC0415

    from spectral.cli.fault_hooks import RelayFaultHooks  # noqa: PLC0415
    from spectral.devstack import resolve_endpoints  # noqa: PLC0415
    from spectral.lifecycle import process_loop  # noqa: PLC0415
    from spectral.observability.health import run_with_health  # noqa: PLC0415
    from spectral.observability.logging import get_logger  # noqa: PLC0415
    from spectral.outbox.relay import OutboxRelay, RelayMetrics, RelayOptions  # noqa: PLC0415

    endpoints = resolve_endpoints(current)
    health = serve_health(current, metrics_port, metrics_host)
    warn_missing_topics(current, endpoints.kafka_bootstrap, installed_registry().event_types())
    relay_ = OutboxRelay(
        current,
        kafka_bootstrap=endpoints.kafka_bootstrap,
        database_url=endpoints.database_url,
        metrics=RelayMetrics(REGISTRY),
        options=RelayOptions(
            batch=batch,
            poll_interval=poll_interval,
            listen=listen,
            once=once,
            crash_after_publish=RelayFaultHooks.of(current).relay_crash_after_publish,
        ),
        health=health,
    )
    report = run(run_with_health(health, relay_.run()), loop_factory=process_loop())
    get_logger(__name__).info(
        "relay stopped",
        published=report.published,
        batches=report.batches,
        sessions=report.sessions,
        refused=report.refused,
    )
    summary(f"published={report.published} batches={report.batches} refused={report.refused}")
    if once and report.refused:
        # A one-shot run that left rows Kafka refused for good (their keys wait) did not do
        # its job: the log says which rows and why.
        raise typer.Exit(code=1)


@app.command()
def status() -> None:
    """Print the outbox depth and the age of the oldest publishable row."""
    current = settings()
    from spectral.devstack import resolve_database_url  # noqa: PLC0415 - after settings
    from spectral.outbox.relay.repository import OutboxStatsReader  # noqa: PLC0415

    url = resolve_database_url(current)

    async def stats() -> tuple[int, float]:
        reader = await OutboxStatsReader.open(url, role=None)
        try:
            current = await reader.stats()
        finally:
            await reader.close()
        return current.depth, current.oldest_age_seconds

    depth, age = run(stats())
    typer.echo(f"depth={depth} oldest_age_seconds={age:.3f}")


__all__ = ["app"]
